"""A plain aggregated run in one C call (csrc/plain_loop.c).

When a run is nothing but one-turn synthetic sessions or trace sessions (by timestamps or
in a closed loop, one or more turns each, no accumulated deltas or authored outputs) placed
by round robin on unwatched C vLLM / TensorRT-LLM ranks, with the built-in timing models,
every step of it (arrivals, prompts from id ranges or the trace's ids, placement, each
rank's passes, the terminals and the summary's per-request values) runs in C, and Python
only fills the collector from the arrays C gathered; with per-request records kept or
streamed, C gathers each record's values too and Python makes the records from them
(``_Records``), in the order the collector settles them. A scaling policy that reads no
snapshot (``schedule``) runs in it too: the loop pauses where the Python loop calls
runtime/cluster.py (``_Scaling``), which changes the pool as it does there, and the loop
goes on with the workers it added, drained or removed. A trace placed by the C kv_router
runs in it too: C places each arrival, reports each pass and notifies prefill completions and
terminals (in running order, with its pending queue, whose releases C delivers; the ones
scaling makes while the loop pauses come through ``Router.flush``). ``eligible`` says
whether a run is such a run;
anything else runs ``Simulation._run_plain``, which is this loop's twin and specification
(tests/test_plain_native.py compares their reports on random configurations).

``AISIMULATE_PLAIN_LOOP=python`` (or ``ENABLED = False``) keeps every run on the Python loop.
"""

from __future__ import annotations

import math
import os
from itertools import islice

from .. import native
from ..engine.decode_run import _native_kind
from ..engine.rank_base import RankBase
from ..engine.request import never_scheduled
from ..engine.timing import FixedTiming, PolynomialTiming, StepTimer
from ..engine.vllm_native import NativeVllmRank
from ..errors import SimulationError
from ..stats import DistributionStats
from array import array

from ..report import RequestRecord, aggregated_record, route_entry
from ..workload.one_turn import OneTurnDriver
from ..workload.rng import CStdRng, StdRng
from ..workload.sessions import SessionDriver
from ..workload.lone_turns import LoneTurns, int64s
from ..workload.synthetic import SyntheticSessions
from ..workload.trace import Session
from .lifecycle import ACTIVE, DRAINING
from .worker import Worker

ENABLED = os.environ.get("AISIMULATE_PLAIN_LOOP", "").strip().lower() != "python"
_ARRIVALS = {"poisson_qps": 0, "constant_qps": 1, "burst": 2}
_CLOSED = 3
_SLA_EXACT = 2.0 ** 53        # an SLA bound compared as a double is Python's comparison below
_SAMPLES = ("ttft", "e2e", "ttst", "tpot")
_TIME_BOUND_MS = 1e12         # 10^15 ns: a tenth of the int64 nanoseconds C's rounding keeps
_TRACE = 4
# Records C gathers before Python takes them (a bounded buffer); a stream (on_record) takes
# them too once the oldest settled RECORDS_LAG_MS of simulated time ago, so that they reach
# it during the run, not in bursts of thousands at a slow request rate.
RECORDS_EVERY = 4096
RECORDS_LAG_MS = 100.0
# the Simulation methods the C loop stands for: one replaced on the instance keeps Python's
_LOOP_METHODS = ("_step", "_next_time", "_run_plain", "_complete_passes", "_start_passes",
                 "_zero_time_pass", "_register_arrival", "_place", "_deliver", "_on_finish",
                 "_finish_all", "_terminal", "_driver_terminal", "_record_maker")
# the ones scaling calls while the C loop pauses: they must be the class's own
_SCALING_METHODS = ("spawn_worker", "_spawn_aggregated", "flush_router", "capture_gauges",
                    "_event_time", "_check_drained")


def eligible(sim, limit):
    """Why ``sim.run_until(limit)`` cannot run in C, or None when it can."""
    if not ENABLED:
        return "switched off"
    if native.lib is None or native.resolve_backend() != "c":
        return "the C backend is not in use"
    if limit != sim.max_sim_time_ms or sim.now_ms != 0.0 or sim.arrived or sim.queue.peek_time() \
            != math.inf:
        return "not a whole run from its start"
    if sim.telemetry is not None or sim.windows:
        return "telemetry or traffic windows"
    reason = _cluster_reason(sim)
    if reason is not None:
        return reason
    if sim.on_event is not None or sim.max_in_flight is not None or sim._external \
            or any(name in sim.__dict__ for name in _LOOP_METHODS):
        return "callbacks, an in-flight cap, submissions or a method replaced"
    from .simulation import Simulation
    if type(sim) is not Simulation:
        return "a subclass of Simulation"
    if sim.collector.holds_terminals():
        return "the collector holds terminals already"
    reason = _driver_reason(sim.driver)
    if reason is None:
        reason = _deployment_reason(sim)
    if reason is not None:
        _PREPARED[:] = [None, None]
    return reason


def _cluster_reason(sim):
    """Why the run's scaling cannot pause the C loop (None: it can, or there is none)."""
    cluster = sim.cluster
    if cluster is None:
        return None
    if cluster.reads_snapshot or cluster.watch:
        return "a scaling policy that reads the snapshot or pass metrics"
    if list(sim.pools) != ["agg"] or sim.pools["agg"].router is not sim.router:
        return "pools other than the aggregated one"
    pool = sim.pools["agg"]
    if scaling_started(cluster, [(pool, sim.workers)]):
        return "scaling under way"
    make, spawn = sim.make_worker, pool.spawn
    if getattr(make, "__qualname__", None) != "worker_factory.<locals>.make" \
            or getattr(spawn, "__self__", None) is not sim \
            or getattr(spawn, "__func__", None) is not type(sim)._spawn_aggregated \
            or any(name in sim.__dict__ for name in _SCALING_METHODS):
        return "workers made otherwise"
    return None


