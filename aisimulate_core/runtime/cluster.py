"""Scaling in the runtime: ticks of the scaling policy, workers starting, draining, removed.

The simulation owns the workers and their routers; this module decides when the pool changes
and records it (runtime/lifecycle.py). Same-time order at t (CLUSTER.md §3.2): pass
completions (and drain settlements of workers they empty), then workers becoming ready, then
arrivals, then the telemetry sample, then the scaling tick. Ticks and ready events happen only
while work remains (a request in flight or still to arrive): the run ends at its last
completion, and later ticks never fire.
"""

from __future__ import annotations

import heapq
import math
import numbers

from ..engine import fpm
from ..errors import AisimError, PluginError, SimulationError
from ..spec.bounds import MAX_RANKS
from ..messages import escape_controls
from .lifecycle import ACTIVE, DRAINING, REMOVED, STARTING, Lifecycle, PoolLifecycle
from .telemetry import scheduler_rows
from .traffic import TrafficWindow

# ticks in a row that change nothing while nothing else can happen, after which a run stops
MAX_STALLED_TICKS = 10_000
_TARGET_KEYS = {"agg": "target_decode", "prefill": "target_prefill", "decode": "target_decode"}


class ClusterPool:
    """One pool of workers (``agg``, ``prefill`` or ``decode``): its lifecycle, its router, its
    live workers by id, and every rank it ever had (cumulative counters outlive removals).
    Every simulation keeps one per pool; scaling and telemetry read them."""

    __slots__ = ("kind", "life", "router", "workers", "all_ranks", "startup_delay_ms", "spawn",
                 "dp_size")

    def __init__(self, kind, router, workers, startup_delay_ms=0.0, spawn=None):
        self.kind = kind
        self.life = PoolLifecycle(kind, len(workers))
        self.router = router
        self.workers = {w.worker_id: w for w in workers}   # live (not removed) workers
        self.all_ranks = [rank for w in workers for rank in w.ranks]
        self.startup_delay_ms = startup_delay_ms
        self.spawn = spawn           # worker_id -> a new Worker of this pool
        self.dp_size = len(workers[0].ranks) if workers else 1   # ranks of each worker

    def live_workers(self):
        return [self.workers[i] for i in sorted(self.workers)]

    def ids(self, state):
        return self.life.ids(state)

    def counters(self):
        """(cache hit tokens, cache total tokens, preemptions) summed over every rank ever: the
        prefix-cache counters are SGLang's (0 on the vLLM engines)."""
        hit = total = preempted = 0
        for rank in self.all_ranks:
            hit += getattr(rank, "cache_hit_tokens", 0)
            total += getattr(rank, "cache_total_tokens", 0)
            preempted += getattr(rank, "completed_preemptions", rank.preemptions)
        return hit, total, preempted

    def decode_steps(self):
        """(decode steps, the tokens they emitted) summed over every rank ever: more tokens
        than steps with MTP bursts (a rank without the second counter emits one a step)."""
        steps = tokens = 0
        for rank in self.all_ranks:
            steps += rank.decode_steps
            tokens += getattr(rank, "decode_tokens", rank.decode_steps)
        return steps, tokens


