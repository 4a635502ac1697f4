"""SGLang scheduler emulation for one attention rank (SEMANTICS 2.5, 2.6).

A pass runs prefill first if it can: when the waiting queue yields a prefill batch, the pass is
that batch alone (running requests wait; freshly prefilled prompts get their first token from
the prefill forward, at no extra cost). Otherwise every running request decodes one token;
if the KV pool cannot hold that step, the request with the fewest output tokens is retracted
to the back of the waiting queue first. Admission reserves decode room for the running batch
through ``new_token_ratio`` (sglang_budget.py).

Running requests are not touched per decode pass: sglang_running.py keeps them arithmetically.
KV bookkeeping (radix tree, pages) is in sglang_kv.py.
What the cluster layer reads (gauges, counters, router KV events, FPM rows) is in
sglang_cluster.py; it runs only when the runtime sets ``watched``.

Per request, the SimRequest slots hold: ``computed`` = materialized tokens (KV slots written),
``held_blocks`` = allocated tokens (whole pages), ``committed_blocks`` = tokens on the tree,
``seq`` = the locked tree node of its path (None when it holds no KV), ``hash_cache`` = its
token array; while running, ``bucket_key`` = its join number (running order) and
``open_start``/``base_gen``/``in_stretch``/``pass_chunk`` = its RunningBatch state.
"""

from __future__ import annotations

from collections import deque

from ..errors import ConfigError, SimulationError
from ..kv.radix_cache import RadixCache
from .rank_base import RankBase
from .request import FINISHED, PREEMPTED, RUNNING, never_scheduled
from .sglang_budget import PrefillBudget, RatioSchedule, TotalRoom, retraction_ratio
from .sglang_cluster import SglangClusterHooks
from .sglang_kv import SglangKv, stamp
from .sglang_running import RunningBatch
from .sglang_stall import fit_reason, head_stall_reason, starved_decoder_reason
from .sglang_tokens import ensure_tokens, lpm_order