def scaling_started(cluster, pools):
    """Whether scaling has changed the run already (both C loops take a run only before it
    has): a worker starting, settling or draining, a tick taken, a stall counted, a probe
    installed, or a pool of ``pools`` ((pool, its simulation workers) pairs) whose workers
    are not all its initial, active ones."""
    if cluster.starting or cluster.settling or cluster.lifecycle.draining \
            or cluster._tick_ordinal or cluster._stalled or cluster.probe is not None:
        return True
    return any(len(pool.workers) != len(workers)
               or any(pool.life.state.get(w.worker_id) != ACTIVE for w in workers)
               for pool, workers in pools)


def _driver_reason(driver):
    if type(driver) is SessionDriver:
        return _trace_reason(driver)
    if type(driver) is not OneTurnDriver:
        return "not the one-turn synthetic driver or a trace's session driver"
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
        if _closed_loop_started(driver, driver.total):
            return "the closed loop has started"
    if not 1 <= resolved.isl or resolved.osl < 0 or resolved.block_size < 1:
        return "lengths"
    return None


def _closed_loop_started(driver, count):
    """Whether a closed-loop driver of ``count`` sessions moved from its first ones at 0."""
    k = min(driver.max_sessions, count)
    return driver._active != k or driver._next_pending != k or \
        sorted(driver._heap) != [(0.0, i, 0) for i in range(k)]


def _synthetic_sessions_reason(driver):
    """Why the session driver's synthetic sessions cannot run in C (None: they can)."""
    sessions = driver.sessions
    resolved = sessions.resolved
    if sessions._made or sessions._live or driver._histories is not None \
            or driver._release is None or not isinstance(sessions._rng, CStdRng):
        return "the driver has started"
    if not 1 <= sessions.turns < 1 << 31 or sessions.count >= 1 << 31 \
            or sessions.count * sessions.turns >= 1 << 40:
        return "a trace too large"
    heap = driver._heap
    if driver.max_sessions is None:
        if heap != ([(0.0, 0, 0)] if sessions.count else []) \
                or resolved.arrival_kind not in _ARRIVALS:
            return "arrivals other than poisson, constant rate or burst"
        if resolved.arrival_kind != "burst":
            gap = 1000.0 / resolved.arrival_qps
            if not (math.isfinite(gap) and gap > 0.0):
                return "an arrival gap that is not positive and finite"
    else:
        if _closed_loop_started(driver, sessions.count):
            return "the closed loop has started"
    delay = sessions._delay
    if not 1 <= sessions._isl or sessions._osl < 0 or driver.block_size < 1 \
            or type(delay) is not float or not (math.isfinite(delay) and delay >= 0.0):
        return "lengths"
    return None


def _trace_reason(driver):
    """Why the session driver's trace cannot run in C (None: it can)."""
    sessions = driver.sessions
    if type(sessions) is SyntheticSessions:
        return _synthetic_sessions_reason(driver)
    lone = type(sessions) is LoneTurns
    if not (lone or type(sessions) is list) or not sessions or driver._histories is not None \
            or driver._release is not None:
        return "sessions other than a trace's, or accumulated deltas"
    if len(sessions) >= 1 << 31 or driver.total >= 1 << 40 or not lone \
            and max(len(session.turns) for session in sessions) >= 1 << 31:
        return "a trace too large"
    heap = driver._heap
    if driver.max_sessions is None:
        if len(heap) != 1 or heap[0][2] != 0 or driver._next_pending != len(sessions):
            return "the driver has started"
    else:
        if _closed_loop_started(driver, len(sessions)):
            return "the closed loop has started"
    try:
        arrays = _trace_arrays(driver)
    except (OverflowError, TypeError):
        return "hash ids beyond u32"
    if isinstance(arrays, str):
        return arrays
    _PREPARED[:] = [driver, arrays]
    return None


_PREPARED = [None, None]   # the driver eligible() last accepted and its trace arrays


def _prepared(driver):
    """The trace arrays of ``driver`` (made again unless eligible() just made them)."""
    if _PREPARED[0] is driver:
        arrays = _PREPARED[1]
        _PREPARED[:] = [None, None]
        return arrays
    return _trace_arrays(driver)


