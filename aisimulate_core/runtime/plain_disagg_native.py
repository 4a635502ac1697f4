"""A plain disaggregated run in one C call (csrc/plain_disagg.c).

When a disaggregated run (vLLM / TensorRT-LLM's source-first handoff) is nothing but
synthetic sessions (one-turn, timed or in a closed loop, or several turns each) or trace
sessions (by timestamps or in a closed loop) placed by round robin or the C kv_router
(without a pending queue or KV event lag: kv_router.c, each pool's router with its overrides,
its engine-index overlaps read from the prefill ranks) in each pool on C role ranks of one
rank per worker, with the built-in timing models, every step of runtime/disaggregated.py's
loop (arrivals, the prefill copies' passes, held sources, reservations with their retries,
transfers, activations and releases, the decode workers' extended runs with their cuts and
the absorbed transfers, terminals and the next turns they make ready, the summary's
per-request values) runs in C; Python fills the collector and the visited times from the
arrays C gathered, and makes the per-request records (kept or streamed:
records.make_disagg_record's) from the rows C gathered (``_Records``). A ``schedule`` of
targets that keeps a worker in each pool runs in it too: the loop pauses where the Python
loop calls runtime/cluster.py (``_Scaling``), which changes the pools as it does there, and
the loop goes on with the workers it added, drained or removed. ``eligible`` says whether a
run is such a run; anything else runs the Python loop, which is this loop's twin and
specification (tests/test_plain_disagg_native.py and test_plain_disagg_native_cluster.py
compare their reports and records on random configurations).

``AISIMULATE_PLAIN_LOOP=python`` keeps every run on the Python loop (as for plain_native).
"""

from __future__ import annotations

import math
import numbers
from collections import deque

from .. import native
from ..engine.decode_run import _native_kind
from ..engine.vllm_native_roles import NativeVllmDecodeRank, NativeVllmPrefillRank
from array import array

from ..errors import SimulationError
from ..report import RequestRecord, disaggregated_record, route_entry
from ..workload.one_turn import OneTurnDriver
from ..workload.sessions import SessionDriver
from ..workload.synthetic import SyntheticSessions
from . import plain_native
from .lifecycle import DRAINING
from .scaling import ScheduledScaling
from .simulation import EngineEvents
from .worker import Worker

_TIMED = {"poisson_qps": 0, "constant_qps": 1, "burst": 2}
# the ones scaling calls while the C loop pauses: they must be the class's own
_SCALING_METHODS = ("_spawn", "flush_router", "capture_gauges", "_event_time",
                    "_check_drained", "pool_states")
# the DisaggregatedSimulation methods the C loop stands for: one replaced on the instance
# keeps Python's
_LOOP_METHODS = ("_step", "_next_time", "_event_time", "_complete_due", "_complete", "_drive",
                 "_start", "_cut", "_absorb_transfers", "_run_actions", "_start_transfer",
                 "_submit_prefill", "_deliver_prefill", "_reserve_destination",
                 "_deliver_decode", "_reserved", "_activate", "_finish", "_arrive",
                 "_release_arrivals", "_register_arrival", "_terminal", "_driver_terminal")


def eligible(sim, limit):
    """Why ``sim.run_until(limit)`` cannot run in C, or None when it can."""
    if not plain_native.ENABLED:
        return "switched off"
    if native.lib is None or native.resolve_backend() != "c":
        return "the C backend is not in use"
    from .disaggregated import DisaggregatedSimulation
    if type(sim) is not DisaggregatedSimulation:
        return "a subclass of the disaggregated loop"
    if limit != sim.max_sim_time_ms or sim.now_ms != 0.0 or sim.arrived or sim._visited \
            or sim._actions or sim._transfers or len(sim._passes) != 1:
        return "not a whole run from its start"
    if sim.on_event is not None or sim.max_in_flight is not None or sim._external \
            or sim.windows or sim.telemetry is not None \
            or sim.progress is not None or sim._spawned \
            or any(name in sim.__dict__ for name in _LOOP_METHODS):
        return "callbacks, windows, telemetry or a method replaced"
    reason = _cluster_reason(sim)
    if reason is not None:
        return reason
    if sim.collector.holds_terminals():
        return "the collector holds terminals already"
    reason = plain_native._driver_reason(sim.driver)
    if reason is None:
        reason = _output_reason(sim.driver)
    if reason is None:
        reason = _deployment_reason(sim)
    if reason is not None:
        plain_native._PREPARED[:] = [None, None]
    return reason


