"""A vLLM (or TensorRT-LLM) rank whose pass runs in C (csrc/vllm_rank.c): ``NativeVllmRank``.

The rank keeps every request's engine state in C (struct-of-arrays slots: lengths, KV blocks,
open stretches, emission stretches, prompt hashes), with the running order, the waiting queue,
the ITL difference array, and the decode-only extension (decode_run.c's loop over the rank's
own state). Decode times of the built-in models are evaluated in C; prefill times and an
external provider's decode times come from the rank's ``StepTimer`` (the latter through the C
memo). Python keeps the slot -> ``SimRequest`` map, ``pass_ends`` (records read token times
from it) and ``break_gaps``. What a call did comes back as one flat array of events (admitted,
preempted, rejected, finished with its stretches), so Python touches a request only at those
lifecycle events: its ``admissions``, ``first_reused``, ``max_reused``, ``preemptions``,
``stretches``, ``generated`` and ``status`` are right from then on (in between, C holds the
truth). What watchers read is gathered in C too and replayed in VllmRank's order: a router's
KV events, running-order signals and prefill completions at each pass end, telemetry's gauges,
forward-pass metrics' lists (engine/fpm.py makes the rows). MTP bursts (aic_nextn) are
drawn in C too, from the rank's own StdRng (engine/mtp.py is their twin); an aggregated MTP rank
is ``NativeVllmMtpRank``, whose decode-only passes run as one event.

``VllmRank`` (engine/vllm.py) is its twin and specification: the same request stream through
both gives the same passes, token times and pool state (tests/test_vllm_native.py). The
configurations it takes are the ones ``supports`` accepts; the others keep the Python rank.
"""

from __future__ import annotations

from array import array

from .. import native
from ..errors import SimulationError
from ..native import check_status as _check
from . import fpm
from .decode_run import MAX_PASSES, MEMO_LIMIT, _native_kind, answer_misses, decode_runner
from .mtp import accept_limits, accept_rates, scheduler_seed
from .native_queue import QueueView
from .rank_base import RankBase
from .request import FINISHED, PREEMPTED, RUNNING
from .vllm import VllmRank
from .vllm_state_cache import state_blocks, state_fit_error
from ..workload.prompt import IdRanges

MAX_BLOCK_SIZE = 65536       # the rank keeps one bucket per block offset
_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # workload/prompt.py's salt of blocks past the prompt
_EXACT = 2 ** 62              # counts the C rank keeps in int64 without overflow
_U64_ARRAY = native.ffi.typeof("uint64_t[]") if native.ffi is not None else None
_U32_ARRAY = native.ffi.typeof("uint32_t[]") if native.ffi is not None else None
_NULL = native.ffi.NULL if native.ffi is not None else None
ROLES = ("aggregated", "prefill", "decode")   # aisim_vllm_role's order


def supports(engine, *, dp_size=1, role="aggregated", pool=None, backend=None):
    """Why the C rank cannot take this configuration, or None when it can.

    It takes the vLLM or TensorRT-LLM rank on the C pool, aggregated or in a disaggregated
    role (engine/vllm_native_roles.py), alone or in an attention DP group (a group forms one
    pass per rank and never extends, as with the Python rank), whether a router, telemetry or
    a scaling policy's forward-pass metrics watch it or not, with MTP bursts or not (each
    pass of an MTP rank is its own event), with a state cache (aggregated, without MTP), with
    prefill_schedule_interval's gate (aggregated, without MTP or a state cache, in a DP group);
    not counts beyond int64."""
    if native.resolve_backend(backend) != "c":
        return "the C backend is not in use"
    if engine.backend not in ("vllm", "trtllm"):
        return f"backend {engine.backend!r} (only 'vllm' and 'trtllm')"
    if role not in ROLES:
        return f"role {role!r} (only {', '.join(ROLES)})"
    if getattr(engine, "worker_type", "aggregated") not in ("aggregated", role):
        return f"worker_type {engine.worker_type!r} in the {role} role"
    if dp_size < 1:
        return f"dp_size {dp_size}"
    if not 1 <= engine.block_size <= MAX_BLOCK_SIZE:
        return f"block_size {engine.block_size} (at most {MAX_BLOCK_SIZE})"
    if pool is not None and getattr(pool, "backend", None) != "c":
        return "a Python block pool"
    for field in ("num_gpu_blocks", "max_num_batched_tokens", "max_num_seqs", "max_model_len"):
        value = getattr(engine, field)
        if value is not None and not 0 <= value < _EXACT:
            return f"{field} {value} (the C rank counts in int64: below 2^62)"
    if engine.num_gpu_blocks * engine.block_size >= _EXACT:
        return "num_gpu_blocks x block_size beyond 2^62 tokens"
    interval = getattr(engine, "prefill_schedule_interval", 1)
    if interval >= _EXACT:
        return f"prefill_schedule_interval {interval} (the C rank counts in int64: below 2^62)"
    if dp_size > 1 and interval > 1 and (
            role != "aggregated" or getattr(engine, "aic_nextn", None) is not None
            or getattr(engine, "state_cache", None) is not None):
        return ("prefill_schedule_interval with attention DP outside a plain aggregated rank "
                "(the Python rank, engine/vllm_psi.py)")
    if getattr(engine, "state_cache", None) is not None:
        if role != "aggregated" or engine.backend != "vllm":
            return "state_cache outside an aggregated vLLM rank (the Python rank)"
        if getattr(engine, "aic_nextn", None) is not None:
            return "state_cache with MTP bursts (the Python rank, engine/vllm_state_cache.py)"
    if getattr(engine, "native_host_offload", None) is not None:
        return "KV offload tiers (native_host_offload: the Python rank, engine/vllm_offload.py)"
    return None