def _trace_arrays(driver):
    """The trace's sessions as aisim_plain_config's arrays, or the reason they cannot be."""
    block = driver.block_size
    timed = driver.max_sessions is None
    if type(driver.sessions) is LoneTurns:
        return _lone_arrays(driver.sessions, timed)
    turn_base, inputs, outputs = array("q", [0]), array("q"), array("q")
    delays, ids_off, ids = array("d"), array("q"), array("I")
    starts = array("d")
    longest = 0
    for session in driver.sessions:
        if type(session) is not Session:
            return "sessions other than a trace's"
        start = session.start_ms
        if timed:
            if start is None:
                start = 0.0
            elif type(start) is not float:
                return "a session start that is not a float"
            starts.append(start)
        for turn in session.turns:
            length, out = turn.input_length, turn.max_output_tokens
            if turn.output_token_ids is not None or type(length) is not int \
                    or type(out) is not int or not 1 <= length < 1 << 50 \
                    or not 0 <= out < 1 << 50:
                return "authored outputs or lengths"
            inputs.append(length)
            outputs.append(out)
            delays.append(turn.delay_ms)
            ids_off.append(len(ids))
            n = -(-length // block)
            hash_ids = turn.hash_ids
            ids.extend(hash_ids if len(hash_ids) == n else hash_ids[:n])
            if length > longest:
                longest = length
        turn_base.append(len(inputs))
    arrays = dict(turn_base=turn_base, turn_input=inputs, turn_output=outputs,
                  turn_delay=delays, ids_off=ids_off, ids=ids)
    if timed:
        # trace_start_order's (start, index) order
        arrays["start_ms"] = starts
        arrays["start_order"] = array("q", sorted(range(len(starts)), key=starts.__getitem__))
    return arrays, longest


def _lone_arrays(sessions, timed):
    """``_trace_arrays`` of sessions of one turn each, from their columns: the lengths, delays
    and hash ids as they are (the loop reads a turn's first ceil(input / block) ids from its
    offset on); the loader's types and bounds (lone_turns.py) leave only the lengths' lower
    bound to check."""
    inputs = sessions.inputs
    n = len(inputs)
    if min(inputs) < 1:
        return "authored outputs or lengths"
    arrays = dict(turn_base=int64s(range(n + 1)), turn_input=inputs,
                  turn_output=sessions.outputs, turn_delay=sessions.delays,
                  ids_off=sessions.ids_off, ids=sessions.ids)
    if timed:
        starts = array("d", [0.0 if start is None else start for start in sessions.starts])
        arrays["start_ms"] = starts
        arrays["start_order"] = int64s(sorted(range(n), key=starts.__getitem__))
    return arrays, max(inputs)


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
    reason = _ranks_reason(sim, ranks, first)
    if reason is not None:
        return reason
    reason = engine_reason(first, sim.driver)
    if reason is not None:
        return reason
    router = sim.router
    if router.deliver != sim._deliver or router.queued or router.parked or router._released:
        return "a router holding requests"
    policy = router.policy.policy
    if [w.worker_id for w in router.active] != [w.worker_id for w in workers] or \
            [w.idx for w in workers] != list(range(len(workers))):
        return "workers out of order"
    if _kv_router(sim) is not None:
        reason = _kv_router_reason(sim)
        if reason is not None:
            return reason
    elif router._unpinned is None or router.observes_engine or router.wants_terminal:
        return "placement other than round robin or kv_router"
    else:
        ids = {w.worker_id: w.idx for w in workers}
        if any(v.worker_id not in ids or v.dp_size != dp for v in policy._workers) or any(
                not 0 <= policy._rank_cursors.get(w.worker_id, 0) < dp for w in workers):
            return "round robin over other workers"
    return sla_reason(sim.collector.totals.sla)


def engine_reason(first, driver):
    """Why a plain loop cannot time or size the passes of rank ``first``'s engine serving
    ``driver``'s prompts (None: it can; both loops)."""
    timer = first.timer
    if type(timer) is not StepTimer or type(timer.model) not in (FixedTiming, PolynomialTiming):
        return "a timing model other than fixed or polynomial"
    if not _times_in_range(timer, first.max_seqs * _longest_prompt(driver)):
        return "pass times the C loop cannot round as Python does"
    if first.num_blocks * first.block_size >= 1 << 50 or first.max_batched > 1 << 30:
        return "sizes beyond the C loop's exact range"
    return None


def sla_reason(sla):
    """Why a plain loop cannot compare against the bounds of ``sla`` as Python does (None:
    it can, or there is none; both loops)."""
    if sla is not None:
        for value in (sla.ttft_ms, sla.itl_ms, sla.e2e_ms):
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float))
                                      or (isinstance(value, int) and abs(value) >= _SLA_EXACT)):
                return "an SLA bound the C loop cannot compare as Python does"
    return None


def _kv_router(sim):
    """The run's C kv_router (the loop calls it directly), or None."""
    return sim.router._native


def _kv_router_reason(sim):
    """Why the loop cannot place with the run's C kv_router (None: it can)."""
    router, policy = sim.router, sim.router.policy.policy
    driver = sim.driver
    if type(driver) is not SessionDriver or type(driver.sessions) not in (list, LoneTurns):
        return "kv_router placement of prompts other than a trace's"
    # (lone turns' priorities are the loader's i32 and u32)
    if type(driver.sessions) is list and any(type(turn.priority) is not int or type(turn.strict_priority) is not int
           or not -1 << 63 <= turn.priority < 1 << 63
           or not -1 << 63 <= turn.strict_priority < 1 << 63
           for session in driver.sessions for turn in session.turns):
        return "kv_router placement with priorities beyond int64"
    if [w.worker_id for w in sim.workers] != list(range(len(sim.workers))) \
            or router.kind != "agg" or not policy._uses_index or policy._given is not None:
        return "kv_router over other workers"
    if router.wants_kv == router.wants_index or not router.wants_prefill \
            or not router.wants_terminal or router.wants_order != policy.holds_requests \
            or router._native_direct == policy.holds_requests:
        return "kv_router notifications the loop does not send"
    return None


def _observer_reason(sim, rank):
    """Why ``rank``'s observer is not one the loop stands for (None: it is): the C kv_router's
    EngineEvents, or none for round robin."""
    from .simulation import EngineEvents
    observer = rank.observer
    if _kv_router(sim) is None:
        return None if observer is None and not rank.watched else "a watched rank"
    if type(observer) is not EngineEvents or observer.sim is not sim \
            or observer.router is not sim.router or not rank.watched:
        return "a rank watched by another"
    return None


def _ranks_reason(sim, ranks, first):
    """Why the loop cannot drive ``ranks`` beside ``first`` (None: it can)."""
    for rank in ranks:
        if type(rank) is not NativeVllmRank or rank.role != "aggregated" \
                or _observer_reason(sim, rank) is not None:
            return "a rank the loop cannot drive"
        reason = rank_reason(sim, rank, first)
        if reason is not None:
            return reason
    return None


