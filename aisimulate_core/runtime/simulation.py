"""The steppable discrete-event loop of an aggregated deployment (SEMANTICS 3.2).

Same-time order: pass completions, then arrivals (placed and queued at their rank), then new
passes on every idle worker that has work. Workers never sleep: an idle worker with work starts
a pass at once. An embedding simulator drives the clock with ``run_until`` and ``submit``.

``Simulation`` also holds what the disaggregated loop (disaggregated.py) shares: the clock and
its limits, arrival and terminal bookkeeping, and the report.
"""

from __future__ import annotations

import gc
import math
import time
from heapq import heappop

from ..engine.request import SimRequest, never_scheduled, request_name
from ..errors import AisimError, SimulationError
from ..report import Collector, _uuid_text
from ..runtime.event_queue import LoopQueue
from . import plain_native
from .checks import install_checks_from_env
from .cluster import ClusterPool
from .records import make_record, make_summary_record

PASS_DONE = 0
WAKE = 1          # a submission reached an idle worker: visit its time so that it starts a pass
# Zero-time passes in a row at one time, none of which changed anything, after which the run is
# a livelock. A legitimate same-time burst changes state in every pass (admits, emits, computes
# a chunk); the few effect-free ones (SGLang's admission ratio decaying to its floor, at most
# 600 passes; deferred prefill rounds) stay far below this.
LIVELOCK_PASSES = 10_000
_GEN_MASK = 0xFFFF_FFFF
# Allocations between two young-generation collections while a run goes on. CPython's default
# (700) makes a run of a few milliseconds pay collections that walk what the imports left (about
# 1 ms, a sixth of such a run); a run keeps most of what it allocates (requests, records), so
# collecting less often frees nothing later. Set for the call and restored (mypy's build does
# the same); the cyclic garbage held meanwhile is at most this many objects.
RUN_GC_THRESHOLD = 100_000
PROGRESS_STEPS = 4096   # loop steps between two calls of a progress callback


def raise_gc_threshold():
    """Raise the young-generation threshold for a run; returns the thresholds to give back to
    ``restore_gc_threshold`` (None when they stay: automatic collection off, or set higher)."""
    old = gc.get_threshold()
    if old[0] == 0 or old[0] >= RUN_GC_THRESHOLD:
        return None
    gc.set_threshold(RUN_GC_THRESHOLD, *old[1:])
    return old


def restore_gc_threshold(old):
    if old is not None:
        gc.set_threshold(*old)


class _RankEvents:
    """Routes rank lifecycle callbacks to the simulation: ``on_finish`` for one terminal,
    ``finish_all`` for a pass's terminals in one call (a rank that gathers them)."""

    __slots__ = ("sim",)

    def __init__(self, sim):
        self.sim = sim

    def on_finish(self, request, end_ms, status):
        self.sim._on_finish(request, end_ms, status)

    def finish_all(self, finished, end_ms):
        """``on_finish`` of each ``(request, status)`` of ``finished``, in order."""
        self.sim._finish_all(finished, end_ms)


class EngineEvents:
    """A rank's observer when its pool's router watches the engines: pass-level events become
    the router's notifications, stamped with the simulation clock (the pass end)."""

    __slots__ = ("sim", "router", "ordered", "sends_kv")

    def __init__(self, sim, router):
        self.sim = sim
        self.router = router
        # prefill completions and terminals of a pass reach the router in running order
        self.ordered = router.wants_order   # (a C kv_router without a queue takes signals at once)
        self.sends_kv = router.wants_kv

    def begin_pass(self, order):
        self.router.begin_pass(order)

    def end_pass(self):
        self.router.end_pass(self.sim.now_ms)

    def kv_stored(self, rank, hashes):
        if self.router.wants_kv:
            self.router.kv_stored(rank, hashes, self.sim.now_ms)

    def kv_removed(self, rank, hashes):
        if self.router.wants_kv:
            self.router.kv_removed(rank, hashes, self.sim.now_ms)

    def prefill_done(self, rank, request):
        if self.router.wants_prefill:
            self.router.prefill_completed(request.uuid, self.sim.now_ms)


