"""A plain aggregated run in one C call (csrc/plain_loop.c).

When a run is nothing but one-turn synthetic sessions placed by round robin on unwatched C
vLLM / TensorRT-LLM ranks, with the built-in timing models and no per-request record kept,
every step of it (arrivals, prompts from id ranges, placement, each rank's passes, the
terminals and the summary's per-request values) runs in C, and Python only fills the
collector from the arrays C gathered. ``eligible`` says whether a run is such a run;
anything else runs ``Simulation._run_plain``, which is this loop's twin and specification
(tests/test_plain_native.py compares their reports on random configurations).

``AISIMULATE_PLAIN_LOOP=python`` (or ``ENABLED = False``) keeps every run on the Python loop.
"""

from __future__ import annotations

import math
import os

from .. import native
from ..engine.decode_run import _native_kind
from ..engine.rank_base import RankBase
from ..engine.request import never_scheduled
from ..engine.timing import FixedTiming, PolynomialTiming, StepTimer
from ..engine.vllm_native import NativeVllmRank
from ..errors import SimulationError
from ..stats import DistributionStats
from ..workload.one_turn import OneTurnDriver
from ..workload.rng import CStdRng, StdRng
from .worker import Worker

ENABLED = os.environ.get("AISIMULATE_PLAIN_LOOP", "").strip().lower() != "python"
_ARRIVALS = {"poisson_qps": 0, "constant_qps": 1, "burst": 2}
_CLOSED = 3
_SLA_EXACT = 2.0 ** 53        # an SLA bound compared as a double is Python's comparison below
_SAMPLES = ("ttft", "e2e", "ttst", "tpot")
_TIME_BOUND_MS = 1e12         # 10^15 ns: a tenth of the int64 nanoseconds C's rounding keeps
# the Simulation methods the C loop stands for: one replaced on the instance keeps Python's
_LOOP_METHODS = ("_step", "_next_time", "_run_plain", "_complete_passes", "_start_passes",
                 "_zero_time_pass", "_register_arrival", "_place", "_deliver", "_on_finish",
                 "_finish_all", "_terminal", "_driver_terminal", "_record_maker")


def eligible(sim, limit):
    """Why ``sim.run_until(limit)`` cannot run in C, or None when it can."""
    if not ENABLED:
        return "switched off"
    if native.lib is None or native.resolve_backend() != "c":
        return "the C backend is not in use"
    if limit != sim.max_sim_time_ms or sim.now_ms != 0.0 or sim.arrived or sim.queue.peek_time() \
            != math.inf:
        return "not a whole run from its start"
    if sim.on_event is not None or sim.max_in_flight is not None or sim._external \
            or any(name in sim.__dict__ for name in _LOOP_METHODS):
        return "callbacks, an in-flight cap, submissions or a method replaced"
    from .simulation import Simulation
    if type(sim) is not Simulation:
        return "a subclass of Simulation"
    if sim.collector.keeps_records or sim.collector._num_requests or sim.collector._order.waiting:
        return "records kept"
    reason = _driver_reason(sim.driver)
    if reason is None:
        reason = _deployment_reason(sim)
    return reason


def _driver_reason(driver):
    if type(driver) is not OneTurnDriver:
        return "not the one-turn synthetic driver"
    shape = driver._shape
    resolved = shape.resolved
    if driver._drawn or driver._ahead or not isinstance(shape._rng, CStdRng):
        return "the driver has started"
    if driver.max_sessions is None:
        kind = resolved.arrival_kind
        if kind not in _ARRIVALS or driver._made or driver._next_ms != (0.0 if driver.total
                                                                          else math.inf):
            return "arrivals other than poisson, constant rate or burst"
        if kind != "burst":
            gap = 1000.0 / resolved.arrival_qps
            if not (math.isfinite(gap) and gap > 0.0):
                return "an arrival gap that is not positive and finite"
    else:
        k = min(driver.max_sessions, driver.total)
        if driver._active != k or driver._next_pending != k or \
                sorted(driver._heap) != [(0.0, i, 0) for i in range(k)]:
            return "the closed loop has started"
    if not 1 <= resolved.isl or resolved.osl < 0 or resolved.block_size < 1:
        return "lengths"
    return None