def rank_reason(sim, rank, first):
    """Why a plain loop cannot drive ``rank`` (of a kind it drives) beside ``first``: what
    both loops ask of a rank (None: it can)."""
    if rank.capture_gauges or rank.fpm_on or type(rank).truncate is not RankBase.truncate \
            or rank.pass_ends or rank.has_work() or rank.timer is not first.timer \
            or rank.cb is not sim.events:
        return "a rank the loop cannot drive"
    if (rank.block_size, rank.num_blocks, rank.max_model_len, rank.caching, rank.no_evict) \
            != (first.block_size, first.num_blocks, first.max_model_len, first.caching,
                first.no_evict):
        return "ranks of different engines"
    return None


def _longest_prompt(driver):
    if type(driver) is OneTurnDriver:
        return driver._isl
    if type(driver.sessions) is SyntheticSessions:
        return driver.sessions._isl
    if _PREPARED[0] is driver:
        return _PREPARED[1][1]
    return max(turn.input_length for session in driver.sessions for turn in session.turns)


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
    records = _Records(sim, loop) if config.keep_records else None
    scaling = _Scaling(sim, loop, view, records) if sim.cluster is not None else None
    try:
        status = lib.aisim_plain_run(loop)
        progress, total = sim.progress, sim.driver.total
        pauses = (lib.AISIM_PLAIN_PROGRESS, lib.AISIM_PLAIN_RECORDS, lib.AISIM_PLAIN_CLUSTER,
                  lib.AISIM_PLAIN_TICK)
        while status in pauses:
            if status == lib.AISIM_PLAIN_PROGRESS:   # _run_plain's call every PROGRESS_STEPS
                progress(view.now_ms, view.completed, total or view.arrived)
            elif status == lib.AISIM_PLAIN_RECORDS:
                sim.now_ms = view.now_ms   # (a sink may read the clock)
                records.take()
            else:
                scaling.pause(status == lib.AISIM_PLAIN_TICK)
            status = lib.aisim_plain_run(loop)
    finally:
        if scaling is not None:
            sim.cluster.probe = None
            sim.router.native_release = None
    _take_state(sim, loop, view)
    if records is not None:   # (before an error too: a stream heard them as they settled)
        records.take()
    if status == lib.AISIM_PLAIN_STALLED:
        raise _stalled(sim, view, loop)
    if status == lib.AISIM_PLAIN_LIVELOCK:
        raise _livelock(sim, view)
    if status == lib.AISIM_PLAIN_NO_ENDPOINTS:
        from aisimulate_placement.kv_router_native import NO_ENDPOINTS
        raise SimulationError(NO_ENDPOINTS)
    if status == lib.AISIM_PLAIN_NO_WORKER:   # RoundRobin.place's words
        raise SimulationError(f"request {view.arrived + 1}: no active workers for round-robin "
                              f"placement in the agg pool")
    if status == lib.AISIM_PLAIN_TIMING:
        raise SimulationError(f"{sim.workers[0].ranks[0].timer.name}: a modeled pass time is "
                              f"out of the range the reference's Duration holds")
    native.check_status(status, "aisim_plain_run")
    _fill_collector(sim.collector, loop, view)
    return view.next_ms


def _synthetic_config(config, driver, keep):
    """Synthetic sessions (synthetic.SyntheticSessions: one turn each behind the one-turn
    driver, or several behind the session driver) and their prompts into ``config``."""
    sessions = type(driver) is SessionDriver
    shape = driver.sessions if sessions else driver._shape
    resolved = shape.resolved
    if sessions:
        config.arrivals = _TRACE
        config.turns_per_session = shape.turns
        config.inter_turn_delay_ms = shape._delay
        config.trace_closed = driver.max_sessions is not None
    if driver.max_sessions is None:
        kind = _ARRIVALS[resolved.arrival_kind]
        if sessions:
            config.start_kind = kind
        else:
            config.arrivals = kind
        if resolved.arrival_kind == "poisson_qps":
            arrival_rng = keep["arrival_rng"] = StdRng(resolved.arrival_seed, backend="c")
            config.arrival_rng = arrival_rng._rng
        if resolved.arrival_kind != "burst":
            config.gap_ms = 1000.0 / resolved.arrival_qps
    else:
        if not sessions:
            config.arrivals = _CLOSED
        config.max_sessions = driver.max_sessions
    config.sessions = shape.count
    config.isl, config.osl, config.trace_block = shape._isl, shape._osl, resolved.block_size
    config.own, config.shared, config.fresh_base = shape._own, shape._shared, shape._fresh_base
    config.groups = resolved.num_prefix_groups
    if shape.grouped:
        config.shape_rng = shape._rng._rng


def trace_config(config, driver, keep):
    """A trace's sessions into a plain loop's ``config`` (both loops' configs carry the trace
    arrays, arrivals, sessions, trace_closed, max_sessions and max_input); what they point to
    goes into ``keep``."""
    ffi = native.ffi
    arrays, longest = _prepared(driver)
    keep.update(arrays)
    config.arrivals = _TRACE
    config.sessions = len(driver.sessions)
    if driver.max_sessions is not None:
        config.trace_closed = 1
        config.max_sessions = driver.max_sessions
    for name, values in arrays.items():
        kind = {"q": "int64_t[]", "d": "double[]", "I": "uint32_t[]"}[values.typecode]
        buffer = keep[name + "_c"] = ffi.from_buffer(kind, values) if values else \
            ffi.new(kind, 1)
        setattr(config, name, buffer)
    config.max_input = longest


