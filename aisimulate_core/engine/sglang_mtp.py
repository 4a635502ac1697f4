"""MTP / speculative decoding on an SGLang rank (FEATURES.md §1.4).

A prefill (EXTEND) pass stays a pure prefill forward: each finished prompt gets exactly one
token, without drawing. Only decode passes burst. Their memory check asks, for each running
request, for the pages its longest possible burst needs (``ceil((len + min(n + 1, remaining)) /
page) × page`` minus what it holds), retracting the request with the fewest output tokens while
that does not fit; the forward's time is the ordinary decode prediction over the batch before
the bursts; the reserved pages are taken, then each request, in running order, samples its
burst from the rank's generator (``StdRng(aic_mtp_seed + scheduler index)``, engine/mtp.py's
rates; sampled even when one token remains) and emits ``min(burst, remaining)`` tokens, all
stamped with the pass end; what the bursts left of the reservation is freed.

The running batch (sglang_running.py) counts one token per member and decode pass; a member
whose burst is longer leaves it after that pass (its pages put on the tree as the reference's
per-token caching did), takes the extra tokens as one-pass emission stretches (zero gaps: the
report's ITL and TPOT count them) and joins again in its place. An MTP rank runs every pass as
its own event (no decode-only runs) and is a Python rank (the C rank declines ``aic_nextn``).
"""

from __future__ import annotations

from ..workload.rng import StdRng
from .mtp import accept_rates
from .sglang_kv import stamp

_U64 = (1 << 64) - 1


class SglangBursts:
    """One rank's burst sampler."""

    __slots__ = ("rng", "rates", "max_burst")

    def __init__(self, engine, scheduler_id):
        nextn = engine.aic_nextn
        self.rates = accept_rates(nextn, engine.aic_nextn_accept_rates)
        self.rng = StdRng((engine.aic_mtp_seed + scheduler_id) & _U64)
        self.max_burst = nextn + 1

    def sample(self):
        return self.rng.accepted_tokens(self.rates)


class SglangMtpSteps:
    """Mixed into SglangRank: what its decode step (``_decode_step``) asks of a rank with
    ``self.mtp`` set."""

    def _burst_need(self):
        """KV tokens the longest bursts of every member need beyond what they hold."""
        running = self.running
        ps = self.page_size
        max_burst = self.mtp.max_burst
        need = 0
        for r in running:
            running.sync(r)
            length = r.prompt_len + r.generated
            remaining = r.out_limit - r.generated
            burst = max_burst if max_burst < remaining else remaining
            grown = -(-(length + burst) // ps) * ps - r.held_blocks
            if grown > 0:
                need += grown
        return need

    def _emit_bursts(self, need, watched):
        """The decode step's emission with bursts, ``need`` KV tokens taken for them."""
        running = self.running
        cache = self.cache
        mtp = self.mtp
        bursts = []
        for r in running:                 # running order; members are synced (_burst_need)
            tokens = mtp.sample()
            remaining = r.out_limit - r.generated
            bursts.append((r, tokens if tokens < remaining else remaining))
        P = self.pass_index
        done = list(running.record_decode(P))
        if self._catch_up:
            self._cache_caught_up(done, watched)
        used = 0
        ps = self.page_size
        rejoined = False
        for r, burst in bursts:
            before = r.held_blocks
            if burst > 1:
                running.leave(r)          # synced: its token of this pass counted
                self._flush_deferred(r, False)
                extra = burst - 1
                r.generated += extra
                r.stretches.extend([(P, P)] * extra)
                length = r.prompt_len + r.generated
                r.held_blocks = -(-length // ps) * ps
                finished = r.generated >= r.out_limit
                # the pages its burst completed go on the tree with this pass's token stamp
                # (a last token's with the completion)
                r.computed = length - 1 if finished else length
                self._cache_materialized(r, stamp(P, 1, r.bucket_key))
                r.computed = length
                if finished:
                    r.open_start = None
                    done.append(r)
                else:
                    running.join(r, r.bucket_key)
                    rejoined = True
                used += r.held_blocks - before
            else:
                length = r.prompt_len + r.generated + 1
                grown = -(-length // ps) * ps - before
                if grown > 0:
                    used += grown
        if need > used:
            cache.free(need - used)       # the pages the bursts did not take
        if rejoined:
            running.members = dict(sorted(running.members.items()))   # running order again
        if done:
            done.sort(key=_join_number)
            for r in done:
                if r.in_stretch:
                    running.leave(r)
                self._complete(r)


def _join_number(r):
    return r.bucket_key