def _deployment_reason(sim):
    workers = sim.workers
    if not workers:
        return "no worker"
    dp = len(workers[0].ranks)
    if any(type(w) is not Worker or len(w.ranks) != dp or w.busy or w.generation
           or w._cadence or w._round_ranks for w in workers):
        return "a worker of another kind"
    ranks = [rank for w in workers for rank in w.ranks]
    first = ranks[0]
    for rank in ranks:
        if type(rank) is not NativeVllmRank or rank.role != "aggregated" or rank.watched \
                or rank.observer is not None or rank.capture_gauges or rank.fpm_on \
                or type(rank).truncate is not RankBase.truncate or rank.pass_ends \
                or rank.has_work() or rank.timer is not first.timer \
                or rank.cb is not sim.events:
            return "a rank the loop cannot drive"
        if (rank.block_size, rank.num_blocks, rank.max_model_len, rank.caching, rank.no_evict) \
                != (first.block_size, first.num_blocks, first.max_model_len, first.caching,
                    first.no_evict):
            return "ranks of different engines"
    timer = first.timer
    if type(timer) is not StepTimer or type(timer.model) not in (FixedTiming, PolynomialTiming):
        return "a timing model other than fixed or polynomial"
    if not _times_in_range(timer, first.max_seqs * sim.driver._isl):
        return "pass times the C loop cannot round as Python does"
    if first.num_blocks * first.block_size >= 1 << 50 or first.max_batched > 1 << 30:
        return "sizes beyond the C loop's exact range"
    router = sim.router
    if router._unpinned is None or router.deliver != sim._deliver or router.queued \
            or router.parked or router._released \
            or router.observes_engine or router.wants_terminal:
        return "placement other than round robin"
    policy = router.policy.policy
    if [w.worker_id for w in router.active] != [w.worker_id for w in workers] or \
            [w.idx for w in workers] != list(range(len(workers))):
        return "workers out of order"
    ids = {w.worker_id: w.idx for w in workers}
    if any(v.worker_id not in ids or v.dp_size != dp for v in policy._workers) or any(
            not 0 <= policy._rank_cursors.get(w.worker_id, 0) < dp for w in workers):
        return "round robin over other workers"
    sla = sim.collector._totals.sla
    if sla is not None:
        for value in (sla.ttft_ms, sla.itl_ms, sla.e2e_ms):
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float))
                                      or (isinstance(value, int) and abs(value) >= _SLA_EXACT)):
                return "an SLA bound the C loop cannot compare as Python does"
    return None


def _times_in_range(timer, most_new_tokens):
    """Whether every modeled pass time stays below _TIME_BOUND_MS, where C's Duration rounding
    (nanoseconds in int64) is Python's; beyond it Python's integers take over, C's stop."""
    def scaled(ms, ratio):
        return ms / ratio if 0.0 < ratio < 1.0 else ms

    model = timer.model
    if type(model) is FixedTiming:
        prefill, decode = model.prefill, model.decode
    else:   # the polynomial at the most new tokens a pass can have; its decode is below 35 ms
        t = float(most_new_tokens)
        prefill, decode = 4.209989e-7 * (t * t) + 1.518344e-2 * t + 16.50142, 35.0
    return scaled(prefill, timer.prefill_ratio) < _TIME_BOUND_MS \
        and scaled(decode, timer.decode_ratio) < _TIME_BOUND_MS


def run(sim, limit):
    """Run ``sim`` (``eligible``) to its end in C; returns the loop's last time, as
    ``Simulation._run_plain``."""
    ffi, lib = native.ffi, native.lib
    config, keep = _config(sim)
    box = ffi.new("aisim_plain **")
    native.check_status(lib.aisim_plain_new(box, config), "aisim_plain_new")
    loop = ffi.gc(box[0], lib.aisim_plain_free)
    views = ffi.new("aisim_plain_view **")
    lib.aisim_plain_view_of(loop, views)
    view = views[0]
    status = lib.aisim_plain_run(loop)
    progress, total = sim.progress, sim.driver.total
    while status == lib.AISIM_PLAIN_PROGRESS:   # _run_plain's call every PROGRESS_STEPS
        progress(view.now_ms, view.completed, total or view.arrived)
        status = lib.aisim_plain_run(loop)
    _take_state(sim, loop, view, keep["cursors_out"])
    if status == lib.AISIM_PLAIN_STALLED:
        raise _stalled(sim, view)
    if status == lib.AISIM_PLAIN_LIVELOCK:
        raise _livelock(sim, view)
    if status == lib.AISIM_PLAIN_TIMING:
        raise SimulationError(f"{sim.workers[0].ranks[0].timer.name}: a modeled pass time is "
                              f"out of the range the reference's Duration holds")
    native.check_status(status, "aisim_plain_run")
    _fill_collector(sim.collector, loop, view)
    return view.next_ms


