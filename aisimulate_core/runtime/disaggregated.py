"""The steppable event loop of a disaggregated deployment (SEMANTICS 3.3): a prefill pool and a
decode pool on one clock, and the source-first KV handoff between them (vLLM, TensorRT-LLM).

A request's handoff: its arrival is placed on a prefill rank as a hidden copy limited to one
token; when that copy completes, its KV is held and a decode rank is chosen; the decode rank
reserves room for the prompt (engine/vllm_roles.py); the KV transfer takes
``tokens × kv_transfer_bytes_per_token / kv_transfer_bandwidth`` (the prefill role's values;
``handoff_latency_ms`` when they are not set); on arrival the decode copy is activated and the
source released. Activation waits for the decode worker's pass in flight to end, a release for
the prefill worker's.

At every visited time t, repeated until nothing changes:
  1. pass completions due at t, prefill workers before decode workers, each in id order, the
     ranks of a DP group in rank order, idle ones included (a decode rank retries a reservation
     at each of its pass ends, zero-duration ones included; actions waiting for the pass join);
  2. transfers completing at t, in the order they started;
  3. the actions (placements, reservations, transfers, activations, releases), first in first
     out, until none is left; one may queue others;
  4. idle prefill workers with work start a pass, then 5. idle decode workers (a pass ending at
     t completes at once; one that changed nothing parks its worker until the next drive);
  6. arrivals due at t are released (they are placed in step 3 of the next round);
  7. the driver hears the terminals of the passes that started and ended at t in steps 4-5
     (rejections, zero-time decodes): after step 6, so what is ready at t is dispatched first.

Speed: a decode worker runs decode-only passes as one event (``VllmRank.extend``) up to the
pass end its first known transfer needs; the run is cut at the pass in flight whenever
something else reaches that worker, and at every visited time that is one of its pass ends, so
that same-time order stays exact (where only the rank would see that pass end, the SGLang
handoff's C decode ranks, the cut waits until something reaches the worker at that time, and is
dropped when nothing does: ``_quiet_pass_end``, ``_reach``). A time at which only transfers into passes in flight complete
is visited without a step (``_absorb_transfers``): all a step would do there is defer their
activations. What b5 (1 prefill, 2 decode workers) still visits per request: its arrival, its
prefill pass end, the decode pass end that reserves its destination, the pass end that activates
it, the end of the pass giving its first token (not decode-only), and its last token. Per step,
the loop's own work is field reads where it can be: pass completions sit in a heap of its own (a
head read is a subscript, not a call), each decode worker's incoming transfer times in a heap of
their own (a start's horizon is its head), and a round calls into scaling only when a worker
settles or becomes ready.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
import math
from collections import deque

from ..errors import SimulationError
from ..engine.request import SimRequest
from .records import make_disagg_record, make_disagg_summary_record
from .cluster import ClusterPool
from . import plain_disagg_native
from .pass_time import time_sums
from .simulation import Simulation, _GEN_MASK, watch_engines

# rounds of same-time work after which a replay that does not advance is an error
_MAX_ROUNDS = 1_000_000

# actions of the handoff
SUBMIT, RESERVE, START_TRANSFER, ACTIVATE, RELEASE_SOURCE, CANCEL_SOURCE = range(6)


class Handoff:
    """One request's way through both pools: its role copies and its lifecycle times."""

    __slots__ = ("request", "prefill", "decode", "prefill_key", "decode_key", "prefill_route",
                 "decode_route",
                 "held_ms", "reserved_ms", "activated_ms", "released_ms", "transfer_tokens",
                 "record", "quiesce_pending")

    def __init__(self, request):
        self.request = request
        self.prefill = None          # the hidden copy on its prefill rank
        self.decode = None           # the copy on its decode rank, once accepted there
        self.prefill_key = -1        # worker keys (index into Simulation.workers)
        self.decode_key = -1
        self.prefill_route = None    # a router's routing_history entry of the prefill pick
        self.decode_route = None     # (logical worker id, dp rank, scheduler id) of the decode
                                     # pick, or a router's entry
        self.held_ms = None
        self.reserved_ms = None
        self.activated_ms = None
        self.released_ms = None
        self.transfer_tokens = 0     # fresh (missing) prompt tokens of the reservation
        self.record = None           # the report record, once terminal
        self.quiesce_pending = False # terminal while its source is still held (agentic drivers)


class _RoleEvents:
    """Routes the role ranks' callbacks to the simulation."""

    __slots__ = ("sim",)

    def __init__(self, sim):
        self.sim = sim

    def on_finish(self, copy, end_ms, status):
        self.sim._finish(copy.handoff, end_ms, status)

    def on_source_held(self, copy, end_ms):
        handoff = copy.handoff
        handoff.held_ms = end_ms
        self.sim._held.append(handoff)