class Cluster:
    def __init__(self, sim, policy, label, *, record_operations):
        self.sim = sim
        self.policy = policy
        self.label = label
        pools = self.pools = sim.pools   # kind -> ClusterPool, in tick order (prefill first)
        self.lifecycle = Lifecycle({kind: p.life for kind, p in pools.items()},
                                   record=record_operations)
        # a policy that says it never reads the snapshot (``schedule``: its answers depend on
        # the tick count only) gets one of just its tick ordinal and time: no traffic window
        # is fed, so arrivals, placements and terminals run as without scaling
        self.reads_snapshot = getattr(policy, "reads_snapshot", True)
        self.window = TrafficWindow() if self.reads_snapshot else None
        # the loop tests these two before calling ready_due / settle
        self.starting = []           # heap of (ready_ms, order, kind, worker_id, origin op)
        self._order = 0
        self._tick_ordinal = 0
        self.settling = []           # draining workers that may hold nothing now
        # while the C loop runs the steps (runtime/plain_native.py): what the loop's queue
        # and driver hold (pending()) and its stall (check_drained())
        self.probe = None
        self._last_tick_ms = -math.inf
        self._stalled = 0            # ticks in a row that changed nothing on a stuck run
        # forward-pass metrics cost every pass a row; a policy that says it never reads them
        # (the built-in ``none`` and ``schedule``) gets empty FPM lists and passes run unwatched
        self.watch = getattr(policy, "reads_pass_metrics", True)
        for pool in pools.values():
            self._watch(pool.live_workers(), 0.0)
        first = self._time("initial_tick_ms()", "",
                           self._call("initial_tick_ms()", policy.initial_tick_ms))
        self.next_tick_ms = max(0.0, first) if math.isfinite(first) else math.inf

    def _watch(self, workers, t):
        if self.watch:
            watch_passes(workers, t)

    def _call(self, what, function, *args):
        try:
            return function(*args)
        except AisimError:
            raise
        except Exception as error:  # a policy's failure is one line naming it
            raise PluginError(escape_controls(
                f"{self.label}: {what} raised {type(error).__name__}: {error}")) from error

    # ------------------------------------------------------------------ the clock
    def next_time(self):
        t = self.next_tick_ms
        if self.starting and self.starting[0][0] < t:
            t = self.starting[0][0]
        return t

    def ready_due(self, t):
        """Workers whose startup ends at or before ``t`` become active, one operation each."""
        ready = self.starting
        due = []
        while ready and ready[0][0] <= t:
            due.append(heapq.heappop(ready))
        # at one time the prefill pool's workers become ready first (observed on the reference)
        due.sort(key=lambda e: (e[0], e[2] != "prefill", e[1]))
        for _, _, kind, worker_id, origin in due:
            pool = self.pools[kind]
            if pool.life.state.get(worker_id) != STARTING:
                continue     # cancelled while starting
            op = self.lifecycle.begin(t, pool.life, "worker_ready_event", origin=origin)
            op.transition(worker_id, "worker_ready", ACTIVE, origin)
            self._watch([pool.workers[worker_id]], t)
            pool.router.worker_ready(pool.workers[worker_id], t)
            self.lifecycle.commit(op, self.sim.flush_router(pool.router, t))

    def tick_due(self, t):
        if self.next_tick_ms > t:
            return
        operations = self.lifecycle._count
        snapshot = self.snapshot(t)
        answer = self._call("on_tick()", self.policy.on_tick, snapshot)
        targets, following = self._read_answer(answer)
        ordinal = self._tick_ordinal
        self._tick_ordinal += 1
        for kind, pool in self.pools.items():
            target = targets[_TARGET_KEYS[kind]]
            if target is not None:
                self._apply(pool, target, t, ordinal)
        self.next_tick_ms = following if following is not None and following > t else math.inf
        self._watch_stall(operations)

    def _watch_stall(self, operations):
        """A policy ticking on while nothing else can ever happen would keep a stuck run
        going for ever: after MAX_STALLED_TICKS such ticks that change nothing, the run stops
        with the error it gives without scaling. (A count, not the first such tick: a load
        policy needs a window of idle ticks before it scales up.)"""
        sim, probe = self.sim, self.probe
        if probe is None:
            event_ms, ready_ms = sim._event_time(), sim.driver.next_ready_ms()
        else:
            event_ms, ready_ms = probe.pending()
        idle = (self.lifecycle._count == operations and not self.starting
                and math.isinf(event_ms) and math.isinf(ready_ms))
        self._stalled = self._stalled + 1 if idle else 0
        if self._stalled >= MAX_STALLED_TICKS:
            (sim._check_drained if probe is None else probe.check_drained)()
            raise SimulationError(f"{self.label}: {self._stalled} ticks in a row changed nothing "
                                  f"while no request could make progress")

    def _read_answer(self, answer):
        if not isinstance(answer, dict):
            raise PluginError(f"{self.label}: on_tick() returned {type(answer).__name__}, expected "
                              f"a dict with target_prefill, target_decode and next_tick_ms")
        missing = [k for k in ("target_prefill", "target_decode", "next_tick_ms") if k not in answer]
        if missing:
            raise PluginError(f"{self.label}: on_tick() returned no {', '.join(missing)}")
        targets = {}
        for key in ("target_prefill", "target_decode"):
            value = answer[key]
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise PluginError(f"{self.label}: on_tick() returned {key} {value!r}, expected an "
                                  f"integer >= 0 or None")
            targets[key] = value
        following = answer["next_tick_ms"]
        if following is not None:
            following = self._time("on_tick()", "next_tick_ms ", following)
        return targets, following

    def _time(self, what, key, value):
        """A policy's time in ms: a real number, not NaN (infinity means never)."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
            raise PluginError(f"{self.label}: {what} returned {key}{value!r}, expected a number "
                              f"of ms{' or None' if key else ''}")
        return float(value)

    # ------------------------------------------------------------------ pool changes
    def _apply(self, pool, target, t, tick_ordinal):
        life = pool.life
        current = life.non_draining()
        if target == len(current):
            return
        lifecycle = self.lifecycle
        if target > len(current):
            self._check_size(pool, target - len(current), t)
            op = lifecycle.begin(t, life, "planner_scale", tick_ordinal)
            for _ in range(target - len(current)):
                self._start(pool, op, t)
            lifecycle.commit(op, self.sim.flush_router(pool.router, t))
            return
        leaving = sorted(current, reverse=True)[:len(current) - target]
        cancels = [w for w in leaving if life.state[w] == STARTING]
        origin = life.origin.get(cancels[0]) if cancels else None
        op = lifecycle.begin(t, life, "planner_scale", tick_ordinal, origin)
        idle = []
        for worker_id in leaving:           # descending id
            if life.state[worker_id] != STARTING:
                op.transition(worker_id, "worker_draining", DRAINING, op.ordinal)
                life.origin[worker_id] = op.ordinal
                worker = pool.workers[worker_id]
                pool.router.worker_draining(worker, t)
                if not worker.holds_work():
                    idle.append(worker_id)
        for worker_id in cancels:  # startup cancellations come after the drains (reference)
            op.transition(worker_id, "worker_removed", REMOVED, life.origin.get(worker_id),
                          reason="startup_cancelled")
            self._forget(pool, worker_id, t)
        for worker_id in sorted(idle):
            op.transition(worker_id, "worker_removed", REMOVED, op.ordinal)
            pool.router.worker_removed(pool.workers[worker_id], t)
            self._forget(pool, worker_id, t)
        lifecycle.commit(op, self.sim.flush_router(pool.router, t))

    def _check_size(self, pool, more, t):
        """Scaling up may not take the cluster past the ranks a payload may ask for
        (spec/bounds.py): a policy's target of 10^9 workers is one error, not a memory blow-up."""
        live = sum(len(w.ranks) for p in self.pools.values() for w in p.workers.values())
        dp = pool.dp_size
        if live + more * dp > MAX_RANKS:
            raise SimulationError(
                f"{self.label}: at {t:g} ms the {pool.kind} pool's target adds {more} workers of "
                f"{dp} ranks to the {live} ranks live; at most {MAX_RANKS} ranks may run at once")

    def _start(self, pool, op, t):
        life = pool.life
        worker_id = life.next_id
        life.next_id += 1
        life.added_ms[worker_id] = t
        life.origin[worker_id] = op.ordinal
        worker = pool.spawn(worker_id)
        self._watch([worker], t)
        pool.workers[worker_id] = worker
        pool.all_ranks.extend(worker.ranks)
        delay = pool.startup_delay_ms
        if delay > 0:
            op.transition(worker_id, "worker_starting", STARTING, op.ordinal)
            heapq.heappush(self.starting, (t + delay, self._order, pool.kind, worker_id, op.ordinal))
            self._order += 1
        else:
            op.transition(worker_id, "worker_ready", ACTIVE, op.ordinal)
            pool.router.worker_ready(worker, t)

    def _forget(self, pool, worker_id, t):
        pool.life.removed_ms[worker_id] = t
        pool.workers.pop(worker_id, None)

    def worker_idle(self, pool_kind, worker):
        """A draining worker's pass completed: remember to check whether it still holds work
        (the loops call it only while ``lifecycle.draining``)."""
        pool = self.pools[pool_kind]
        if pool.life.draining and pool.life.state.get(worker.worker_id) == DRAINING:
            self.settling.append((pool, worker))

    def settle(self, t):
        """Draining workers that hold nothing any more are removed: one ``drain_settlement``
        per pool and time, in ascending id (the reference batches them); its origin is their
        draining operation, or None when they drained in different operations."""
        settling, self.settling = self.settling, []
        by_pool = {}
        for pool, worker in settling:
            worker_id = worker.worker_id
            if pool.life.state.get(worker_id) != DRAINING or worker.holds_work():
                continue
            by_pool.setdefault(id(pool), (pool, {}))[1][worker_id] = worker
        for pool, workers in by_pool.values():
            ids = sorted(workers)
            origins = {pool.life.origin.get(worker_id) for worker_id in ids}
            origin = origins.pop() if len(origins) == 1 else None   # mixed drains: none
            op = self.lifecycle.begin(t, pool.life, "drain_settlement", origin=origin)
            for worker_id in ids:
                op.transition(worker_id, "worker_removed", REMOVED, pool.life.origin.get(worker_id))
                pool.router.worker_removed(workers[worker_id], t)
                self._forget(pool, worker_id, t)
            self.lifecycle.commit(op, self.sim.flush_router(pool.router, t))

    # ------------------------------------------------------------------ what the policy sees
    def snapshot(self, t):
        if not self.reads_snapshot:
            return {"tick_ordinal": self._tick_ordinal, "now_ms": t}
        snap = {"tick_ordinal": self._tick_ordinal, "now_ms": t,
                "prefill_fpm_snapshots": [], "decode_fpm_snapshots": []}
        for prefix in ("prefill", "decode"):
            pool = self.pools.get(prefix) or (self.pools.get("agg") if prefix == "decode" else None)
            if pool is None:
                snap.update(PoolLifecycle(prefix, 0).snapshot_counts(prefix))
                continue
            snap[f"{prefix}_fpm_snapshots"] = fpm.snapshot_rows(pool, self._last_tick_ms, t)
            snap.update(pool.life.snapshot_counts(prefix))
        self._last_tick_ms = t
        snap["traffic"] = self.window.take_snapshot_traffic(t, self.sim.decode_steps())
        # beyond the reference's wheel (its public source has them): the engines' gauges and
        # the routers' queues, which load-based policies read
        pools = self.sim.pool_states()
        for prefix in ("prefill", "decode"):
            state = pools.get(prefix)
            snap[f"{prefix}_scheduler_metrics"] = scheduler_rows(state)
            snap[f"router_pending_{prefix}_requests"] = (
                state.router.pending_count() if state is not None else 0)
        return snap

    def worker_seconds(self, end_ms):
        return {kind: pool.life.worker_seconds(end_ms) for kind, pool in self.pools.items()}


def watch_passes(workers, now_ms):
    """The ranks of ``workers`` keep forward-pass metrics, their idle clock starting now."""
    for worker in workers:
        for rank in worker.ranks:
            rank.fpm_on = True
            rank.watched = True
            rank.fpm_clock = now_ms