def _config(sim):
    """The loop's aisim_plain_config for ``sim``, and what it points to (kept alive by the
    caller through the run)."""
    ffi, lib = native.ffi, native.lib
    driver = sim.driver
    workers = sim.workers
    ranks = [rank for w in workers for rank in w.ranks]
    first = ranks[0]
    timer = first.timer
    keep = {}
    config = ffi.new("aisim_plain_config *")
    if type(driver) is SessionDriver and type(driver.sessions) is not SyntheticSessions:
        trace_config(config, driver, keep)
        config.isl, config.osl, config.trace_block = 1, 0, driver.block_size
    else:
        _synthetic_config(config, driver, keep)
    config.n_workers = len(workers)
    config.dp_size = len(workers[0].ranks)
    handles = ffi.new("void *[]", [rank._rank for rank in ranks])
    ids = {w.worker_id: w.idx for w in workers}
    policy = sim.router.policy.policy
    kv_router = _kv_router(sim)
    if kv_router is None:
        rr_ids = [ids[v.worker_id] for v in policy._workers]
        cursors = ffi.new("int64_t[]", [policy._rank_cursors.get(w.worker_id, 0)
                                        for w in workers])
        config.rr_cursor = policy._cursor
    else:
        rr_ids, cursors = [], ffi.NULL
    rr = ffi.new("int32_t[]", rr_ids or [0])
    keep.update(handles=handles, rr=rr, cursors=cursors)
    config.ranks = handles
    if kv_router is not None:
        if kv_router.pool.schedulers is not kv_router._synced:
            kv_router._sync()
        config.kvr = kv_router._r
        config.kvr_queue = kv_router.holds_requests
        for name, values in _turn_priorities(driver.sessions):
            if values is not None and any(values):
                buffer = keep[name] = ffi.new("int64_t[]", values)
                setattr(config, name, buffer)
        config.kvr_report = lib.AISIM_VLLM_REPORT_KV if sim.router.wants_kv else \
            lib.AISIM_VLLM_REPORT_INDEX
    config.rr_workers = rr
    config.n_rr = len(rr_ids)
    config.rank_cursors = cursors
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
    if sim.collector.keeps_records:
        config.keep_records = 1
        config.records_every = RECORDS_EVERY
        if sim.collector.record_stream.running:
            config.records_lag_ms = RECORDS_LAG_MS
    set_report_config(config, sim.collector.totals)
    return config, keep



def _turn_priorities(sessions):
    """(config field, every turn's value or None) of the turns' priority and strict
    priority."""
    if type(sessions) is LoneTurns:
        return ("turn_priority", sessions.priorities), ("turn_strict", sessions.stricts)
    turns = [turn for session in sessions for turn in session.turns]
    return tuple((name, [getattr(turn, field) for turn in turns])
                 for name, field in (("turn_priority", "priority"),
                                     ("turn_strict", "strict_priority")))


def set_report_config(config, totals):
    """The summary's start and SLA bounds into a C loop's config (both loops' configs carry
    report_start_ms, has_ttft/itl/e2e and sla_ttft/itl/e2e_ms)."""
    config.report_start_ms = totals.start_ms
    sla = totals.sla
    if sla is not None:
        for name in ("ttft", "itl", "e2e"):
            value = getattr(sla, f"{name}_ms")
            if value is not None:
                setattr(config, f"has_{name}", 1)
                setattr(config, f"sla_{name}_ms", float(value))

def _take_state(sim, loop, view):
    """What the rest of the simulation reads after a run: the counters, each rank's pass
    history, the driver's and the round robin's positions, the passes still in flight."""
    ffi, lib = native.ffi, native.lib
    ranks = [rank for w in sim.workers for rank in w.ranks]
    policy = sim.router.policy.policy
    take_counters(sim, view)
    round_robin = _kv_router(sim) is None
    if round_robin:
        policy._cursor = view.rr_cursor
    take_driver_state(sim.driver, loop, view, lib.aisim_plain_ready)
    sim._dirty.clear()
    from .simulation import PASS_DONE
    n = lib.aisim_plain_events(loop, ffi.NULL, ffi.NULL, 0)
    times, idents = ffi.new("double[]", n), ffi.new("int64_t[]", n)
    native.check_status(lib.aisim_plain_events(loop, times, idents, n), "aisim_plain_events")
    for i in range(n):   # passes in flight at a cutoff: the queue the Python loop leaves
        sim.queue.push(times[i], PASS_DONE, idents[i])
    busy, generation, end = ffi.new("int32_t *"), ffi.new("uint32_t *"), ffi.new("double *")
    cursor = ffi.new("int64_t *")
    cursors = policy._rank_cursors if round_robin else {}
    for w, worker in enumerate(sim.workers):
        native.check_status(lib.aisim_plain_worker(loop, w, busy, generation, end, cursor),
                            "aisim_plain_worker")
        worker.busy, worker.generation, worker.pass_end_ms = bool(busy[0]), generation[0], end[0]
        if worker.worker_id in cursors:   # (a removed worker's cursor went with it)
            cursors[worker.worker_id] = cursor[0]
    # (worker by worker, as C numbers them)
    take_pass_history(loop, ranks, lib.aisim_plain_pass_ends, lib.aisim_plain_breaks)


def take_counters(sim, view):
    """The run's clock, arrival, completion and in-flight counts as the Python loop leaves
    them, and the collector's arrivals (both loops)."""
    sim.now_ms = view.now_ms
    sim.arrived = view.arrived
    sim.completed = view.completed
    sim.in_flight = view.in_flight
    sim._next_uuid = view.arrived + 1
    sim.collector.on_arrival(view.arrived)


