"""MTP / speculative decoding on the vLLM and TensorRT-LLM ranks (FEATURES.md §1.2, §1.3).

With ``aic_nextn = n`` one verification forward emits a *burst* of up to ``n + 1`` tokens,
sampled per request from conditional acceptance rates by the rank's own generator
(``StdRng.seed_from_u64(aic_mtp_seed + scheduler index)``). ``VllmRank`` keeps every request of
an MTP rank outside open stretches (a burst breaks the one-token-per-pass arithmetic) and hands
the emission of each pass to ``MtpBursts``:

* ``reserve`` (at the pass start, after admission): the blocks the bursts may need,
  ``Σ ceil((len + min(n + 1, remaining)) / bs) − ceil(len / bs)`` over the ready requests; when
  they are not available a victim is preempted by the preemption mode and the reservation is
  recomputed over the ready requests left. The bursts are sampled then, in running order, and
  their tokens' KV allocated from the reservation (cached blocks it evicted stay evicted).
* ``emit`` (at the pass end): the tokens, all stamped with the pass end; a request's first token
  of the pass continues its emission stretch, the others are stretches of one pass (zero gaps).

A prefill-role rank emits its copy's single token without drawing (the burst is 1).

This is the twin and specification of the C rank's bursts (csrc/vllm_rank.c, set up by
``NativeVllmRank._set_mtp`` with ``accept_limits`` and ``scheduler_seed``; its generator is
csrc/rng.c's StdRng): tests/test_vllm_native_mtp.py runs both on the same streams.
"""

from __future__ import annotations

from ..workload.rng import StdRng

DEFAULT_RATES = "0.85,0.3,0,0,0"
_U64 = (1 << 64) - 1


def accept_rates(nextn, text):
    """The conditional acceptance rates of ``aic_nextn_accept_rates``, cut or zero-padded to
    ``nextn`` entries (absent, empty or blank: the defaults). The spec's validation has
    checked every entry already."""
    if text is None or not text.strip():
        text = DEFAULT_RATES
    rates = [float(part.strip()) for part in text.split(",")]
    rates = rates[:nextn]
    return rates + [0.0] * (nextn - len(rates))


def accept_limits(rates):
    """Per rate, the u64 one draw must stay below for the draft to be accepted,
    ``floor(rate x 2^64)`` (rand 0.9's Bernoulli), or None for a rate of 1: accepted without a
    draw (``StdRng.accepted_tokens`` unrolled; the C rank takes the same limits)."""
    return [None if rate == 1.0 else int(rate * 18446744073709551616.0) for rate in rates]


def scheduler_seed(engine, scheduler_id):
    """The seed of a scheduler's generator: ``aic_mtp_seed + scheduler index`` (wrapping u64)."""
    return (engine.aic_mtp_seed + scheduler_id) & _U64


