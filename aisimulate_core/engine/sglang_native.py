"""An SGLang rank whose pass runs in C (csrc/sglang_rank.c): ``NativeSglangRank``.

The rank keeps every request's engine state in C (slots: lengths, pages, its tree node, its
open decode run, emission stretches, its tokens), the waiting queue, the running batch kept
arithmetically (as sglang_running.py's RunningBatch), the radix cache (csrc/radix_cache.c),
the admission ratio and deferred rounds, the ITL difference array and the decode-only
extension (decode_run.c's loop over the rank's own state, with the built-in timing models and
an external provider's memo). Python keeps the slot -> ``SimRequest`` map, ``pass_ends``
(records read token times from it) and ``break_gaps``, and computes prefill times (and
decode times C does not know). What a call did comes back as one flat array of events
(admitted, retracted, finished with its stretches), so Python touches a request only at those
lifecycle events. Iterating ``running`` or ``waiting`` (messages, checks) brings the
requests' counts up to date from C.

``SglangRank`` (engine/sglang.py) is its twin and specification: the same request stream
through both gives the same passes, records, ITL and radix tree (tests/test_sglang_native.py).
The configurations it takes are the ones ``supports`` accepts. A rank the cluster layer comes
to watch (a router's KV events, telemetry gauges, forward-pass metrics) before it takes a
request becomes the Python rank then (``watched`` and the other watch switches).
"""

from __future__ import annotations

from array import array

from .. import native
from ..errors import SimulationError
from ..native import check_status as _check
from ..kv.radix_native import NativeRadixCache
from ..workload.prompt import IdRanges
from .decode_run import MAX_PASSES, MEMO_LIMIT, _native_kind, answer_misses
from .native_queue import QueueView
from .rank_base import RankBase
from .request import FINISHED, PREEMPTED, RUNNING
from .sglang import SglangRank
from .sglang_cluster import SglangClusterHooks
from .sglang_layout import SglangLayout

MAX_PAGE_SIZE = 65536
_EXACT = 2 ** 62                 # counts the C rank keeps in int64 without overflow
_OUTPUT_TAG = 0x8000_0000        # sglang_tokens.py's tag of unauthored outputs
_U32_ARRAY = native.ffi.typeof("uint32_t[]") if native.ffi is not None else None
_ROLES = {"aggregated": 0, "prefill": 1, "decode": 2}   # enum aisim_sglang_role


def supports(engine, *, dp_size=1, backend=None):
    """Why the C rank cannot take this configuration, or None when it can.

    It takes an aggregated SGLang rank on its own (no attention DP group), without the overlap
    scheduler (``host_loop``, refused by both), counts below 2^62."""
    if native.resolve_backend(backend) != "c":
        return "the C backend is not in use"
    if engine.backend != "sglang":
        return f"backend {engine.backend!r} (only 'sglang')"
    if dp_size != 1:
        return f"dp_size {dp_size} (attention DP groups keep the Python rank)"
    sg = engine.sglang
    if sg.host_loop:
        return "sglang.host_loop"
    if engine.aic_nextn is not None:
        return "aic_nextn (MTP bursts: the Python rank, engine/sglang_mtp.py)"
    if not 1 <= engine.block_size <= MAX_PAGE_SIZE:
        return f"block_size {engine.block_size} (at most {MAX_PAGE_SIZE})"
    for name, value in (("num_gpu_blocks", engine.num_gpu_blocks),
                        ("max_num_seqs", engine.max_num_seqs),
                        ("sglang.max_prefill_tokens", sg.max_prefill_tokens),
                        ("sglang.chunked_prefill_size", sg.chunked_prefill_size),
                        ("sglang.clip_max_new_tokens", sg.clip_max_new_tokens),
                        ("prefill_decode_interval", engine.prefill_decode_interval),
                        ("max_model_len", -1 if engine.max_model_len is None
                         else engine.max_model_len)):
        if not (name == "max_model_len" and value == -1) and not 0 <= value < _EXACT:
            return f"{name} {value} (the C rank counts in int64: below 2^62)"
    if engine.num_gpu_blocks * engine.block_size >= _EXACT:
        return "num_gpu_blocks x block_size beyond 2^62 tokens"
    return None


def rank_class(engine, *, dp_size=1, backend=None):
    """The class of an SGLang rank of this configuration: the C rank where ``supports`` takes
    it, else the Python one (the runtime's choice)."""
    if supports(engine, dp_size=dp_size, backend=backend) is None:
        return NativeSglangRank
    return SglangRank


