"""The G3 storage tier behind the G2 host tier (FEATURES.md §6), both scopes.

``VllmG3Rank`` is ``VllmOffloadRank`` (engine/vllm_offload.py) with a storage pool behind the
host pool (kv/offload_tier.py, recency by a global counter: a probe hit and a completed job
move an entry to the LRU's tail, one by one):

* writes: when a D2H store ends, its blocks not in the storage pool yet are written as one job
  (free slots, then the least recently used entries neither pending nor pinned are evicted;
  if there are not enough, the leading blocks that fit are written and the rest dropped); the
  host entries stay pinned until it ends; a finished request whose stored blocks are still
  pending on the host or pinned by a write keeps the engine stepping until they are through;
* reads: a block the host lookup misses is probed in storage: resident, a host slot is
  reserved for it (evicting host victims) and it joins one read job; pending, the request
  waits; absent, the probe stops. A request whose lookup started a read waits for it; once
  read, the blocks are resident on the host and the lookup goes on as without storage
  (an H2D into G1). Storage hits count as host reuse;
* timing (``FairLane``): a job is ready ``latency_to_first_byte_ms`` after its submission and
  then moves its bytes; the ready jobs of one direction share its bandwidth equally (reads
  and writes have separate budgets); bandwidth 0 moves them at once;
* ``cluster_shared`` (``Storage`` shared by every rank, handed out by runtime/build.py): one
  pool for all workers, a job's rate also capped by the shared bandwidth over all workers'
  ready jobs of its direction; a worker reads what another wrote; the end of any worker's
  storage job wakes an idle worker (it looks up again), a wake-up that another worker's job
  pushed back is slept through (settled on the reference: g3_shared_* recorded).

The summary's ``g3_offload`` object counts probes, hits, jobs, bytes and transfer times, as the
reference's.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from ..kv.offload_tier import ABSENT, PENDING, offload_tier
from .vllm_offload import VllmOffloadRank


class FairLane:
    """One direction's jobs (reads or writes) of one worker, or of all workers for
    ``cluster_shared``: a ready job of worker ``w`` moves its bytes at
    ``min(bandwidth / n_w, shared / n_all)`` over the ``n_w`` ready jobs of its worker and the
    ``n_all`` ready jobs of the lane (``shared`` None or 0: no cap; ``bandwidth`` 0: no limit
    of the worker's own); with neither limit a job moves at once.
    Each rank sees its own jobs through a ``LaneView``; the lane's clock moves forward with
    the first rank that looks (passes start in time order), and the jobs it finds done wait
    for their rank."""

    def __init__(self, gbps, latency_ms, shared_gbps=None):
        self.rate = gbps * 1e6           # bytes per ms; 0: instantaneous
        self.cap = None if not shared_gbps else shared_gbps * 1e6
        self.latency = latency_ms
        self.instant = self.rate == 0 and self.cap is None
        self.clock = 0.0
        # [ready_ms, bytes left, submitted_ms, order, payload, worker, owner]
        self.jobs = []
        self.done = {}                   # owner -> [(end_ms, job)] found done, not yet seen
        self.last_end = None             # when the latest job ended
        self._order = 0

    def view(self, worker, owner):
        return LaneView(self, worker, owner)

    def add(self, now_ms, size, payload, worker=0, owner=0):
        self._order += 1
        self.jobs.append([now_ms + self.latency, float(size), now_ms, self._order, payload,
                          worker, owner])

    def _rates(self, jobs, clock):
        """The ready jobs of ``jobs`` at ``clock`` with their rates (bytes per ms)."""
        ready = [j for j in jobs if j[0] <= clock]
        per_worker = {}
        for j in ready:
            per_worker[j[5]] = per_worker.get(j[5], 0) + 1
        cap = None if self.cap is None or not ready else self.cap / len(ready)
        out = []
        for j in ready:
            # a worker's bandwidth 0 is no limit of its own: the shared cap still holds
            rate = self.rate / per_worker[j[5]] if self.rate else cap
            out.append((j, rate if cap is None or rate < cap else cap))
        return out

    def _run(self, jobs, clock, left):
        """One step of ``jobs`` from ``clock`` (``left``: bytes left by job order, updated):
        the step's end and the jobs done then, in submission order."""
        waiting = [j[0] for j in jobs if j[0] > clock]
        t = min(waiting) if waiting else float("inf")
        rated = self._rates(jobs, clock)
        if rated:
            if self.instant:
                return clock, sorted((j for j, _ in rated), key=lambda j: j[3])
            # a job whose end rounds to the clock (an infinite rate, or a time too large for
            # the transfer to move it) is done now: the step always makes progress
            ends = {j[3]: clock + left[j[3]] / rate for j, rate in rated}
            t = min(t, min(ends.values()))
            for j, rate in rated:
                left[j[3]] -= (t - clock) * rate
        else:
            ends = {}
        done = [j for j, _ in rated if left[j[3]] <= 1e-6 or ends[j[3]] <= clock]
        done.sort(key=lambda j: j[3])
        return t, done

    def next_event(self):
        if not self.jobs:
            return None
        return self._run(self.jobs, self.clock, {j[3]: j[1] for j in self.jobs})[0]

    def next_done(self, owner=None):
        """When ``owner``'s next job (None: any job) ends with no job added meanwhile, or
        None."""
        jobs = list(self.jobs)
        if not any(owner is None or j[6] == owner for j in jobs):
            return None
        clock = self.clock
        left = {j[3]: j[1] for j in jobs}
        while True:
            clock, done = self._run(jobs, clock, left)
            if any(owner is None or j[6] == owner for j in done):
                return clock
            gone = {j[3] for j in done}
            jobs = [j for j in jobs if j[3] not in gone]

    def project(self):
        """(end, job) of every job in flight if no job were added (the run's end)."""
        jobs = list(self.jobs)
        clock = self.clock
        left = {j[3]: j[1] for j in jobs}
        out = []
        while jobs:
            clock, done = self._run(jobs, clock, left)
            out.extend((clock, j) for j in done)
            gone = {j[3] for j in done}
            jobs = [j for j in jobs if j[3] not in gone]
        return out

    def advance(self, t_ms):
        """Move the clock to ``t_ms``: the jobs done by then go to their owners' lists."""
        while self.jobs:
            left = {j[3]: j[1] for j in self.jobs}
            t, done = self._run(self.jobs, self.clock, left)
            if t > t_ms:
                break
            for j in self.jobs:
                j[1] = left[j[3]]
            self.clock = t
            for j in done:
                self.jobs.remove(j)
                self.done.setdefault(j[6], []).append((t, j))
                self.last_end = t
        if t_ms > self.clock:
            if not self.instant:
                for j, rate in self._rates(self.jobs, self.clock):
                    j[1] -= (t_ms - self.clock) * rate
            self.clock = t_ms


class LaneView:
    """One rank's side of a ``FairLane``: its jobs, and the ends of its jobs."""

    __slots__ = ("lane", "worker", "owner")

    def __init__(self, lane, worker, owner):
        self.lane, self.worker, self.owner = lane, worker, owner

    def add(self, now_ms, size, payload):
        self.lane.add(now_ms, size, payload, self.worker, self.owner)

    def next_event(self):
        """The next time this rank's drain has something to do (an end found already, or the
        lane's next event), or None."""
        lane = self.lane
        found = lane.done.get(self.owner)
        if found:
            return found[0][0]
        return lane.next_event()

    def next_done(self):
        found = self.lane.done.get(self.owner)
        if found:
            return found[0][0]
        return self.lane.next_done(self.owner)

    def next_any_done(self):
        """When the lane's next job ends, whoever's (a shared lane wakes every worker)."""
        found = self.lane.done.get(self.owner)
        if found:
            return found[0][0]
        return self.lane.next_done()

    def advance(self, t_ms):
        """This rank's jobs done by ``t_ms``, with their end times, in that order."""
        lane = self.lane
        if t_ms > lane.clock or (lane.jobs and lane.next_event() <= t_ms):
            lane.advance(t_ms)
        found = lane.done.get(self.owner)
        if not found:
            return []
        k = 0
        while k < len(found) and found[k][0] <= t_ms:
            k += 1
        out = found[:k]
        del found[:k]
        return out


class Storage:
    """A G3 pool with its read and write lanes: one per rank (``worker_local``) or one for all
    workers (``cluster_shared``, the lanes capped by the shared bandwidths), and which worker
    wrote each entry (the summary's ``cross_worker_read_blocks``)."""

    def __init__(self, g3, shared):
        self.shared = shared
        self.pool = offload_tier(g3.num_g3_blocks)
        latency = g3.latency_to_first_byte_ms
        self.reads = FairLane(g3.read_bandwidth_gbps, latency,
                              g3.shared_read_bandwidth_gbps if shared else None)
        self.writes = FairLane(g3.write_bandwidth_gbps, latency,
                               g3.shared_write_bandwidth_gbps if shared else None)
        self.writer = {}


# the summary's g3_offload object of a run (its collector) and the ranks it sums
_REPORTS = WeakKeyDictionary()


def _direction():
    return {"submitted_jobs": 0, "completed_jobs": 0, "cancelled_jobs": 0,
            "completed_bytes": 0, "transfer_ms": 0.0}


class VllmG3Rank(VllmOffloadRank):
    def __init__(self, engine, timer, pool, *, callbacks, worker_idx=0, dp_rank=0,
                 scheduler_id=0):
        super().__init__(engine, timer, pool, callbacks=callbacks, worker_idx=worker_idx,
                         dp_rank=dp_rank, scheduler_id=scheduler_id)
        self.use_storage(Storage(engine.g3_offload, shared=False))
        self.g3_stats = {"lookup_probes": 0, "lookup_hits": 0, "lookup_pending": 0,
                         "cross_worker_read_blocks": 0,
                         "read": _direction(), "write": _direction()}
        self._report = None         # (the summary's object, the ranks it sums), once known
        self._stored = []           # keys of the stores that ended, to write behind
        self._ended = 0             # transfers ended (host and storage jobs)
        self._rewait = None         # the end of the idle wait in flight

    @staticmethod
    def shared_storage(engine):
        """The one storage of all workers for ``cluster_shared`` (runtime/build.py hands it to
        every rank with ``use_storage``), or None."""
        g3 = getattr(engine, "g3_offload", None)
        if g3 is None or g3.scope != "cluster_shared":
            return None
        return Storage(g3, shared=True)

    def use_storage(self, storage):
        """Use ``storage``'s pool and lanes (this rank's own, or the cluster's)."""
        self.storage = storage
        self.g3 = storage.pool
        owner = self.scheduler_id if storage.shared else 0
        worker = self.worker_idx if storage.shared else 0
        self._reads = storage.reads.view(worker, owner)
        self._writes = storage.writes.view(worker, owner)

    def schedule(self, now_ms):
        if self._report is None:
            self._join_report()
        if now_ms == self._rewait:
            # woken for a transfer end that another worker's job pushed back (the lanes of
            # cluster_shared): if nothing ended, the worker sleeps on as if never woken
            ended = self._ended
            self._finish_transfers(now_ms)
            upcoming = self.next_transfer_ms()
            if self._ended == ended and upcoming is not None and upcoming > now_ms and \
                    self._reads.lane.last_end != now_ms and self._writes.lane.last_end != now_ms:
                self._idle_wait = self._empty_wait = True
                self.pass_effect = False
                self.pass_end_ms = self._rewait = upcoming
                self._refresh_report()
                return upcoming
        self._rewait = None
        end = super().schedule(now_ms)
        if self._idle_wait:
            self._rewait = end
        self._refresh_report()
        return end

    def _finish_job(self, done, kind, payload):
        self._ended += 1
        super()._finish_job(done, kind, payload)

    def _join_report(self):
        """Sum this rank into its run's ``g3_offload`` summary object."""
        collector = self.cb.sim.collector
        report = _REPORTS.get(collector)
        if report is None:
            report = _REPORTS[collector] = ({}, [])
            collector.add_extra("g3_offload", report[0])
        report[1].append(self)
        self._report = report

    def _refresh_report(self):
        summary, ranks = self._report
        out = {"lookup_probes": 0, "lookup_hits": 0, "lookup_pending": 0,
               "read": _direction(), "write": _direction(), "evictions": 0,
               "cross_worker_read_blocks": 0, "resident_blocks": 0, "pending_blocks": 0}
        pools = {}
        for rank in ranks:
            stats = rank.g3_stats
            for key in ("lookup_probes", "lookup_hits", "lookup_pending",
                        "cross_worker_read_blocks"):
                out[key] += stats[key]
            for direction in ("read", "write"):
                for key, value in stats[direction].items():
                    out[direction][key] += value
            pools[id(rank.g3)] = rank.g3       # a shared pool counts once
        for g3 in pools.values():
            out["evictions"] += g3.evictions
            out["resident_blocks"] += len(g3) - g3.pending
            out["pending_blocks"] += g3.pending
        # the storage jobs still in flight are counted as run to their end (the reference
        # completes them when the run ends, without moving its clock)
        storages = {id(rank.storage): (rank.storage, rank.block_bytes) for rank in ranks}
        for storage, block_bytes in storages.values():
            for direction, lane in (("read", storage.reads), ("write", storage.writes)):
                stats = out[direction]
                found = [x for ends in lane.done.values() for x in ends]  # not seen yet
                for end, job in found + lane.project():
                    blocks = len(job[4])
                    stats["completed_jobs"] += 1
                    stats["completed_bytes"] += blocks * block_bytes
                    stats["transfer_ms"] += end - job[2]
                    if direction == "write":
                        out["pending_blocks"] -= blocks
                        out["resident_blocks"] += blocks
        summary.clear()
        summary.update(out)

    # ------------------------------------------------------------------ events in time order
    def next_transfer_ms(self):
        if self.storage.shared:
            # the end of any worker's storage job wakes this one (it looks up again)
            lanes = (self._reads.next_any_done(), self._writes.next_any_done())
        else:
            lanes = (self._reads.next_done(), self._writes.next_done())
        times = [t for t in (super().next_transfer_ms(),) + lanes if t is not None]
        return min(times) if times else None

    def _finish_transfers(self, now_ms):
        # the writes behind the stores that ended are submitted now, when the engine sees them
        self._stored = []
        self._drain(now_ms)
        for keys in self._stored:
            self._write(keys, now_ms)

    def _drain(self, now_ms):
        """Every host job and storage job done by ``now_ms``, in the order they end."""
        jobs = self._jobs
        while True:
            t_host = jobs[0][0] if jobs else None
            t_read = self._reads.next_event()
            t_write = self._writes.next_event()
            t = min(x for x in (t_host, t_read, t_write, float("inf")) if x is not None)
            if t > now_ms:
                break
            if t_read == t or t_write == t:
                for lane, finish in ((self._reads, self._read_done),
                                     (self._writes, self._write_done)):
                    for done, job in lane.advance(t):
                        finish(done, job)
                continue
            super()._finish_transfers(t)   # the host jobs ending at t (they may add writes)
        for lane, finish in ((self._reads, self._read_done), (self._writes, self._write_done)):
            for done, job in lane.advance(now_ms):
                finish(done, job)

    def _store_running(self, done, keys, end_ms):
        return False        # _retire below holds on every stored block, not the last store

    def _retire(self, r, end_ms):
        # a request that finishes while any block it stored is still pending on the host or
        # pinned by the write behind it keeps the engine stepping until they are through,
        # whichever of its stores wrote them (settled on the reference: g3_hold_*)
        refs = self._refs.get(r.uuid)
        held = []
        if refs:
            host = self.host
            for h in refs[:self._cursor.get(r.uuid, 0)]:
                state, pins = host.state(h)
                if state == PENDING or pins:
                    held.append(h)
        super()._retire(r, end_ms)
        if held:
            self._holds.append(held)

    # ------------------------------------------------------------------ writes
    def _stored_hook(self, done_ms, keys):
        self._stored.append(keys)

    def _write(self, keys, now_ms):
        done_ms = now_ms
        g3 = self.g3
        new = [h for h in keys if g3.state(h)[0] == ABSENT]
        if not new:
            return
        for done, job in self._writes.advance(done_ms):
            self._write_done(done, job)
        if g3.reserve(new, protect=keys) is None:
            # not enough room: the leading blocks that fit are written, the rest dropped
            guard = set(keys)
            fit = g3.capacity - len(g3) + sum(1 for h in g3.lru() if h not in guard)
            if fit <= 0:
                return
            new = new[:fit]
            g3.reserve(new, protect=keys)
        self.host.pin(new)
        writers = self.storage.writer
        for h in new:
            writers[h] = self.worker_idx
        self._writes.add(done_ms, len(new) * self.block_bytes, new)
        self.g3_stats["write"]["submitted_jobs"] += 1

    def _write_done(self, done_ms, job):
        keys = job[4]
        self._ended += 1
        self.g3.complete(keys, shared=True)
        self.host.unpin(keys, shared=True)
        self._count("write", done_ms, job, len(keys))

    def _count(self, direction, done_ms, job, blocks):
        stats = self.g3_stats[direction]
        stats["completed_jobs"] += 1
        stats["completed_bytes"] += blocks * self.block_bytes
        stats["transfer_ms"] += done_ms - job[2]

    # ------------------------------------------------------------------ reads
    def _probe_below(self, h, refs, reads):
        stats = self.g3_stats
        stats["lookup_probes"] += 1
        state = self.g3.state(h)[0]
        if state == ABSENT:
            return None
        if state == PENDING:
            stats["lookup_pending"] += 1
            return False
        stats["lookup_hits"] += 1
        self.g3.touch([h])
        if self.host.reserve([h]) is None:
            return None     # no host slot for it: the probe stops here
        reads.append(h)
        return True

    def _read_below(self, keys, now_ms):
        for done, job in self._reads.advance(now_ms):
            self._read_done(done, job)
        self.g3.pin(keys)
        writers, me = self.storage.writer, self.worker_idx
        self.g3_stats["cross_worker_read_blocks"] += sum(
            1 for h in keys if writers.get(h, me) != me)
        self._reads.add(now_ms, len(keys) * self.block_bytes, list(keys))
        self.g3_stats["read"]["submitted_jobs"] += 1

    def _read_done(self, done_ms, job):
        keys = job[4]
        self._ended += 1
        self.host.complete(keys, shared=True)
        self.g3.unpin(keys, shared=True)
        self._count("read", done_ms, job, len(keys))