class MtpBursts:
    """One rank's burst sampler and the bursts of its pass in flight."""

    __slots__ = ("rng", "rates", "max_burst", "draws", "bursts", "preempted", "sampled",
                 "_thresholds", "_next_u64")

    def __init__(self, engine, scheduler_id, *, draws=True):
        nextn = engine.aic_nextn
        self.rates = accept_rates(nextn, engine.aic_nextn_accept_rates)
        self.rng = StdRng(scheduler_seed(engine, scheduler_id))
        self._thresholds = accept_limits(self.rates)
        self._next_u64 = self.rng.next_u64
        # a prefill-role copy stops at its first token: a burst of one, no draw
        self.draws = draws
        self.max_burst = nextn + 1 if draws else 1
        self.bursts = []              # (request, tokens) of the pass in flight
        self.preempted = False        # the latest reservation preempted a request
        self.sampled = []             # the tokens each burst accepted before the clip

    def _need(self, rank, ready):
        """Blocks the bursts of ``ready`` may take beyond what they hold."""
        bs = rank.block_size
        need = 0
        for r in ready:
            length = r.prompt_len + r.generated
            burst = min(self.max_burst, r.out_limit - r.generated)
            need += -(-(length + burst) // bs) - -(-length // bs)
            if rank.state is not None and burst > 1:
                need += rank._state_need(r, length + 1)   # a draft token's state write
        return need

    def reserve(self, rank, P, ready):
        """Reserve the bursts' KV over the requests ready to emit (preempting while it does not
        fit), sample their bursts and allocate their tokens. Returns the emitting requests."""
        self.preempted = False        # (of this pass: none without emitters)
        emitters = [r for r in ready if r.generated < r.out_limit]
        if not emitters:
            return emitters
        pool = rank.pool
        need = self._need(rank, emitters)
        while need > pool.allocatable():
            # requests whose generation is complete already leave at this pass end
            candidates = [r for r in rank.running if r.generated < r.out_limit]
            victim = rank.admission.victim(candidates)
            if victim is None:
                emitters = []  # (TensorRT-LLM never preempts; nothing runs: nothing to emit)
                break
            rank._preempt(victim, P)
            self.preempted = True
            emitters = [r for r in rank.partial if r.generated < r.out_limit
                        and r.computed >= r.prompt_len + r.generated]
            if not emitters:
                break
            need = self._need(rank, emitters)
        if not emitters:
            return emitters
        if need > pool.free_blocks():
            # the reservation takes its blocks at once: the cached blocks it evicts stay
            # evicted even when the bursts turn out shorter
            scratch = pool.new_seq()
            pool.allocate(scratch, need)
            pool.release(scratch)
        bs = rank.block_size
        bursts = self.bursts
        sampled = self.sampled = []
        draw = self.draw
        for r in emitters:
            remaining = r.out_limit - r.generated
            tokens = draw() if self.draws else 1
            burst = tokens if tokens < remaining else remaining
            bursts.append((r, burst))
            sampled.append(tokens)
            length = r.prompt_len + r.generated + burst
            grow = -(-length // bs) - r.held_blocks
            if grow > 0:
                pool.allocate(r.seq, grow)
                r.held_blocks += grow
                rank.held_total += grow
            if rank.caching and (length - 1) // bs > r.committed_blocks:
                rank._commit_full_blocks(r, (length - 1) // bs)
            if rank.state is not None and burst > 1:
                rank._burst_state(r, length - burst, burst)
        return emitters

    def draw(self):
        """One burst's accepted tokens: ``StdRng.accepted_tokens(rates)`` without its per-draw
        calls."""
        tokens = 1
        next_u64 = self._next_u64
        for limit in self._thresholds:
            if limit is not None and next_u64() >= limit:
                break
            tokens += 1
        return tokens

    def decode_steps(self):
        """(decode forwards, the tokens they accepted) of the pass in flight: the bursts of
        requests past their first token (the pass computing prompt tokens is not a decode step),
        each counted as sampled, before the clip to the tokens left (as the reference's
        avg_accept_length counts them)."""
        steps = tokens = 0
        for (r, _), accepted in zip(self.bursts, self.sampled):
            # (a readmitted request recomputing its prompt takes a prefill forward)
            if r.generated and r.pass_chunk[1] < 0:
                steps += 1
                tokens += accepted
        return steps, tokens

    def finishing(self):
        """Requests whose last token comes with the pass in flight."""
        return [r for r, burst in self.bursts if r.generated + burst >= r.out_limit]

    def complete(self, rank, P, end_ms, ready):
        """The pass end: the bursts stamped (``stamp_tokens``)."""
        bursts, self.bursts = self.bursts, []
        stamp_tokens(rank, P, end_ms, ready, bursts)


def stamp_tokens(rank, P, end_ms, ready, bursts):
    """A pass end of a rank without open stretches: requests ready with nothing left to generate
    leave without a token, then each ``(request, tokens)`` is stamped with pass ``P`` (its first
    token of the pass continues its stretch, the others are one-pass stretches: zero gaps) and
    the requests whose last token came leave, in running order."""
    partial = rank.partial
    for r in ready:
        if r.generated >= r.out_limit:
            partial.remove(r)
            rank._retire(r, end_ms)
    finished = []
    for r, burst in bursts:
        r.generated += burst
        r.computed = r.prompt_len + r.generated - 1
        rank._emit(r, P)
        if burst > 1:
            r.stretches.extend([(P, P)] * (burst - 1))
        if r.generated >= r.out_limit:
            finished.append(r)
    for r in finished:
        partial.remove(r)
        if rank.mtp is None:
            rank._record_itl(r)
        else:
            record_burst_itl(rank, r)
        rank._retire(r, end_ms)


def record_burst_itl(rank, r):
    """RankBase._record_itl for a request with bursts: a break of zero length (two stretches in
    one pass) is counted under the one key (0, 0) (its gap is 0 whatever the pass, and the
    first such break keeps its place among the gaps' first-seen order); most of an MTP
    request's stretches are such one-pass stretches. The C rank counts them the same way."""
    diff = rank.itl_diff
    breaks = rank.break_gaps
    prev = None
    for first, last in r.stretches:
        if last > first:
            diff[first] += 1
            diff[last] -= 1
        if prev is not None:
            key = (0, 0) if prev == first else (prev, first)
            breaks[key] = breaks.get(key, 0) + 1
        prev = last


def mtp_prefix_hit(cached, active_cached, block_size):
    """vLLM's EAGLE/MTP prefix rule: a hit of at least one block loses its last block (the
    drafter needs that block's hidden states), after the ordinary recompute rule."""
    if cached >= block_size:
        cached -= block_size
        if active_cached > cached:
            active_cached = cached
    return cached, active_cached


__all__ = ["DEFAULT_RATES", "MtpBursts", "accept_limits", "accept_rates", "mtp_prefix_hit",
           "record_burst_itl", "scheduler_seed", "stamp_tokens"]