def _cluster_reason(sim):
    """Why the run's scaling cannot pause the C loop (None: it can, or there is none)."""
    cluster = sim.cluster
    if cluster is None:
        return None
    policy = cluster.policy
    if cluster.reads_snapshot or cluster.watch or type(policy) is not ScheduledScaling:
        return "a scaling policy other than a schedule"
    # (a target of at least one worker keeps an active worker in each pool: a pool's newest
    # workers leave first, and start last; an empty pool parks its requests, in Python)
    if any(target is not None and target < 1 for tick in policy.ticks for target in tick[1:]):
        return "a schedule that may empty a pool"
    pools = sim.pools
    if list(pools) != ["prefill", "decode"] or pools["prefill"].router is not sim.routers[0] \
            or pools["decode"].router is not sim.routers[1]:
        return "pools other than the prefill and decode ones"
    if plain_native.scaling_started(cluster, [(pools["prefill"], sim.prefill_workers),
                                              (pools["decode"], sim.decode_workers)]):
        return "scaling under way"
    for kind in ("prefill", "decode"):
        pool = pools[kind]
        make = sim.make_workers.get(kind)
        if getattr(make, "__qualname__", None) != "worker_factory.<locals>.make" \
                or getattr(pool.spawn, "__qualname__", None) \
                != "DisaggregatedSimulation.attach_pools.<locals>.<lambda>":
            return "workers made otherwise"
    if any(name in sim.__dict__ for name in _SCALING_METHODS):
        return "workers made otherwise"
    return None


def _output_reason(driver):
    """Every request asks for a token at least (a prefill copy of none is not in C)."""
    if type(driver) is OneTurnDriver:
        shortest = driver._osl
    elif type(driver.sessions) is SyntheticSessions:
        shortest = driver.sessions._osl
    else:
        outputs = plain_native._PREPARED[1][0]["turn_output"]
        shortest = min(outputs) if outputs else 1
    return "no output token" if shortest < 1 else None


def _pool_reason(sim, workers, router, cls, deliver):
    """Why the C loop cannot drive pool ``workers`` placed by ``router``."""
    if not workers:
        return "an empty pool"
    first = workers[0].ranks[0]
    reason = _workers_reason(sim, workers, router, cls, first)
    if reason is not None:
        return reason
    reason = plain_native.engine_reason(first, sim.driver)
    if reason is not None:
        return reason
    if router.deliver != deliver or router.queued or router.parked or router._released:
        return "placement under way"
    if [w.worker_id for w in router.active] != [w.worker_id for w in workers]:
        return "workers out of order"
    native = router._native
    if native is not None:
        if not router._native_direct or native._given is not None \
                or (native._uses_index and not native._engine_index) \
                or native._synced is not native.pool.schedulers:
            return "a kv_router with a queue, lagged KV events or ranks C cannot read"
        return None
    if router._unpinned is None or router.observes_engine or router.wants_terminal:
        return "placement other than round robin or kv_router"
    policy = router.policy.policy
    ids = {w.worker_id for w in workers}
    if any(v.worker_id not in ids or v.dp_size != 1 for v in policy._workers) or any(
            policy._rank_cursors.get(w.worker_id, 0) != 0 for w in workers):
        return "round robin over other workers"
    return None