class _Scratch:
    """C buffers every rank uses only within one call (one process, one thread)."""

    __slots__ = ("run", "ends", "finishing", "state", "firsts", "counts")

    def __init__(self):
        ffi = native.ffi
        self.run = ffi.new("aisim_decode_run *")
        self.ends = ffi.new("double[]", MAX_PASSES)
        self.finishing = ffi.new("int32_t *")
        self.state = ffi.new("int64_t[]", 9)
        # a synthetic prompt's id ranges (a group prefix and a fresh range, or a few more)
        self.firsts = ffi.new("uint32_t[]", 8)
        self.counts = ffi.new("uint32_t[]", 8)


# made as the module loads, as vllm_native's (a run's first rank would pay for them)
_SCRATCH = _Scratch() if native.ffi is not None else None

# the C calls every pass makes, bound once: a global's read is specialized, a cffi library's
# attribute read is not (about 300 instructions a call; ~60K calls a run)
if native.lib is not None:
    _C_SCHEDULE = native.lib.aisim_sglang_schedule
    _C_START = native.lib.aisim_sglang_start
    _C_EXTEND = native.lib.aisim_sglang_extend
    _C_COMPLETE = native.lib.aisim_sglang_complete
    _DECODE_MISS = native.lib.AISIM_DECODE_MISS
else:
    _C_SCHEDULE = _C_START = _C_EXTEND = _C_COMPLETE = _DECODE_MISS = None


def _item(name, size):
    """The index of view field ``name`` in the view's memory read as items of ``size`` bytes
    (0 without the C library: no rank reads it then)."""
    if native.ffi is None:
        return 0
    offset = native.ffi.offsetof("aisim_sglang_view", name)
    if offset % size:
        raise AssertionError(f"aisim_sglang_view.{name} is not {size}-byte aligned")
    return offset // size


# The view fields every pass reads, as indexes into the view's memory (``_i64``, ``_i32``,
# ``_f64`` of a rank): a memoryview subscript costs a third of a cffi field read, and the loop
# reads a dozen of them per pass (tests/test_sglang_native.py checks them against the fields)
_N_RUNNING, _N_WAITING, _ROUNDS_LEFT, _N_PREBUILT, _PF_COUNT, _DEC_BATCH, _N_EVENTS = (
    _item(name, 8) for name in ("n_running", "n_waiting", "rounds_left", "n_prebuilt",
                                "pf_count", "dec_batch", "n_events"))
_DECODE_MS = _item("decode_ms", 8)
_DECODE_KNOWN, _FORMED, _PASS_EFFECT, _STUCK, _EXTENDABLE, _RETRY_DUE, _PROMOTED = (
    _item(name, 4) for name in ("decode_known", "formed", "pass_effect", "stuck",
                                "extendable", "retry_due", "promoted"))
_START_TIMED = _item("start_timed", 4)
_START_END_MS = _item("start_end_ms", 8)


class _Queue(QueueView):
    """The running batch (which 0) or the waiting queue (which 1): iterating brings the
    requests' counts up to date from C (their ``generated``, ``computed``, ``held_blocks``,
    ``committed_blocks``, ``seq``, and the running ones' ``open_start``, ``base_gen``,
    ``bucket_key``) for messages and checks."""

    __slots__ = ()
    QUEUE = "aisim_sglang_queue"

    def _request(self, slot):
        return self._rank._synced(slot)

    # RunningBatch's, for what reads a running batch (stall messages, checks.py)
    @property
    def D(self):
        return self._rank._view.decodes

    def sync(self, r):
        """Members come up to date as they are iterated."""


class _Ratio:
    """The admission ratio C keeps, read and set as ``RatioSchedule``'s fields."""

    __slots__ = ("_rank",)
    _FIELDS = ("init", "min", "step", "value")

    def __init__(self, rank):
        object.__setattr__(self, "_rank", rank)

    def _values(self):
        view = self._rank._view
        return [view.ratio_init, view.ratio_min, view.ratio_step, view.ratio]

    def __getattr__(self, name):
        if name not in _Ratio._FIELDS:
            raise AttributeError(name)
        return self._values()[_Ratio._FIELDS.index(name)]

    def __setattr__(self, name, value):
        if name not in _Ratio._FIELDS:
            raise AttributeError(name)
        values = self._values()
        values[_Ratio._FIELDS.index(name)] = value
        _check(native.lib.aisim_sglang_set_ratio(self._rank._rank, *values),
               "aisim_sglang_set_ratio")