def rank_class(engine, *, dp_size=1, role="aggregated", backend=None):
    """The class of a rank of this configuration: the C rank where ``supports`` takes it, else
    the Python one (the runtime's choice)."""
    from . import vllm_native_roles   # (it subclasses this module's rank)
    native_cls, python_cls = vllm_native_roles.RANK_CLASSES[role]
    if supports(engine, dp_size=dp_size, role=role, backend=backend) is None:
        return native_cls
    if role == "aggregated" and getattr(engine, "state_cache", None) is not None:
        from .vllm_state_cache import StateCacheRank
        return StateCacheRank
    return python_cls


class _Scratch:
    """C buffers every rank uses only within one call (one process, one thread): made once,
    not per rank, so that 65,536 idle ranks of a DP group cost nothing for them."""

    __slots__ = ("run", "ends", "gauges", "count", "ranges")

    def __init__(self):
        ffi = native.ffi
        self.run = ffi.new("aisim_decode_run *")     # a decode-only run, resumed on misses
        self.ends = ffi.new("double[]", MAX_PASSES)  # its end times
        self.gauges = ffi.new("int64_t[]", 3)        # finishing_gauges' answer
        self.count = ffi.new("int64_t *")
        self.ranges = ffi.new("uint32_t[]", 8)       # a synthetic prompt's (first, count) pairs


_lib = native.lib
# made as the module loads, as the types it uses are (native._build_types): the first rank of
# a run would otherwise pay its allocation and first-use costs (about 25 us)
_SCRATCH = _Scratch() if native.ffi is not None else None


class _Chunk:
    """A prompt chunk as engine/fpm.py reads a request: its prompt length and prefix."""

    __slots__ = ("prompt_len", "pass_chunk")

    def __init__(self, prompt_len, prefix):
        self.prompt_len = prompt_len
        self.pass_chunk = (0, 0, prefix)


class _Context:
    """A decoder's context as engine/fpm.py reads an open stretch (base_len - base_pass + P
    with base_pass = P)."""

    __slots__ = ("base_len", "base_pass")

    def __init__(self, context, P):
        self.base_len = context
        self.base_pass = P


class _FpmPass:
    """The pass just formed, as engine/fpm.py's pass_row reads a rank."""

    __slots__ = ("_fpm_chunks", "buckets", "_fpm_queue", "_pf_tokens")

    def __init__(self, view, queue):
        ffi = native.ffi
        n = view.n_fpm_chunks
        chunks = ffi.unpack(view.fpm_chunks, 2 * n) if n else ()
        self._fpm_chunks = [_Chunk(chunks[i], chunks[i + 1]) for i in range(0, 2 * n, 2)]
        P = view.pass_index
        n = view.n_fpm_contexts
        contexts = ffi.unpack(view.fpm_contexts, n) if n else ()
        self.buckets = {0: [_Context(c, P) for c in contexts]}
        self._fpm_queue = queue
        self._pf_tokens = view.pf_tokens


class _StoredRuns:
    """The runs of hashes committed since the last report, read from C (VllmRank's
    ``_stored`` list): truth is a field read, iterating copies them out."""

    __slots__ = ("_view",)

    def __init__(self, view):
        self._view = view

    def __bool__(self):
        return self._view.n_stored_runs > 0

    def __iter__(self):
        view = self._view
        ffi = native.ffi
        start = 0
        for i in range(view.n_stored_runs):
            end = view.stored_ends[i]
            run = array("Q")
            run.frombytes(ffi.buffer(view.stored + start, 8 * (end - start)))
            start = end
            yield run


class _Queue(QueueView):
    """The running order or the waiting queue (the requests themselves)."""

    __slots__ = ()
    QUEUE = "aisim_vllm_queue"

    def _request(self, slot):
        return self._rank._requests[slot]