class TransferModel:
    """KV transfer time of a handoff, from the prefill role's rank settings."""

    __slots__ = ("bytes_per_token", "bandwidth_gbps", "missing_only", "fallback_ms")

    def __init__(self, prefill_rank, handoff_latency_ms):
        self.bytes_per_token = prefill_rank.kv_transfer_bytes_per_token
        self.bandwidth_gbps = prefill_rank.kv_transfer_bandwidth
        self.missing_only = prefill_rank.kv_transfer_timing_mode == "destination_missing"
        self.fallback_ms = handoff_latency_ms

    def delay_ms(self, prompt_tokens, missing_tokens):
        bandwidth = self.bandwidth_gbps
        if self.bytes_per_token is None or bandwidth is None or bandwidth <= 0:
            return self.fallback_ms
        tokens = missing_tokens if self.missing_only else prompt_tokens
        # float arithmetic in the reference's order; the time is not rounded to nanoseconds
        return float(tokens) * float(self.bytes_per_token) / (bandwidth * 1e9) * 1000.0


class DisaggregatedSimulation(Simulation):
    """One disaggregated replay; built by ``build_simulation`` for a disaggregated topology."""

    # the handoff's order: an arrival's first action, and the action a held source takes
    # (source-first; SGLang's destination-first order is runtime/sglang_handoff.py)
    FIRST_ACTION = SUBMIT
    HELD_ACTION = RESERVE

    # (slots, as Simulation's: see there)
    __slots__ = ("transfer", "prefill_gpus_per_worker", "prefill_workers", "decode_workers",
                 "_is_decode", "_order_keys", "_spawned", "_actions", "_deferred", "_idle",
                 "_extended", "_no_extend", "_uncut", "_uncut_started", "_passes", "_stale",
                 "_transfers", "_inbound", "_transfer_order", "_held", "_late_terminals",
                 "_late", "_visited", "_until", "make_workers")

    def __init__(self, *, transfer, prefill_gpus_per_worker, **kwargs):
        super().__init__(**kwargs)
        self.transfer = transfer
        self.prefill_gpus_per_worker = prefill_gpus_per_worker
        self.prefill_workers = []
        self.decode_workers = []
        self.events = _RoleEvents(self)
        self._is_decode = []         # by worker key: whether it is a decode worker
        self._order_keys = []        # by worker key: (is decode, worker id), the same-time order
        self._spawned = False        # scaling added a worker (keys out of pool order)
        self._actions = deque()
        self._deferred = {}          # rank -> actions waiting for its worker's pass to end
        self._idle = (set(), set())  # per pool: keys of idle workers that may have work
        self._extended = {}          # decode worker key -> its rank, while its pass in flight
                                     # may be extended
        self._no_extend = False      # a parked worker progresses at every drive: keep passes single
        self._uncut = set()          # decode worker keys whose run the step left uncut at its
                                     # time (_quiet_pass_end), until something reaches them
        self._uncut_started = False  # the step's decode workers have been started
        # pass completions: a heap of (end time, key << 32 | generation) over a sentinel that
        # is never due; this loop's own (not ``queue``): a head read is a subscript, not a call
        self._passes = [(math.inf, -1)]
        self._stale = {}             # time -> pass completions due then that were cut short
        self._transfers = []         # heap of (done_ms, order, handoff)
        self._inbound = {}           # decode worker key -> heap of its transfers' done_ms
        self._transfer_order = 0
        self._held = []              # handoffs whose source was held by the pass completing now
        self._late_terminals = []
        self._late = None            # while a zero-time pass completes at once: the terminals
                                     # its driver hears after the round's arrivals
        self._visited = []           # every time the clock stopped at (worker-seconds)
        self._until = -math.inf      # the last time the current run_until call visits

    def attach_pools(self, prefill_workers, decode_workers, prefill_router, decode_router):
        self.prefill_workers = prefill_workers
        self.decode_workers = decode_workers
        self.workers = prefill_workers + decode_workers
        self._is_decode = [False] * len(prefill_workers) + [True] * len(decode_workers)
        self._order_keys = [(d, w.worker_id) for d, w in zip(self._is_decode, self.workers)]
        self.pools = {
            "prefill": ClusterPool("prefill", prefill_router, prefill_workers,
                                   spawn=lambda worker_id: self._spawn("prefill", worker_id)),
            "decode": ClusterPool("decode", decode_router, decode_workers,
                                  spawn=lambda worker_id: self._spawn("decode", worker_id)),
        }
        self.router = prefill_router
        self.routers = (prefill_router, decode_router)
        prefill_router.deliver = self._deliver_prefill
        decode_router.deliver = self._deliver_decode
        watch_engines(self, prefill_router, prefill_workers)
        watch_engines(self, decode_router, decode_workers)

    # ------------------------------------------------------------------ embedding API
    def submit(self, request):
        self._check_submission(request)
        self._arrive(request, self.now_ms)
        self._external.add(request.uuid)

    def _submission_pool(self):
        return self.prefill_workers

    def pool_states(self):
        return self.pools

    def _spawn(self, kind, worker_id):
        """A worker added to pool ``kind`` by scaling; its key is the next free one."""
        worker = self.make_workers[kind](worker_id, len(self.workers))
        self.workers.append(worker)
        self._spawned = True
        decode = kind == "decode"
        self._is_decode.append(decode)
        self._order_keys.append((decode, worker.worker_id))
        (self.decode_workers if decode else self.prefill_workers).append(worker)
        watch_engines(self, self.routers[decode], [worker])
        self.capture_gauges([worker])
        return worker

    # ------------------------------------------------------------------ loop
    def run_until(self, t_ms):
        # the last time this call may visit: a step looks ahead no further (_absorb_transfers)
        self._until = min(t_ms, self.max_sim_time_ms)
        super().run_until(t_ms)

    def _plain(self):
        """A plain run of this loop (runtime/plain_disagg_native.py's ``eligible``) runs in one
        C call; ``_run_plain`` is that call."""
        return plain_disagg_native.eligible(self, self._until) is None

    def _run_plain(self, limit):
        return plain_disagg_native.run(self, limit)

    def _next_time(self):
        if self._actions:
            return self.now_ms  # a submission waits for its placement
        # (this loop's _event_time, inline: this runs per step)
        t = self._passes[0][0]
        if t in self._stale:
            t = self._pass_time()
        transfers = self._transfers
        if transfers and transfers[0][0] < t:
            t = transfers[0][0]
        # (Simulation._next_time_after, inline)
        if self.max_in_flight is None or self.in_flight < self.max_in_flight:
            ready = self.driver.next_ready_ms()
            if ready < t:
                t = ready if ready > self.now_ms else self.now_ms
        if self.cluster is not None:
            t = self._cluster_time(t)
        return t

    def _event_time(self):
        t = self._passes[0][0]
        if t in self._stale:
            t = self._pass_time()
        transfers = self._transfers
        if transfers and transfers[0][0] < t:
            return transfers[0][0]
        return t

    def _pass_time(self):
        """The next pass completion's time, dropping cut-short completions from the head: their
        times are never visited."""
        passes = self._passes
        stale = self._stale
        workers = self.workers
        t = passes[0][0]
        while t in stale:
            ident = passes[0][1]
            worker = workers[ident >> 32]
            if worker.busy and worker.generation == ident & _GEN_MASK:
                break    # (a live completion: its time is visited)
            heapq.heappop(passes)
            count = stale[t] - 1    # (_unstale, inline)
            if count:
                stale[t] = count
            else:
                del stale[t]
            t = passes[0][0]
        return t

    def _unstale(self, t):
        count = self._stale[t] - 1
        if count:
            self._stale[t] = count
        else:
            del self._stale[t]

    def _step(self, t):
        telemetry = self.telemetry
        if telemetry is not None:
            telemetry.due_before(t)   # samples between the last step and t see its state
        self.now_ms = t
        self._visited.append(t)
        extended = self._extended
        if extended:
            for key, rank in extended.items():   # (a cut leaves the keys as they are)
                # rank.ends_pass_at(t), inline: a pass before the last of its run ends at t
                ends = rank._macro_ends
                if ends is not None and t < ends[-1] and ends[bisect_left(ends, t)] == t:
                    # that pass end is a visited time of its own: cut there, unless only the
                    # rank sees it (then only when something reaches the worker now: _reach)
                    if self._quiet_pass_end(rank):
                        self._uncut.add(key)
                        self._uncut_started = False
                    else:
                        self._cut(key, t)
        # bound once: a step runs two rounds or more
        passes = self._passes
        transfers = self._transfers
        actions = self._actions
        idle_prefill, idle_decode = self._idle
        next_ready = self.driver.next_ready_ms
        cluster = self.cluster
        prefill_router, decode_router = self.routers
        late_terminals = self._late_terminals
        uncut = self._uncut
        rounds = 0
        sampled = ticked = False
        while True:
            rounds += 1
            if rounds > _MAX_ROUNDS:
                self._no_progress(t)
            changed = False
            if passes[0][0] <= t or (transfers and transfers[0][0] <= t):
                changed = self._complete_due(t)
            if (prefill_router._released or decode_router._released) and self._flush_routers(t):
                changed = True
            if cluster is not None:
                # (what settle and ready_due do when nothing settles or becomes ready: nothing)
                if cluster.settling:
                    cluster.settle(t)
                if cluster.starting and cluster.starting[0][0] <= t:
                    cluster.ready_due(t)
            if actions:
                self._run_actions(t)
                changed = True
            if idle_prefill and self._drive(idle_prefill, t):
                changed = True
            if idle_decode and self._drive(idle_decode, t):
                changed = True
            if uncut:
                self._uncut_started = True
            if next_ready() <= t and self._release_arrivals(t):
                changed = True
                if not sampled and telemetry is not None and telemetry.periodic_due(t):
                    # a periodic sample counts the arrivals at t but is taken before they are
                    # placed (observed on the reference; the baseline at 0 sees them placed)
                    sampled = True
                    telemetry.due(t)
            if late_terminals:
                self._tell_late_terminals()
                changed = True
            if not changed:
                if ticked:
                    break
                # the same-time work is settled: the telemetry sample, then the scaling tick
                # (whose changes get their own rounds)
                ticked = sampled = True
                if telemetry is not None:
                    telemetry.due(t)
                if cluster is None or cluster.next_tick_ms > t:
                    break
                cluster.tick_due(t)
        if idle_prefill or idle_decode:
            no_extend = self._progress_parked()
            if no_extend:
                for key in list(uncut):
                    self._reach(key)      # (started again as the step started it: extended)
                for key in list(self._extended):
                    self._cut(key, t)
            self._no_extend = no_extend
            uncut.clear()
        else:
            self._no_extend = False
            # nothing reached the uncut runs: they go on as the passes started at t would
            uncut.clear()
            if transfers and cluster is None and telemetry is None:
                # (a transfer after the next pass end waits for it: nothing to absorb now)
                head = transfers[0][0]
                if head < passes[0][0] or passes[0][0] in self._stale:
                    self._absorb_transfers()

    def _absorb_transfers(self):
        """Visit, without a step, the next times at which only transfers complete, each into a
        decode worker whose pass is in flight: all a step there does is to defer each
        activation to that pass end (cutting an extended pass there) and to cut the extended
        passes that end a pass at that time. Nothing else can happen then: no pass ends, no
        arrival is due, no worker is idle with work, no action waits, no router released a
        request, and neither scaling nor telemetry runs (the caller checked the last three)."""
        transfers = self._transfers
        workers = self.workers
        prefill_router, decode_router = self.routers
        next_ready = self.driver.next_ready_ms
        while transfers:
            t = transfers[0][0]
            next_pass = self._pass_time()
            # (the next pass end is visited by this run: the clock ends past t as it would)
            if (t >= next_pass or next_pass > self._until or t >= next_ready() or self._actions
                    or prefill_router._released or decode_router._released):
                return
            due = [heapq.heappop(transfers)]
            while transfers and transfers[0][0] == t:
                due.append(heapq.heappop(transfers))
            for entry in due:
                if not workers[entry[2].decode_key].busy:
                    for back in due:
                        heapq.heappush(transfers, back)  # (time, start order) keys: order kept
                    return
            self._visited.append(t)
            for key, rank in self._extended.items():
                # rank.ends_pass_at(t), inline (as _step's)
                ends = rank._macro_ends
                if ends is not None and t < ends[-1] and ends[bisect_left(ends, t)] == t:
                    self._cut(key, t)
            for _, _, handoff in due:
                self._arrived(handoff)
                self._defer(handoff.decode_key, handoff.decode.rank, ACTIVATE, handoff, t)

    def _flush_routers(self, t):
        """Deliver what the routers released from their queues; whether anything was."""
        released = False
        for router in self.routers:
            if router._released and router.flush(t):
                released = True
        return released  # (the loop tests _released first: most rounds release nothing)

    def _complete_due(self, t):
        """Steps 1 and 2: the pass completions and transfers due at ``t``."""
        passes = self._passes
        workers = self.workers
        first = -1      # the first worker whose pass ends now; more of them only rarely
        due = None
        while passes[0][0] <= t:
            time, ident = heapq.heappop(passes)
            key = ident >> 32
            worker = workers[key]
            if not worker.busy or worker.generation != ident & _GEN_MASK:
                self._unstale(time)   # cut short: its pass ends earlier
            elif first < 0:
                first = key
            elif due is None:
                due = [first, key]
            else:
                due.append(key)
        done = first >= 0
        if done:
            cluster = self.cluster
            if cluster is not None and not cluster.lifecycle.draining:
                cluster = None   # (worker_idle's work: nothing while no worker drains)
            if due is None:
                self._complete(first, t)
                if cluster is not None:
                    self._worker_idle(first)
            else:
                # prefill workers first, each pool in id order (the keys follow that order
                # until scaling adds a worker)
                due.sort(key=self._order_keys.__getitem__ if self._spawned else None)
                for key in due:
                    self._complete(key, t)
                    if cluster is not None:
                        self._worker_idle(key)
        transfers = self._transfers
        if transfers and transfers[0][0] <= t:
            actions = self._actions
            while transfers and transfers[0][0] <= t:
                handoff = heapq.heappop(transfers)[2]
                self._arrived(handoff)
                actions.append((ACTIVATE, handoff))
            done = True
        return done

    def _worker_idle(self, key):
        self.cluster.worker_idle("decode" if self._is_decode[key] else "prefill",
                                 self.workers[key])

    def _complete(self, key, t, immediate=False):
        """A pass of worker ``key`` ends at ``t``; returns whether it produced a reservation or
        a held source (its tokens and terminals are recorded through the rank callbacks)."""
        worker = self.workers[key]
        extended = self._extended
        if extended:
            extended.pop(key, None)
        held = self._held = []
        lone = worker._lone
        if lone is not None:
            # Worker.complete_pass of a lone rank, inline (a call fewer per pass)
            worker.busy = False
            if worker._active:
                lone.complete()
                worker._active = ()
        else:
            worker.complete_pass()
        actions = self._actions
        deferred = None if immediate else self._deferred
        # each rank of the group completes in turn, idle ones included
        if self._is_decode[key]:
            # (a decode rank holds no source: its pass leaves nothing in ``held``)
            produced = False
            for rank in worker.ranks:
                got = rank.retry()
                if deferred:
                    waiting = deferred.pop(rank, None)
                    if waiting:
                        actions.extend(waiting)
                if got is not None:
                    self._reserved(got, t)
                    produced = True
            self._idle[1].add(key)
            return produced
        for rank in worker.ranks:
            if deferred:
                waiting = deferred.pop(rank, None)
                if waiting:
                    actions.extend(waiting)
            for handoff in held:
                if handoff.prefill.rank is rank:
                    actions.append((self.HELD_ACTION, handoff))
        self._idle[0].add(key)
        return bool(held)

    def _drive(self, idle, t):
        """Steps 4/5: the idle workers ``idle`` of a pool (``_idle[0]`` prefill, ``[1]`` decode)
        that have work start a pass, in id order, from the first again after each one that
        made progress."""
        workers = self.workers
        progressed = False
        rounds = 0
        while idle:
            rounds += 1
            if rounds > _MAX_ROUNDS:
                self._no_progress(t)
            # (most drives find one idle worker: no sort then)
            for key in sorted(idle) if len(idle) > 1 else tuple(idle):
                worker = workers[key]
                if worker.busy:
                    idle.discard(key)
                    continue
                for rank in worker.ranks:   # Worker.has_work by the ranks' own test (a C
                    if rank.has_work():     # rank reads two counts)
                        break
                else:
                    idle.discard(key)
                    continue
                if self._start(key, t):
                    progressed = True
                    break
            else:
                break
        return progressed

    def _start(self, key, t):
        worker = self.workers[key]
        decode = self._is_decode[key]
        if not decode or self._no_extend:
            horizon = t
        else:
            # where decode-only passes stop being extended: the first transfer to this worker
            # completes (its activation needs that pass end). A reservation, which any held
            # source may bring, cuts the extended pass when it comes: ending every run at each
            # prefill pass end would cost more than the passes a cut throws away.
            inbound = self._inbound.get(key)
            horizon = inbound[0] if inbound else math.inf
        cutoff = (self.max_sim_time_ms if self.cluster is None and self.telemetry is None
                  else self._extension_cutoff())
        start_run = worker._start_run
        if start_run:
            # Worker.start_pass of a lone rank with a fused start, inline (a call fewer per pass)
            end = start_run(t, horizon, cutoff)
            if end is None:
                return False
            worker._active = worker.ranks
            if end == t:
                worker._check_stuck(t)
            worker.busy = True
            worker._pass_start = t
            worker.pass_end_ms = end
        else:
            end = worker.start_pass(t, horizon, cutoff)
            if end is None:
                return False
        if end > t:
            heapq.heappush(self._passes, (end, (key << 32) | worker.generation))
            self._idle[decode].discard(key)
            if decode and worker.extendable:
                self._extended[key] = worker.ranks[0]
            return True
        effect = worker.progressed()
        # the driver hears the terminals of a pass that starts and ends now after the arrivals
        # of this round are released (the reference's order: a failed play's node ready now is
        # dispatched, and the failure is a later lifecycle round)
        self._late = self._late_terminals
        try:
            return self._complete(key, t, immediate=True) or effect
        finally:
            self._late = None

    def _tell_late_terminals(self):
        late = self._late_terminals
        for request, end_ms, status in late:
            self._tell_driver(request, end_ms, status)
        late.clear()

    def _arrived(self, handoff):
        """A transfer leaves the heaps: it is the earliest of all, so of its destination's too."""
        heapq.heappop(self._inbound[handoff.decode_key])

    def _progress_parked(self):
        """Whether an idle worker with work computed something in its effect-free pass: it does
        more at every drive, so every pass end of the other workers must be visited."""
        for idle in self._idle:
            for key in idle:
                worker = self.workers[key]
                if not worker.busy and any(rank.partial for rank in worker.ranks):
                    return True
        return False

    def _cut(self, key, t):
        """End the extended pass of decode worker ``key`` at its pass in flight at ``t``."""
        # (_shorten, inline: a run is cut about three times per request)
        worker = self.workers[key]
        before = worker.pass_end_ms
        end = worker.truncate(t)
        if end is not None:
            stale = self._stale
            stale[before] = stale.get(before, 0) + 1
            heapq.heappush(self._passes, (end, (key << 32) | worker.generation))

    def _shorten(self, key, t):
        """``_cut`` but for the new completion: the new end of the pass in flight, or None."""
        worker = self.workers[key]
        before = worker.pass_end_ms
        end = worker.truncate(t)
        if end is not None:
            self._stale[before] = self._stale.get(before, 0) + 1
        return end

    def _quiet_pass_end(self, rank):
        """Whether the pass end of ``rank``'s run at the step's time changes nothing that
        anything but the rank sees: then the run is cut there only when something reaches the
        worker at that time (``_reach``); the source-first handoff's ranks always cut."""
        return False

    def _reach(self, key):
        """Something reaches decode worker ``key`` at the step's time t, at which its run has a
        pass end the step left uncut: its pass ends at t and completes now, as it would have
        among the step's pass completions (which it changes nothing after, _quiet_pass_end),
        and is started again when the step's decode workers have been."""
        self._uncut.discard(key)
        t = self.now_ms
        self._shorten(key, t)
        self._complete(key, t)
        if self._uncut_started:
            self._drive({key}, t)

    def _release_arrivals(self, t):
        limit = self._arrival_limit()
        if limit <= 0:
            return False
        arrived = False
        for request in self.driver.pop_ready(t, limit):
            self._arrive(request, t)
            arrived = True
        return arrived

    def _arrive(self, request, now_ms):
        self._register_arrival(request, now_ms)
        for window in self.windows:
            window.arrival()
        request.handoff = Handoff(request)
        self._actions.append((self.FIRST_ACTION, request.handoff))
        if self.on_event is not None:
            self.on_event("arrival", now_ms, request)

    # ------------------------------------------------------------------ the handoff
    def _run_actions(self, t):
        actions = self._actions
        while actions:
            kind, handoff = actions.popleft()
            if kind == SUBMIT:
                self._submit_prefill(handoff, t)
            elif kind == RESERVE:
                self._reserve_destination(handoff, t)
            elif kind == START_TRANSFER:
                self._start_transfer(handoff, t)
            elif kind == ACTIVATE:
                if handoff.decode_key in self._uncut:
                    self._reach(handoff.decode_key)
                if self.workers[handoff.decode_key].busy:
                    self._defer(handoff.decode_key, handoff.decode.rank, kind, handoff, t)
                else:
                    self._activate(handoff, t)
            elif kind > CANCEL_SOURCE:
                self._extra_action(kind, handoff, t)  # an action of a subclass's handoff
            elif self.workers[handoff.prefill_key].busy:  # RELEASE_SOURCE, CANCEL_SOURCE
                self._defer(handoff.prefill_key, handoff.prefill.rank, kind, handoff, t)
            else:
                handoff.prefill.rank.release_source(handoff.prefill)
                self._idle[0].add(handoff.prefill_key)
                # the prefill pool's router counts the request until its KV leaves
                self.routers[0].terminal(handoff.request.uuid, t)
                if handoff.quiesce_pending:
                    handoff.quiesce_pending = False
                    self.driver.on_quiescent(handoff.request, t)
                if self.cluster is not None and self.cluster.lifecycle.draining:
                    self.cluster.worker_idle("prefill", self.workers[handoff.prefill_key])
                if kind == RELEASE_SOURCE:
                    handoff.released_ms = t
                    if handoff.record is not None:
                        handoff.record.source_released_ms = t

    def _start_transfer(self, handoff, t):
        """The KV leaves the source: activation at its arrival (queued now if it takes no
        time)."""
        delay = self.transfer.delay_ms(handoff.request.prompt_len, handoff.transfer_tokens)
        if delay > 0:
            done_ms = t + delay
            heapq.heappush(self._transfers, (done_ms, self._transfer_rank(handoff), handoff))
            inbound = self._inbound.get(handoff.decode_key)
            if inbound is None:
                inbound = self._inbound[handoff.decode_key] = []
            heapq.heappush(inbound, done_ms)
        else:
            self._actions.append((ACTIVATE, handoff))

    def _transfer_rank(self, handoff):
        """Where a transfer stands among those completing at the same time: start order."""
        order = self._transfer_order
        self._transfer_order = order + 1
        return order

    def _extra_action(self, kind, handoff, t):
        raise SimulationError(f"internal: unknown handoff action {kind}")

    def _defer(self, key, rank, kind, handoff, t):
        """Run the action on ``rank`` when its worker ``key`` finishes the pass in flight (cut
        there)."""
        self._deferred.setdefault(rank, []).append((kind, handoff))
        if key in self._extended:
            self._cut(key, t)

    def _submit_prefill(self, handoff, t):
        request = handoff.request
        wanted = request.prefill_dp_rank
        self.routers[0].place(request, t, request.dp_rank if wanted is None else wanted)

    def _deliver_prefill(self, request, worker, dp_rank, t):
        handoff = request.handoff
        handoff.prefill_route, request.route = request.route, None
        copy = self._copy(handoff, min(request.max_output, 1))
        handoff.prefill = copy
        handoff.prefill_key = worker.idx
        worker.ranks[dp_rank].submit(copy)
        self._idle[0].add(worker.idx)

    def _reserve_destination(self, handoff, t):
        request = handoff.request
        self.routers[1].place(request, t, request.dp_rank)

    def _deliver_decode(self, request, worker, dp_rank, t):
        if worker.idx in self._uncut:
            self._reach(worker.idx)
        handoff = request.handoff
        rank = worker.ranks[dp_rank]
        handoff.decode_route = request.route if request.route is not None else (
            worker.worker_id, rank.dp_rank, rank.scheduler_id)
        request.route = None
        copy = self._copy(handoff, request.max_output)
        if not rank.accept(copy):
            # the decode ranks can never hold it: the request fails, its source (if the
            # handoff holds one yet) is dropped
            self._finish(handoff, t, "failed")
            if handoff.prefill is not None:
                self._actions.append((CANCEL_SOURCE, handoff))
            return
        handoff.decode = copy
        key = worker.idx
        handoff.decode_key = key
        if worker.busy:
            if key in self._extended:
                self._cut(key, t)  # the next pass end retries
        else:
            got = rank.retry()
            if got is not None:
                self._reserved(got, t)

    def _reserved(self, got, t):
        copy, missing_tokens = got
        handoff = copy.handoff
        handoff.reserved_ms = t
        handoff.transfer_tokens = missing_tokens
        self._actions.append((START_TRANSFER, handoff))

    def _activate(self, handoff, t):
        handoff.activated_ms = t
        copy = handoff.decode
        rank = copy.rank
        rank.activate(copy)
        self._idle[1].add(handoff.decode_key)
        self._actions.append((RELEASE_SOURCE, handoff))
        got = rank.retry()
        if got is not None:
            self._reserved(got, t)

    @staticmethod
    def _copy(handoff, max_output):
        """A role's copy of the request: same tokens and identity, its own engine state."""
        request = handoff.request
        copy = SimRequest(request.uuid, request.prompt, max_output, request.arrival_ms,
                          request_id=request.request_id, session_id=request.session_id,
                          output_token_ids=request.output_token_ids, dp_rank=request.dp_rank)
        copy.handoff = handoff
        return copy

    def _driver_terminal(self, request, end_ms, status):
        late = self._late
        if late is not None:
            late.append((request, end_ms, status))
        else:
            self._tell_driver(request, end_ms, status)

    def _tell_driver(self, request, end_ms, status):
        """A driver that tracks what requests hold (agentic) hears of a terminal whose source
        KV is still held as not quiescent, and of the release later (``on_quiescent``)."""
        handoff = request.handoff
        if (handoff is not None and handoff.held_ms is not None and handoff.released_ms is None
                and hasattr(self.driver, "on_quiescent")):
            handoff.quiesce_pending = True
            self.driver.on_terminal(request, end_ms, status, quiescent=False)
        else:
            self.driver.on_terminal(request, end_ms, status)

    def _route_terminal(self, request, end_ms):
        handoff = request.handoff
        if handoff is None or handoff.held_ms is None:
            self.routers[0].terminal(request.uuid, end_ms)   # it never held a source
        self.routers[1].terminal(request.uuid, end_ms)

    def _finish(self, handoff, end_ms, status):
        request = handoff.request
        request.terminal_ms = end_ms
        request.terminal_status = status
        self._terminal(request, end_ms, status, self._handoff_record(handoff, status))

    def _handoff_record(self, handoff, status):
        """The terminal's record: the full one, kept on the handoff (its source release time
        comes later), when the collector keeps records; else the fields the summary reads."""
        if not self.collector.keeps_records:
            return make_disagg_summary_record(handoff, status)
        record = handoff.record = make_disagg_record(handoff, status)
        return record

    # ------------------------------------------------------------------ stranded requests
    def _check_drained(self):
        if self.in_flight <= 0:
            return
        raise SimulationError(f"{self._stuck_request()}; the disaggregated replay cannot "
                              f"progress with {self.in_flight} requests in flight")

    def _no_progress(self, t):
        """The same-time livelock guard of this loop: name where the work sits."""
        where = ""
        for pool, workers in (("prefill", self.prefill_workers), ("decode", self.decode_workers)):
            busy = [w for w in workers if w.has_work()]
            if busy:
                names = ", ".join(busy[0].spinning_requests())
                where = f"; {pool} worker {busy[0].worker_id} holds requests {names}"
                break
        raise SimulationError(f"the disaggregated replay keeps changing state at {t} ms without "
                              f"time advancing ({_MAX_ROUNDS} rounds, the livelock limit; "
                              f"{self.in_flight} requests in flight{where})")

    def _stuck_request(self):
        for pool, workers in (("prefill", self.prefill_workers), ("decode", self.decode_workers)):
            for worker in workers:
                for rank in worker.ranks:
                    pending = getattr(rank, "pending", None)
                    if pending:
                        return stuck_message(pool, worker, rank, pending[0], True)
                    if rank.waiting:
                        return stuck_message(pool, worker, rank, rank.waiting[0], False)
        return "requests are stranded between the prefill and decode pools"

    # ------------------------------------------------------------------ report
    def _worker_seconds(self):
        """Each pool's worker count times every clock advance, summed in time order over the
        visited times (every pass end included, also inside extended passes); under scaling
        each worker's own time from its start to its removal or the end."""
        if self.cluster is not None:
            seconds = self.cluster.worker_seconds(self.now_ms)
            return dict(prefill_worker_seconds=seconds["prefill"],
                        decode_worker_seconds=seconds["decode"],
                        prefill_gpus_per_worker=self.prefill_gpus_per_worker,
                        decode_gpus_per_worker=self.gpus_per_worker)
        runs = [self._visited]
        runs.extend(rank.pass_ends for worker in self.workers for rank in worker.ranks)
        prefill, decode = time_sums(runs, (len(self.prefill_workers), len(self.decode_workers)))
        return dict(prefill_worker_seconds=prefill, decode_worker_seconds=decode,
                    prefill_gpus_per_worker=self.prefill_gpus_per_worker,
                    decode_gpus_per_worker=self.gpus_per_worker)


def stuck_message(pool, worker, rank, r, pending):
    """Why request ``r`` at the head of ``rank``'s pending FIFO (``pending``) or waiting queue
    never moves (runtime/plain_disagg_native.py words its stalls with it too)."""
    if pending:
        blocks = -(-r.prompt_len // rank.block_size)
        return (f"request {_name(r)} can never get its KV reserved on decode "
                f"worker {worker.worker_id}: {rank.setting_prefix('num_gpu_blocks')}its prompt "
                f"needs {blocks} KV blocks of "
                f"{rank.block_size} tokens, {rank.pool.allocatable()} of "
                f"{rank.num_blocks} are free")
    return (f"request {_name(r)} can never be scheduled on {pool} worker "
            f"{worker.worker_id}: {rank.stall_reason(r)}")


def _check_rank(request, dp_rank, worker):
    if not 0 <= dp_rank < len(worker.ranks):
        raise SimulationError(f"request {_name(request)}: dp_rank {dp_rank} out of range for "
                              f"dp_size {len(worker.ranks)}")
    return dp_rank


def _name(r):
    return r.request_id or f"#{r.uuid}"   # (the wording the recorded messages use)