def take_pass_history(loop, ranks, pass_ends, breaks):
    """Each of ``ranks``' pass ends and break gaps as the Python loop leaves them, read with
    the loop's ``pass_ends`` and ``breaks`` calls (rank i is the loop's i-th; both loops)."""
    ffi = native.ffi
    out, n = ffi.new("double **"), ffi.new("size_t *")
    pairs = ffi.new("int64_t **")
    for w, rank in enumerate(ranks):
        native.check_status(pass_ends(loop, w, out, n), pass_ends.__name__)
        rank.pass_ends = native.c_array("d", out[0], n[0])
        native.check_status(breaks(loop, w, pairs, n), breaks.__name__)
        gaps = rank.break_gaps
        if n[0]:
            values = ffi.unpack(pairs[0], 2 * n[0])
            for i in range(0, len(values), 2):
                key = (values[i], values[i + 1])
                gaps[key] = gaps.get(key, 0) + 1


def take_driver_state(driver, loop, view, ready):
    """The driver's positions as the Python loop leaves them; ``ready`` is the loop's call
    for its ready sessions (aisim_plain_ready, aisim_pd_ready: both loops)."""
    if type(driver) is SessionDriver:
        _take_trace_state(driver, loop, view, ready)
        return
    if driver._shape.grouped:
        driver._drawn = view.made   # (C drew the group of each request it made)
    if driver.max_sessions is None:
        driver._made = view.made
        driver._next_ms = view.next_arrival_ms
        return
    keys, ready_ms, n = _ready(loop, ready)
    driver._heap = [(ready_ms[i], keys[i], 0) for i in range(n)]   # in heap order already
    driver._active = view.active
    driver._next_pending = view.next_pending


def _ready(loop, ready):
    """The loop's ready sessions (keys, ready times, count) in heap order, by its ``ready``."""
    ffi = native.ffi
    n = ready(loop, ffi.NULL, ffi.NULL, 0)
    keys, ready_ms = ffi.new("int64_t[]", n), ffi.new("double[]", n)
    native.check_status(ready(loop, keys, ready_ms, n), ready.__name__)
    return keys, ready_ms, n


def _take_trace_state(driver, loop, view, ready):
    """The session driver's heap, starts and closed-loop counts as the Python loop leaves
    them (``ready``: the loop's ready call)."""
    keys, ready_ms, n = _ready(loop, ready)
    driver._heap = [(ready_ms[i], keys[i] >> 32, keys[i] & 0xFFFFFFFF) for i in range(n)]
    if type(driver.sessions) is SyntheticSessions:
        # (the sessions still running at a cutoff are not made again: nothing reads them)
        driver.sessions._made = view.sessions_made
    if driver.max_sessions is None:
        skip = view.next_start - 1   # (__init__ took the first start)
        next(islice(driver._starts, skip, skip), None)   # (consumed in C)
    else:
        driver._active = view.active
        driver._next_pending = view.next_pending


def record_sessions(driver):
    """How records name their sessions: (the trace's sessions by index, or None; whether
    they are named session_<index>) (both loops' _Records)."""
    if type(driver) is SessionDriver and type(driver.sessions) is SyntheticSessions:
        return None, driver.session_metadata
    if type(driver) is SessionDriver:
        return (driver.sessions if driver.session_metadata else None), False
    return None, driver._named


def rows(values, width):
    """Consecutive tuples of ``width`` of ``values``: the rows C gathered, from their
    concatenation (both loops' _Records)."""
    return zip(*[iter(values)] * width)


def settle_behind(stream, settle, *record):
    """``settle(*record)`` (the stream's ``settled`` or ``settled_row``) behind a request still
    in flight: as after the stream closed (both loops' _Records)."""
    running = stream.running
    stream.running = False
    settle(*record)
    stream.running = running