def _becomes_python(name):
    """A watch switch (``watched``, ``capture_gauges``, ``fpm_on``, ``observer``): off on the
    C rank; switching it on turns the rank into the Python one first."""

    def get(self):
        return None if name == "observer" else False

    def put(self, value):
        if value:
            self._become_python()
            setattr(self, name, value)

    return property(get, put)


class NativeSglangRank(SglangLayout):
    __slots__ = ()
    config_path = "$.spec.engine.rank"
    extension = True             # SglangRank.extension's switch (the differential tests')
    charges_prefill = True       # SglangRank.charges_prefill (a decode role's prefill is free)
    role = "aggregated"          # the C rank's role (engine/sglang_native_roles.py)
    TWIN = SglangRank            # the Python rank a watched one becomes
    # what it can do (engine/rank.py: Rank): attention-DP groups keep the Python rank
    # (``supports``), so it never joins one
    extends = True
    joins_groups = False
    indexes_prefix = False
    psi = None
    tier_split = None
    grouped = False
    group_size = 1
    # what only a watched rank counts (the Python rank's, unwatched: nothing)
    preemptions = 0
    decode_steps = 0
    cache_hit_tokens = 0
    cache_total_tokens = 0
    fpm_last = None
    fpm_clock = 0.0
    _gauges = None
    _stored = None               # what a router's observer would read (never set here)

    @property
    def _pass_chunks(self):
        """The prefill chunks a watcher would read of the pass just formed: none kept."""
        return []
    watched = _becomes_python("watched")
    capture_gauges = _becomes_python("capture_gauges")
    fpm_on = _becomes_python("fpm_on")
    observer = _becomes_python("observer")

    def __init__(self, engine, timer, pool=None, *, callbacks, worker_idx=0, dp_rank=0,
                 scheduler_id=0):
        reason = supports(engine, backend="c")
        if reason is not None:
            raise SimulationError(f"the C SGLang rank does not take this rank: {reason}")
        ffi, lib = native.ffi, native.lib
        self.pass_effect = False
        self.stuck = False
        # the role's switches, read per pass: slots (a class default read through ``self``
        # never specializes)
        self._prefill_charged = self.charges_prefill
        self._sets_idle_pass = self._tracks_idle_pass
        self._args = (engine, timer, pool, callbacks, worker_idx, dp_rank, scheduler_id)
        SglangRank._take_settings(self, engine, timer, callbacks, worker_idx, dp_rank,
                                  scheduler_id)
        ps = self.page_size
        sg = engine.sglang
        self.num_blocks = engine.num_gpu_blocks
        self.interval = engine.prefill_decode_interval
        config = ffi.new("aisim_sglang_config *")
        config.page_size = ps
        config.total_kv_tokens = self.total_kv_tokens
        config.max_running = self.max_running
        config.max_prefill = sg.max_prefill_tokens
        config.chunk_size = sg.chunked_prefill_size
        config.clip = sg.clip_max_new_tokens
        config.interval = self.interval
        config.max_model_len = -1 if self.max_model_len is None else self.max_model_len
        config.conservativeness = sg.schedule_conservativeness
        config.caching = self.caching
        config.lpm = self.lpm
        config.extension = bool(self.extension)
        config.role = _ROLES[self.role]
        self._rank = native.open_handle("aisim_sglang_rank", lib.aisim_sglang_new,
                                        lib.aisim_sglang_free, "aisim_sglang_new", config)
        self._view = native.handle_view(self._rank, "aisim_sglang_view", lib.aisim_sglang_view_of)
        memory = memoryview(ffi.buffer(self._view, ffi.sizeof("aisim_sglang_view")))
        self._i64, self._i32, self._f64 = memory.cast("q"), memory.cast("i"), memory.cast("d")
        box = ffi.new("aisim_radix **")
        _check(lib.aisim_sglang_cache(self._rank, box), "aisim_sglang_cache")
        self.cache = NativeRadixCache.borrow(box[0], self._rank, ps)
        self.pool = self.cache
        # decode times: the built-in models in C, anything else through the C memo (filled
        # from the timer on a miss), as the decode-only runs do (engine/decode_run.py)
        kind, fixed_ms = _native_kind(timer.model)
        self._decode_timing = native.open_handle(
            "aisim_decode_timing", lib.aisim_decode_timing_new, lib.aisim_decode_timing_free,
            "aisim_decode_timing_new", kind, fixed_ms, timer.decode_ratio,
            self.total_kv_tokens, MEMO_LIMIT)
        _check(lib.aisim_sglang_set_decode_timing(self._rank, self._decode_timing),
               "aisim_sglang_set_decode_timing")
        # aisim_sglang_start extends into the module's scratch buffers (they live as long)
        _check(lib.aisim_sglang_set_start_buffers(self._rank, _SCRATCH.ends, MAX_PASSES,
                                                  _SCRATCH.run, _SCRATCH.finishing),
               "aisim_sglang_set_start_buffers")
        self._requests = []          # slot -> SimRequest (None while free)
        self._submitted = 0
        self.running = _Queue(self, 0)
        self.waiting = _Queue(self, 1)
        self.ratio = _Ratio(self)
        self.pass_ends = array("d")
        self._break_gaps = {}
        self._breaks_read = 0        # triples of C's break gaps already in _break_gaps
        self.pass_end_ms = 0.0
        self._macro_ends = None
        self._ends_finishing = False

    def _become_python(self):
        """Turn into the Python rank (``TWIN``: ``SglangRank``, or a role's) of the same
        settings: what watches a rank is the Python rank's (v1 of the C rank keeps none of
        it)."""
        if self._submitted:
            raise SimulationError("internal: the C SGLang rank was watched after it took "
                                  "requests")
        engine, timer, pool, callbacks, worker_idx, dp_rank, scheduler_id = self._args
        kept = {key: self.__dict__[key] for key in ("config_path", "extension")
                if key in self.__dict__}
        twin = self.TWIN
        self._clear_slots()
        self.__dict__.clear()
        self.__class__ = twin
        twin.__init__(self, engine, timer, pool, callbacks=callbacks, worker_idx=worker_idx,
                      dp_rank=dp_rank, scheduler_id=scheduler_id)
        self.__dict__.update(kept)

    # ------------------------------------------------------------------ counters (C's)
    @property
    def pass_index(self):
        return self._view.pass_index

    @property
    def retractions(self):
        return self._view.retractions

    @property
    def committed_prefill_tokens(self):
        return self._view.committed_prefill_tokens

    @property
    def rounds_left(self):
        return self._view.rounds_left

    @property
    def prefill_in_pass(self):
        return bool(self._view.prefill_in_pass)

    @property
    def model_work_in_pass(self):
        return bool(self._view.model_work_in_pass)

    @property
    def itl_diff(self):
        """The difference array of gap multiplicities, per pass (C keeps it), with the
        finished requests' counted decode runs folded in (as the report reads it)."""
        self._fold()
        view = self._view
        return native.c_array("q", view.itl_diff, view.n_itl_diff)

    # ------------------------------------------------------------------ what SglangRank words
    # the same text over the same fields: one definition, SglangRank's
    stall_reason = SglangRank.stall_reason
    fit_error = SglangRank.fit_error
    kv_summary = SglangRank.kv_summary
    stuck_error = SglangRank.stuck_error
    live_gauges = SglangClusterHooks.live_gauges
    kv_gauges = SglangClusterHooks.kv_gauges
    submission_gauges = SglangClusterHooks.submission_gauges
    telemetry_gauges = SglangClusterHooks.telemetry_gauges
    truncate = RankBase.truncate
    ends_pass_at = RankBase.ends_pass_at
    holds_kv = RankBase.holds_kv
    progressed = RankBase.progressed

    def _run_cut(self):
        # the run now ends before the pass in which members finish
        self._ends_finishing = False

    def _synced(self, slot):
        """The request of ``slot`` with its counts as C holds them now."""
        r = self._requests[slot]
        out = _SCRATCH.state
        _check(native.lib.aisim_sglang_request(self._rank, slot, out), "aisim_sglang_request")
        r.generated, r.computed, r.held_blocks, r.committed_blocks = out[0], out[1], out[2], out[3]
        r.seq = None if out[4] < 0 else out[4]
        r.open_start = None if out[5] < 0 else out[5]
        r.base_gen, r.bucket_key, r.out_limit = out[6], out[7], out[8]
        return r

    def pending_prefill_tokens(self):
        out = _SCRATCH.state
        _check(native.lib.aisim_sglang_pending_prefill_tokens(self._rank, out),
               "aisim_sglang_pending_prefill_tokens")
        return out[0]

    def has_work(self):
        counts = self._i64
        # (a decode role's prebuilt requests are work too; no other rank has any)
        return bool(counts[_N_RUNNING] or counts[_N_WAITING] or counts[_ROUNDS_LEFT]
                    or counts[_N_PREBUILT])

    # ------------------------------------------------------------------ queue entry
    def submit(self, request):
        SglangRank._take_request(self, request)
        lib = native.lib
        self._enter(request, lib.aisim_sglang_submit, lib.aisim_sglang_submit_ranges)

    def _enter(self, request, submit, submit_ranges):
        """Taken ``request`` into the rank's slots by ``submit`` (a decode role's ``accept``:
        the pending FIFO), its prompt from id ranges by ``submit_ranges`` where it can; returns
        its slot."""
        ffi = native.ffi
        authored = ffi.NULL
        n_authored = 0
        tag = _OUTPUT_TAG | (request.uuid & 0x7FFF_FFFF)
        slot = None
        if self.caching:
            prompt = request.prompt
            outputs = request.output_token_ids
            if outputs is not None and len(outputs):
                own = array("I", outputs)
                n_authored = len(own)
                authored = ffi.from_buffer(_U32_ARRAY, own)
            slot = self._submit_ranges(request, prompt, authored, n_authored, tag,
                                       submit_ranges)
            if slot is None:
                runs = prompt.values
                n_runs = len(runs)
                values = ffi.from_buffer(_U32_ARRAY, runs) if n_runs else ffi.NULL
                lengths = ffi.from_buffer(_U32_ARRAY, prompt.lengths) if n_runs else ffi.NULL
        else:
            values = lengths = ffi.NULL
            n_runs = 0
        if slot is None:
            slot = _check(submit(self._rank, request.prompt_len, request.out_limit, values,
                                 lengths, n_runs, authored, n_authored, tag),
                          submit.__name__)
        requests = self._requests
        if slot == len(requests):
            requests.append(request)
        else:
            requests[slot] = request
        self._submitted += 1
        return slot

    def _submit_ranges(self, request, prompt, authored, n_authored, tag, submit_ranges):
        """Submit a synthetic prompt from its id ranges (``Prompt.from_hash_ids`` over an
        ``IdRanges`` whose runs are not built yet), so that its id array is never made in
        Python; None when the prompt has another form."""
        source = getattr(prompt, "_source", None)
        if source is None or not isinstance(source[0], IdRanges):
            return None
        ranges, block = source[0].ranges, source[1]
        n = len(ranges)
        scratch = _SCRATCH
        firsts, counts = scratch.firsts, scratch.counts
        if n > len(firsts):
            firsts = scratch.firsts = native.ffi.new("uint32_t[]", n)
            counts = scratch.counts = native.ffi.new("uint32_t[]", n)
        first_ids, id_counts = zip(*ranges) if n else ((), ())
        try:
            firsts[0:n] = first_ids
            counts[0:n] = id_counts
        except OverflowError:   # (an id past 2^32 - 1: the runs say what it is)
            return None
        slot = submit_ranges(self._rank, request.prompt_len, request.out_limit, firsts,
                             counts, n, block, authored, n_authored, tag)
        if slot == native.EINVAL:
            return None               # ids past u32 or a short range: the runs say why
        if slot < 0:   # (no check's call on a slot: two submissions per request)
            _check(slot, "aisim_sglang_submit_ranges")
        return slot

    # ------------------------------------------------------------------ scheduling
    def schedule(self, now_ms):
        """Form one pass at ``now_ms``; returns its end time, or None with nothing to do."""
        i64 = self._i64
        if (not i64[_N_RUNNING] and not i64[_N_WAITING] and not i64[_ROUNDS_LEFT]
                and not i64[_N_PREBUILT]):
            self.stuck = False
            return None
        status = _C_SCHEDULE(self._rank, now_ms)
        if i64[_N_EVENTS]:
            self._schedule_events(now_ms)
        if status:   # (AISIM_OK: no check's call; this runs per pass)
            self._schedule_failed(status)
        i32 = self._i32
        if not i32[_FORMED]:     # (a decode role's prebuilt requests without a slot)
            self.stuck = False
            return None
        end_ms = self._pass_end(now_ms)
        self.pass_effect = bool(i32[_PASS_EFFECT])
        self.stuck = bool(i32[_STUCK])
        self.pass_end_ms = end_ms
        return end_ms

    def _schedule_failed(self, status):
        """A pass's schedule returned ``status`` (not AISIM_OK): the stall's own error, or the
        status's."""
        if status == native.lib.AISIM_SG_STALLED:
            raise SimulationError(self.stall_reason(self.waiting[0]))
        _check(status, "aisim_sglang_schedule")

    def _pass_end(self, now_ms):
        """The end of the pass just formed at ``now_ms``: its prefill (where this rank charges
        one) or its decode forward."""
        i64 = self._i64
        count = i64[_PF_COUNT]
        if count:
            view = self._view
            return now_ms + (self.timer.prefill(count, view.pf_isl // count,
                                                view.pf_prefix // count)
                             if self._prefill_charged else 0.0)
        n = i64[_DEC_BATCH]
        if not n:
            decode = 0.0
        elif self._i32[_DECODE_KNOWN]:
            decode = self._f64[_DECODE_MS]
        else:   # a time only Python knows (or an error only it can word): ask, remember
            active = self._view.dec_active
            decode = self.timer.decode(n, active, active // n, self.total_kv_tokens)
            _check(native.lib.aisim_decode_timing_put(self._decode_timing, n, active, decode),
                   "aisim_decode_timing_put")
        return now_ms + decode

    # whether the pass just formed sets ``_idle_pass`` (the decode role's: its next retry reads it)
    _tracks_idle_pass = False

    def schedule_extended(self, now_ms, horizon_ms, cutoff_ms):
        """``schedule`` then ``extend`` (a lone rank's pass start: Worker.start_pass), the same
        answers, in one C call (aisim_sglang_start) where C knows the pass's time."""
        i64 = self._i64
        if (not i64[_N_RUNNING] and not i64[_N_WAITING] and not i64[_ROUNDS_LEFT]
                and not i64[_N_PREBUILT]):
            self.stuck = False
            if self._sets_idle_pass:
                self._idle_pass = False
            return None
        status = _C_START(self._rank, now_ms, horizon_ms, cutoff_ms, self._prefill_charged)
        if i64[_N_EVENTS]:
            self._schedule_events(now_ms)
        i32 = self._i32
        timed = i32[_START_TIMED]
        if status and timed != 2:   # (the schedule's status: an extension's is read below)
            self._schedule_failed(status)
        if not i32[_FORMED]:
            self.stuck = False
            if self._sets_idle_pass:
                self._idle_pass = False
            return None
        end_ms = self._f64[_START_END_MS] if timed else self._pass_end(now_ms)
        effect = self.pass_effect = bool(i32[_PASS_EFFECT])
        self.stuck = bool(i32[_STUCK])
        self.pass_end_ms = end_ms
        if self._sets_idle_pass:
            self._idle_pass = end_ms == now_ms and not effect and not i32[_PROMOTED]
        if timed == 2:
            return self._extended(status, horizon_ms, cutoff_ms, MAX_PASSES)
        if not timed:
            return self.extend(horizon_ms, cutoff_ms)
        return end_ms

    def _schedule_events(self, now_ms):
        view = self._view
        values = native.ffi.unpack(view.events, view.n_events * 5)
        requests = self._requests
        fields = iter(values)
        for kind, slot, a, b, _ in zip(fields, fields, fields, fields, fields):
            r = requests[slot]
            if kind == 1:      # admitted: a cached tokens, b readmission
                r.status = RUNNING
                r.admissions.append((now_ms, a, bool(b)))
                if not b:
                    r.first_reused = a
                if a > r.max_reused:
                    r.max_reused = a
            else:              # retracted
                r.status = PREEMPTED
                r.preemptions = a

    # ------------------------------------------------------------------ decode-only runs
    def extend(self, horizon_ms, cutoff_ms, max_passes=MAX_PASSES):
        """Lengthen the pass just formed by the decode-only passes that follow it (as
        ``SglangRank.extend``, in C). Returns the end time of the last pass."""
        i32 = self._i32
        # (a decode role's pass end that the handoff needs, retry_due, is never extended:
        # SglangDecodeRank.extend; C sets it only for that role)
        if not i32[_EXTENDABLE] or i32[_RETRY_DUE] or self.pass_end_ms >= horizon_ms:
            return self.pass_end_ms
        scratch = _SCRATCH
        run, ends, finishing = scratch.run, scratch.ends, scratch.finishing
        if max_passes > MAX_PASSES:
            max_passes = MAX_PASSES
        status = _C_EXTEND(self._rank, self.pass_end_ms, horizon_ms, cutoff_ms, max_passes, ends,
                           MAX_PASSES, run, 0, finishing)
        return self._extended(status, horizon_ms, cutoff_ms, max_passes)

    def _extended(self, status, horizon_ms, cutoff_ms, max_passes):
        """``extend`` after its C call returned ``status``: the run it made, in the scratch
        buffers (resumed while C misses a decode time only Python knows)."""
        scratch = _SCRATCH
        run, ends, finishing = scratch.run, scratch.ends, scratch.finishing
        if status == _DECODE_MISS:   # (an external provider's time: the memo missed)
            lib = native.lib
            status = answer_misses(
                status, run, self._decode_timing, self.timer.decode, self.total_kv_tokens,
                lambda: lib.aisim_sglang_extend(self._rank, self.pass_end_ms, horizon_ms,
                                                cutoff_ms, max_passes, ends, MAX_PASSES, run, 1,
                                                finishing))
        if status < 0:
            _check(status, "aisim_sglang_extend")
        n_ends = run.n_ends
        if n_ends > 1:
            out = array("d")   # (native.c_array, inline: most passes start a run)
            out.frombytes(native.ffi.buffer(ends, 8 * n_ends))
            self._macro_ends = out
            self._ends_finishing = bool(finishing[0])
            self.pass_end_ms = out[-1]
        return self.pass_end_ms

    # ------------------------------------------------------------------ pass completion
    def complete(self):
        ends = self._macro_ends
        end_ms = self.pass_end_ms
        if ends is not None:
            self._macro_ends = None
            extra = len(ends) - 1
            self.pass_ends.extend(ends)     # (a run's last end is pass_end_ms)
        else:
            extra = 0
            self.pass_ends.append(end_ms)
        status = _C_COMPLETE(self._rank, extra, self._ends_finishing)
        if status < 0:
            _check(status, "aisim_sglang_complete")
        self._ends_finishing = False
        if not self._i64[_N_EVENTS]:
            return
        view = self._view
        ffi = native.ffi
        values = ffi.unpack(view.events, view.n_events * 5)
        n_values = view.n_stretch_values
        stretches = ffi.unpack(view.stretches, n_values) if n_values else ()
        requests = self._requests
        # every event is read before the first callback: a terminal may submit here
        finished = []
        fields = iter(values)
        for kind, slot, a, b, c in zip(fields, fields, fields, fields, fields):
            r = requests[slot]
            if kind == 4 or kind == 6:   # finished (6: a held source): stretches[a:a+b],
                if kind == 4:            # c tokens generated
                    requests[slot] = None
                    r.seq = None
                    finished.append((r, "completed"))
                else:
                    self._hold(r, slot)
                    finished.append((r, "held"))
                r.status = FINISHED
                r.generated = c
                r.stretches = list(zip(stretches[2 * a:2 * (a + b):2],
                                       stretches[2 * a + 1:2 * (a + b):2]))
            elif kind == 3:    # rejected by max_model_len
                requests[slot] = None
                r.status = FINISHED
                finished.append((r, "rejected"))
            else:              # retracted (an extension's last pass never retracts)
                r.status = PREEMPTED
                r.preemptions = a
        on_finish = self.cb.on_finish
        for r, status in finished:
            if status == "held":
                self.cb.on_source_held(r, end_ms)
            else:
                on_finish(r, end_ms, status)

    # ------------------------------------------------------------------ report
    def _fold(self):
        """Fold the counted decode runs into the ITL arrays (RunningBatch.fold_spans) and
        bring ``break_gaps`` up to C's, in the order C counted them (the dict's order)."""
        _check(native.lib.aisim_sglang_fold(self._rank), "aisim_sglang_fold")
        view = self._view
        self._breaks_read = native.fold_break_triples(
            self._break_gaps, view.break_gaps, self._breaks_read, view.n_break_gaps)

    @property
    def break_gaps(self):
        """Gaps across a break between two stretches (RankBase's), folded as ``itl_diff``."""
        self._fold()
        return self._break_gaps

    itl_gaps = RankBase.itl_gaps
    add_gaps_to = RankBase.add_gaps_to
    gap_history = RankBase.gap_history