def _workers_reason(sim, workers, router, cls, first):
    """Why the C loop cannot drive ``workers`` of ``router``'s pool beside rank ``first``."""
    for w in workers:
        if type(w) is not Worker or len(w.ranks) != 1 or w.busy or w.generation \
                or w._cadence or w._round_ranks:
            return "a worker of another kind"
    watches = router.observes_engine
    for w in workers:
        rank = w.ranks[0]
        if type(rank) is not cls or not _observed(rank, router, watches) or rank.holds_kv() \
                or rank.mtp_nextn is not None:
            return "a rank the loop cannot drive"
        reason = plain_native.rank_reason(sim, rank, first)
        if reason is not None:
            return reason
    return None


def _observed(rank, router, watches):
    """Whether ``rank`` is watched as the C loop reports: not at all, or (a kv_router reading
    the engines' index) by its pool's router's EngineEvents wanting its prefill completions
    only, at once."""
    observer = rank.observer
    if not watches:
        return not rank.watched and observer is None
    return rank.watched and type(observer) is EngineEvents and observer.router is router \
        and not observer.ordered and not observer.sends_kv


def _deployment_reason(sim):
    prefill, decode = sim.prefill_workers, sim.decode_workers
    if [w.idx for w in sim.workers] != list(range(len(sim.workers))) \
            or sim.workers != prefill + decode:
        return "workers out of order"
    reason = _pool_reason(sim, prefill, sim.routers[0], NativeVllmPrefillRank,
                          sim._deliver_prefill) \
        or _pool_reason(sim, decode, sim.routers[1], NativeVllmDecodeRank, sim._deliver_decode)
    if reason is not None:
        return reason
    if not all(w.ranks[0].open_activations for w in decode):
        return "decode ranks that never open activations' runs"
    if any(r.pending for w in decode for r in w.ranks) or sim._deferred or sim._held \
            or sim._extended or sim._no_extend or sim._idle[0] or sim._idle[1]:
        return "a handoff under way"
    transfer = sim.transfer
    if _uses_bandwidth(transfer):
        for value in (transfer.bytes_per_token, transfer.bandwidth_gbps):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                    or (isinstance(value, int) and abs(value) >= 1 << 53):
                return "a transfer size the C loop cannot compute as Python does"
    elif isinstance(transfer.fallback_ms, bool) \
            or not isinstance(transfer.fallback_ms, (int, float)) \
            or not math.isfinite(float(transfer.fallback_ms)) \
            or (isinstance(transfer.fallback_ms, int) and abs(transfer.fallback_ms) >= 1 << 53):
        return "a handoff latency the C loop cannot add as Python does"
    if _longest(sim) >= 1 << 53:
        return "lengths"
    return plain_native.sla_reason(sim.collector.totals.sla)


def _longest(sim):
    return plain_native._longest_prompt(sim.driver)


def _uses_bandwidth(transfer):
    bandwidth = transfer.bandwidth_gbps
    return not (transfer.bytes_per_token is None or bandwidth is None or bandwidth <= 0)


