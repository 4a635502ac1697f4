"""vLLM v1 scheduler emulation for one attention rank (SEMANTICS 2.3, 2.6).

A pass is split in two calls: ``schedule(now_ms)`` decides the batch, allocates KV and returns
the modeled duration; ``complete(end_ms)`` stamps the tokens and retires finished requests.

Speed: a request that decodes in consecutive passes is kept in an *open stretch* and is not
touched per pass. Its length, block needs and finishing pass follow arithmetically from the
rank's pass counter; per-pass work is proportional to prefill/admission/finish events, plus one
C call that hands a new KV block to every decoder crossing a block boundary in that pass. When
the budget or the KV pool binds, the pass falls back to the explicit walk over the running
queue in order, which is the reference behaviour itself.
"""

from __future__ import annotations

from array import array
from collections import deque

from .request import FINISHED, PREEMPTED, RUNNING


class RankCallbacks:
    """How a rank reports lifecycle events to its runtime (overridden by the runtime)."""

    def on_admit(self, request, now_ms, reused_tokens, is_readmission):
        pass

    def on_finish(self, request, end_ms, status):
        pass


class VllmRank:
    def __init__(self, engine, timer, pool, *, hashing, callbacks, worker_idx=0, dp_rank=0):
        self.worker_idx = worker_idx
        self.dp_rank = dp_rank
        self.timer = timer
        self.pool = pool
        self.hashing = hashing
        self.cb = callbacks
        bs = engine.block_size
        self.block_size = bs
        self.num_blocks = engine.num_gpu_blocks
        self.total_kv_tokens = engine.num_gpu_blocks * bs
        self.max_batched = engine.max_num_batched_tokens
        self.max_seqs = engine.max_num_seqs
        self.max_model_len = engine.max_model_len
        self.caching = engine.enable_prefix_caching
        self.chunked = engine.enable_chunked_prefill
        self.lifo = engine.preemption_mode != "fifo"
        self.waiting = deque()
        self.running = []            # running order (admission order, preempted removed)
        self.partial = []            # running requests not in an open stretch
        # open-stretch decoders, indexed arithmetically by the pass counter
        self.n_dec = 0
        self.sum_base = 0            # sum of (base_len - base_pass) over open stretches
        self.buckets = [[] for _ in range(bs)]
        self.finishing = {}          # pass index -> requests whose last token is in that pass
        self.pass_index = 0
        self.pass_ends = array("d")
        self.itl_diff = array("q")   # difference array of gap multiplicities, per pass
        self.extra_gaps = []         # gaps across preemption breaks of finished requests
        self.busy = False
        self._ready = []             # partial requests whose last known token is computed
        self._rejected = []          # rejected while forming the pass; terminal at its end
        self.preemptions = 0
        self.committed_prefill_tokens = 0

    # ------------------------------------------------------------------ queue entry
    def submit(self, request):
        request.rank = self
        self.waiting.append(request)

    def has_work(self):
        return bool(self.running or self.waiting)

    def in_flight(self):
        return len(self.running) + len(self.waiting)

    # ------------------------------------------------------------------ scheduling
    def schedule(self, now_ms):
        """Form one pass at ``now_ms``; returns its duration or None when there is nothing to do."""
        if not self.running and not self.waiting:
            return None
        P = self.pass_index
        bs = self.block_size
        budget = self.max_batched
        n_dec = self.n_dec
        partial = self.partial
        demand = n_dec
        for r in partial:
            demand += r.prompt_len + r.generated - r.computed
        fast = demand <= budget
        crossing = self.buckets[P % bs]
        if fast:
            need = len(crossing)
            for r in partial:
                need += -(-(r.prompt_len + r.generated) // bs) - r.held_blocks
            fast = need <= self.pool.allocatable()
        # prefill batch statistics: count, sum of chunk ends, sum of chunk starts
        self._pf_count = 0
        self._pf_isl = 0
        self._pf_prefix = 0
        self._dec_extra = 0          # decode emitters outside open stretches
        self._dec_extra_len = 0
        if fast:
            if crossing:
                self.pool.allocate_each(array("i", [r.seq for r in crossing]))
                for r in crossing:
                    r.held_blocks += 1
            for r in partial:
                self._run_chunk(r, r.prompt_len + r.generated - r.computed)
            budget -= demand
            preempted = False
        else:
            budget, preempted = self._schedule_running_walk(P, budget)
        if not preempted:
            self._admit_waiting(now_ms, budget)
            if not self.running and self.waiting:
                # nothing runs and the head still does not fit: it never will
                self._fail_head(now_ms)
        self._ready = [r for r in self.partial if r.computed == r.prompt_len + r.generated]
        return self._pass_duration(P)

    def _pass_duration(self, P):
        prefill = 0.0
        if self._pf_count:
            n = self._pf_count
            prefill = self.timer.prefill(n, self._pf_isl // n, self._pf_prefix // n)
        n = self.n_dec + self._dec_extra
        decode = 0.0
        if n:
            active = self.sum_base + self.n_dec * P + self._dec_extra_len
            decode = self.timer.decode(n, active, active // n, self.total_kv_tokens)
        # the reference keeps durations in whole nanoseconds
        return round((prefill + decode) * 1e6) / 1e6

    def _run_chunk(self, r, tokens):
        """Compute ``tokens`` more known tokens of a request outside an open stretch."""
        start = r.computed
        end = start + tokens
        bs = self.block_size
        need = -(-end // bs) - r.held_blocks
        if need > 0:
            self.pool.allocate(r.seq, need)
            r.held_blocks += need
        r.computed = end
        if start < r.prompt_len:
            self._pf_count += 1
            self._pf_isl += end
            self._pf_prefix += start
            self.committed_prefill_tokens += tokens
        else:
            self._dec_extra += 1
            self._dec_extra_len += end
        if self.caching:
            self._commit_full_blocks(r, end // bs)

    def _schedule_running_walk(self, P, budget):
        """Exact walk over the running queue in order: budget, blocking and preemption."""
        bs = self.block_size
        running = self.running
        pool = self.pool
        preempted = False
        stopped = False
        i = 0
        while i < len(running):
            r = running[i]
            if stopped or budget <= 0:
                if r.in_stretch:
                    self._break_stretch(r, P)
                i += 1
                continue
            if r.in_stretch:
                tokens = 1
                length = r.base_len + P - r.base_pass
                need = 1 if (length - 1) % bs == 0 else 0
            else:
                remaining = r.prompt_len + r.generated - r.computed
                if not self.chunked and remaining > budget:
                    stopped = True
                    continue
                tokens = remaining if remaining < budget else budget
                need = -(-(r.computed + tokens) // bs) - r.held_blocks
            dropped = False
            while need > pool.allocatable():
                victim_index = len(running) - 1 if self.lifo else 0
                victim = running[victim_index]
                self._preempt(victim, P)
                preempted = True
                if victim is r:
                    dropped = True
                    break
                if victim_index < i:
                    i -= 1
            if dropped:
                continue
            if r.in_stretch:
                if need:
                    pool.allocate(r.seq, 1)
                    r.held_blocks += 1
            else:
                self._run_chunk(r, tokens)
            budget -= tokens
            i += 1
        return budget, preempted

    def _admit_waiting(self, now_ms, budget):
        bs = self.block_size
        pool = self.pool
        waiting = self.waiting
        while waiting and budget > 0 and len(self.running) < self.max_seqs:
            r = waiting[0]
            fresh = not r.admissions
            if self._reject_if_impossible(r, now_ms):
                waiting.popleft()
                continue
            length = r.prompt_len + r.generated
            hashes = self._lookup_hashes(r, length // bs) if self.caching else None
            hit_blocks = pool.match(hashes) if hashes is not None and len(hashes) else 0
            cached = hit_blocks * bs
            if cached >= length and r.out_limit > r.generated:
                cached = ((length - 1) // bs) * bs
                hit_blocks = cached // bs
            remaining = length - cached
            if not self.chunked and remaining > budget:
                break
            tokens = remaining if remaining < budget else budget
            need = -(-(cached + tokens) // bs) - hit_blocks
            if need > self.num_blocks - pool.active():
                break
            waiting.popleft()
            r.seq = pool.new_seq()
            if hit_blocks:
                pool.acquire(r.seq, hashes, 0, hit_blocks)
            r.held_blocks = hit_blocks
            r.committed_blocks = hit_blocks
            r.computed = cached
            r.status = RUNNING
            self.running.append(r)
            self.partial.append(r)
            self._run_chunk(r, tokens)
            budget -= tokens
            reused = min(cached, r.prompt_len)
            r.admissions.append((now_ms, reused, not fresh))
            if fresh:
                r.first_reused = reused
            if reused > r.max_reused:
                r.max_reused = reused
            self.cb.on_admit(r, now_ms, reused, not fresh)

    def _fail_head(self, now_ms):
        r = self.waiting.popleft()
        r.status = FINISHED
        self._rejected.append(r)

    def _reject_if_impossible(self, r, now_ms):
        limit = self.max_model_len
        too_long = limit is not None and r.prompt_len >= limit
        too_big = not r.admissions and -(-r.prompt_len // self.block_size) > self.num_blocks
        if too_long or too_big:
            r.status = FINISHED
            self._rejected.append(r)
            return True
        return False

    # ------------------------------------------------------------------ pass completion
    def complete(self, end_ms):
        P = self.pass_index
        self.pass_ends.append(end_ms)
        self.itl_diff.append(0)
        self.pass_index = P + 1
        if self._rejected:
            rejected = self._rejected
            self._rejected = []
            for r in rejected:
                self.cb.on_finish(r, end_ms, "rejected")
        finishing = self.finishing.pop(P, None)
        if finishing:
            for r in finishing:
                if r.in_stretch and r.status == RUNNING and \
                        r.base_pass + r.out_limit - r.base_gen - 1 == P:
                    self._finish_stretch(r, P, end_ms)
        ready = self._ready
        if ready:
            self._ready = []
            for r in ready:
                self.partial.remove(r)
                if r.generated >= r.out_limit:
                    # a prefill-only request ends without emitting
                    self._release(r)
                    self.running.remove(r)
                    r.status = FINISHED
                    self.cb.on_finish(r, end_ms, "completed")
                    continue
                self._open_stretch(r, P)
                if r.generated + 1 >= r.out_limit:
                    self._finish_stretch(r, P, end_ms)

    def _open_stretch(self, r, P):
        r.in_stretch = True
        r.base_pass = P
        r.base_gen = r.generated
        r.base_len = r.prompt_len + r.generated
        key = (P + 1 - r.base_len) % self.block_size
        r.bucket_key = key
        self.buckets[key].append(r)
        self.n_dec += 1
        self.sum_base += r.base_len - P
        last = P + r.out_limit - r.generated - 1
        if last <= P:
            return  # finishes with this very token; complete() retires it
        bucket = self.finishing.get(last)
        if bucket is None:
            self.finishing[last] = [r]
        else:
            bucket.append(r)

    def _close_stretch(self, r, last_pass):
        """Stop tracking ``r`` arithmetically; its last emission was in ``last_pass``."""
        r.in_stretch = False
        self.buckets[r.bucket_key].remove(r)
        self.n_dec -= 1
        self.sum_base -= r.base_len - r.base_pass
        emitted = last_pass - r.base_pass + 1
        if emitted > 0:
            r.stretches.append((r.base_pass, last_pass))
        r.generated = r.base_gen + emitted
        r.computed = r.prompt_len + r.generated - 1

    def _break_stretch(self, r, P):
        """A decoder that gets no token in pass P keeps running outside a stretch."""
        self._close_stretch(r, P - 1)
        self.partial.append(r)

    def _finish_stretch(self, r, P, end_ms):
        self._close_stretch(r, P)
        r.computed = r.prompt_len + r.generated - 1
        self.running.remove(r)
        self._release(r)
        r.status = FINISHED
        self._record_itl(r)
        self.cb.on_finish(r, end_ms, "completed")

    def _preempt(self, r, P):
        if r.in_stretch:
            self._close_stretch(r, P - 1)
        else:
            self.partial.remove(r)
        self.running.remove(r)
        self._release(r)
        r.computed = 0
        r.status = PREEMPTED
        r.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(r)

    # ------------------------------------------------------------------ KV helpers
    def _release(self, r):
        if r.seq < 0:
            return
        if self.caching:
            self._commit_full_blocks(r, r.computed // self.block_size)
        self.pool.release(r.seq)
        r.seq = -1
        r.held_blocks = 0
        r.committed_blocks = 0

    def _commit_full_blocks(self, r, full_blocks):
        done = r.committed_blocks
        if full_blocks > done:
            hashes = self._lookup_hashes(r, full_blocks)
            self.pool.commit(r.seq, hashes, done, full_blocks - done)
            r.committed_blocks = full_blocks

    def _lookup_hashes(self, r, n_blocks):
        """Sequence hashes of the first ``n_blocks`` blocks of prompt + generated tokens."""
        hashes = r.hash_cache
        if hashes is None:
            hashes = r.prompt.block_hashes(self.block_size)
            r.hash_cache = hashes
        if len(hashes) < n_blocks:
            hashes = r.prompt.extended_hashes(self.block_size, r, n_blocks)
            r.hash_cache = hashes
        return hashes

    # ------------------------------------------------------------------ metrics
    def _record_itl(self, r):
        """Add a finished request's inter-token gaps: stretches via the difference array."""
        diff = self.itl_diff
        ends = self.pass_ends
        prev_last = None
        for first, last in r.stretches:
            if last > first:
                diff[first] += 1
                diff[last] -= 1
            if prev_last is not None:
                self.extra_gaps.append(ends[first] - ends[prev_last])
            prev_last = last

    def itl_gaps(self):
        """(gap values, multiplicities) of every recorded gap on this rank."""
        values = []
        counts = []
        running_count = 0
        ends = self.pass_ends
        diff = self.itl_diff
        for i in range(len(ends) - 1):
            running_count += diff[i]
            if running_count:
                values.append(ends[i + 1] - ends[i])
                counts.append(running_count)
        for gap in self.extra_gaps:
            values.append(gap)
            counts.append(1)
        return values, counts