def _config(sim):
    """The loop's aisim_plain_config for ``sim``, and what it points to (kept alive by the
    caller through the run)."""
    ffi, lib = native.ffi, native.lib
    driver = sim.driver
    shape = driver._shape
    resolved = shape.resolved
    workers = sim.workers
    ranks = [rank for w in workers for rank in w.ranks]
    first = ranks[0]
    timer = first.timer
    keep = {}
    config = ffi.new("aisim_plain_config *")
    if driver.max_sessions is None:
        config.arrivals = _ARRIVALS[resolved.arrival_kind]
        if resolved.arrival_kind == "poisson_qps":
            arrival_rng = keep["arrival_rng"] = StdRng(resolved.arrival_seed, backend="c")
            config.arrival_rng = arrival_rng._rng
        if resolved.arrival_kind != "burst":
            config.gap_ms = 1000.0 / resolved.arrival_qps
    else:
        config.arrivals = _CLOSED
        config.max_sessions = driver.max_sessions
    config.sessions = driver.total
    config.isl, config.osl, config.trace_block = driver._isl, driver._osl, driver._block
    config.own, config.shared, config.fresh_base = shape._own, shape._shared, shape._fresh_base
    config.groups = resolved.num_prefix_groups
    if shape.grouped:
        config.shape_rng = shape._rng._rng
    config.n_workers = len(workers)
    config.dp_size = len(workers[0].ranks)
    handles = ffi.new("void *[]", [rank._rank for rank in ranks])
    ids = {w.worker_id: w.idx for w in workers}
    policy = sim.router.policy.policy
    rr = ffi.new("int32_t[]", [ids[v.worker_id] for v in policy._workers])
    cursors = ffi.new("int64_t[]", [policy._rank_cursors.get(w.worker_id, 0) for w in workers])
    cursors_out = ffi.new("int64_t[]", len(workers))
    keep.update(handles=handles, rr=rr, cursors=cursors, cursors_out=cursors_out)
    config.ranks = handles
    config.rr_workers = rr
    config.n_rr = len(policy._workers)
    config.rr_cursor = policy._cursor
    config.rank_cursors = cursors
    config.rank_cursors_out = cursors_out
    config.block_size, config.num_blocks = first.block_size, first.num_blocks
    config.max_model_len = -1 if first.max_model_len is None else first.max_model_len
    config.caching, config.no_evict = bool(first.caching), bool(first.no_evict)
    kind, _ = _native_kind(timer.model)
    config.prefill_kind = kind
    config.prefill_fixed_ms = timer.model.prefill if kind == lib.AISIM_DECODE_FIXED else 0.0
    config.prefill_ratio = timer.prefill_ratio
    config.cutoff_ms = sim.max_sim_time_ms
    from .simulation import LIVELOCK_PASSES, PROGRESS_STEPS
    config.livelock_passes = LIVELOCK_PASSES
    config.progress_every = 0 if sim.progress is None else PROGRESS_STEPS
    totals = sim.collector._totals
    config.report_start_ms = totals.start_ms
    sla = totals.sla
    if sla is not None:
        for name in ("ttft", "itl", "e2e"):
            value = getattr(sla, f"{name}_ms")
            if value is not None:
                setattr(config, f"has_{name}", 1)
                setattr(config, f"sla_{name}_ms", float(value))
    return config, keep