class SglangRank(SglangClusterHooks, SglangKv, RankBase):
    config_path = "$.spec.engine.rank"     # SGLang runs aggregated only
    def __init__(self, engine, timer, pool=None, *, callbacks, worker_idx=0, dp_rank=0,
                 scheduler_id=0):
        self.worker_idx = worker_idx
        self.dp_rank = dp_rank
        self.scheduler_id = scheduler_id
        self.timer = timer
        self.cb = callbacks
        ps = engine.block_size
        self.page_size = ps
        self.total_kv_tokens = engine.num_gpu_blocks * ps
        self.cache = RadixCache(self.total_kv_tokens, ps)
        self.caching = engine.enable_prefix_caching
        self.max_running = engine.max_num_seqs
        self.max_model_len = engine.max_model_len
        sg = engine.sglang
        if sg.host_loop:
            # the overlap scheduler (outputs visible one iteration later) is not emulated
            raise ConfigError("$.spec.engine.rank.sglang.host_loop: true is not supported yet")
        self.lpm = sg.schedule_policy == "lpm"
        self.budget = PrefillBudget(sg.max_prefill_tokens, sg.chunked_prefill_size,
                                    sg.clip_max_new_tokens, ps)
        self.ratio = RatioSchedule(sg.schedule_conservativeness)
        self.chunk_setting = sg.chunked_prefill_size   # before a DP group splits it
        self._conservativeness = sg.schedule_conservativeness
        self.interval = engine.prefill_decode_interval
        self.rounds_left = 0
        self.waiting = deque()
        self.running = RunningBatch(ps, sg.clip_max_new_tokens)
        self._join_seq = 0
        self._match_memo = (None, 0, 0, None, -1)   # (request, limit, matched, node, inserts)
        self._k0 = 0                 # phase-0 stamp counter of the current pass
        self._k2 = 0
        self._init_pass_history()
        self._emitted_any = False    # some request emitted a token this pass
        self._done = []              # (request, status) terminal at this pass's end
        self._finishing = []         # completed this pass; they hold their KV until its end
        self._retracted = []
        self._catch_up = []          # members whose first token waits for a decode step
        self.pass_end_ms = 0.0
        self.committed_prefill_tokens = 0
        self._pass_committed = 0
        self.retractions = 0
        # group-round feedback (prefill_decode_interval, ratio reset), see finish_round
        self.prefill_in_pass = False
        self.model_work_in_pass = False
        self._interval_idle = False
        self.grouped = False
        self.group_size = 1
        # a decode step that found no KV page and changed nothing (see schedule)
        self._starved = False
        self._init_cluster_hooks()

    # ------------------------------------------------------------------ queue entry
    def submit(self, request):
        request.rank = self
        request.seq = None
        limit = self.max_model_len
        if limit is not None:
            room = limit - request.prompt_len
            request.out_limit = min(request.max_output, room if room > 0 else 0)
        self.waiting.append(request)
        if self.watched and self.capture_gauges:
            self._gauges = self.submission_gauges()

    def has_work(self):
        return bool(self.running or self.waiting or self.rounds_left)

    # ------------------------------------------------------------------ scheduling
    def schedule(self, now_ms):
        """Form one pass at ``now_ms``; returns its end time, or None with nothing to do."""
        running = self.running
        waiting = self.waiting
        self.prefill_in_pass = self.model_work_in_pass = self._interval_idle = False
        self.stuck = False
        if not running and not waiting and not self.rounds_left:
            return None
        watched = self.watched
        self._k0 = self._k2 = 0
        self._pass_committed = 0     # prompt tokens computed; they count once the pass ends
        defer = self.rounds_left > 0
        rejected = 0
        if self.max_model_len is not None and waiting:
            rejected = self._reject_too_long()
        if self.lpm and self.caching and 0 < len(waiting) <= 128:
            lpm_order(self, waiting)
        can_run = ()
        if waiting and not defer:
            can_run, sum_isl, sum_prefix, computed = self._prefill_batch(now_ms, watched)
        batch = len(can_run)
        self.prefill_in_pass = batch > 0 and computed > 0
        self.model_work_in_pass = self.prefill_in_pass
        retraction = None
        if batch:
            prefill_ms = self.timer.prefill(batch, sum_isl // batch, sum_prefix // batch)
            fresh = []
            for r in can_run:
                if r.computed < r.prompt_len + r.generated:
                    self._cache_materialized(r, self._stamp0())
                    waiting.appendleft(r)
                else:
                    fresh.append(r)
            self._interval_idle = False
            self._first_tokens(fresh, watched)
            end_ms = now_ms + prefill_ms
        else:
            # members always have output left: an idle deferred round is one with no decoders
            self._interval_idle = defer and not running
            settled = self.ratio.settled()
            if watched:
                self._watch_decoders()
            decode_ms, retraction = self._decode_step(watched)
            if watched:
                self._watch_decoded(self._emitted_any)
            end_ms = now_ms + decode_ms
            if self._emitted_any:
                self.model_work_in_pass = True
            if not running and not self._emitted_any and not self._done and not rejected \
                    and waiting and not defer and retraction is None:
                self._stalled()
            if self._starved:
                # The lone decoder found no page and nothing changed. With the admission ratio
                # settled (at its floor) and no deferred rounds the next pass is this one again:
                # the reference repeats it forever; the worker raises when no rank can move.
                self._starved = False
                self.stuck = settled and not defer and not rejected and not self._done \
                    and retraction is None
        # what a zero-time pass would change (the event loop's livelock guard reads it)
        self.pass_effect = bool(batch or self._emitted_any or self._done or rejected or defer
                                or retraction is not None)
        self._emitted_any = False
        if self._finishing:
            for r in self._finishing:
                self._finish_kv(r)
            self._finishing = []
        if self._retracted:
            waiting.extend(self._retracted)     # SGLang re-queues them at the back
            self._retracted = []
        if retraction is not None:
            self.ratio.value = retraction
        elif not batch and not self._interval_idle:
            self.ratio.decay()
        if not self.grouped:
            self.finish_round(self.prefill_in_pass, self.model_work_in_pass)
        self.pass_end_ms = end_ms
        if watched:
            self._watch_formed(now_ms, batch)
        return end_ms

    def join_group(self, dp_size):
        """Attention DP (the worker calls this when ``dp_size`` > 1): SGLang splits the chunk
        budget across the group and admits more conservatively; rounds are group-wide."""
        self.grouped = True
        self.group_size = dp_size
        self.budget.chunk_size //= dp_size
        self.ratio = RatioSchedule(self._conservativeness * 0.3)

    def finish_round(self, any_rank_prefilled, any_rank_ran_model):
        """Close one scheduler round of the DP group (every rank, idle ones included)."""
        if self._interval_idle and not any_rank_ran_model:
            self.ratio.reset()
        if any_rank_prefilled:
            self.rounds_left = self.interval
        elif self.rounds_left:
            self.rounds_left -= 1
        self._interval_idle = False

    def _reject_too_long(self):
        limit = self.max_model_len
        kept = deque()
        rejected = 0
        for r in self.waiting:
            if r.prompt_len < limit:
                kept.append(r)
            else:
                r.status = FINISHED
                self._done.append((r, "rejected"))
                rejected += 1
        if rejected:
            self.waiting.clear()
            self.waiting.extend(kept)
        return rejected

    def _stalled(self):
        raise SimulationError(self.stall_reason(self.waiting[0]))

    def stall_reason(self, r):
        """Why ``r`` cannot start (or, running alone, cannot go on), naming the limit."""
        if self.running:
            return starved_decoder_reason(self)
        return never_scheduled(head_stall_reason(self, r), r)

    def fit_error(self, r):
        """Why ``r`` can never be admitted here (checked when an embedder submits it), or None."""
        return fit_reason(self, r)

    def kv_summary(self):
        cache = self.cache
        return f"{cache.available() + cache.evictable_size} of {self.total_kv_tokens} KV tokens free"

    def stuck_error(self, now_ms):
        """The error of a rank whose passes repeat without effect (``stuck``) at ``now_ms``."""
        return SimulationError(f"{starved_decoder_reason(self)} (worker {self.worker_idx} dp rank "
                               f"{self.dp_rank}, stuck at {now_ms} ms)")

    # ------------------------------------------------------------------ prefill admission
    def _prefill_batch(self, now_ms, watched):
        """SGLang ``get_new_batch_prefill``: the waiting requests this pass prefills, in order.

        Returns (batch, Σ chunk ends, Σ prefixes, Σ computed tokens)."""
        waiting = self.waiting
        cache = self.cache
        ps = self.page_size
        budget = self.budget
        slots = self.max_running - len(self.running)
        running = self.running
        ratio = self.ratio.value
        room = TotalRoom(cache.available() + cache.evictable_size,
                         running.clipped_remaining() * ratio,
                         lambda: budget.reserved_exact(running, ratio))
        rem_input = float(budget.max_prefill)
        rem_chunk = float(budget.chunk_size)
        chunks = self._pass_chunks if watched else None
        can_run = []
        sum_isl = sum_prefix = computed = 0
        while len(can_run) < slots and waiting:
            r = waiting[0]
            length = r.prompt_len + r.generated
            fresh_kv = r.computed == 0
            if fresh_kv and self.caching:
                limit = length if r.out_limit == 0 else length - 1
                memo = self._match_memo
                if memo[0] is r and memo[1] == limit and cache.still_matches(*memo[2:]):
                    cached = memo[2]          # a head that waits asks again every pass
                else:
                    inserts = cache.inserts
                    cached, node = cache.match_where(ensure_tokens(r, length), limit)
                    self._match_memo = (r, limit, cached, node, inserts)
            else:
                cached = 0
            start = r.computed if r.computed > cached else cached
            extend = length - start
            if extend == 0 and not fresh_kv:
                break
            if -(-extend // ps) * ps <= rem_chunk:
                chunk = extend
            else:
                chunk = (int(rem_chunk) // ps) * ps
                if chunk == 0:
                    break
                if chunk > extend:
                    chunk = extend
            charged = -(-chunk // ps) * ps
            reserve = 0 if chunk < extend else budget.output_reserve(r)
            if not room.admits(charged + reserve):
                break
            if charged > rem_input or charged > rem_chunk:
                break
            chunk_end = start + chunk
            if fresh_kv:
                prefix = self._allocate_fresh(r, start, chunk_end)
            else:
                prefix = self._extend_allocation(r, chunk_end)
            if prefix is None:
                break
            waiting.popleft()
            r.computed = chunk_end
            r.held_blocks = -(-chunk_end // ps) * ps
            if fresh_kv:
                readmit = bool(r.admissions)
                r.admissions.append((now_ms, prefix, readmit))
                if not readmit:
                    r.first_reused = prefix
                if prefix > r.max_reused:
                    r.max_reused = prefix
                r.status = RUNNING
            can_run.append(r)
            if chunks is not None:
                chunks.append((r, prefix, chunk_end, fresh_kv))
            sum_isl += chunk_end
            sum_prefix += prefix
            computed += chunk_end - prefix
            room.charge(charged + reserve)
            rem_input -= charged
            rem_chunk -= charged
            if rem_chunk <= 0.0:
                break
        self._pass_committed = computed
        return can_run, sum_isl, sum_prefix, computed

    # ------------------------------------------------------------------ tokens
    def _first_tokens(self, fresh, watched):
        """The prefill forward's first token for each request whose prompt completed."""
        P = self.pass_index
        ps = self.page_size
        for r in fresh:                   # their place in running order
            self._join_seq += 1
            r.bucket_key = self._join_seq
        for r in fresh:
            if r.generated >= r.out_limit:
                self._complete(r)
        growing = []
        need = 0
        for r in fresh:
            remaining = r.out_limit - r.generated
            if remaining <= 0:
                continue
            if remaining == 1:
                r.generated += 1          # its final token needs no KV slot
                self._emit(r, P)
                self._emitted_any = True
                self._complete(r)
            else:
                growing.append(r)
                if (r.prompt_len + r.generated) % ps == 0:
                    need += ps
        if not growing:
            return
        cache = self.cache
        if cache.available() < need:
            cache.evict(need - cache.available())
        if cache.allocate(need):
            for r in growing:
                if r.prompt_len + r.generated + 1 > r.held_blocks:
                    r.held_blocks += ps
                r.generated += 1
                r.computed += 1
                self._emit(r, P)
                self._cache_materialized(r, stamp(P, 1, r.bucket_key))
            self._emitted_any = True
            if watched:
                self._prefilled.extend(growing)
        else:
            # they get their first token at the next decode step, which then caches their
            # prompt pages (shareable, so that insert cannot be deferred)
            self._catch_up.extend(growing)
        for r in growing:
            self.running.join(r, r.bucket_key)

    def _decode_step(self, watched):
        """One decode forward over ``running``; returns (its time, a retraction ratio or None)."""
        running = self.running
        if not running:
            return 0.0, None
        cache = self.cache
        retraction = None
        need = running.growth()
        while cache.available() + cache.evictable_size < need and len(running) > 1:
            self._retract(self._shortest_output())
            need = running.growth()
            retraction = True
        evictable = cache.evictable_size
        if cache.available() < need:
            cache.evict(need - cache.available())
        if retraction:
            for r in running:
                running.sync(r)
            retraction = retraction_ratio(running)
        n = len(running)
        if not n:
            return 0.0, retraction
        total = running.sum_len
        decode_ms = self.timer.decode(n, total, total // n, self.total_kv_tokens)
        if not cache.allocate(need):
            # no room even after eviction: no tokens, no time; with nothing left to evict
            # this pass changed nothing
            self._starved = retraction is None and evictable == 0
            return 0.0, retraction
        self._emitted_any = True
        done = running.record_decode(self.pass_index)
        if self._catch_up:
            self._cache_caught_up(done, watched)
        for r in done:
            running.leave(r)
            self._complete(r)
        return decode_ms, retraction

    def _cache_caught_up(self, done, watched):
        """Members that missed their first token (no KV room) emitted it now: cache their pages."""
        P = self.pass_index
        running = self.running
        for r in self._catch_up:
            if r.in_stretch and r not in done:
                running.sync(r)
                self._cache_materialized(r, stamp(P, 1, r.bucket_key))
                if watched:
                    self._prefilled.append(r)     # its first token came with this step
        self._catch_up = []

    def _shortest_output(self):
        """The member with the fewest output tokens (the first of them in running order)."""
        running = self.running
        best = None
        for r in running:
            running.sync(r)
            if best is None or r.generated < best.generated:
                best = r
        return best

    def _retract(self, r):
        self.running.leave(r)
        self._release(r)
        r.status = PREEMPTED
        r.preemptions += 1
        self.retractions += 1
        self._retracted.append(r)

    def _complete(self, r):
        r.status = FINISHED
        self._finishing.append(r)
        self._done.append((r, "completed"))

    # ------------------------------------------------------------------ pass completion
    def complete(self):
        end_ms = self.pass_end_ms
        self._pass_done(end_ms)
        # a pass cut off by the run's time limit never completes: its prompt work is not counted
        self.committed_prefill_tokens += self._pass_committed
        watched = self.watched
        if watched:
            self._watch_completed()
        done = self._done
        if done:
            self._done = []
            for r, status in done:
                if status == "completed":
                    self._record_itl(r)
                self.cb.on_finish(r, end_ms, status)
        if watched:
            self._watch_settled()