class _Records:
    """Per-request records from the rows C gathered (aisim_plain_records), handed to the
    collector's record stream in the order the collector settles them: each the record
    ``per_request_record`` makes of the ``RequestRecord`` runtime/records.py make_record makes
    of the request. The usual one (admitted once) is settled as the values
    report.aggregated_record makes it of, without the RequestRecord; any other as the
    RequestRecord."""

    def __init__(self, sim, loop):
        self.loop = loop
        self.stream = sim.collector.record_stream
        driver = sim.driver
        # each rank's routing_history entry of an immediate placement (its pool, worker id,
        # dp rank and scheduler id)
        self.routes = []
        self.add_routes(sim.workers)
        self.sessions, self.synthetic = record_sessions(driver)
        self.later = {}   # uuid -> the admissions after its first, not settled yet
        # kv_router placements: each route with its overlaps (Router._place_native's)
        self.block_size = sim.router.block_size if _kv_router(sim) is not None else None
        ffi = native.ffi
        self.out = (ffi.new("int64_t **"), ffi.new("double **"), ffi.new("size_t *"),
                    ffi.new("int64_t **"), ffi.new("double **"), ffi.new("size_t *"),
                    ffi.new("size_t *"))

    def add_routes(self, workers):
        self.routes.extend(route_entry("agg", rank.scheduler_id, rank.worker_idx, rank.dp_rank)
                           for w in workers for rank in w.ranks)

    def take(self):
        ffi, lib = native.ffi, native.lib
        ints_p, doubles_p, n_p, adm_p, at_p, n_adm_p, rest_p = self.out
        native.check_status(lib.aisim_plain_records(self.loop, *self.out),
                            "aisim_plain_records")
        n, n_adm, rest_from = n_p[0], n_adm_p[0], rest_p[0]
        later = self.later
        if n_adm:
            adm = array("q")
            adm.frombytes(ffi.buffer(adm_p[0], 24 * n_adm))
            at = array("d")
            at.frombytes(ffi.buffer(at_p[0], 8 * n_adm))
            for k in range(n_adm):
                entry = (at[k], "agg", adm[3 * k + 1], bool(adm[3 * k + 2]))
                uuid = adm[3 * k]
                extra = later.get(uuid)
                if extra is None:
                    later[uuid] = [entry]
                else:
                    extra.append(entry)
        if n:
            ints = array("q")
            ints.frombytes(ffi.buffer(ints_p[0], 8 * 13 * n))
            doubles = array("d")
            doubles.frombytes(ffi.buffer(doubles_p[0], 8 * 6 * n))
            self._settle(zip(rows(ints.tolist(), 13), rows(doubles.tolist(), 6)), rest_from,
                         self._overlaps())
        native.check_status(lib.aisim_plain_clear_records(self.loop),
                            "aisim_plain_clear_records")

    def _route(self, route, overlaps, uuid):
        """The kv_router's route entry (Router._place_native's, or route_entry's for a
        request it queued and released), from the rank's immediate one."""
        blocks, times = overlaps
        selected, best = blocks[2 * uuid - 2], blocks[2 * uuid - 1]
        entry = route.copy()
        queued = times[2 * uuid - 2]
        if queued == queued:   # (not NAN: it waited in the router's queue)
            released = times[2 * uuid - 1]
            entry.update(outcome="queued", queue_entered_at_ms=queued,
                         released_at_ms=released, queue_wait_ms=released - queued)
        entry.update(reported_overlap_tokens=selected * self.block_size,
                     selected_overlap_blocks=selected, best_available_overlap_blocks=best,
                     overlap_regret_blocks=best - selected)
        return entry

    def _overlaps(self):
        """Each request's (selected, best) overlap blocks and (queued, released) times by
        uuid - 1 (None: round robin): C's own arrays, indexed in place (they cover the whole
        run, so copying them at every batch of records would cost the run's length each time;
        no C call runs while a batch settles)."""
        if self.block_size is None:
            return None
        ffi = native.ffi
        out, times, n = ffi.new("int64_t **"), ffi.new("double **"), ffi.new("size_t *")
        native.check_status(native.lib.aisim_plain_overlaps(self.loop, out, times, n),
                            "aisim_plain_overlaps")
        if not n[0]:
            return [], []
        return out[0], times[0]

    def _settle(self, gathered, rest_from, overlaps):
        """The rows (their ints, their doubles); from rest_from on, settled behind a request
        still in flight when the run ended (as after the stream closed)."""
        stream = self.stream
        settled, settled_row = stream.settled, stream.settled_row
        routes, later, sessions, synthetic = self.routes, self.later, self.sessions, \
            self.synthetic
        for i, ((uuid, prompt_len, max_output, count, max_reused, first_reused, state, rank,
                 session, turn, n_admissions, admit_reused, flags),
                (arrival, terminal, first, second, last, admit_at)) in enumerate(gathered):
            if not flags & 1:
                first = last = None
            if not flags & 2:
                second = None
            if sessions is not None:
                session_id, turn_index = sessions[session].session_id, turn
            elif synthetic:
                session_id, turn_index = f"session_{session}", turn
            else:
                session_id = turn_index = None
            route = routes[rank]
            scheduler = route["scheduler_id"]
            if overlaps is not None:
                route = self._route(route, overlaps, uuid)
            status = "completed" if state == 1 else "rejected"
            if n_admissions == 1:   # the usual record: made from these values
                values = (session_id, turn_index, arrival, terminal, status, prompt_len,
                          max_output, count, first, second, last, max_reused, admit_at,
                          admit_reused, scheduler, route)
                if i < rest_from:
                    settled_row(uuid, arrival, admit_at, aggregated_record, values)
                else:
                    settle_behind(stream, settled_row, uuid, arrival, admit_at,
                                  aggregated_record, values)
                continue
            if n_admissions:
                admissions = [(admit_at, "agg", admit_reused, bool(flags & 4)), *later.pop(uuid)]
            else:
                admissions = []
            # (per_request_record copies a route: the rank's entry can be shared)
            record = RequestRecord(
                uuid, None, session_id, turn_index, None, None, arrival, None, terminal,
                status, prompt_len, max_output, count, first, second, last, max_reused,
                None if first_reused < 0 else first_reused, admissions, None, scheduler,
                [route], agentic=None)
            if i < rest_from:
                settled(record)
            else:
                settle_behind(stream, settled, record)


class _Released:
    """A request the kv_router released while the loop paused, as flush_router reads it."""

    __slots__ = ("uuid",)

    def __init__(self, uuid):
        self.uuid = uuid


class ScalingPause:
    """What both C loops' scaling pauses share (this module's ``_Scaling`` and
    plain_disagg_native's): the simulation, the loop and its view, the records, the cluster
    (which reads the loop through ``pending`` and ``check_drained`` while it runs in C: its
    ``probe``) and the draining flags the loop was last told of."""

    def __init__(self, sim, loop, view, records):
        self.sim, self.loop, self.view, self.records = sim, loop, view, records
        self.cluster = sim.cluster
        self.draining = set()
        self.cluster.probe = self

    def _clock(self):
        """The loop's clock and counters into the simulation, as the Python loop has them at
        this point; returns the time."""
        sim, view = self.sim, self.view
        t = sim.now_ms = view.now_ms
        sim.in_flight, sim.arrived, sim.completed = view.in_flight, view.arrived, view.completed
        return t

    # what cluster._watch_stall reads of the loop while it runs in C
    def pending(self):
        """The next pass completion (or transfer) and the next session ready."""
        view = self.view
        return view.next_event_ms, view.next_ready_ms