class NativeVllmRank(RankBase):
    role = "aggregated"          # the disaggregated roles subclass it (vllm_native_roles.py)
    charges_prefill = True
    charges_decode = True
    holds_sources = False

    # The rank's attributes in slots: past 30 instance attributes CPython 3.11 keeps them in a
    # dict of their own, and no ``self.method()`` of the rank specializes; the watch switches
    # are slots set in __init__, not class defaults (a class default read through ``self``
    # never specializes). RankBase's ``__dict__`` stays for the rest (a role's, a caller's).
    __slots__ = ("worker_idx", "dp_rank", "scheduler_id", "timer", "pool", "cb", "block_size",
                 "num_blocks", "total_kv_tokens", "max_batched", "max_seqs", "max_model_len",
                 "caching", "chunked", "lifo", "no_evict", "admission", "_rank", "_view",
                 "_decode_timing", "psi", "mtp_nextn", "_requests", "running", "waiting",
                 "pass_ends", "_break_gaps", "_breaks_read", "pass_end_ms", "pass_effect",
                 "_macro_ends", "_decode_run", "_evicted_in_flight", "_index", "_index_key",
                 "watched", "capture_gauges", "in_flight", "completed_preemptions", "_gauges",
                 "_observer", "_fpm_on", "fpm_last", "fpm_clock", "_fpm_pending", "_fpm_queue")

    def __init__(self, engine, timer, pool, *, callbacks, worker_idx=0, dp_rank=0,
                 scheduler_id=0, supported=False):
        """``supported``: the caller found ``supports`` None for this engine in this role on a
        C pool (the build's worker_factory asks once per role, not per rank)."""
        if not supported:
            # the pool decides, not the process
            reason = supports(engine, role=self.role, pool=pool, backend="c")
            if reason is not None:
                raise SimulationError(f"the C vLLM rank does not take this rank: {reason}")
        ffi, lib = native.ffi, native.lib
        # what watches the rank, as VllmRank's: telemetry gauges (captured as of the latest
        # pass completion or submission), a router's observer, forward-pass metrics
        self.watched = False
        self.capture_gauges = False
        self.in_flight = False            # a pass formed by schedule() has not completed yet
        self.completed_preemptions = 0    # as of the latest completed pass
        self._gauges = None
        self._observer = None
        self._fpm_on = False
        self.fpm_last = None              # (end ms, row) of the latest completed pass
        self.fpm_clock = 0.0              # when its last row was reported, or it activated
        self._fpm_pending = None
        self._fpm_queue = None
        VllmRank._take_settings(self, engine, timer, pool, callbacks, worker_idx, dp_rank,
                                scheduler_id)
        config = ffi.new("aisim_vllm_config *")
        config.block_size = self.block_size
        config.num_blocks = self.num_blocks
        config.max_batched = self.max_batched
        config.max_seqs = self.max_seqs
        config.max_model_len = -1 if self.max_model_len is None else self.max_model_len
        config.caching = self.caching
        config.chunked = self.chunked
        config.lifo = self.lifo
        config.no_evict = self.no_evict
        config.role = ROLES.index(self.role)
        box = ffi.new("aisim_vllm_rank **")
        _check(lib.aisim_vllm_new(box, config, pool._pool), "aisim_vllm_new")
        self._rank = ffi.gc(box[0], lib.aisim_vllm_free)
        view = ffi.new("aisim_vllm_view **")
        lib.aisim_vllm_view_of(self._rank, view)
        self._view = view[0]
        # decode times: the built-in models in C, anything else through the C memo (filled
        # from the timer on a miss), as the decode-only runs do (engine/decode_run.py)
        kind, fixed_ms = _native_kind(timer.model)
        timing = ffi.new("aisim_decode_timing **")
        _check(lib.aisim_decode_timing_new(timing, kind, fixed_ms, timer.decode_ratio,
                                           self.total_kv_tokens, MEMO_LIMIT),
               "aisim_decode_timing_new")
        self._decode_timing = ffi.gc(timing[0], lib.aisim_decode_timing_free)
        _check(lib.aisim_vllm_set_decode_timing(self._rank, self._decode_timing),
               "aisim_vllm_set_decode_timing")
        # prefill_schedule_interval's gate (engine/vllm_psi.py's PrefillCadence, the same
        # fields in a C struct the rank reads): the worker of a DP group sets its wave
        self.psi = None
        interval = getattr(engine, "prefill_schedule_interval", 1)
        if interval > 1:
            self.psi = ffi.new("aisim_vllm_psi *", {"interval": interval})
            _check(lib.aisim_vllm_set_psi(self._rank, self.psi), "aisim_vllm_set_psi")
        self.mtp_nextn = getattr(engine, "aic_nextn", None)
        if self.mtp_nextn is not None:
            self._set_mtp(engine, scheduler_id)
        self._requests = []          # slot -> SimRequest (None while free)
        self.running = _Queue(self, 0)
        self.waiting = _Queue(self, 1)
        self.pass_ends = array("d")
        self._break_gaps = {}
        self._breaks_read = 0        # C's MTP break triples already in _break_gaps
        self.pass_end_ms = 0.0
        self.pass_effect = False
        self._macro_ends = None
        self._decode_run = None
        # a router's kv_index (indexed_prefix): the evictions taken during the pass in flight,
        # and the hash sets built from them and the pass's commits
        self._evicted_in_flight = []
        self._index = None
        self._index_key = None

    def __new__(cls, engine, *args, **kwargs):
        # an aggregated MTP or state_cache rank is its own class (NativeVllmMtpRank,
        # NativeVllmStateRank): whoever drives ranks by their exact class (the plain C loop,
        # runtime/plain_native.py) leaves it to the runtime
        if cls is NativeVllmRank:
            if getattr(engine, "aic_nextn", None) is not None:
                cls = NativeVllmMtpRank
            elif getattr(engine, "state_cache", None) is not None:
                cls = NativeVllmStateRank
        return object.__new__(cls)

    def _set_mtp(self, engine, scheduler_id):
        """MTP bursts in C (engine/mtp.py's MtpBursts: the same rates, limits and seed); a
        prefill-role copy emits its one token without drawing."""
        ffi = native.ffi
        nextn = engine.aic_nextn
        limits = accept_limits(accept_rates(nextn, engine.aic_nextn_accept_rates))
        _check(native.lib.aisim_vllm_set_mtp(
            self._rank, nextn, ffi.new("uint64_t[]", [limit or 0 for limit in limits]),
            ffi.new("int32_t[]", [limit is None for limit in limits]),
            scheduler_seed(engine, scheduler_id), not self.holds_sources),
            "aisim_vllm_set_mtp")

    # ------------------------------------------------------------------ counters (C's)
    @property
    def pass_index(self):
        return self._view.pass_index

    @property
    def preemptions(self):
        return self._view.preemptions

    @property
    def committed_prefill_tokens(self):
        return self._view.committed_prefill_tokens

    @property
    def decode_steps(self):
        return self._view.decode_steps

    @property
    def decode_tokens(self):
        """The tokens the decode steps emitted (MTP bursts: more than one a step)."""
        return self._view.decode_tokens

    @property
    def itl_diff(self):
        """The difference array of gap multiplicities, per pass (C keeps it; read once, by
        the report)."""
        view = self._view
        return native.c_array("q", view.itl_diff, view.n_itl_diff)

    @property
    def held_total(self):
        return self._view.held_total

    @property
    def n_dec(self):
        return self._view.n_dec

    @property
    def partial(self):
        """How many running requests are outside an open stretch (its truth is what the
        disaggregated loop asks)."""
        return self._view.n_partial

    @property
    def fpm_on(self):
        """Forward-pass metrics for scaling snapshots (engine/fpm.py), kept only when asked."""
        return self._fpm_on

    @fpm_on.setter
    def fpm_on(self, value):
        self._fpm_on = bool(value)
        _check(native.lib.aisim_vllm_set_fpm(self._rank, self._fpm_on), "aisim_vllm_set_fpm")

    @property
    def observer(self):
        """A router's view of the engine (runtime/simulation.py EngineEvents), or None."""
        return self._observer

    @observer.setter
    def observer(self, value):
        self._observer = value
        _check(native.lib.aisim_vllm_observe(self._rank, value is not None),
               "aisim_vllm_observe")

    # ------------------------------------------------------------------ what VllmRank words
    # the same text and arithmetic over the same fields: one definition, VllmRank's
    _limit_output = VllmRank._limit_output
    stall_reason = VllmRank.stall_reason
    setting_prefix = VllmRank.setting_prefix
    fit_error = VllmRank.fit_error
    kv_gauges = VllmRank.kv_gauges
    live_gauges = VllmRank.live_gauges
    kv_summary = VllmRank.kv_summary

    telemetry_gauges = VllmRank.telemetry_gauges

    def submission_gauges(self):
        """``live_gauges()`` at a submission: with a pass in flight, the reference's engine
        shows the requests that pass finishes as gone already (their blocks cached)."""
        active, inactive, running, waiting = self.live_gauges()
        if not self.in_flight:
            return active, inactive, running, waiting
        ends = self._macro_ends
        out = _SCRATCH.gauges
        _check(native.lib.aisim_vllm_finishing_gauges(
            self._rank, len(ends) - 1 if ends else 0, out), "aisim_vllm_finishing_gauges")
        finishing, freed, cached = out[0], out[1], out[2]
        if not finishing:
            return active, inactive, running, waiting
        return active - freed, inactive + cached, running - finishing, waiting

    def progressed(self):
        # computed chunks are progress too: a chunk can cost no time
        return self.pass_effect or bool(self._view.chunked_pass)

    def has_work(self):
        view = self._view
        return bool(view.n_running or view.n_waiting)

    def pending_prefill_tokens(self):
        """Prompt tokens not computed yet, over the requests waiting or running here."""
        out = _SCRATCH.count
        _check(native.lib.aisim_vllm_pending_prefill_tokens(self._rank, out),
               "aisim_vllm_pending_prefill_tokens")
        return out[0]

    def request_blocks(self, r):
        """The KV blocks ``r`` holds now (the invariant checker's question)."""
        slot = self._requests.index(r)
        ffi = native.ffi
        blocks, computed, seq = ffi.new("int64_t *"), ffi.new("int64_t *"), ffi.new("int32_t *")
        _check(native.lib.aisim_vllm_request_blocks(self._rank, slot, blocks, computed, seq),
               "aisim_vllm_request_blocks")
        return blocks[0]

    # ------------------------------------------------------------------ queue entry
    def submit(self, request):
        # once per request: the common case (no output limit to set, a prompt of id ranges or
        # runs hashed in C) without _limit_output, _request_args and _take_slot calls
        prompt_len = request.prompt_len
        limit = self.max_model_len
        if limit is not None or self.no_evict or not self.caching \
                or request.output_token_ids is not None \
                or -(-prompt_len // self.block_size) > self.num_blocks:
            self._limit_output(request)
            slot = _lib.aisim_vllm_submit(self._rank, *self._request_args(request))
        else:
            request.rank = self
            prompt = request.prompt
            source = getattr(prompt, "_source", None)
            slot = None
            if source is not None and type(source[0]) is IdRanges:
                slot = self._submit_ranges(request, prompt_len, source)
            if slot is None:
                runs = prompt.values
                n_runs = len(runs)
                from_buffer = native.ffi.from_buffer
                slot = _lib.aisim_vllm_submit(
                    self._rank, prompt_len, request.max_output, request.out_limit, _NULL, 0,
                    from_buffer(_U32_ARRAY, runs) if n_runs else _NULL,
                    from_buffer(_U32_ARRAY, prompt.lengths) if n_runs else _NULL,
                    n_runs, 0, (request.uuid * _GOLDEN) & _MASK)
        if slot < 0:
            raise native.status_error(slot, "aisim_vllm_submit")
        requests = self._requests
        if slot == len(requests):
            requests.append(request)
        else:
            requests[slot] = request
        if self.capture_gauges:
            self._gauges = self.submission_gauges()

    def _submit_ranges(self, request, prompt_len, source, entry=None):
        """Submit a synthetic prompt from its id ranges (``Prompt.from_hash_ids`` over an
        ``IdRanges`` whose runs are not built yet): its runs are made and hashed in C, never
        in Python. The slot, or None (nothing queued) when the runs must say it. ``entry``:
        the C call (aisim_vllm_submit_ranges, or a decode rank's aisim_vllm_accept_ranges)."""
        ranges = source[0].ranges
        n = len(ranges)
        scratch = _SCRATCH
        buffer = scratch.ranges
        try:
            if n == 1:          # an ungrouped synthetic prompt: its fresh range
                buffer[0], buffer[1] = ranges[0]
            else:
                if 2 * n > len(buffer):
                    buffer = scratch.ranges = native.ffi.new("uint32_t[]", 2 * n)
                i = 0
                for first, count in ranges:
                    buffer[i] = first
                    buffer[i + 1] = count
                    i += 2
        except OverflowError:
            return None
        slot = (entry or _lib.aisim_vllm_submit_ranges)(
            self._rank, prompt_len, request.max_output, request.out_limit, buffer, n, source[1],
            (request.uuid * _GOLDEN) & _MASK)
        return None if slot == native.EINVAL else slot

    def _take_slot(self, slot, request):
        requests = self._requests
        if slot == len(requests):
            requests.append(request)
        else:
            requests[slot] = request

    def _request_args(self, request, hashed=None):
        """aisim_vllm_submit's arguments after the rank: the lengths, and with prefix caching
        the prompt's hashes or runs (hashed in C) when ``hashed`` (by default: when it may
        fit)."""
        ffi = native.ffi
        hashes = values = lengths = ffi.NULL
        n_hashes = n_runs = 0
        authored = request.output_token_ids is not None
        if hashed is None:
            hashed = self._may_fit(request)
        if self.caching and hashed:
            prompt = request.prompt
            if authored:
                bs = self.block_size
                n_blocks = (request.prompt_len + len(request.output_token_ids)) // bs
                own = prompt.extended_hashes(bs, request, n_blocks)
                n_hashes = len(own)
                if n_hashes:
                    hashes = ffi.from_buffer(_U64_ARRAY, own)
            else:
                # hashed in C from the prompt's runs: no hash array in Python
                runs = prompt.values
                n_runs = len(runs)
                if n_runs:
                    values = ffi.from_buffer(_U32_ARRAY, runs)
                    lengths = ffi.from_buffer(_U32_ARRAY, prompt.lengths)
        return (request.prompt_len, request.max_output, request.out_limit, hashes, n_hashes,
                values, lengths, n_runs, authored, (request.uuid * _GOLDEN) & _MASK)

    def _may_fit(self, r):
        """Whether ``r`` passes admission's length tests, so that its prompt is worth hashing
        (an over-capacity prompt of 10^7 tokens would cost ~2 GB of hashes)."""
        if self.max_model_len is not None and r.prompt_len >= self.max_model_len:
            return False
        return -(-r.prompt_len // self.block_size) <= self.num_blocks

    # ------------------------------------------------------------------ scheduling
    def schedule(self, now_ms):
        """Form one pass at ``now_ms``; returns its end time, or None with nothing to do."""
        view = self._view
        if not view.n_running and not view.n_waiting:
            return None
        status = _lib.aisim_vllm_schedule(self._rank, now_ms)
        if status < 0:
            raise native.status_error(status, "aisim_vllm_schedule")
        if view.n_events:
            self._schedule_events(now_ms)
        timer = self.timer
        prefill = 0.0
        count = view.pf_count
        if count and self.charges_prefill:
            prefill = timer.prefill(count, view.pf_isl // count, view.pf_prefix // count)
        decode = 0.0
        n = view.dec_batch
        if n and self.charges_decode:
            if view.decode_known:
                decode = view.decode_ms
            else:   # a time only Python knows (or an error only it can word): ask, remember
                active = view.dec_active
                decode = timer.decode(n, active, active // n, self.total_kv_tokens)
                _check(native.lib.aisim_decode_timing_put(self._decode_timing, n, active,
                                                          decode), "aisim_decode_timing_put")
        self.pass_effect = bool(view.pass_effect)
        self.pass_end_ms = (now_ms + prefill) + decode
        if self.watched:
            self.in_flight = True
            if self._fpm_on:
                self._fpm_row(now_ms)
        return self.pass_end_ms

    def _fpm_row(self, now_ms):
        """engine/fpm.py's row of the pass just formed, from what C gathered (the same lists
        in the same order as VllmRank's, so the same sums and variances)."""
        ffi = native.ffi
        view = self._view
        n = view.n_fpm_queued
        queued = ffi.unpack(view.fpm_queued, 2 * n) if n else ()
        prefill = [queued[i + 1] for i in range(0, 2 * n, 2) if not queued[i]]
        decode = [queued[i + 1] for i in range(0, 2 * n, 2) if queued[i]]
        self._fpm_queue = (prefill, decode) if n else ((), ())
        self._fpm_pending = fpm.pass_row(_FpmPass(view, self._fpm_queue), now_ms,
                                         view.pass_index, ())

    def _events(self):
        view = self._view
        return native.ffi.unpack(view.events, view.n_events * 5)

    def _schedule_events(self, now_ms):
        requests = self._requests
        fields = iter(self._events())
        for kind, slot, a, b, c in zip(fields, fields, fields, fields, fields):
            r = requests[slot]
            if kind == 1:      # admitted: a cached tokens, b readmission
                r.status = RUNNING
                r.admissions.append((now_ms, a, bool(b)))
                if not b:
                    r.first_reused = a
                if a > r.max_reused:
                    r.max_reused = a
            else:              # preempted
                r.status = PREEMPTED
                r.seq = -1     # (a decode destination's KV table is gone with it)
                r.preemptions = a
                r.generated = c
                r.computed = 0

    # ------------------------------------------------------------------ decode-only runs
    def extend(self, horizon_ms, cutoff_ms, max_passes=MAX_PASSES):
        """Lengthen the pass just formed by the decode-only passes that follow it (as
        ``VllmRank.extend``). Returns the end time of the last pass."""
        view = self._view
        if not view.plain_decode or view.n_dec == 0 or self.pass_end_ms >= horizon_ms:
            return self.pass_end_ms
        if max_passes <= MAX_PASSES:
            ends = self._extend_in_c(horizon_ms, cutoff_ms, max_passes)
            if ends is not None:
                if len(ends) > 1:
                    self._macro_ends = ends
                    self.pass_end_ms = ends[-1]
                return self.pass_end_ms
        return self._extend_in_python(horizon_ms, cutoff_ms, max_passes)

    def _extend_in_c(self, horizon_ms, cutoff_ms, max_passes):
        """The run's end times from the C loop over the rank's own state, or None when its
        integers need Python's."""
        lib = native.lib
        run, buffer = _SCRATCH.run, _SCRATCH.ends
        status = lib.aisim_vllm_extend(self._rank, self.pass_end_ms, horizon_ms, cutoff_ms,
                                       max_passes, buffer, MAX_PASSES, run, 0)
        if status == lib.AISIM_DECODE_MISS:   # (an external provider's time: the memo missed)
            status = answer_misses(
                status, run, self._decode_timing, self.timer.decode, self.total_kv_tokens,
                lambda: lib.aisim_vllm_extend(self._rank, self.pass_end_ms, horizon_ms,
                                              cutoff_ms, max_passes, buffer, MAX_PASSES, run, 1))
        if status == lib.AISIM_VLLM_EXTEND_IN_PYTHON:
            return None
        _check(status, "aisim_vllm_extend")
        ends = native.c_array("d", buffer, run.n_ends)
        return ends

    def _extend_in_python(self, horizon_ms, cutoff_ms, max_passes):
        """``extend`` through engine/decode_run.py's loop, fed from the rank's state."""
        view = self._view
        run = self._decode_run
        if run is None:
            run = self._decode_run = decode_runner(self.timer, self.total_kv_tokens)
        ffi = native.ffi
        keys, counts = ffi.new("int64_t[]", self.block_size), ffi.new("int64_t[]", self.block_size)
        stop = _SCRATCH.count
        n = _check(native.lib.aisim_vllm_extension_input(
            self._rank, keys, counts, self.block_size, stop), "aisim_vllm_extension_input")
        crossing = dict(zip(ffi.unpack(keys, n), ffi.unpack(counts, n)))
        P0 = view.pass_index
        ends = run(first_pass=P0 + 1, end_ms=self.pass_end_ms, batch=view.n_dec,
                   base=view.sum_base, total_kv=self.total_kv_tokens, block_size=self.block_size,
                   room=self.pool.allocatable(), horizon_ms=horizon_ms, cutoff_ms=cutoff_ms,
                   crossing=crossing, stop_pass=stop[0], max_passes=max_passes)
        if len(ends) > 1:
            self._macro_ends = ends
            self.pass_end_ms = ends[-1]
        return self.pass_end_ms

    # ------------------------------------------------------------------ a router's view
    def _report_pass(self, observer):
        """Tell the router what the pass that ends now did (VllmRank._report_pass, from the
        report C made at the pass end): the full blocks it computed, the cached blocks
        evicted for it, the prompts it completed (in that order)."""
        ffi = native.ffi
        view = self._view
        requests = self._requests
        if observer.sends_kv:
            runs = view.n_report_runs
            if runs:
                ends = ffi.unpack(view.report_ends, runs)
                start = 0
                for end in ends:
                    hashes = array("Q")
                    hashes.frombytes(ffi.buffer(view.report_stored + start, 8 * (end - start)))
                    observer.kv_stored(self, hashes)
                    start = end
            if view.n_report_evicted:
                evicted = array("Q")
                evicted.frombytes(ffi.buffer(view.report_evicted, 8 * view.n_report_evicted))
                observer.kv_removed(self, evicted)
        else:  # the router reads the engine itself (indexed_prefix): a new pass, a new log
            self._evicted_in_flight = []
            self._in_flight_index = None
        if observer.ordered:
            # the reference signals each request in running order, each draining the
            # router's queue on its own: the router sorts this pass's signals by it
            n_pairs = view.n_report_order
            pairs = ffi.unpack(view.report_order, 2 * n_pairs) if n_pairs else ()
            observer.begin_pass({requests[pairs[i]].uuid: pairs[i + 1]
                                 for i in range(0, len(pairs), 2)})
        if view.n_report_prefilled:
            for slot in ffi.unpack(view.report_prefilled, view.n_report_prefilled):
                observer.prefill_done(self, requests[slot])

    # the index a router's kv_index reads (VllmRank.indexed_prefix, the one definition): the
    # runs committed in the pass in flight come from C; the hash sets built from them and the
    # evictions stand until the next commit, eviction or (without KV events) report
    indexed_prefix = VllmRank.indexed_prefix
    extends = True               # (engine/rank.py: Rank) VllmRank's capabilities
    indexes_prefix = True

    @property
    def _stored(self):
        return _StoredRuns(self._view)

    @property
    def _in_flight_index(self):
        return self._index if self._index_key == self._view.stored_commits else None

    @_in_flight_index.setter
    def _in_flight_index(self, index):
        self._index = index
        self._index_key = None if index is None else self._view.stored_commits

    # ------------------------------------------------------------------ pass completion
    def _count_breaks(self, stretches):
        """RankBase._record_itl's gaps across a break between two stretches."""
        breaks = self.break_gaps
        for i in range(1, len(stretches)):
            key = (stretches[i - 1][1], stretches[i][0])
            breaks[key] = breaks.get(key, 0) + 1

    def complete(self):
        if self.watched:
            self.in_flight = False
            if self._fpm_on:
                self.fpm_last = fpm.completed(self)
        observer = self._observer
        # (one method, not two: a rank completes a pass per event of the loop)
        ends = self._macro_ends
        extra = 0
        if ends is not None:
            self._macro_ends = None
            extra = len(ends) - 1
            self.pass_ends.extend(ends[:-1])
        end_ms = self.pass_end_ms
        self.pass_ends.append(end_ms)
        report = 0
        if observer is not None:
            report = _lib.AISIM_VLLM_REPORT_KV if observer.sends_kv else _lib.AISIM_VLLM_REPORT_INDEX
        status = _lib.aisim_vllm_complete(self._rank, extra, report)
        if status < 0:
            raise native.status_error(status, "aisim_vllm_complete")
        if observer is not None:
            self._report_pass(observer)
        if self._view.n_events:
            self._completed(end_ms)
        if self.capture_gauges:
            self._gauges = self.live_gauges()
            # preemptions count once the pass that preempted completes (the reference's)
            self.completed_preemptions = self._view.preemptions
        if observer is not None and observer.ordered:
            observer.end_pass()

    def _completed(self, end_ms):
        """The terminals (and held sources) of the pass that completed at ``end_ms``."""
        view = self._view
        ffi = native.ffi
        values = ffi.unpack(view.events, view.n_events * 5)
        n_values = view.n_stretch_values
        stretches = ffi.unpack(view.stretches, n_values) if n_values else ()
        requests = self._requests
        # every event is read before the first callback: a terminal may submit here
        finished = []
        held = False
        fields = iter(values)
        for kind, slot, a, b, c in zip(fields, fields, fields, fields, fields):
            r = requests[slot]
            r.status = FINISHED
            if kind == 4:   # finished: stretches[a:a+b], c tokens generated
                requests[slot] = None
                r.seq = -1
                r.generated = c
                if b == 1:  # the usual request: one stretch, no break
                    a += a
                    r.stretches.append((stretches[a], stretches[a + 1]))
                else:
                    self._take_stretches(r, stretches, a, b)
                finished.append((r, "completed"))
            elif kind == 3:  # rejected (a running state_cache request: with its tokens)
                requests[slot] = None
                r.seq = -1
                if b:
                    r.generated = c
                    pairs = iter(stretches[2 * a:2 * (a + b)])
                    r.stretches.extend(zip(pairs, pairs))
                finished.append((r, "rejected"))
            else:           # a prefill copy's source held: its slot lives until released
                self._hold(r, slot)
                r.generated = c
                self._take_stretches(r, stretches, a, b)
                finished.append((r, None))
                held = True
        cb = self.cb
        if not held:
            finish_all = getattr(cb, "finish_all", None)
            if finish_all is not None:
                finish_all(finished, end_ms)   # one call for the pass's terminals
                return
        for r, status in finished:
            if status is None:
                cb.on_source_held(r, end_ms)
            else:
                cb.on_finish(r, end_ms, status)

    def _take_stretches(self, r, stretches, a, b):
        """``r``'s stretches ``stretches[a:a+b]`` (pairs), and the gaps across its breaks (C
        counted those within stretches, and on an MTP rank those across breaks too: a stretch
        per burst token past the first)."""
        own = r.stretches
        pairs = iter(stretches[2 * a:2 * (a + b)])
        own.extend(zip(pairs, pairs))
        if b > 1 and self.mtp_nextn is None:
            self._count_breaks(own)

    @property
    def break_gaps(self):
        """Gaps across a break between two stretches (RankBase's): an MTP rank's counted in C,
        folded in the order C counted them (the dict's order)."""
        view = self._view
        self._breaks_read = native.fold_break_triples(
            self._break_gaps, view.mtp_breaks, self._breaks_read, view.n_mtp_breaks)
        return self._break_gaps

    def _hold(self, r, slot):
        """The prefill role keeps the slot of a held source (vllm_native_roles.py)."""
        raise SimulationError("an aggregated C rank held a source")


class NativeVllmMtpRank(NativeVllmRank):
    """An aggregated C rank with MTP bursts (aic_nextn); ``NativeVllmRank(engine, ...)`` makes
    one for an MTP engine.

    Its decode-only passes run as one event too: while every running request emits without
    finishing and nothing waiting could start, C draws the next passes' bursts ahead from a
    copy of the rank's generator and evaluates their decode times (``aisim_vllm_mtp_extend``);
    ``complete`` replays the passes the run kept (a truncated run keeps fewer) exactly as one
    event each would form and complete them. The Python rank (VllmRank with engine/mtp.py)
    runs every pass as its own event: the differential tests check that both give the same
    passes and records."""

    def extend(self, horizon_ms, cutoff_ms, max_passes=MAX_PASSES):
        # (a watched rank reports every pass: its own event)
        if not self._view.mtp_plain or self.watched or self.pass_end_ms >= horizon_ms:
            return self.pass_end_ms
        buffer = _SCRATCH.ends
        n = _lib.aisim_vllm_mtp_extend(self._rank, self.pass_end_ms, horizon_ms, cutoff_ms,
                                       min(max_passes, MAX_PASSES), buffer, MAX_PASSES)
        if n > 1:
            self._macro_ends = native.c_array("d", buffer, n)
            self.pass_end_ms = self._macro_ends[-1]
        elif n < 0:
            raise native.status_error(n, "aisim_vllm_mtp_extend")
        return self.pass_end_ms


class NativeVllmStateRank(NativeVllmMtpRank):
    """An aggregated C rank with a state cache (``state_cache``, FEATURES.md §7);
    ``NativeVllmRank(engine, ...)`` makes one for such an engine. Its twin and specification is
    engine/vllm_state_cache.py's ``StateCacheRank`` (C: aisim_vllm_set_state and the state_*
    functions of csrc/vllm_rank.c, the pool's uncache/discard/key_refs).

    Every request stays outside open stretches, each pass stamps its tokens, as the Python
    rank; its decode-only passes run as one event (``NativeVllmMtpRank.extend``: C looks them
    up ahead, each request's KV growth and checkpoint copies included, and ``complete``
    replays the passes kept exactly as one event each would form and complete them)."""

    def __init__(self, engine, timer, pool, **kwargs):
        super().__init__(engine, timer, pool, **kwargs)
        self.state_blocks = state_blocks(engine)
        _check(native.lib.aisim_vllm_set_state(self._rank, self.state_blocks),
               "aisim_vllm_set_state")

    def fit_error(self, r):
        return state_fit_error(self, r, self.state_blocks)