def run(sim, limit):
    """Run ``sim`` (``eligible``) to its end in C; returns the loop's last time, as the Python
    loop leaves it."""
    ffi, lib = native.ffi, native.lib
    config, keep = _config(sim)
    box = ffi.new("aisim_pd **")
    native.check_status(lib.aisim_pd_new(box, config), "aisim_pd_new")
    loop = ffi.gc(box[0], lib.aisim_pd_free)
    views = ffi.new("aisim_pd_view **")
    lib.aisim_pd_view_of(loop, views)
    view = views[0]
    records = _Records(sim, loop) if config.keep_records else None
    scaling = _Scaling(sim, loop, view, records) if sim.cluster is not None else None
    try:
        status = lib.aisim_pd_run(loop)
        while status in (lib.AISIM_PD_RECORDS, lib.AISIM_PD_CLUSTER, lib.AISIM_PD_TICK):
            if status == lib.AISIM_PD_RECORDS:
                sim.now_ms = view.now_ms   # (a sink may read the clock)
                records.take()
            else:
                scaling.pause(status == lib.AISIM_PD_TICK)
            status = lib.aisim_pd_run(loop)
    finally:
        if scaling is not None:
            scaling.close()
    _take_state(sim, loop, view)
    if records is not None:
        records.take()
    if status == lib.AISIM_PD_STALLED:
        raise SimulationError(f"{_stuck_request(sim, view)}; the disaggregated replay cannot "
                              f"progress with {sim.in_flight} requests in flight")
    if status == lib.AISIM_PD_LIVELOCK:
        raise SimulationError(f"the disaggregated replay keeps changing state at {view.now_ms} "
                              f"ms without time advancing (the livelock limit; "
                              f"{sim.in_flight} requests in flight)")
    if status == lib.AISIM_PD_NO_WORKER:   # (not eligible: every pool keeps a worker)
        raise SimulationError("internal: a pool with no active worker in the C loop")
    if status == lib.AISIM_PD_TIMING:
        raise SimulationError(f"{sim.workers[0].ranks[0].timer.name}: a modeled pass time is "
                              f"out of the range the reference's Duration holds")
    native.check_status(status, "aisim_pd_run")
    plain_native._fill_collector(sim.collector, loop, view, lib.aisim_pd_sample_stats,
                                 lib.aisim_pd_drop_samples)
    return view.next_ms


def _config(sim):
    ffi, lib = native.ffi, native.lib
    driver = sim.driver
    keep = {}
    config = ffi.new("aisim_pd_config *")
    if type(driver) is SessionDriver and type(driver.sessions) is not SyntheticSessions:
        _trace_config(config, driver, keep)
    else:
        plain_native._synthetic_config(config, driver, keep)
    prefill, decode = sim.prefill_workers, sim.decode_workers
    config.n_prefill, config.n_decode = len(prefill), len(decode)
    handles = keep["handles"] = ffi.new("void *[]", [w.ranks[0]._rank for w in sim.workers])
    config.ranks = handles
    worker_ids = keep["worker_ids"] = ffi.new("int64_t[]", [w.worker_id for w in sim.workers])
    config.worker_ids = worker_ids
    cluster = sim.cluster
    if cluster is not None:
        config.cluster = 1
        config.next_tick_ms = cluster.next_tick_ms
        config.next_ready_ms = cluster.starting[0][0] if cluster.starting else math.inf
    for pool, workers, router in ((0, prefill, sim.routers[0]), (1, decode, sim.routers[1])):
        kvr = router._native
        if kvr is not None:
            config.kvr[pool] = kvr._r
            config.kvr_runs[pool] = kvr._hashes_needed
            if router.observes_engine:
                config.report[pool] = lib.AISIM_VLLM_REPORT_INDEX
        else:
            ids = {w.worker_id: i for i, w in enumerate(workers)}
            policy = router.policy.policy
            rr = keep[f"rr{pool}"] = ffi.new("int32_t[]", [ids[v.worker_id]
                                                           for v in policy._workers])
            name = "prefill" if pool == 0 else "decode"
            setattr(config, f"rr_{name}", rr)
            setattr(config, f"n_rr_{name}", len(policy._workers))
            setattr(config, f"rr_{name}_cursor", policy._cursor)
        rank = workers[0].ranks[0]
        config.block_size[pool] = rank.block_size
        config.num_blocks[pool] = rank.num_blocks
        config.max_model_len[pool] = -1 if rank.max_model_len is None else rank.max_model_len
        config.caching[pool] = bool(rank.caching)
        config.no_evict[pool] = bool(rank.no_evict)
    timer = prefill[0].ranks[0].timer
    kind, _ = _native_kind(timer.model)
    config.prefill_kind = kind
    config.prefill_fixed_ms = timer.model.prefill if kind == lib.AISIM_DECODE_FIXED else 0.0
    config.prefill_ratio = timer.prefill_ratio
    transfer = sim.transfer
    if _uses_bandwidth(transfer):
        config.use_bandwidth = 1
        config.bytes_per_token = float(transfer.bytes_per_token)
        config.bandwidth_gbps = float(transfer.bandwidth_gbps)
        config.missing_only = bool(transfer.missing_only)
    else:
        config.fallback_ms = float(transfer.fallback_ms)
    config.cutoff_ms = sim.max_sim_time_ms
    if sim.collector.keeps_records:
        config.keep_records = 1
        config.records_every = plain_native.RECORDS_EVERY
        if sim.collector.record_stream.running:
            config.records_stream = 1
            config.records_lag_ms = plain_native.RECORDS_LAG_MS
    plain_native.set_report_config(config, sim.collector.totals)
    return config, keep