def watch_engines(sim, router, workers):
    """Give each rank of ``workers`` the router's observer, when the router watches engines."""
    if not router.observes_engine:
        return
    events = EngineEvents(sim, router)
    for worker in workers:
        for rank in worker.ranks:
            rank.observer = events
            rank.watched = True
            if router.wants_kv or router.wants_index:
                rank.pool.log_evictions(True)


class Simulation:
    """One replay. Build it with ``aisimulate_core.build_simulation`` (or ``run_replay``)."""

    # The loop's state lives in slots. CPython 3.11 keeps an instance's attributes inline only
    # while its class holds at most 30 of them (the disaggregated loops hold 55); past that its
    # ``self.method()`` loads stop specializing. ``__dict__`` stays: for what a caller sets on
    # one simulation, as a replaced method (the plain C loops' eligibility checks for those).
    __slots__ = ("__dict__", "__weakref__",
                 "workers", "router", "routers", "cluster", "telemetry", "windows",
                 "_routes_terminals", "make_worker", "pools", "driver", "collector",
                 "gpus_per_worker", "max_in_flight", "max_sim_time_ms", "on_event", "progress",
                 "now_ms", "queue", "in_flight", "completed", "arrived", "_next_uuid", "_dirty",
                 "_passes_started_at", "_wall_ms", "_finished", "events", "_external",
                 "_spin_t", "_spins")

    def __init__(self, *, driver, collector: Collector, gpus_per_worker,
                 max_in_flight=None, max_sim_time_ms=None, on_event=None, progress=None):
        self.workers = []
        self.router = None
        self.routers = ()
        self.cluster = None          # runtime/cluster.py, when a scaling policy runs
        self.telemetry = None        # runtime/telemetry.py, when samples are asked for
        self.windows = ()            # traffic windows to feed (scaling snapshot, telemetry)
        self._routes_terminals = None
        self.make_worker = None      # (worker_id, key) -> a new worker of the pool (build.py)
        self.pools = {}              # kind -> runtime/cluster.py ClusterPool
        self.driver = driver
        self.collector = collector
        self.gpus_per_worker = gpus_per_worker
        self.max_in_flight = max_in_flight
        self.max_sim_time_ms = math.inf if max_sim_time_ms is None else max_sim_time_ms
        self.on_event = on_event
        self.progress = progress
        self.now_ms = 0.0
        self.queue = LoopQueue()
        self.in_flight = 0
        self.completed = 0
        self.arrived = 0
        self._next_uuid = 1
        self._dirty = set()
        # the instant passes last started: an arrival placed later in that instant waits for
        # the pass an extended run starts then (Worker.truncate's ``started``; the reference's)
        self._passes_started_at = -math.inf
        self._wall_ms = 0.0
        self._finished = False
        self.events = _RankEvents(self)
        self._external = set()   # uuids of submitted requests: their terminals skip the driver
        self._spin_t = -1.0      # livelock guard: the time of the last effect-free zero-time pass
        self._spins = 0          # ... and how many came in a row there
        install_checks_from_env(self)

    def attach(self, workers, router):
        """Install the deployment: workers (each with its ranks) and the pool's router."""
        self.workers = workers
        self.router = router
        self.routers = (router,)
        router.deliver = self._deliver
        watch_engines(self, router, workers)
        self._dirty = set(range(len(workers)))
        self.pools = {"agg": ClusterPool("agg", router, workers, spawn=self._spawn_aggregated)}

    def _spawn_aggregated(self, worker_id):
        return self.spawn_worker(worker_id, self.make_worker)

    def attach_cluster(self, cluster):
        """Install scaling (runtime/cluster.py) and the traffic windows it reads."""
        self.cluster = cluster
        self._feed_windows()

    def sample_telemetry(self, interval_ms, on_sample):
        """Take telemetry samples every ``interval_ms`` of virtual time, each passed to
        ``on_sample(sample)`` (runtime/telemetry.py); call before ``run``."""
        if self.arrived or self.now_ms > 0:
            # samples start at 0 and watched ranks keep what unwatched ones never did: a run
            # already under way cannot be sampled from its start (nor an SGLang C rank watched)
            raise SimulationError(
                f"sample_telemetry(): call it before the run starts (the simulation is at "
                f"{self.now_ms} ms with {self.arrived} requests arrived)")
        from .telemetry import Telemetry
        self.telemetry = Telemetry(self, interval_ms, on_sample)
        self._feed_windows()
        self.capture_gauges(self.workers)

    def capture_gauges(self, workers):
        """Telemetry reads the gauges each rank captured at its latest completion/submission."""
        if self.telemetry is not None:
            for worker in workers:
                for rank in worker.ranks:
                    rank.capture_gauges = True
                    rank.watched = True
                    rank._gauges = rank.live_gauges()

    def _feed_windows(self):
        windows = []
        if self.cluster is not None and self.cluster.window is not None:
            windows.append(self.cluster.window)
        if self.telemetry is not None:
            windows.append(self.telemetry.window)
        self.windows = tuple(windows)

    def pool_states(self):
        """The pools as telemetry names them: the aggregated pool reports as ``decode``."""
        return {"decode": self.pools["agg"]}

    def decode_steps(self):
        """Tokens after each request's first, emitted so far by the pools that decode."""
        return self.pool_states()["decode"].decode_steps()

    def spawn_worker(self, worker_id, make_worker):
        """A worker added by scaling: its key is its id (aggregated ids are never reused)."""
        worker = make_worker(worker_id, len(self.workers))
        self.workers.append(worker)
        watch_engines(self, self.router, [worker])
        self.capture_gauges([worker])
        return worker

    def flush_router(self, router, now_ms):
        """After a change of a pool's workers: deliver what ``router`` released (returns their
        uuids, the operation's ``topology_released_request_uuids``) and what it held while the
        pool had no worker (not a release of the router's queue: not reported)."""
        released = [_uuid_text(r.uuid) for r in router.flush(now_ms)]
        router.unpark(now_ms)
        return released


    # ------------------------------------------------------------------ embedding API
    def submit(self, request):
        """Enter a request (a ``SimRequest``) now, bypassing the workload driver.

        Works before ``run``, between ``run_until`` calls and from an ``on_event`` callback; the
        request arrives at the current clock. Its terminal is reported (events, records) but
        not to the workload driver, which did not produce it."""
        self._check_submission(request)
        before = (request.uuid, request.arrival_ms, request.dispatched_ms)
        try:
            self._place(request, self.now_ms)
        except AisimError:
            # refused by placement (no active worker, a policy's error): undo its arrival so
            # that nothing of the simulation changed
            self._unregister_arrival(request, before)
            raise
        self._external.add(request.uuid)
        if request.worker_idx is None:
            return  # the router queued it
        worker = self.workers[request.worker_idx]
        if not worker.busy:
            # nothing may be scheduled at this time: make the loop visit it
            self.queue.push(self.now_ms, WAKE, request.worker_idx << 32)

    def _check_submission(self, request):
        """One ``SimulationError`` line for a request the runtime cannot take; nothing of the
        simulation changes then."""
        if not isinstance(request, SimRequest):
            raise SimulationError(f"submit: expected a SimRequest, got {type(request).__name__}")
        name = f"submit: request {request_name(request)}"
        if request.uuid in self._external or request.terminal_status is not None \
                or request.rank is not None:
            raise SimulationError(f"{name} was submitted already")
        out = request.max_output
        if isinstance(out, bool) or not isinstance(out, int) or out < 0:
            raise SimulationError(f"{name}: max_output must be an integer >= 0, got {out!r}")
        if request.prompt_len < 1:
            raise SimulationError(f"{name}: the prompt must have at least 1 token, got "
                                  f"{request.prompt_len}")
        ranks = self._submission_pool()[0].ranks
        rank = ranks[0]
        dp_size = len(ranks)
        if request.dp_rank is not None and not 0 <= request.dp_rank < dp_size:
            raise SimulationError(f"{name}: dp_rank {request.dp_rank} out of range for dp_size "
                                  f"{dp_size}")
        reason = rank.fit_error(request)
        if reason is not None:
            raise SimulationError(never_scheduled(f"submit: {reason}", request))

    def _submission_pool(self):
        """The workers a submitted request is placed on first."""
        return self.workers

    def run_until(self, t_ms):
        """Process every event at or before ``t_ms``; the clock ends at ``t_ms`` (or the cutoff)."""
        started = time.perf_counter()
        limit = min(t_ms, self.max_sim_time_ms)
        # bound once: this loop runs once per event
        next_time, step, progress = self._next_time, self._step, self.progress
        steps = 0
        thresholds = raise_gc_threshold()
        try:
            if self._plain():
                t = self._run_plain(limit)
            else:
                while True:
                    t = next_time()
                    if t > limit or t == math.inf:
                        break
                    step(t)
                    if progress is not None:
                        steps += 1
                        if steps % PROGRESS_STEPS == 0:
                            progress(self.now_ms, self.completed,
                                     self.driver.total or self.arrived)
        finally:
            restore_gc_threshold(thresholds)
        if t == math.inf:
            self._check_drained()
        if t_ms < self.max_sim_time_ms and not math.isinf(t_ms) and t_ms > self.now_ms:
            self.now_ms = t_ms  # the embedder's clock moved on; later submissions arrive then
        self._wall_ms += (time.perf_counter() - started) * 1000.0

    def run(self):
        self.run_until(math.inf)
        return self

    def is_done(self):
        return math.isinf(self._next_time())

    def _check_drained(self):
        """Nothing is left to happen: requests still in flight wait behind a queue head that
        can never start; the reference aborts the run then, and so do we."""
        if self.in_flight <= 0:
            return
        for router in self.routers:
            if router.queued:
                raise SimulationError(
                    f"{len(router.queued)} requests wait in the {router.kind} pool's router "
                    f"queue and no worker will ever take them (active workers: "
                    f"{[w.worker_id for w in router.active] or 'none'})")
        for worker in self.workers:
            for rank in worker.ranks:
                if rank.waiting and not rank.running:
                    r = rank.waiting[0]
                    raise SimulationError(never_scheduled(rank.stall_reason(r), r))
        raise SimulationError(f"the replay cannot progress with {self.in_flight} requests in "
                              f"flight")

    # ------------------------------------------------------------------ loop
    def _plain(self):
        """Whether ``_run_plain`` runs this loop: an aggregated deployment (this class's own
        loop, unchecked) without telemetry (scaling and its traffic window included)."""
        cls = type(self)
        return (cls._step is Simulation._step and cls._next_time is Simulation._next_time
                and cls._event_time is Simulation._event_time and "_step" not in self.__dict__
                and self.telemetry is None)

    def _run_plain(self, limit):
        """``_next_time`` and ``_step`` of a plain run (``_plain``) in one loop, until the next
        event is past ``limit``; returns its time. The same events in the same order: only
        the branches for telemetry are gone, and a step's calls (scaling's are tested
        inline: ticks and ready workers are times of the loop's own)."""
        cluster = self.cluster
        if plain_native.eligible(self, limit) is None:
            return plain_native.run(self, limit)   # the whole run in one C loop
        heap = self.queue.heap      # the next event's time is heap[0][0]
        driver = self.driver
        next_ready, pop_ready = driver.next_ready_ms, driver.pop_ready
        dirty = self._dirty
        router = self.router
        place, register, route = self._place, self._register_arrival, router.place
        max_in_flight = self.max_in_flight
        cutoff = self.max_sim_time_ms
        inline = self.on_event is None and not self.windows   # _place's work inline
        inf = math.inf
        progress = self.progress
        steps = 0
        while True:
            t = heap[0][0]
            ready = inf
            if max_in_flight is None or self.in_flight < max_in_flight:
                ready = next_ready()
                if ready < t:
                    t = ready if ready > self.now_ms else self.now_ms
            if cluster is not None:
                # _cluster_time: the next tick or worker ready, while work remains
                c = cluster.next_tick_ms
                starting = cluster.starting
                if starting and starting[0][0] < c:
                    c = starting[0][0]
                if c < t and (self.in_flight > 0 or next_ready() != inf):
                    t = c
            if t > limit or t == inf:
                return t
            self.now_ms = t
            if heap[0][0] <= t:
                # (a terminal may free a slot or ready a request: the driver is asked again)
                self._complete_passes(t)
                ready = next_ready()
            if router.queued:
                router.flush(t)
                ready = next_ready()
            if cluster is not None:
                # at one time a worker ready comes before a settlement
                if cluster.starting and cluster.starting[0][0] <= t:
                    cluster.ready_due(t)
                    ready = next_ready()
                if cluster.settling:
                    cluster.settle(t)
                    ready = next_ready()
            if ready <= t:
                n = 1 << 62 if max_in_flight is None else max_in_flight - self.in_flight
                if n > 0:
                    if inline:
                        for request in pop_ready(t, n):
                            register(request, t)
                            route(request, t, request.dp_rank)
                    else:
                        for request in pop_ready(t, n):
                            place(request, t)
            if cluster is not None:
                if cluster.next_tick_ms <= t:
                    cluster.tick_due(t)
                if dirty:
                    self._start_passes(t, min(cutoff, self._cluster_time(inf)))
            elif dirty:
                self._start_passes(t, cutoff)
            if progress is not None:
                steps += 1
                if steps % PROGRESS_STEPS == 0:
                    progress(self.now_ms, self.completed, driver.total or self.arrived)

    def _next_time(self):
        return self._next_time_after(self._event_time())

    def _next_time_after(self, t):
        """The next time to visit, the next event being at ``t``: an arrival or, with scaling,
        a tick or worker ready may come first."""
        if self.max_in_flight is None or self.in_flight < self.max_in_flight:
            ready = self.driver.next_ready_ms()
            if ready < t:
                t = ready if ready > self.now_ms else self.now_ms
        if self.cluster is not None:
            t = self._cluster_time(t)
        return t

    def _cluster_time(self, t):
        """The next tick or worker ready if earlier than ``t`` and work remains (a request in
        flight or still to arrive): they never keep a finished run going. Telemetry samples
        are not events: each is taken when the clock passes it (``Telemetry.due_before``), so
        that sampling never changes a run."""
        cluster = self.cluster
        if cluster is None:
            return t
        c = cluster.next_tick_ms
        starting = cluster.starting
        if starting and starting[0][0] < c:
            c = starting[0][0]            # cluster.next_time(), inline: this runs per event
        if c >= t or (self.in_flight <= 0 and self.driver.next_ready_ms() == math.inf):
            return t
        return c

    def _extension_cutoff(self):
        """Extended decode passes end by the run's time limit, and by the next tick, worker
        ready or sample, which must see every pass completed before it."""
        cutoff = self.max_sim_time_ms
        if self.cluster is not None:
            cutoff = min(cutoff, self._cluster_time(math.inf))
        if self.telemetry is not None:
            cutoff = min(cutoff, self.telemetry.next_time())
        return cutoff

    def _event_time(self):
        return self.queue.heap[0][0]

    def _arrival_limit(self):
        """How many requests may arrive now (the in-flight cap)."""
        return (self.max_in_flight - self.in_flight) if self.max_in_flight is not None else 1 << 62

    def _step(self, t):
        # Runs once per event: what a run without scaling, telemetry or a router queue does
        # not need is skipped by a field test, not a call.
        telemetry = self.telemetry
        if telemetry is not None:
            telemetry.due_before(t)   # samples between the last step and t see its state
        self.now_ms = t
        cluster = self.cluster
        if self.queue.heap[0][0] <= t:
            self._complete_passes(t)
        router = self.router
        if router.queued:
            router.flush(t)
        if cluster is not None:
            # at one time a worker ready comes before a settlement
            if cluster.starting and cluster.starting[0][0] <= t:
                cluster.ready_due(t)
            if cluster.settling:
                cluster.settle(t)
        driver = self.driver
        max_in_flight = self.max_in_flight
        if driver.next_ready_ms() <= t:
            limit = 1 << 62 if max_in_flight is None else max_in_flight - self.in_flight
            if limit > 0:
                for request in driver.pop_ready(t, limit):
                    self._place(request, t)
        if telemetry is not None:
            telemetry.due(t)
        if cluster is not None:
            if cluster.next_tick_ms <= t:
                cluster.tick_due(t)
        elif telemetry is None:
            if self._dirty:
                self._start_passes(t, self.max_sim_time_ms)
            return
        if self._dirty:
            self._start_passes(t, self._extension_cutoff())

    def _complete_passes(self, t):
        """Complete every pass that ends by ``t`` (the events due then)."""
        heap = self.queue.heap
        workers = self.workers
        dirty = self._dirty
        cluster = self.cluster
        while heap[0][0] <= t:
            _, _, kind, ident = heappop(heap)
            idx = ident >> 32
            worker = workers[idx]
            if kind != PASS_DONE or not worker.busy or worker.generation != ident & _GEN_MASK:
                continue  # a wake-up, or the pass was cut short and rescheduled earlier
            worker.complete_pass()
            dirty.add(idx)
            if cluster is not None and cluster.lifecycle.draining:
                cluster.worker_idle("agg", worker)

    def _start_passes(self, t, cutoff):
        """Start a pass on every idle worker a step touched (in worker order)."""
        dirty = self._dirty
        workers = self.workers
        horizon = None
        for idx in sorted(dirty) if len(dirty) > 1 else tuple(dirty):
            worker = workers[idx]
            if not worker.busy:
                if horizon is None:
                    # the earliest time a known request could arrive (passes starting later
                    # may see it): a completion must free a slot first when the cap is reached
                    max_in_flight = self.max_in_flight
                    if max_in_flight is not None and self.in_flight >= max_in_flight:
                        horizon = math.inf
                    else:
                        horizon = self.driver.next_ready_ms()
                end = worker.start_pass(t, horizon, cutoff)
                if end is not None:
                    if end == t and self._zero_time_pass(worker, t):
                        continue
                    self.queue.push(end, PASS_DONE, (idx << 32) | worker.generation)
        dirty.clear()
        self._passes_started_at = t

    def _zero_time_pass(self, worker, t):
        """A pass of ``worker`` ends as it starts. Returns True when the worker is parked: its
        ranks run nothing and the head of each queue can never start, so the pass is over at
        once and the worker waits for the next arrival placed on it (which joins behind).
        Otherwise counts effect-free zero-time passes in a row at ``t`` (the livelock guard)."""
        if worker.progressed():
            self._spins = 0
            return False
        if worker.blocked():
            worker.complete_pass()
            return True
        if t != self._spin_t:
            self._spin_t = t
            self._spins = 0
        self._spins += 1
        if self._spins >= LIVELOCK_PASSES:
            raise livelock_error(worker, t, self._spins)
        return False

    def _register_arrival(self, request, now_ms):
        request.uuid = self._next_uuid
        self._next_uuid += 1
        request.arrival_ms = now_ms
        request.dispatched_ms = now_ms
        self.arrived += 1
        self.in_flight += 1
        self.collector.on_arrival()

    def _unregister_arrival(self, request, before):
        self._next_uuid -= 1
        self.arrived -= 1
        self.in_flight -= 1
        self.collector.on_arrival(-1)
        for window in self.windows:
            window.arrivals -= 1
        request.uuid, request.arrival_ms, request.dispatched_ms = before

    def _place(self, request, now_ms):
        self._register_arrival(request, now_ms)
        if self.windows:
            for window in self.windows:
                window.arrival()
        self.router.place(request, now_ms, request.dp_rank)
        if self.on_event is not None:
            self.on_event("arrival", now_ms, request)

    def _deliver(self, request, worker, dp_rank, now_ms):
        """The router placed ``request`` on ``worker``'s rank ``dp_rank`` now."""
        w_idx = worker.idx
        request.worker_idx = w_idx
        worker.ranks[dp_rank].submit(request)
        if worker.busy:
            # its pass ends later, and the worker is marked then: it stays busy until the
            # step starts passes (nothing completes a pass after the step's arrivals)
            self.cut_pass(worker, now_ms, now_ms == self._passes_started_at)
        else:
            self._dirty.add(w_idx)
        if self.windows:
            self._count_placement(request)

    def cut_pass(self, worker, t_ms, started=False):
        """End ``worker``'s pass in flight early, at the end of its pass running at ``t_ms``
        (``Worker.truncate``: an extended run cut short, an idle wait woken), its completion
        queued then; returns the new end, or None when it did not change."""
        end = worker.truncate(t_ms, started)
        if end is not None:
            self.queue.push(end, PASS_DONE, (worker.idx << 32) | worker.generation)
        return end

    def _count_placement(self, request):
        route = request.route
        if route is not None and route.get("selected_overlap_blocks") is not None:
            for window in self.windows:
                window.placed(route["selected_overlap_blocks"], request.prompt_len,
                              self.router.block_size)

    @property
    def _terminal_routing(self):
        """Whether a router of this run wants terminals (round robin does not)."""
        flag = self._routes_terminals
        if flag is None:
            flag = self._routes_terminals = any(r.wants_terminal for r in self.routers)
        return flag

    def _route_terminal(self, request, end_ms):
        for router in self.routers:
            router.terminal(request.uuid, end_ms)

    def _on_finish(self, request, end_ms, status):
        request.terminal_ms = end_ms
        request.terminal_status = status
        self._terminal(request, end_ms, status, self._record_maker()(request, status))

    def _record_maker(self):
        """A terminal's record: a full one when the collector keeps or streams records, else
        the fields the summary and the traffic windows read."""
        return make_record if self.collector.keeps_records else make_summary_record

    def _finish_all(self, finished, end_ms):
        """``_on_finish`` of each ``(request, status)`` of one pass, in order: with nothing
        but the collector and the driver to tell (no router, window, submission, event
        callback or check wants a terminal), ``_terminal``'s work inline."""
        cls = type(self)
        if self.on_event is not None or self.windows or self._external \
                or self._terminal_routing or "_terminal" in self.__dict__ \
                or cls._terminal is not Simulation._terminal \
                or cls._on_finish is not Simulation._on_finish \
                or cls._driver_terminal is not Simulation._driver_terminal:
            for request, status in finished:
                self._on_finish(request, end_ms, status)
            return
        on_terminal = self.collector.on_terminal
        driver_terminal = self.driver.on_terminal
        make = self._record_maker()
        for request, status in finished:
            request.terminal_ms = end_ms
            request.terminal_status = status
            record = make(request, status)
            self.in_flight -= 1
            if status == "completed":
                self.completed += 1
            on_terminal(record)
            driver_terminal(request, end_ms, status)

    def _terminal(self, request, end_ms, status, record):
        """Bookkeeping of a request that reached ``status`` (its record made already)."""
        self.in_flight -= 1
        if status == "completed":
            self.completed += 1
        self.collector.on_terminal(record)
        if self._terminal_routing:
            self._route_terminal(request, end_ms)
        if self.windows and status == "completed":
            for window in self.windows:
                window.completed_request(record)
        if self._external and request.uuid in self._external:
            self._external.discard(request.uuid)  # submitted: not the driver's request
        else:
            self._driver_terminal(request, end_ms, status)
        if self.on_event is not None:
            self.on_event(status, end_ms, request)

    def _driver_terminal(self, request, end_ms, status):
        self.driver.on_terminal(request, end_ms, status)

    # ------------------------------------------------------------------ report
    def report(self):
        """Finalize metrics (call once, after ``run``)."""
        if self.telemetry is not None:
            self.telemetry.finish(self.now_ms)
        collector = self.collector
        for worker in self.workers:
            for rank in worker.ranks:
                rank.add_gaps_to(collector)
        collector.set_worker_seconds(**self._worker_seconds())
        if self.cluster is not None and self.cluster.lifecycle.record:
            collector.add_extra("lifecycle_operations", self.cluster.lifecycle.operations)
        ranks = [rank for worker in self.workers for rank in worker.ranks]
        collector.add_extra("kv_eviction_policy", "lru")
        collector.add_extra("committed_prefill_tokens",
                            sum(rank.committed_prefill_tokens for rank in ranks))
        driver_extras = getattr(self.driver, "report_extras", None)
        if driver_extras is not None:  # e.g. the agentic driver's trajectories
            driver_extras(collector)
        return collector.finalize(wall_time_ms=self._wall_ms)

    def _worker_seconds(self):
        if self.cluster is not None:
            decode = self.cluster.worker_seconds(self.now_ms)["agg"]
        else:
            decode = len(self.workers) * self.now_ms / 1000.0
        return dict(prefill_worker_seconds=0.0, decode_worker_seconds=decode,
                    prefill_gpus_per_worker=0, decode_gpus_per_worker=self.gpus_per_worker)


def livelock_error(worker, t, passes):
    """The guard's error: the rank, a few of its requests, its KV and the limit it hit."""
    busy = [rank for rank in worker.ranks if rank.waiting or rank.running] or worker.ranks
    rank = busy[0]
    return SimulationError(
        f"worker {worker.idx} dp rank {rank.dp_rank} cannot progress at {t} ms: {passes} "
        f"passes in a row took no time and changed nothing (the livelock limit); requests "
        f"{', '.join(worker.spinning_requests()) or 'none'}; {rank.kv_summary()}")