class _Scaling(ScalingPause):
    """Scaling (runtime/cluster.py) while the C loop pauses where the Python loop calls it:
    worker ready and drain settlement after a step's completions, the tick after its
    arrivals; then the loop learns what changed (workers added, round robin's active list,
    draining flags, the next tick and ready)."""

    def __init__(self, sim, loop, view, records):
        super().__init__(sim, loop, view, records)
        self.pool = sim.pools["agg"]
        self.index = {w.worker_id: w.idx for w in sim.workers}
        self.first = sim.workers[0].ranks[0]
        self.rr = None
        if _kv_router(sim) is not None:
            sim.router.native_release = self.release
        self._tell()

    def pause(self, tick):
        sim, view, cluster = self.sim, self.view, self.cluster
        t = self._clock()
        if tick:
            cluster.tick_due(t)
        else:
            if cluster.starting and cluster.starting[0][0] <= t:
                cluster.ready_due(t)
            if view.n_emptied:
                workers = sim.workers
                for w in native.ffi.unpack(view.emptied, view.n_emptied):
                    cluster.worker_idle("agg", workers[w])
            if cluster.settling:
                cluster.settle(t)
        self._tell()

    def _tell(self):
        ffi, lib = native.ffi, native.lib
        sim, loop, cluster = self.sim, self.loop, self.cluster
        self._add_workers()
        index = self.index
        kv_router = _kv_router(sim)
        if kv_router is not None:
            if kv_router.pool.schedulers is not kv_router._synced:
                kv_router._sync()
            rr = ()
        else:
            rr = tuple(index[v.worker_id] for v in sim.router.policy.policy._workers)
        if rr != self.rr:
            self.rr = rr
            native.check_status(lib.aisim_plain_set_rr(loop, ffi.new("int32_t[]", rr) if rr
                                                       else ffi.NULL, len(rr)),
                                "aisim_plain_set_rr")
        state = self.pool.life.state
        draining = {index[i] for i, s in state.items() if s == DRAINING}
        for w in draining ^ self.draining:
            native.check_status(lib.aisim_plain_set_draining(loop, w, w in draining),
                                "aisim_plain_set_draining")
        self.draining = draining
        starting = cluster.starting
        native.check_status(lib.aisim_plain_set_cluster(
            loop, cluster.next_tick_ms, starting[0][0] if starting else math.inf),
            "aisim_plain_set_cluster")

    def _add_workers(self):
        """The workers scaling made since the loop last heard, into the loop."""
        ffi, lib = native.ffi, native.lib
        sim = self.sim
        added = sim.workers[self.view.n_workers:]
        dp = len(sim.workers[0].ranks)
        for worker in added:
            ranks = worker.ranks
            if type(worker) is not Worker or len(ranks) != dp or worker.worker_id != worker.idx \
                    or _ranks_reason(sim, ranks, self.first) is not None:
                raise SimulationError(f"internal: worker {worker.worker_id} is not one the C "
                                      f"loop can drive")
            handles = ffi.new("void *[]", [rank._rank for rank in ranks])
            native.check_status(lib.aisim_plain_add_worker(self.loop, handles),
                                "aisim_plain_add_worker")
            self.index[worker.worker_id] = worker.idx
        if added and self.records is not None:
            self.records.add_routes(added)

    def release(self, released, now_ms):
        """Router.flush while the loop pauses: the requests the kv_router released (it holds
        them in C) delivered there; returns them (their uuids) in release order."""
        lib, out = native.lib, []
        self._add_workers()   # (a worker ready at once may take them)
        for uuid, answer in released:
            overlap = answer.overlap_blocks
            best = answer.best_overlap_blocks if answer.best_overlap_blocks is not None \
                else overlap
            native.check_status(lib.aisim_plain_release(self.loop, uuid, answer.worker_id,
                                                        answer.dp_rank, overlap, best, now_ms),
                                "aisim_plain_release")
            out.append(_Released(uuid))
        return out

    def check_drained(self):
        """Simulation._check_drained's error for the loop's state, if requests are stuck."""
        if self.view.in_flight > 0:
            native.check_status(native.lib.aisim_plain_find_stall(self.loop),
                                "aisim_plain_find_stall")
            raise _stalled(self.sim, self.view, self.loop)


def _fill_collector(collector, loop, view, sample_stats=None, drop_samples=None):
    """The summary's inputs C accumulated, into the collector (report.fill_totals); the
    loop's statistics and drop calls (by default the aggregated loop's)."""
    from ..report import fill_totals
    lib = native.lib
    sample_stats = sample_stats or lib.aisim_plain_sample_stats
    drop_samples = drop_samples or lib.aisim_plain_drop_samples
    view = view.summary
    samples, stats = {}, {}
    counts = (view.n_ttft, view.n_ttft, view.n_ttst, view.n_tpot)
    out = native.ffi.new("double[]", 9)
    for which, name in enumerate(_SAMPLES):
        samples[name] = native.c_array("d", getattr(view, name), counts[which])
        # (after the copy: it sorts C's array)
        native.check_status(sample_stats(loop, which, out), "sample_stats")
        stats[name] = DistributionStats(*out)
        drop_samples(loop, which)   # held once at the peak
    fill_totals(collector, completed=view.completed, input_tokens=view.input_tokens,
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


def _stalled(sim, view, loop):
    """Simulation._check_drained's error for a run that ended with requests in flight."""
    queued = native.lib.aisim_plain_queued(loop)
    if queued:
        router = sim.router
        return SimulationError(
            f"{queued} requests wait in the {router.kind} pool's router queue and no worker "
            f"will ever take them (active workers: "
            f"{[w.worker_id for w in router.active] or 'none'})")
    if view.stuck_worker >= 0:
        rank = sim.workers[view.stuck_worker].ranks[view.stuck_rank]
        head = _Head(view.stuck_uuid, view.stuck_prompt_len, view.stuck_generated)
        return SimulationError(never_scheduled(rank.stall_reason(head), head))
    return SimulationError(f"the replay cannot progress with {view.in_flight} requests in "
                           f"flight")