def _trace_config(config, driver, keep):
    """A trace's sessions into ``config`` (plain_native.trace_config)."""
    plain_native.trace_config(config, driver, keep)
    # (isl and osl stand for no turn's; every turn asks for a token, _output_reason)
    config.isl, config.osl, config.trace_block = 1, 1, driver.block_size


def _take_state(sim, loop, view):
    """What the report reads after a run: the counters, the visited times, each rank's pass
    history, the driver's and the round robins' positions."""
    lib = native.lib
    plain_native.take_counters(sim, view)
    for router, cursor in zip(sim.routers, (view.rr_prefill_cursor, view.rr_decode_cursor)):
        if router._native is None:
            router.policy.policy._cursor = cursor
    plain_native.take_driver_state(sim.driver, loop, view, lib.aisim_pd_ready)
    sim._visited = native.c_array("d", view.visited, view.n_visited)
    plain_native.take_pass_history(loop, [w.ranks[0] for w in sim.workers],
                                   lib.aisim_pd_pass_ends, lib.aisim_pd_breaks)
    for worker in sim.decode_workers:
        worker.ranks[0].activation_runs = 0
    sim.decode_workers[0].ranks[0].activation_runs = view.extensions


class _Records:
    """Per-request records from the rows C gathered (aisim_pd_records), handed to the
    collector's record stream in the order the collector settles them: each the record
    ``per_request_record`` makes of the ``RequestRecord`` records.make_disagg_record makes of
    the request. The usual one (admitted once into each pool, its source released) is settled
    as the values report.disaggregated_record makes it of, without the RequestRecord; any
    other as the RequestRecord. A source
    released after its request's row was gathered is set on its record where the Python loop
    sets it: before the rows gathered after the release, unless a running stream's sink has
    the record already (its dict was made when a later arrival settled)."""

    _STATUS = {1: "completed", 2: "rejected", 3: "failed"}

    def __init__(self, sim, loop):
        self.loop = loop
        self.settled = sim.collector.record_stream.settled
        driver = sim.driver
        self.schedulers, self.routes, self.kv_routes = [], [], []
        self.add_workers(sim, sim.workers)
        self.sessions, self.synthetic = plain_native.record_sessions(driver)
        self.later = {}      # uuid -> its admissions after the first, not settled yet
        self.unreleased = {}  # uuid -> a record whose source is released later
        self.stream = sim.collector.record_stream
        ffi = native.ffi
        self.out = (ffi.new("int64_t **"), ffi.new("double **"), ffi.new("size_t *"),
                    ffi.new("int64_t **"), ffi.new("double **"), ffi.new("size_t *"),
                    ffi.new("int64_t **"), ffi.new("double **"), ffi.new("int64_t **"),
                    ffi.new("size_t *"), ffi.new("size_t *"))

    def add_workers(self, sim, workers):
        """By worker key: its rank's scheduler id and its routing_history entry in its pool:
        round robin's, and for a kv_router's pool the entry of an immediate placement with
        the router's block size (the pick's overlaps complete it)."""
        for w in workers:
            rank = w.ranks[0]
            decode = sim._is_decode[w.idx]
            router = sim.routers[decode]
            self.schedulers.append(rank.scheduler_id)
            self.kv_routes.append(None if router._native is None else (
                route_entry(router.kind, rank.scheduler_id, w.worker_id, rank.dp_rank),
                router.block_size))
            self.routes.append(route_entry("decode", rank.scheduler_id, w.worker_id,
                                           rank.dp_rank) if decode else
                               route_entry("prefill", rank.scheduler_id, rank.worker_idx,
                                           rank.dp_rank))

    def take(self):
        ffi, lib = native.ffi, native.lib
        (ints_p, doubles_p, n_p, adm_p, at_p, n_adm_p, late_p, late_at_p, late_row_p,
         n_late_p, rest_p) = self.out
        native.check_status(lib.aisim_pd_records(self.loop, *self.out), "aisim_pd_records")
        n, n_adm, n_late = n_p[0], n_adm_p[0], n_late_p[0]
        later = self.later
        if n_adm:
            adm = ffi.unpack(adm_p[0], 3 * n_adm)
            at = ffi.unpack(at_p[0], n_adm)
            for k in range(n_adm):
                flags = adm[3 * k + 2]
                entry = (at[k], "decode" if flags & 2 else "prefill", adm[3 * k + 1],
                         bool(flags & 1))
                later.setdefault(adm[3 * k], []).append(entry)
        # (uuid, time, rows before) of each late release, in release order, then a sentinel
        late = list(zip(ffi.unpack(late_p[0], n_late), ffi.unpack(late_at_p[0], n_late),
                        ffi.unpack(late_row_p[0], n_late))) if n_late else []
        late.append((0, 0.0, n))
        ints = array("q")
        doubles = array("d")
        if n:
            ints.frombytes(ffi.buffer(ints_p[0], 8 * 19 * n))
            doubles.frombytes(ffi.buffer(doubles_p[0], 8 * 10 * n))
        gathered = zip(plain_native.rows(ints.tolist(), 19),
                       plain_native.rows(doubles.tolist(), 10))
        done = 0
        unreleased = self.unreleased
        for uuid, t, row in late:
            if row > done:   # the rows gathered before this release
                self._settle(gathered, done, row, rest_p[0])
                done = row
            record = unreleased.pop(uuid, None)
            if record is not None and row >= 0 and uuid:
                record.source_released_ms = t
        native.check_status(lib.aisim_pd_clear_records(self.loop), "aisim_pd_clear_records")

    def _settle(self, gathered, start, end, rest_from):
        """Rows start..end-1, the next ones of ``gathered`` (their ints, their doubles); from
        rest_from on, settled behind a request still in flight when the run ended (as after
        the stream closed)."""
        settled, routes, schedulers, later = self.settled, self.routes, self.schedulers, \
            self.later
        sessions, synthetic, status_of = self.sessions, self.synthetic, self._STATUS
        stream, kv_routes, unreleased = self.stream, self.kv_routes, self.unreleased
        settled_row = stream.settled_row
        # (zip takes the range first: it stops without taking a row past end)
        for i, ((uuid, prompt_len, max_output, count, max_reused, first_reused, state, pkey,
                 session, turn, n_admissions, admit_reused, flags, dkey, stages, p_overlap,
                 p_best, d_overlap, d_best),
                (arrival, terminal, first, second, last, admit_at, held, reserved, activated,
                 released)) in zip(range(start, end), gathered):
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
            # (a record copies its routes: a worker's entry can be shared)
            prefill_route = (routes[pkey] if kv_routes[pkey] is None
                             else _kv_route(kv_routes[pkey], p_overlap, p_best))
            decode_route = None if dkey < 0 else (
                routes[dkey] if kv_routes[dkey] is None
                else _kv_route(kv_routes[dkey], d_overlap, d_best))
            decode_worker = schedulers[dkey] if stages & 16 else None
            held = held if stages & 1 else None
            reserved = reserved if stages & 2 else None
            activated = activated if stages & 4 else None
            released = released if stages & 8 else None
            later_admissions = later.pop(uuid) if n_admissions > 1 else ()
            if (n_admissions == 2 and not flags & 8 and later_admissions[0][1] == "decode"
                    and decode_route is not None and stages & 25 != 17):
                # the usual record, into prefill, then into decode, its source released: made
                # from these values
                decode_at, _, decode_reused, _ = later_admissions[0]
                values = (session_id, turn_index, arrival, terminal, status_of[state],
                          prompt_len, max_output, count, first, second, last, schedulers[pkey],
                          decode_worker, admit_at, admit_reused, decode_at, decode_reused, held,
                          reserved, activated, released, prefill_route, decode_route)
                if i < rest_from:
                    settled_row(uuid, arrival, admit_at, disaggregated_record, values)
                else:   # (behind a request still in flight)
                    plain_native.settle_behind(stream, settled_row, uuid, arrival, admit_at,
                                               disaggregated_record, values)
                continue
            admissions = [(admit_at, "decode" if flags & 8 else "prefill", admit_reused,
                           bool(flags & 4)), *later_admissions] if n_admissions else []
            # (one positional call: the handoff's times follow the routing in field order)
            record = RequestRecord(
                uuid, None, session_id, turn_index, None, None, arrival, None, terminal,
                status_of[state], prompt_len, max_output, count, first, second, last,
                max_reused, None if first_reused < 0 else first_reused, admissions,
                schedulers[pkey], decode_worker,
                [prefill_route] if decode_route is None else [prefill_route, decode_route],
                None, held, reserved, activated, None, released)
            if stages & 25 == 17:   # held, accepted, not released: later, or never (a cutoff)
                unreleased[uuid] = record
            if i < rest_from:
                settled(record)
            else:   # (behind a request still in flight)
                plain_native.settle_behind(stream, settled, record)