def _take_state(sim, loop, view, rank_cursors):
    """What the rest of the simulation reads after a run: the counters, each rank's pass
    history, the driver's and the round robin's positions, the passes still in flight."""
    ffi, lib = native.ffi, native.lib
    ranks = [rank for w in sim.workers for rank in w.ranks]
    policy = sim.router.policy.policy
    for w, worker in enumerate(sim.workers):
        policy._rank_cursors[worker.worker_id] = rank_cursors[w]
    sim.now_ms = view.now_ms
    sim.arrived = view.arrived
    sim.completed = view.completed
    sim.in_flight = view.in_flight
    sim._next_uuid = view.arrived + 1
    sim.collector.on_arrival(view.arrived)
    sim.router.policy.policy._cursor = view.rr_cursor
    driver = sim.driver
    if driver._shape.grouped:
        driver._drawn = view.made   # (C drew the group of each request it made)
    if driver.max_sessions is None:
        driver._made = view.made
        driver._next_ms = view.next_arrival_ms
    else:
        n = lib.aisim_plain_ready(loop, ffi.NULL, ffi.NULL, 0)
        index, ready = ffi.new("int64_t[]", n), ffi.new("double[]", n)
        native.check_status(lib.aisim_plain_ready(loop, index, ready, n), "aisim_plain_ready")
        driver._heap = [(ready[i], index[i], 0) for i in range(n)]   # in heap order already
        driver._active = view.active
        driver._next_pending = view.next_pending
    sim._dirty.clear()
    from .simulation import PASS_DONE
    n = lib.aisim_plain_events(loop, ffi.NULL, ffi.NULL, 0)
    times, idents = ffi.new("double[]", n), ffi.new("int64_t[]", n)
    native.check_status(lib.aisim_plain_events(loop, times, idents, n), "aisim_plain_events")
    for i in range(n):   # passes in flight at a cutoff: the queue the Python loop leaves
        sim.queue.push(times[i], PASS_DONE, idents[i])
    busy, generation, end = ffi.new("int32_t *"), ffi.new("uint32_t *"), ffi.new("double *")
    for w, worker in enumerate(sim.workers):
        native.check_status(lib.aisim_plain_worker(loop, w, busy, generation, end),
                            "aisim_plain_worker")
        worker.busy, worker.generation, worker.pass_end_ms = bool(busy[0]), generation[0], end[0]
    out, n = ffi.new("double **"), ffi.new("size_t *")
    pairs = ffi.new("int64_t **")
    for w, rank in enumerate(ranks):   # (worker by worker, as C numbers them)
        native.check_status(lib.aisim_plain_pass_ends(loop, w, out, n), "aisim_plain_pass_ends")
        rank.pass_ends = native.c_array("d", out[0], n[0])
        native.check_status(lib.aisim_plain_breaks(loop, w, pairs, n), "aisim_plain_breaks")
        breaks = rank.break_gaps
        if n[0]:
            values = ffi.unpack(pairs[0], 2 * n[0])
            for i in range(0, len(values), 2):
                key = (values[i], values[i + 1])
                breaks[key] = breaks.get(key, 0) + 1


def _fill_collector(collector, loop, view, sample_stats=None, drop_samples=None):
    """The summary's inputs C accumulated, into the collector (report.fill_totals); the
    loop's statistics and drop calls (by default the aggregated loop's)."""
    from ..report import fill_totals
    lib = native.lib
    sample_stats = sample_stats or lib.aisim_plain_sample_stats
    drop_samples = drop_samples or lib.aisim_plain_drop_samples
    samples, stats = {}, {}
    counts = (view.n_ttft, view.n_ttft, view.n_ttst, view.n_tpot)
    out = native.ffi.new("double[9]")
    for which, name in enumerate(_SAMPLES):
        samples[name] = native.c_array("d", getattr(view, name), counts[which])
        # (after the copy: it sorts C's array)
        native.check_status(sample_stats(loop, which, out), "sample_stats")
        stats[name] = DistributionStats(*out)
        drop_samples(loop, which)   # held once at the peak
    fill_totals(collector, completed=view.totals_completed, input_tokens=view.input_tokens,
                output_tokens=view.output_tokens, reused=view.reused,
                first_reused=view.first_reused, duration_ms=view.duration_ms, good=view.good,
                good_tokens=view.good_tokens, committed_prefill=view.fallback_committed,
                stats=stats, **samples)


class _Head:
    """The request at the head of a stalled queue, as the stall message reads it."""

    __slots__ = ("uuid", "request_id", "prompt_len", "generated")

    def __init__(self, uuid, prompt_len, generated):
        self.uuid = uuid
        self.request_id = None
        self.prompt_len = prompt_len
        self.generated = generated


def _livelock(sim, view):
    """simulation.livelock_error's words (the few requests it names aside: C keeps none)."""
    worker = sim.workers[view.stuck_worker]
    rank = next((r for r in worker.ranks if r.has_work()), worker.ranks[0])
    return SimulationError(
        f"worker {worker.idx} dp rank {rank.dp_rank} cannot progress at {view.stuck_ms} ms: "
        f"{view.spins} passes in a row took no time and changed nothing (the livelock limit); "
        f"{rank.kv_summary()}")


def _stalled(sim, view):
    """Simulation._check_drained's error for a run that ended with requests in flight."""
    if view.stuck_worker >= 0:
        rank = sim.workers[view.stuck_worker].ranks[view.stuck_rank]
        head = _Head(view.stuck_uuid, view.stuck_prompt_len, view.stuck_generated)
        return SimulationError(never_scheduled(rank.stall_reason(head), head))
    return SimulationError(f"the replay cannot progress with {view.in_flight} requests in "
                           f"flight")
