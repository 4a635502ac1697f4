"""vLLM v1 scheduler emulation for one attention rank (SEMANTICS 2.3, 2.6).

A pass is split in two calls: ``schedule(now_ms)`` decides the batch, allocates KV and returns
the pass end time; ``complete()`` stamps the tokens and retires finished requests.

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

from ..errors import SimulationError
from . import fpm
from ..kv.hash_counts import hash_counts
from .decode_run import MAX_PASSES, decode_runner
from .mtp import MtpBursts
from .vllm_admission import admission_policy
from .vllm_psi import cadence_of
from .rank_base import RankBase
from .request import FINISHED, PREEMPTED, RUNNING, request_name


class VllmRank(RankBase):
    # what a pass costs; the disaggregated roles turn one off (engine/vllm_roles.py)
    charges_prefill = True
    charges_decode = True
    holds_sources = False        # the disaggregated prefill role keeps a finished copy's KV
    # (engine/rank.py: Rank) it runs decode-only passes as one event (extend) and a router's
    # kv_index may read its prefix index (indexed_prefix)
    extends = True
    indexes_prefix = True
    # every request is outside open stretches: each pass stamps its tokens (state_cache)
    stretchless = False
    state = None                 # the state_cache bookkeeping (engine/vllm_state_cache.py)
    # a router hears of the blocks a pass caches anew only, not of recomputed copies of cached
    # ones (the reference's rule; the C rank, the twin of the other configurations, reports
    # every committed block yet): on for the ranks only Python runs (MTP, state_cache)
    stores_new_only = False

    def __init__(self, engine, timer, pool, *, callbacks, worker_idx=0, dp_rank=0, scheduler_id=0):
        self._take_settings(engine, timer, pool, callbacks, worker_idx, dp_rank, scheduler_id)
        self.held_total = 0          # KV blocks held, summed over running requests
        self.completion_total = 0    # to-completion blocks, summed over running requests
        # The head of the queue that last had to wait, and the cache version then: while no
        # block was committed or released since, its answer cannot have changed.
        self.kv_version = 0
        self._blocked = (None, -1, 0)
        self.waiting = deque()
        self.running = []            # running order (admission order, preempted removed)
        self.partial = []            # running requests not in an open stretch
        # open-stretch decoders, indexed arithmetically by the pass counter
        self.n_dec = 0
        self.sum_base = 0            # sum of (base_len - base_pass) over open stretches
        # open-stretch decoders by the pass offset (mod block_size) at which each next needs a
        # block; a dict holding only non-empty buckets keeps memory O(decoders), not O(bs)
        self.buckets = {}
        # per bucket, the members' KV handles in member order, and the blocks granted to every
        # member since the bucket opened: a decoder's held_blocks is brought up to date when
        # its stretch closes, so growth is one C call per bucket, not one per request
        self.bucket_seqs = {}
        self.bucket_grown = {}
        self.finishing = {}          # pass index -> requests whose last token is in that pass
        self._init_pass_history()
        self._ready = []             # partial requests whose last known token is computed
        self._macro_ends = None      # end times of a pass extended by decode-only passes
        self._decode_run = None      # the loop that extends it (engine/decode_run.py), made once
        self._plain_decode = False   # the pass just formed only decodes open stretches
        self._plain_after_ready = False  # ... once the requests it readies open stretches
        self._rejected = []          # rejected while forming the pass; terminal at its end
        self.pass_effect = False     # the pass just formed admits, preempts, emits or rejects
        self.pass_end_ms = 0.0
        self.preemptions = 0
        self.completed_preemptions = 0  # as of the latest completed pass (telemetry)
        self.committed_prefill_tokens = 0
        self.decode_steps = 0        # tokens after each request's first, over completed passes
        self._pass_steps = 0
        # the tokens those decode steps emitted (more than one a step with MTP bursts): the
        # telemetry's avg_accept_length is decode_tokens / decode_steps over a window
        self.decode_tokens = 0
        self._pass_tokens = 0
        # a router that watches this rank (runtime/router.py): KV blocks stored in the pass
        # in flight, reported with its prefill completions when it ends
        self.observer = None
        self._stored = []
        self._in_flight_index = None   # (stored, evicted) hash sets of the pass in flight
        self._evicted_in_flight = []
        # telemetry reads the rank as of its latest pass completion or submission: a pass in
        # flight has changed the queues already, the reference's gauges not yet
        self.capture_gauges = False
        self._gauges = None
        self.in_flight = False       # a pass formed by schedule() has not completed yet
        # any of the above (a router's observer, telemetry gauges, FPM): one test per pass
        # when none is
        self.watched = False
        # forward-pass metrics for scaling snapshots (engine/fpm.py), kept only when asked
        self.fpm_on = False
        self.fpm_last = None         # (end ms, row) of the latest completed pass
        self.fpm_clock = 0.0         # when its last row was reported, or the rank activated
        self._fpm_chunks = []
        self._fpm_queue = None
        self._fpm_pending = None
        # MTP bursts (engine/mtp.py): every request stays outside open stretches
        self.mtp = None
        if getattr(engine, "aic_nextn", None) is not None:
            self.mtp = MtpBursts(engine, scheduler_id, draws=not self.holds_sources)
            self.stores_new_only = True
        # prefill_schedule_interval's gate (engine/vllm_psi.py): a worker of several ranks
        # moves its wave; a lone rank's stays 0 and never defers
        self.psi = cadence_of(engine)

    def _take_settings(self, engine, timer, pool, callbacks, worker_idx, dp_rank, scheduler_id):
        """The rank's identity and the engine settings it schedules by (the C rank's too)."""
        self.worker_idx = worker_idx
        self.dp_rank = dp_rank
        self.scheduler_id = scheduler_id
        self.timer = timer
        self.pool = pool
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
        # how requests are admitted and make room to grow (engine/vllm_admission.py): vLLM's,
        # or TensorRT-LLM's GUARANTEED_NO_EVICT; the flags are the C rank's config
        self.admission = admission_policy(engine)
        self.lifo = engine.preemption_mode != "fifo"
        self.no_evict = engine.backend == "trtllm"

    # ------------------------------------------------------------------ queue entry
    def submit(self, request):
        self._limit_output(request)
        self.waiting.append(request)
        if self.capture_gauges:
            self._gauges = self.submission_gauges()

    def _limit_output(self, request):
        """Take ``request`` onto this rank: its output limit under max_model_len (and the
        admission policy's clamp)."""
        request.rank = self
        limit = self.max_model_len
        if limit is not None and request.prompt_len < limit:
            request.out_limit = min(request.max_output, limit - request.prompt_len)
        self.admission.limit_output(self, request)

    def has_work(self):
        return bool(self.running or self.waiting)

    # ------------------------------------------------------------------ scheduling
    def schedule(self, now_ms):
        """Form one pass at ``now_ms``; returns its end time, or None with nothing to do."""
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
        # a pass deferring prefills skips prompt chunks: the exact walk
        defer = self.psi is not None and self.psi.begin(self.running)
        fast = demand <= budget and not defer and self.state is None
        crossing = self.buckets.get(P % bs, ())
        if fast:
            need = len(crossing)
            for r in partial:
                need += -(-(r.prompt_len + r.generated) // bs) - r.held_blocks
            fast = need <= self.pool.allocatable()
        self._pf_count = 0
        self._pf_tokens = 0          # prompt tokens computed; they count once the pass ends
        self._chunked = False        # some known tokens were computed (prompt or recompute)
        self._pf_isl = 0
        self._pf_prefix = 0
        if fast:
            if crossing:
                self._grow_decoders(P)
            for r in partial:
                self._run_chunk(r, r.prompt_len + r.generated - r.computed)
            budget -= demand
            preempted = False
        else:
            budget, preempted = self._schedule_running_walk(P, budget, defer)
        admitted = 0
        if not preempted:
            # a head that can never start (nothing runs, it does not fit) makes the pass
            # empty: the runtime parks the worker and, as the reference, aborts only once
            # nothing else can happen (other workers may run on to a time limit first)
            admitted = self._admit_waiting(now_ms, budget)
        if self.psi is not None:
            self.psi.end_admission(self.waiting, preempted)
        ready = [r for r in self.partial if r.computed >= r.prompt_len + r.generated]
        emitters = None
        if self.mtp is not None:
            # the bursts' KV is reserved (preempting while it does not fit) and sampled now
            emitters = self.mtp.reserve(self, P, ready)
            preempted = preempted or self.mtp.preempted
            ready = [r for r in ready if r.generated >= r.out_limit] + emitters
        self._ready = ready
        plain = (fast and not self._rejected and not self._pf_count
                 and P not in self.finishing and emitters is None and not self.stretchless)
        self._plain_decode = plain and not self.partial
        # every request outside a stretch gets its token with this pass: the decode role
        # may open their stretches now and extend the pass (VllmDecodeRank.extend)
        self._plain_after_ready = plain and len(ready) == len(self.partial)
        n = self.n_dec
        # anything a zero-duration pass would make visible: the disaggregated runtime parks a
        # worker whose zero-duration pass has no effect
        self.pass_effect = bool(preempted or admitted or ready or n or self._rejected)
        active = self.sum_base + n * P
        if emitters is not None:
            # with MTP every emitter pays decode time, a prompt just finished included
            for r in emitters:
                n += 1
                active += r.prompt_len + r.generated
        else:
            for r in ready:
                # a first token comes free with the prefill chunk that completed the prompt in
                # this pass; one after no prompt work (TRT-LLM full cache hit, decode-role
                # activation) is a decode step
                if r.generated > 0 or (r.pass_chunk[1] < 0 and r.out_limit > 0):
                    n += 1
                    active += r.prompt_len + r.generated
        prefill = 0.0
        if self._pf_count and self.charges_prefill:
            count = self._pf_count
            prefill = self.timer.prefill(count, self._pf_isl // count, self._pf_prefix // count)
        decode = 0.0
        if n and self.charges_decode:
            decode = self.timer.decode(n, active, active // n, self.total_kv_tokens)
        # decode steps (telemetry's accept_length_forward_count): a token after a preempted
        # request's recompute comes from a prefill forward, not a decode step
        steps = n
        if emitters is not None:
            steps, self._pass_tokens = self.mtp.decode_steps()
        elif ready:
            for r in ready:
                if r.generated > 0 and r.pass_chunk[1] >= 0:
                    steps -= 1
        self._pass_steps = steps
        if emitters is None:
            self._pass_tokens = steps
        self.pass_end_ms = (now_ms + prefill) + decode
        if self.watched:
            self.in_flight = True
            if self.fpm_on:
                self._fpm_queue = fpm.queue_stats(self.waiting)   # what the pass left waiting
                self._fpm_pending = fpm.pass_row(self, now_ms, P, ready)
                self._fpm_chunks = []
        return self.pass_end_ms

    # ------------------------------------------------------------------ decode-only runs
    def extend(self, horizon_ms, cutoff_ms, max_passes=MAX_PASSES):
        """Lengthen the pass just formed by the decode-only passes that follow it.

        They change nothing but token counts until a request finishes, the KV pool would run
        out, a new request could join (``horizon_ms``: the next known arrival) or the run's
        time limit; the runtime calls ``truncate`` if an unforeseen request arrives meanwhile.
        Returns the end time of the last pass.
        """
        if not self._plain_decode or self.n_dec == 0 or self.pass_end_ms >= horizon_ms:
            return self.pass_end_ms
        run = self._decode_run
        if run is None:
            run = self._decode_run = decode_runner(self.timer, self.total_kv_tokens)
        P0 = self.pass_index
        # the first pass after P0 in which a request emits its last token ends the run
        stop = -1
        for P in self.finishing:
            if P > P0 and (stop < 0 or P < stop):
                stop = P
        ends = run(first_pass=P0 + 1, end_ms=self.pass_end_ms, batch=self.n_dec,
                   base=self.sum_base, total_kv=self.total_kv_tokens, block_size=self.block_size,
                   room=self.pool.allocatable(), horizon_ms=horizon_ms, cutoff_ms=cutoff_ms,
                   crossing={key: len(bucket) for key, bucket in self.buckets.items()},
                   stop_pass=stop, max_passes=max_passes)
        if len(ends) > 1:
            self._macro_ends = ends
            self.pass_end_ms = ends[-1]
        return self.pass_end_ms

    def _complete_extension(self):
        """Record the decode-only passes before the last one of an extended pass, and give
        every decoder the KV blocks it grew into over all the extra passes at once."""
        ends = self._macro_ends
        self._macro_ends = None
        first = self.pass_index + 1          # the first pass's blocks came at scheduling
        self.pass_ends.extend(ends[:-1])
        self.decode_steps += self.n_dec * (len(ends) - 1)
        self.decode_tokens += self.n_dec * (len(ends) - 1)
        self.itl_diff.frombytes(bytes(8 * (len(ends) - 1)))
        self.pass_index += len(ends) - 1
        last = self.pass_index
        bs = self.block_size
        pool = self.pool
        grown = 0
        seqs_of = self.bucket_seqs
        grown_of = self.bucket_grown
        # ascending offsets, members in joining order: the order of one allocation per request
        for key in sorted(seqs_of):
            # passes P in [first, last] with P % bs == key
            blocks = (last - key) // bs - (first - 1 - key) // bs
            if blocks:
                seqs = seqs_of[key]
                pool.allocate_each(seqs, blocks)
                grown_of[key] += blocks
                grown += blocks * len(seqs)
        self.held_total += grown

    def _grow_decoders(self, P):
        key = P % self.block_size
        seqs = self.bucket_seqs.get(key)
        if seqs:
            self.pool.allocate_each(seqs)
            self.bucket_grown[key] += 1
            self.held_total += len(seqs)

    def request_blocks(self, r):
        """The KV blocks ``r`` holds now (an open stretch's count is brought up to date only
        when it closes)."""
        if r.in_stretch:
            return r.held_blocks + self.bucket_grown[r.bucket_key] - r.grown_mark
        return r.held_blocks

    def _run_chunk(self, r, tokens):
        """Compute ``tokens`` more known tokens of a request outside an open stretch."""
        start = r.computed
        end = start + tokens
        bs = self.block_size
        need = -(-end // bs) - r.held_blocks
        if need > 0:
            self.pool.allocate(r.seq, need)
            r.held_blocks += need
            self.held_total += need
        r.computed = end
        self._chunked = True
        prompt = r.prompt_len
        prompt_start = start if start < prompt else prompt
        prompt_end = end if end < prompt else prompt
        if prompt_end > prompt_start:
            self._pf_count += 1
            self._pf_isl += prompt_end
            self._pf_prefix += prompt_start
            self._pf_tokens += tokens
            r.pass_chunk = (tokens, prompt_end, prompt_start)
            if self.fpm_on:
                self._fpm_chunks.append(r)
        else:
            r.pass_chunk = (tokens, -1, -1)
        if self.caching:
            self._commit_full_blocks(r, end // bs)

    def _schedule_running_walk(self, P, budget, defer=False):
        """Exact walk over the running queue in order: budget, blocking and preemption
        (``defer``: requests still computing their prompt are skipped, engine/vllm_psi.py)."""
        bs = self.block_size
        running = self.running
        pool = self.pool
        preempted = False
        scheduled = set()
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            if r.in_stretch:
                tokens = 1
                length = r.base_len + P - r.base_pass
                need = 1 if (length - 1) % bs == 0 else 0
            elif defer and r.computed < r.prompt_len:
                i += 1
                continue
            else:
                remaining = r.prompt_len + r.generated - r.computed
                prompt_left = r.prompt_len - r.computed
                if not self.chunked and 0 < prompt_left and prompt_left > budget:
                    break
                tokens = remaining if remaining < budget else budget
                need = -(-(r.computed + tokens) // bs) - r.held_blocks
                if self.state is not None:
                    end = r.computed + tokens
                    if self._never_fits(r, end):
                        self._reject_running(r)
                        continue
                    need += self._state_need(r, end)
            if need > pool.allocatable():
                # the admission policy's victims give way (the reference does not move its
                # cursor when an earlier request leaves), or none does
                refund = self._preempt_for(r, need, P, scheduled)
                if refund is None:
                    break  # (TRT-LLM's reservation under-counted: r and those after it wait)
                budget += refund
                preempted = True
                if r.status == PREEMPTED:
                    continue  # r gave way itself: the next request took its place
            if r.in_stretch:
                if need:
                    pool.allocate(r.seq, 1)
                    r.held_blocks += 1
                    self.held_total += 1
            else:
                self._run_chunk(r, tokens)
            scheduled.add(r.uuid)
            budget -= tokens
            i += 1
        # requests the walk did not reach (or skipped) get nothing this pass
        for r in running:
            if r.in_stretch and r.uuid not in scheduled:
                self._break_stretch(r, P)
        return budget, preempted

    def _preempt_for(self, r, need, P, scheduled):
        """Preempt the admission policy's victims until ``need`` more blocks of ``r`` fit or
        ``r`` itself gave way; returns the budget refunded by victims this pass had scheduled,
        or None when the policy lets nothing give way."""
        pool = self.pool
        running = self.running
        victim_of = self.admission.victim
        refund = 0
        while need > pool.allocatable():
            victim = victim_of(running)
            if victim is None:
                return None
            if victim.uuid in scheduled:
                refund += self._roll_back(victim, P)
            self._preempt(victim, P)
            if victim is r:
                break
        return refund

    def _roll_back(self, r, P):
        """Undo this pass's work of an already scheduled victim; returns the refunded budget."""
        if r.in_stretch:
            return 1
        tokens, isl, prefix = r.pass_chunk
        if isl >= 0:
            self._pf_count -= 1
            self._pf_isl -= isl
            self._pf_prefix -= prefix
            self._pf_tokens -= tokens
        return tokens

    def _admit_waiting(self, now_ms, budget):
        """Admit from the head of the queue while it fits; returns how many were admitted."""
        waiting = self.waiting
        running = self.running
        before = len(running)
        while waiting and len(running) < self.max_seqs:
            budget = self._admit_head(now_ms, budget)
            if budget is None:
                break
        return len(running) - before

    def _admit_head(self, now_ms, budget):
        """Admit or reject the head of the queue; returns the budget left, or None when the
        head has to wait (and nothing behind it may start)."""
        bs = self.block_size
        pool = self.pool
        r = self.waiting[0]
        blocked_head, version, active_then = self._blocked
        if blocked_head is r and version == self.kv_version and pool.active() >= active_then:
            return None
        fresh = not r.admissions
        length = r.prompt_len + r.generated
        if self.max_model_len is not None and r.prompt_len >= self.max_model_len:
            self._reject_head()
            return budget
        admission = self.admission
        if admission.rejects(self, r, fresh):
            self._reject_head()
            return budget
        # hashed only once it may fit: an over-capacity prompt of 10^7 tokens would cost ~2 GB
        # (the lookup only reads the pool, so the order does not change the outcome)
        if self.caching:
            hashes = self._lookup_hashes(r, length // bs)
            hit_blocks, active_hits = pool.match_counts(hashes)
        else:
            hashes = None
            hit_blocks = active_hits = 0
        cached = hit_blocks * bs
        active_cached = active_hits * bs
        if cached > length:
            cached = length
        if active_cached > length:
            active_cached = length
        # whether it fits now, the cached tokens it reuses (what its state restores included,
        # state_cache) and the blocks it reserves: the policy's
        admitted = admission.admit(self, r, length, cached, active_cached, hashes)
        if admitted is None:
            self._blocked = (r, self.kv_version, pool.active())
            return None
        cached, footprint = admitted
        remaining = length - cached
        prompt_left = r.prompt_len - cached
        if prompt_left > 1 and self.psi is not None and self.psi.defer:
            return None   # a deferring pass admits only what needs at most one prompt token
        if not self.chunked and 0 < prompt_left and prompt_left > budget:
            return None
        tokens = remaining if remaining < budget else budget
        if tokens == 0 and remaining > 0:
            return None
        self.waiting.popleft()
        self._take_blocks(r, hashes, cached // bs, 0, footprint)
        r.computed = cached
        r.status = RUNNING
        self.running.append(r)
        self.partial.append(r)
        if self.state is not None:
            self._admitted(r, cached)
        self._run_chunk(r, tokens)
        r.admissions.append((now_ms, cached, not fresh))
        if fresh:
            r.first_reused = cached
        if cached > r.max_reused:
            r.max_reused = cached
        return budget - tokens

    def stall_reason(self, r):
        """Why ``r``, at the head of the queue, cannot start."""
        if not self.chunked and r.prompt_len > self.max_batched:
            return (f"{self.setting_prefix('max_num_batched_tokens')}its prompt of "
                    f"{r.prompt_len} tokens exceeds max_num_batched_tokens {self.max_batched} "
                    f"and chunked prefill is disabled")
        return (f"{self.setting_prefix('num_gpu_blocks')}its {r.prompt_len + r.generated} tokens "
                f"need more than the {self.num_blocks} KV blocks of {self.block_size} tokens of "
                f"a rank")

    def setting_prefix(self, field):
        """``$.path.field: `` of one of the rank's settings, when the path is known."""
        return f"{self.config_path}.{field}: " if self.config_path else ""

    def progressed(self):
        # computed chunks are progress too: a chunk can cost no time (zero prefill timing, or
        # a recompute on a decode role)
        return self.pass_effect or self._chunked

    def fit_error(self, r):
        """Why ``r`` can never be admitted here (checked when an embedder submits it), or None;
        traffic that large is rejected at admission, as the reference does."""
        if not self.admission.never_fits(self, r):
            return None
        blocks = -(-r.prompt_len // self.block_size)
        return (f"{self.setting_prefix('num_gpu_blocks')}the prompt of request {request_name(r)} "
                f"({r.prompt_len} tokens) needs {blocks} KV blocks of {self.block_size} tokens, "
                f"a rank has {self.num_blocks}")

    def kv_gauges(self):
        """(active, inactive) KV blocks: referenced by requests (partial blocks included), and
        cached with no reference."""
        pool = self.pool
        return pool.active(), pool.inactive()

    def indexed_prefix(self, hashes):
        """The leading blocks of ``hashes`` an index fed by this rank's KV events would hold:
        what the pool holds, minus blocks the pass in flight committed, plus blocks it evicted
        (their events come at its end)."""
        pool = self.pool
        held = pool.match(hashes)
        evicted = pool.take_evicted()
        if len(evicted):
            self._evicted_in_flight.extend(evicted)
            self._in_flight_index = None
        if not self._evicted_in_flight and (not held or not self._stored):
            return held     # (nothing of the pass in flight can change the answer)
        index = self._in_flight_index
        if index is None:
            # each set only when the pass in flight has something for it: most placements
            # come while a pass commits a few blocks and evicts none
            stored = gone = None
            if self._stored:
                stored = hash_counts()
                for run in self._stored:
                    stored.insert_all(run)
            if self._evicted_in_flight:
                gone = hash_counts()
                gone.insert_all(self._evicted_in_flight)
            index = self._in_flight_index = (stored, gone)
        stored, gone = index
        # resident blocks are indexed unless this pass stored them (a copy this pass stored
        # after evicting the indexed one is still indexed: its removal comes at the pass end
        # too); gone ones are indexed until this pass ends, unless this pass had stored them in
        # the first place
        count = stored.leading_absent(hashes, 0, held) if stored is not None else held
        if count < held and gone is not None:
            while count < held and (hashes[count] in gone or hashes[count] not in stored):
                count += 1
        if count < held:
            return count
        run = gone.leading(hashes, held) if gone is not None else 0
        if run and stored is not None:
            run = stored.leading_absent(hashes, held, held + run)
        return held + run

    def live_gauges(self):
        """(active blocks, inactive blocks, running, waiting) now."""
        pool = self.pool
        return pool.active(), pool.inactive(), len(self.running), len(self.waiting)

    def submission_gauges(self):
        """``live_gauges()`` at a submission: with a pass in flight, the reference's engine
        shows the requests that pass finishes as gone already (their blocks cached)."""
        active, inactive, running, waiting = self.live_gauges()
        if not self.in_flight:
            return active, inactive, running, waiting
        finishing = self._finishing_in_flight()
        if not finishing:
            return active, inactive, running, waiting
        # the blocks no other running request references leave the active set; the full ones
        # stay cached (a block shared by several finishing requests counts once)
        pool, bs = self.pool, self.block_size
        kept = set()
        for r in self.running:
            if r not in finishing and r.seq >= 0:
                kept.update(pool.seq_blocks(r.seq))
        freed, cached = set(), set()
        for r in finishing:
            if r.seq < 0:
                continue
            blocks = pool.seq_blocks(r.seq)
            full = (r.prompt_len + r.out_limit - 1) // bs if self.caching else 0
            for i, block in enumerate(blocks):
                if block not in kept:
                    freed.add(block)
                    if i < full:
                        cached.add(block)
        return (active - len(freed), inactive + len(cached), running - len(finishing), waiting)

    def _finishing_in_flight(self):
        """Requests whose last token comes with the pass in flight."""
        P = self.pass_index + (len(self._macro_ends) - 1 if self._macro_ends else 0)
        done = [r for r in self.finishing.get(P, ())
                if r.in_stretch and r.base_pass + r.out_limit - r.base_gen - 1 == P]
        if self.mtp is not None:
            return self.mtp.finishing()
        done += [r for r in self._ready if r.generated + 1 >= r.out_limit]
        return done

    def telemetry_gauges(self):
        """``live_gauges()`` as of the latest pass completion or submission."""
        return self._gauges if self._gauges is not None else self.live_gauges()

    def pending_prefill_tokens(self):
        """Prompt tokens not computed yet, over the requests waiting or running here."""
        total = 0
        for r in self.waiting:
            total += r.prompt_len
        for r in self.partial:
            if r.computed < r.prompt_len:
                total += r.prompt_len - r.computed
        return total

    def kv_summary(self):
        return f"{self.pool.allocatable()} of {self.num_blocks} KV blocks free"

    def _reject_head(self):
        r = self.waiting.popleft()
        r.status = FINISHED
        self._rejected.append(r)

    # ------------------------------------------------------------------ pass completion
    def complete(self):
        watched = self.watched
        if watched:
            self.in_flight = False
            if self.fpm_on:
                self.fpm_last = fpm.completed(self)
        if self._macro_ends is not None:
            self._complete_extension()
        end_ms = self.pass_end_ms
        P = self.pass_index
        self._pass_done(end_ms)
        # a pass cut off by the run's time limit never completes: its prompt work is not counted
        self.committed_prefill_tokens += self._pf_tokens
        self.decode_steps += self._pass_steps
        self.decode_tokens += self._pass_tokens
        if watched and self.observer is not None:
            self._report_pass(self.observer)
        if self._rejected:
            rejected = self._rejected
            self._rejected = []
            for r in rejected:
                self.cb.on_finish(r, end_ms, "rejected")
        done = []
        finishing = self.finishing.pop(P, None)
        if finishing:
            for r in finishing:
                if r.in_stretch and r.base_pass + r.out_limit - r.base_gen - 1 == P:
                    done.append(r)
        ready = self._ready
        if self.mtp is not None:
            self._ready = []
            self.mtp.complete(self, P, end_ms, ready)
        elif self.stretchless:
            self._ready = []
            self._stamp(P, end_ms, ready)
        elif ready:
            self._ready = []
            for r in ready:
                self.partial.remove(r)
                if r.generated >= r.out_limit:
                    # nothing left to generate: it ends without a token, released first
                    self._retire(r, end_ms)
                    continue
                self._open_stretch(r, P)
                if r.generated + 1 >= r.out_limit:
                    done.append(r)
        if done:
            if len(done) > 1:
                done.sort(key=self.running.index)
            for r in done:
                self._finish_stretch(r, P, end_ms)
        if watched:
            if self.capture_gauges:
                self._gauges = self.live_gauges()
                # preemptions count once the pass that preempted completes (the reference's)
                self.completed_preemptions = self.preemptions
            if self.observer is not None and self.observer.ordered:
                self.observer.end_pass()

    def _report_pass(self, observer):
        """Tell the router what the pass that ends now did: the full blocks it computed, the
        cached blocks evicted for it, the prompts it completed (in that order)."""
        stored, self._stored = self._stored, []
        if observer.sends_kv:
            for hashes in stored:
                observer.kv_stored(self, hashes)
            evicted = self.pool.take_evicted(absent_only=True)
            if len(evicted):
                observer.kv_removed(self, evicted)
        else:  # the router reads the engine itself (indexed_prefix): a new pass, a new log
            self.pool.take_evicted()
            self._evicted_in_flight = []
            self._in_flight_index = None
        ready = self._ready
        if observer.ordered:
            # the reference signals each request in running order, each draining the
            # router's queue on its own: the router sorts this pass's signals by it
            running = self.running
            P = self.pass_index - 1
            order = {r.uuid: running.index(r) for r in ready}
            for r in self.finishing.get(P, ()):
                if r.in_stretch and r.base_pass + r.out_limit - r.base_gen - 1 == P:
                    order[r.uuid] = running.index(r)
            observer.begin_pass(order)
        for r in ready:
            # a first token that is also the last is a terminal only, except on a prefill
            # worker, whose copies stop at their first token: that is their prefill completion
            if r.generated + 1 < r.out_limit or self.holds_sources:
                observer.prefill_done(self, r)

    def _open_stretch(self, r, P):
        r.in_stretch = True
        r.base_pass = P
        r.base_gen = r.generated
        r.base_len = r.prompt_len + r.generated
        key = (P + 1 - r.base_len) % self.block_size
        r.bucket_key = key
        bucket = self.buckets.get(key)
        if bucket is None:
            self.buckets[key] = [r]
            self.bucket_seqs[key] = array("i", [r.seq])
            self.bucket_grown[key] = 0
            r.grown_mark = 0
        else:
            bucket.append(r)
            self.bucket_seqs[key].append(r.seq)
            r.grown_mark = self.bucket_grown[key]
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
        key = r.bucket_key
        bucket = self.buckets[key]
        r.held_blocks += self.bucket_grown[key] - r.grown_mark
        if len(bucket) == 1:
            del self.buckets[key], self.bucket_seqs[key], self.bucket_grown[key]
        else:
            i = bucket.index(r)
            del bucket[i]
            del self.bucket_seqs[key][i]
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
        self._record_itl(r)
        self._retire(r, end_ms)

    def _retire(self, r, end_ms):
        """``r`` has generated its last token (or had none to generate): it leaves the rank."""
        self.running.remove(r)
        self._release(r)
        r.status = FINISHED
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
        self.kv_version += 1
        r.seq = -1
        self.held_total -= r.held_blocks
        r.held_blocks = 0
        r.committed_blocks = 0
        if r.footprint_blocks:
            # the blocks it reserved through completion (TRT-LLM's, engine/vllm_admission.py)
            self.completion_total -= r.footprint_blocks
            r.footprint_blocks = 0

    def _take_blocks(self, r, hashes, hits, fresh, footprint):
        """Give ``r`` a KV table: its first ``hits`` blocks found cached (pinned before fresh
        blocks are taken, so that they cannot be evicted for them), then ``fresh`` new ones,
        and ``footprint`` blocks reserved through completion (the admission policy's)."""
        pool = self.pool
        r.seq = pool.new_seq()
        if hits:
            pool.acquire(r.seq, hashes, 0, hits)
        if fresh:
            pool.allocate(r.seq, fresh)
        r.held_blocks = hits + fresh
        r.committed_blocks = hits
        self.held_total += hits + fresh
        if footprint:
            r.footprint_blocks = footprint
            self.completion_total += footprint

    def _commit_full_blocks(self, r, full_blocks):
        done = r.committed_blocks
        if full_blocks > done:
            hashes = self._lookup_hashes(r, full_blocks)
            fresh = None
            if self.observer is not None and self.stores_new_only:
                # a block whose hash another copy already caches makes no store event (the
                # reference's cache_private); its copy is indexed already
                match = self.pool.match
                fresh = [h for i, h in enumerate(hashes[done:full_blocks], done)
                         if not match(hashes, i)]
            self.pool.commit(r.seq, hashes, done, full_blocks - done)
            self.kv_version += 1
            r.committed_blocks = full_blocks
            if self.observer is not None:
                self._stored.append(hashes[done:full_blocks] if fresh is None else fresh)
                self._in_flight_index = None

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