class _Scaling(plain_native.ScalingPause):
    """Scaling (runtime/cluster.py) while the C loop pauses where the Python loop calls it:
    the workers heard completing a pass or releasing a source while draining
    (``worker_idle``), drain settlement and workers ready after a round's completions, the
    tick once a step's rounds settled; then the loop learns what changed (workers added,
    each pool's round robin list, draining flags, the next tick and ready).
    (plain_native._Scaling's shape, over two pools.)"""

    def __init__(self, sim, loop, view, records):
        super().__init__(sim, loop, view, records)
        self.firsts = (sim.prefill_workers[0].ranks[0], sim.decode_workers[0].ranks[0])
        self.rr = [None, None]
        self.operations = None     # the lifecycle's operation count the loop was told of
        self.out = native.ffi.new("int64_t[]", 64)
        self._tell()

    def close(self):
        self.cluster.probe = None
        self._sync_pending()

    def pause(self, tick):
        sim, view, cluster = self.sim, self.view, self.cluster
        t = self._clock()
        self._sync_pending()
        if tick:
            cluster.tick_due(t)
        else:
            if view.n_idle_keys:
                workers, decode = sim.workers, sim._is_decode
                for key in native.ffi.unpack(view.idle_keys, view.n_idle_keys):
                    cluster.worker_idle("decode" if decode[key] else "prefill", workers[key])
            if cluster.settling:
                cluster.settle(t)
            if cluster.starting and cluster.starting[0][0] <= t:
                cluster.ready_due(t)
        self._tell()

    def _sync_pending(self):
        """A decode rank's pending FIFO (holds_kv reads it) as the C loop holds it: uuids."""
        ffi, lib = native.ffi, native.lib
        out = self.out
        for worker in self.sim.decode_workers:
            n = lib.aisim_pd_pending(self.loop, worker.idx, out, len(out))
            if n < 0:
                native.check_status(n, "aisim_pd_pending")
            rank = worker.ranks[0]
            if n != len(rank.pending):
                if n > len(out):
                    out = ffi.new("int64_t[]", n)
                    lib.aisim_pd_pending(self.loop, worker.idx, out, n)
                rank.pending = deque(out[0:n])

    def _tell(self):
        ffi, lib = native.ffi, native.lib
        sim, loop, cluster = self.sim, self.loop, self.cluster
        added = sim.workers[self.view.n_workers:]
        for worker in added:
            decode = sim._is_decode[worker.idx]
            cls = NativeVllmDecodeRank if decode else NativeVllmPrefillRank
            if _workers_reason(sim, [worker], sim.routers[decode], cls,
                               self.firsts[decode]) is not None \
                    or (decode and not worker.ranks[0].open_activations):
                raise SimulationError(f"internal: worker {worker.worker_id} is not one the C "
                                      f"loop can drive")
            native.check_status(lib.aisim_pd_add_worker(loop, worker.ranks[0]._rank, decode,
                                                        worker.worker_id),
                                "aisim_pd_add_worker")
        if added and self.records is not None:
            self.records.add_workers(sim, added)
        operations = cluster.lifecycle._count
        if operations != self.operations:   # (workers come, drain and go in operations only)
            self.operations = operations
            self._tell_workers()
        starting = cluster.starting
        native.check_status(lib.aisim_pd_set_cluster(
            loop, cluster.next_tick_ms, starting[0][0] if starting else math.inf),
            "aisim_pd_set_cluster")

    def _tell_workers(self):
        """Each pool's round robin list and the draining workers, as the loop must have them."""
        ffi, lib = native.ffi, native.lib
        sim, loop = self.sim, self.loop
        for pool, workers in enumerate((sim.prefill_workers, sim.decode_workers)):
            if sim.routers[pool]._native is not None:
                continue   # (the kv_router's candidates: its own, synced as workers change)
            index = {w.worker_id: w.idx for w in workers}
            rr = tuple(index[v.worker_id] for v in sim.routers[pool].policy.policy._workers)
            if rr != self.rr[pool]:
                self.rr[pool] = rr
                native.check_status(lib.aisim_pd_set_rr(loop, pool, ffi.new("int32_t[]", rr)
                                                        if rr else ffi.NULL, len(rr)),
                                    "aisim_pd_set_rr")
        draining = set()
        for kind, workers in (("prefill", sim.prefill_workers), ("decode", sim.decode_workers)):
            state = sim.pools[kind].life.state
            draining.update(w.idx for w in workers if state.get(w.worker_id) == DRAINING)
        for key in draining ^ self.draining:
            native.check_status(lib.aisim_pd_set_draining(loop, key, key in draining),
                                "aisim_pd_set_draining")
        self.draining = draining

    def check_drained(self):
        """DisaggregatedSimulation._check_drained's error for the loop's state."""
        if self.view.in_flight > 0:
            native.check_status(native.lib.aisim_pd_find_stall(self.loop), "aisim_pd_find_stall")
            raise SimulationError(f"{_stuck_request(self.sim, self.view)}; the disaggregated "
                                  f"replay cannot progress with {self.view.in_flight} requests "
                                  f"in flight")


def _stuck_request(sim, view):
    """DisaggregatedSimulation._stuck_request over the head C named."""
    from .disaggregated import stuck_message
    if view.stuck_worker < 0:
        return "requests are stranded between the prefill and decode pools"
    worker = sim.workers[view.stuck_worker]
    head = plain_native._Head(view.stuck_uuid, view.stuck_prompt_len, view.stuck_generated)
    pool = "decode" if sim._is_decode[view.stuck_worker] else "prefill"
    return stuck_message(pool, worker, worker.ranks[0], head, bool(view.stuck_pending))


def _kv_route(fixed, selected, best):
    """Router._place_native's route entry of a pick with these overlaps (in blocks)."""
    entry, block_size = fixed
    entry = entry.copy()
    entry["reported_overlap_tokens"] = selected * block_size
    entry["selected_overlap_blocks"] = selected
    entry["best_available_overlap_blocks"] = best
    entry["overlap_regret_blocks"] = best - selected
    return entry
