"""SGLang scheduler emulation for one attention rank (SEMANTICS 2.5, 2.6).

A pass runs prefill first if it can: when the waiting queue yields a prefill batch, the pass is
that batch alone (running requests wait; freshly prefilled prompts get their first token from
the prefill forward, at no extra cost). Otherwise every running request decodes one token;
if the KV pool cannot hold that step, the request with the fewest output tokens is retracted
to the back of the waiting queue first. Admission reserves decode room for the running batch
through ``new_token_ratio`` (sglang_budget.py).

Running requests are not touched per decode pass: sglang_running.py keeps them arithmetically.
KV bookkeeping (radix tree, pages) is in sglang_kv.py.

Speed: the decode passes that follow a pass run as one event while they can change nothing but
token counts, page use, the admission ratio and deferred rounds (``extend``): the pool holds
every member's growth, the queue's head stays refused, evicting cached pages cannot change its
match, and the run ends with the first pass in which a member emits its last token. Their end
times come from vLLM's decode-run loop (engine/decode_run.py, in C); what they did is applied
when the last one completes. A rank the cluster layer watches runs every pass as its own event.

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
from .decode_run import MAX_PASSES, decode_runner
from .rank_base import RankBase
from .request import FINISHED, PREEMPTED, RUNNING, never_scheduled
from .sglang_budget import PrefillBudget, RatioSchedule, TotalRoom, refused_passes, retraction_ratio
from .sglang_cluster import SglangClusterHooks
from .sglang_kv import SglangKv, stamp
from .sglang_layout import SglangLayout
from .sglang_mtp import SglangBursts, SglangMtpSteps
from .sglang_running import RunningBatch
from .sglang_stall import fit_reason, head_stall_reason, starved_decoder_reason
from .sglang_tokens import ensure_tokens, lpm_order, lpm_ranked


class SglangRank(SglangClusterHooks, SglangMtpSteps, SglangKv, RankBase, SglangLayout):
    config_path = "$.spec.engine.rank"     # SGLang runs aggregated only
    # run the decode-only passes that follow a pass as one event (``extend``); the
    # differential test switches it off to compare
    extension = True
    # a prefill forward costs its predicted time (a disaggregated decode role's does not)
    charges_prefill = True
    # (engine/rank.py: Rank) it extends its passes, and attention-DP rounds are group-wide
    # (no prefix index of its own: RankBase's default)
    extends = True
    joins_groups = True

    def __init__(self, engine, timer, pool=None, *, callbacks, worker_idx=0, dp_rank=0,
                 scheduler_id=0):
        self._take_settings(engine, timer, callbacks, worker_idx, dp_rank, scheduler_id)
        ps = self.page_size
        sg = engine.sglang
        self.cache = RadixCache(self.total_kv_tokens, ps)
        self.ratio = RatioSchedule(sg.schedule_conservativeness)
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
        # decode-only passes run as one event: the end times of the pass just formed and of
        # those after it, while it is in flight (see extend)
        self._macro_ends = None
        self._ends_finishing = False  # ... whose last pass is one in which members finish
        self._extendable = False     # the pass just formed left nothing that waits for its end
        self._decode_run = None      # the loop of a run without admission checks, made once
        # MTP bursts on decode passes (sglang_mtp.py): every pass its own event then
        self.mtp = SglangBursts(engine, scheduler_id) if engine.aic_nextn is not None else None
        if self.mtp is not None:
            self.extension = False
        self._init_cluster_hooks()

    def _take_settings(self, engine, timer, callbacks, worker_idx, dp_rank, scheduler_id):
        """The rank's identity and settings (the C rank, engine/sglang_native.py, takes the
        same ones)."""
        self.worker_idx = worker_idx
        self.dp_rank = dp_rank
        self.scheduler_id = scheduler_id
        self.timer = timer
        self.cb = callbacks
        ps = engine.block_size
        self.page_size = ps
        self.total_kv_tokens = engine.num_gpu_blocks * ps
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
        self.chunk_setting = sg.chunked_prefill_size   # before a DP group splits it

    # ------------------------------------------------------------------ queue entry
    def _take_request(self, request):
        """A submitted request is this rank's, holding no KV, its output limited by
        ``max_model_len`` (the C rank's submission too)."""
        request.rank = self
        request.seq = None
        limit = self.max_model_len
        if limit is not None:
            room = limit - request.prompt_len
            request.out_limit = min(request.max_output, room if room > 0 else 0)

    def submit(self, request):
        self._take_request(request)
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
        if self._lpm_sorts():
            lpm_order(self, waiting)
        can_run = ()
        if waiting and not defer and self._may_prefill():
            can_run, sum_isl, sum_prefix, computed = self._prefill_batch(now_ms, watched)
        batch = len(can_run)
        self.prefill_in_pass = batch > 0 and computed > 0
        self.model_work_in_pass = self.prefill_in_pass
        retraction = None
        if batch:
            prefill_ms = self.timer.prefill(batch, sum_isl // batch, sum_prefix // batch) \
                if self.charges_prefill else 0.0
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
                    and waiting and not defer and retraction is None and self._may_prefill():
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
        # terminals are reported at this pass's end, and a catch-up caches pages in the next
        # decode step: either keeps the next pass out of an extension
        self._extendable = (self.extension and self.pass_effect and not watched and bool(running)
                            and not self._done and not self._catch_up and not self.grouped)
        self.pass_end_ms = end_ms
        if watched:
            self._watch_formed(now_ms, batch)
        return end_ms

    def _may_prefill(self):
        """Whether the waiting queue may form a prefill batch now (a disaggregated decode role
        keeps it shut while destinations wait)."""
        return True

    # ------------------------------------------------------------------ decode-only runs
    def extend(self, horizon_ms, cutoff_ms, max_passes=MAX_PASSES):
        """Lengthen the pass just formed by the decode-only passes that follow it.

        Those passes change nothing but token counts, page use, the admission ratio and the
        deferred rounds: the pool holds the growth of every member without a retraction, and
        the queue's head stays refused (by its slots, a static limit, a deferred round or
        ``rem_total``, recomputed per pass); the first pass in which a member emits its last
        token is the last one. They also start before ``horizon_ms`` (the next known arrival)
        and end by ``cutoff_ms``; the runtime calls ``truncate`` if an unforeseen request
        arrives meanwhile. What they do is applied when the last of them completes
        (``_complete_extension``): nothing reads the rank in between but a submission, which
        only queues, and a placement policy's live view, which sees the rank as the first pass
        left it (as with vLLM's runs). Returns the end time of the last pass.
        """
        end = self.pass_end_ms
        if not self._extendable or end >= horizon_ms:
            return end
        self._extendable = False
        if self._lpm_sorts() and lpm_ranked(self, self.waiting) != list(self.waiting):
            return end                    # the next pass reorders the queue
        running = self.running
        finish = running.next_finish()
        if finish is None:
            return end
        passes = finish - running.D + 1   # up to the decode step with a last token
        if passes > max_passes - 1:
            passes = max_passes - 1
        cache = self.cache
        capacity = cache.available() + cache.evictable_size
        # evicting for the growth must not change what the queue's head would match
        room = capacity if self._eviction_unseen() else cache.available()
        cost = self._head_cost() if self.rounds_left < passes else None
        if cost is not None:
            passes = refused_passes(running, self.ratio, passes=passes, room=room,
                                    capacity=capacity, cost=cost, rounds_left=self.rounds_left)
            if not passes:
                return end
        ends = self._plain_run(end, passes, horizon_ms, cutoff_ms, room)
        if len(ends) > 1:
            self._macro_ends = ends
            self._ends_finishing = len(ends) - 1 == finish - running.D + 1
            self.pass_end_ms = ends[-1]
        return self.pass_end_ms

    def _plain_run(self, end, passes, horizon_ms, cutoff_ms, room):
        """The end times of at most ``passes`` decode passes after the pass just formed (none
        of them admits): vLLM's loop (engine/decode_run.py, in C) counting tokens for blocks,
        passes numbered from the next one."""
        run = self._decode_run
        if run is None:
            run = self._decode_run = decode_runner(self.timer, self.total_kv_tokens)
        running = self.running
        n = len(running)
        ps = self.page_size
        first = self.pass_index + 1
        if ps == 1:
            crossing = {0: n}
        else:
            # pass P is decode step D + P - first: members whose length is then page-aligned
            crossings = running.crossings
            shift = first - running.D
            crossing = {}
            for residue in range(ps):
                count = crossings[(shift - residue) % ps]
                if count:
                    crossing[residue] = ps * count
        return run(first_pass=first, end_ms=end, batch=n, base=running.sum_len - n * first,
                   total_kv=self.total_kv_tokens, block_size=ps, room=room,
                   horizon_ms=horizon_ms, cutoff_ms=cutoff_ms, crossing=crossing,
                   stop_pass=first + passes - 1, max_passes=passes + 1)

    def _eviction_unseen(self):
        """Whether evicting cached pages can change no decision of the passes to come: nobody
        waits, or the only waiting request priced (the head, in FIFO order) matches nothing
        evictable (its matched path is locked by a running request)."""
        waiting = self.waiting
        if not waiting or not self.caching:
            return True
        if self._lpm_sorts():
            return False                  # the order of the whole queue reads the tree
        if len(self.running) >= self.max_running:
            return True                   # no slot: nobody is priced
        head = waiting[0]
        if head.computed:
            return True                   # a continuation does not match again
        cached, node = self._head_match(head, head.prompt_len + head.generated)
        return cached == 0 or node.lock > 0

    def _lpm_sorts(self):
        """Whether the next pass reorders the queue by longest prefix match (as schedule)."""
        return self.lpm and self.caching and 0 < len(self.waiting) <= 128

    def _head_cost(self):
        """What admitting the queue's head would charge ``rem_total`` in a pass to come, or None
        when it can join none of them (no slot, nobody waits, a limit that does not change)."""
        waiting = self.waiting
        if not waiting or len(self.running) >= self.max_running:
            return None
        budget = self.budget
        rem_chunk = float(budget.chunk_size)
        priced = self._price_chunk(waiting[0], rem_chunk)
        if priced is None:
            return None
        _, _, charged, reserve = priced
        if charged > float(budget.max_prefill) or charged > rem_chunk:
            return None
        return charged + reserve

    def _record_itl(self, r):
        """A finished request's gaps: those of its last decode run are counted per rank
        (``RunningBatch.count_span``), the stretches before it and the link to it here."""
        span = r.itl_span
        stretches = r.stretches
        if span is None or len(stretches) != span[4]:
            self._add_stretch_gaps(stretches)   # (it emitted after that run: no shortcut)
            return
        first, last, before, prev_last, _ = span
        running = self.running
        if before:
            head = stretches[:before]
            head[-1] = (head[-1][0], prev_last)   # as it was before the run merged into it
            self._add_stretch_gaps(head)
            start = running.dec_pass[first]
            if start == prev_last + 1:
                diff = self.itl_diff
                diff[prev_last] += 1
                diff[start] -= 1
            else:
                breaks = self.break_gaps
                breaks[(prev_last, start)] = breaks.get((prev_last, start), 0) + 1
        running.count_span(first, last)

    def gap_history(self):
        self.running.fold_spans(self.itl_diff, self.break_gaps)
        return super().gap_history()

    def _run_cut(self):
        # the run now ends before the pass in which members finish
        self._ends_finishing = False

    def _complete_extension(self):
        """Record the passes before the last one of an extended pass and apply what every
        extra pass did: page growth (evicting as each pass would), the decode steps, the
        ratio's decay, the deferred rounds; then a last pass in which members finish."""
        ends = self._macro_ends
        self._macro_ends = None
        extra = len(ends) - 1
        plain = extra - 1 if self._ends_finishing else extra
        first = self.pass_index + 1
        self.pass_ends.extend(ends[:-1])
        self.itl_diff.frombytes(bytes(8 * extra))
        self.pass_index += extra
        if plain:
            self._grow_pages(plain)
            self.running.record_decodes(first, plain)
            ratio = self.ratio
            for _ in range(plain):
                value = ratio.value
                ratio.decay()
                if ratio.value == value:
                    break                 # at its floor
            self.rounds_left = self.rounds_left - plain if self.rounds_left > plain else 0
        if self._ends_finishing:
            self._finishing_decode()

    def _finishing_decode(self):
        """The last pass of an extended pass, formed now as ``schedule`` would have at its
        start: a decode step in which members emit their last token (the queue is not read:
        its head was refused, and requests that came meanwhile were not there yet)."""
        self._k0 = self._k2 = 0
        self._decode_step(False)
        self._emitted_any = False
        for r in self._finishing:
            self._finish_kv(r)
        self._finishing = []
        self.ratio.decay()
        self.finish_round(False, True)

    def _grow_pages(self, steps):
        """The pages of the next ``steps`` decode steps of the running batch.

        Each step evicts what the free pool lacks, least recently used first. One eviction of
        the sum leaves the tree as the steps' evictions one by one would: the run made sure the
        pool holds it all, each eviction frees exactly what it is asked (whole pages, a leaf
        trimmed to what is still wanted), and two leaves never share an access stamp (one
        touch stamps one path), so a trimmed leaf is the next one taken either way."""
        running = self.running
        cache = self.cache
        ps = self.page_size
        if ps == 1:
            total = len(running) * steps
        else:
            crossings = running.crossings
            total = 0
            for d in range(running.D, running.D + steps):
                total += crossings[(-d) % ps]
            total *= ps
        free = cache.available()
        if free < total:
            cache.evict(total - free)
        if not cache.allocate(total):
            raise SimulationError("internal: an extended SGLang pass found no KV room its plan "
                                  "counted on")

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
            priced = self._price_chunk(r, rem_chunk)
            if priced is None:
                break
            start, chunk, charged, reserve = priced
            fresh_kv = r.computed == 0
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

    def _price_chunk(self, r, rem_chunk):
        """The chunk ``get_new_batch_prefill`` would give ``r`` with ``rem_chunk`` tokens of
        chunk budget left: (start, chunk tokens, tokens charged, output reserve), or None when
        the reference stops before pricing it."""
        ps = self.page_size
        length = r.prompt_len + r.generated
        fresh_kv = r.computed == 0
        if fresh_kv and self.caching:
            cached = self._head_match(r, length)[0]
        else:
            cached = 0
        start = r.computed if r.computed > cached else cached
        extend = length - start
        if extend == 0 and not fresh_kv:
            return None
        if -(-extend // ps) * ps <= rem_chunk:
            chunk = extend
        else:
            chunk = (int(rem_chunk) // ps) * ps
            if chunk == 0:
                return None
            if chunk > extend:
                chunk = extend
        charged = -(-chunk // ps) * ps
        reserve = 0 if chunk < extend else self.budget.output_reserve(r)
        return start, chunk, charged, reserve

    def _head_match(self, r, length):
        """(cached tokens, the tree node holding the last) of a fresh request's prompt match,
        capped at ``len - 1`` (the whole length for a zero-output request)."""
        cache = self.cache
        limit = length if r.out_limit == 0 else length - 1
        memo = self._match_memo
        if memo[0] is r and memo[1] == limit and cache.still_matches(*memo[2:]):
            return memo[2], memo[3]         # a head that waits asks again every pass
        inserts = cache.inserts
        cached, node = cache.match_where(ensure_tokens(r, length), limit)
        self._match_memo = (r, limit, cached, node, inserts)
        return cached, node

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
        """One decode forward over ``running``; returns (its time, a retraction ratio or None).
        With MTP the memory check asks for every member's longest burst and the members burst
        (sglang_mtp.py)."""
        running = self.running
        if not running:
            return 0.0, None
        cache = self.cache
        retraction = None
        mtp = self.mtp
        need = running.growth() if mtp is None else self._burst_need()
        while cache.available() + cache.evictable_size < need and len(running) > 1:
            self._retract(self._shortest_output())
            need = running.growth() if mtp is None else self._burst_need()
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
        if mtp is not None:
            self._emit_bursts(need, watched)
            return decode_ms, retraction
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
    def _report_done(self, r, end_ms, status):
        """A terminal at this pass's end (a disaggregated prefill role holds the source
        instead)."""
        self.cb.on_finish(r, end_ms, status)

    def complete(self):
        if self._macro_ends is not None:
            self._complete_extension()
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
                self._report_done(r, end_ms, status)
        if watched:
            self._watch_settled()

