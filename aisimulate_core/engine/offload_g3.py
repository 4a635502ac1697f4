"""The G3 storage tier behind the G2 host tier (FEATURES.md §6), both scopes.

``VllmG3Rank`` is ``VllmOffloadRank`` (engine/vllm_offload.py) with a storage pool behind the
host pool (kv/offload_tier.py, least recently used first: a probe hit moves an entry to the
LRU's tail, a completed job its blocks, in ascending hash order):

* writes: when a D2H store ends, its blocks not in the storage pool yet are written as one job
  (free slots, then the least recently used entries neither pending nor pinned are evicted;
  if there are not enough, the leading blocks that fit are written and the rest dropped); the
  host entries stay pinned until it ends; a finished request whose stored blocks are still
  pending on the host or pinned by a write keeps the engine stepping until they are through;
* reads: a block the host lookup misses is probed in storage: resident, a host slot is
  reserved for it (evicting host victims) and it joins one read job; pending, the request
  waits; absent, the probe stops. A request whose lookup started a read waits for it; once
  read, the blocks are resident on the host (the most recent, in the order they were
  promoted) and the lookup goes on as without storage (an H2D into G1). Storage hits count
  as host reuse;
* timing and effects (``Storage``): a job is ready ``latency_to_first_byte_ms`` after its
  submission and then moves its bytes; the ready jobs of one direction share its bandwidth
  equally (reads and writes have separate budgets); bandwidth 0 moves them at once. Jobs of
  both directions run on the tier's one clock, which a rank moves when it submits a job or
  takes its jobs done (a submission is at the clock's time); a job done takes effect in the
  pool at its end, its owner sees it when it next takes its jobs;
* ``cluster_shared`` (one ``Storage`` for every rank, handed out by runtime/build.py): one
  pool for all workers, a job's rate also capped by the shared bandwidth over all workers'
  ready jobs of its direction; a worker reads what another wrote; the end of any worker's
  storage job wakes an idle worker (it looks up again), even a job submitted after it went
  idle; a wake-up that another worker's job pushed back is slept through (settled on the
  reference: g3_shared_* recorded);
* a request whose lookup made it wait is looked up again only once a transfer has ended;
* the engine boundary at a pass end (the reference's): this worker's transfers done by then
  are seen before any pass starts at that time, the boundaries of one instant in worker
  order; the host jobs submitted before it first (the writes behind the stores among them),
  then the storage jobs done, then the stores the ending pass submitted if done.

The summary's ``g3_offload`` object counts probes, hits, jobs, bytes and transfer times, as the
reference's.
"""

from __future__ import annotations

import heapq
import math
from weakref import WeakKeyDictionary

from ..kv.offload_tier import ABSENT, PENDING, offload_tier
from .vllm_offload import _D2H, VllmOffloadRank

_READ, _WRITE = 0, 1
# restore rounds in a row on a stalled rank after which a request computes instead (the
# reference's G3 restore bypass, FEATURES.md §6)
BYPASS_ROUNDS = 1024
_INF = math.inf
# a job: [order, owner, worker, direction, keys, submitted_ms, ready_ms, bytes left]
_ORDER, _OWNER, _WORKER, _DIR, _KEYS, _SUBMITTED, _READY, _LEFT = range(8)


def _direction():
    return {"submitted_jobs": 0, "completed_jobs": 0, "cancelled_jobs": 0,
            "completed_bytes": 0, "transfer_ms": 0.0}


class Storage:
    """A G3 tier: its pool, its jobs of both directions on one clock, and its counters. One
    per rank (``worker_local``) or one for all workers (``cluster_shared``).

    A job is ready ``latency_to_first_byte_ms`` after its submission, then moves its bytes at
    ``min(bw / n_w, shared / n_all)`` bytes per ms over the ``n_w`` ready jobs of its worker and
    direction and the ``n_all`` ready jobs of its direction (the shared cap only for
    ``cluster_shared``; a bandwidth of 0 is no limit of its own). The clock moves to a time
    (``advance``) from event to event (a job ready, a job done); a job done there takes effect
    in the pool at once, whichever rank moved the clock (a write's entries resident, a read's
    pins released, one recency for its blocks), and waits in its owner's list until that rank
    takes it (``take_completed``). A job is submitted at the clock's time, moved there first.
    ``epoch`` counts the jobs done."""

    def __init__(self, g3, shared, block_bytes):
        self.shared = shared
        self.block_bytes = block_bytes
        self.pool = offload_tier(g3.num_g3_blocks)
        self.latency = g3.latency_to_first_byte_ms
        self.bw = (g3.read_bandwidth_gbps, g3.write_bandwidth_gbps)
        self.shared_bw = ((g3.shared_read_bandwidth_gbps, g3.shared_write_bandwidth_gbps)
                          if shared else None)
        self.now = 0.0
        self.jobs = []
        self.completed = {}         # owner -> [(end_ms, job)] done, not taken yet
        self.epoch = 0
        self.writer = {}            # key -> the worker that wrote it
        self.ranks = []             # the ranks using it
        self.boundaries = []        # (end, worker, dp rank, rank) of passes ended, not seen
        self._order = 0
        self.stats = {"lookup_probes": 0, "lookup_hits": 0, "lookup_pending": 0,
                      "cross_worker_read_blocks": 0, "bypassed_restores": 0,
                      "read": _direction(), "write": _direction()}

    # ------------------------------------------------------------------ timing
    def _rates(self, jobs, now):
        """{order: rate} of the jobs of ``jobs`` ready at ``now`` (bytes per ms)."""
        total = [0, 0]
        local = {}
        for j in jobs:
            if j[_READY] <= now:
                d = j[_DIR]
                total[d] += 1
                key = (j[_WORKER], d)
                local[key] = local.get(key, 0) + 1
        bw, shared = self.bw, self.shared_bw
        out = {}
        for j in jobs:
            if j[_READY] <= now:
                d = j[_DIR]
                own = bw[d]
                rate = _INF if own == 0 else own * 1e6 / local[(j[_WORKER], d)]
                if shared is not None and shared[d] != 0:
                    cap = shared[d] * 1e6 / total[d]
                    if cap < rate:
                        rate = cap
                out[j[_ORDER]] = rate
        return out

    @staticmethod
    def _event(j, now, rates):
        if j[_READY] > now:
            return j[_READY]
        return now + j[_LEFT] / rates[j[_ORDER]]

    def _run(self, jobs, now, target, finish):
        """Move ``jobs`` (changed in place) from ``now`` to ``target``, calling ``finish(end,
        job)`` for each job done, in submission order at each event; returns the clock."""
        event_of = self._event
        while True:
            rates = self._rates(jobs, now)
            event = min((event_of(j, now, rates) for j in jobs), default=None)
            nxt = target if event is None or event > target else event
            elapsed = nxt - now
            for j in jobs:
                if j[_READY] <= now:
                    if event_of(j, now, rates) <= nxt:
                        j[_LEFT] = 0.0      # the chosen end is authoritative
                    else:
                        left = j[_LEFT] - elapsed * rates[j[_ORDER]]
                        j[_LEFT] = left if left > 0.0 else 0.0
            now = nxt
            done = [j for j in jobs if j[_READY] <= now and j[_LEFT] == 0.0]
            if done:
                for j in done:
                    jobs.remove(j)
                    finish(now, j)
            if event is None or event > target:
                return now
            if now == target and not done:
                rates = self._rates(jobs, now)
                if all(event_of(j, now, rates) > target for j in jobs):
                    return now

    def advance(self, t_ms):
        if t_ms < self.now:
            t_ms = self.now
        if self.jobs:
            self.now = self._run(self.jobs, self.now, t_ms, self._finish)
        else:
            self.now = t_ms

    def _finish(self, end, job):
        self.epoch += 1
        keys = job[_KEYS]
        if job[_DIR] == _WRITE:
            self.pool.complete(keys, shared=True)
        else:
            self.pool.unpin(keys, shared=True)
            writers, me = self.writer, job[_WORKER]
            self.stats["cross_worker_read_blocks"] += sum(
                1 for h in keys if writers.get(h, me) != me)
        self._count(self.stats, end, job)
        self.completed.setdefault(job[_OWNER], []).append((end, job))

    def _count(self, stats, end, job):
        io = stats["write" if job[_DIR] == _WRITE else "read"]
        io["completed_jobs"] += 1
        io["completed_bytes"] += len(job[_KEYS]) * self.block_bytes
        io["transfer_ms"] += end - job[_SUBMITTED]

    def submit(self, owner, worker, direction, keys, now_ms):
        """A job of ``keys`` (a write's absent keys, a read's resident ones) submitted at
        ``now_ms`` or the clock's time if later. Returns its keys, or None (nothing to do: a
        write with no absent key or no room)."""
        self.advance(now_ms)
        pool = self.pool
        if direction == _WRITE:
            cohort = keys       # its blocks already in the pool are never the victims
            keys = [h for h in cohort if pool.state(h)[0] == ABSENT]
            if not keys:
                return None
            if pool.reserve(keys, protect=cohort) is None:
                # not enough room: the leading blocks that fit are written, the rest dropped
                guard = set(cohort)
                fit = pool.capacity - len(pool) + sum(1 for h in pool.lru() if h not in guard)
                if fit <= 0:
                    return None
                keys = keys[:fit]
                pool.reserve(keys, protect=cohort)
            writers = self.writer
            for h in keys:
                writers[h] = worker
        else:
            keys = list(keys)
            pool.pin(keys)
        self._order += 1
        self.jobs.append([self._order, owner, worker, direction, keys, self.now,
                          self.now + self.latency, float(len(keys) * self.block_bytes)])
        self.stats["write" if direction == _WRITE else "read"]["submitted_jobs"] += 1
        return keys

    def take_completed(self, owner, now_ms):
        """``owner``'s jobs done by ``now_ms`` (the clock moved there), with their ends."""
        self.advance(now_ms)
        found = self.completed.get(owner)
        if not found:
            return ()
        k = 0
        while k < len(found) and found[k][0] <= now_ms:
            k += 1
        out = found[:k]
        del found[:k]
        return out

    def _project(self, until=None):
        """(end, job) of the jobs in flight run on with no job added, to the end or until a
        job of ``until`` (an owner; True: anyone's) is done; the tier is unchanged."""
        jobs = [list(j) for j in self.jobs]
        out = []
        now = self.now
        if until is None:
            self._run(jobs, now, _INF, lambda end, j: out.append((end, j)))
            return out

        class Found(Exception):
            pass

        def finish(end, j):
            out.append((end, j))
            if until is True or j[_OWNER] == until:
                raise Found
        try:
            self._run(jobs, now, _INF, finish)
        except Found:
            pass
        return out

    def next_done(self, owner, anyone=False):
        """When ``owner``'s next job is done (one done and not taken: at its end), or with
        ``anyone`` the next job of any owner in flight, no job added; or None."""
        found = self.completed.get(owner)
        if found:
            return found[0][0]
        if not self.jobs:
            return None
        out = self._project(True if anyone else owner)
        if out and (anyone or out[-1][1][_OWNER] == owner):
            return out[-1][0]
        return None

    def report(self):
        """The summary's ``g3_offload`` counters of this tier, the jobs in flight counted as
        run to their end (the reference completes them when the run ends, its clock unmoved)."""
        stats = self.stats
        pool = self.pool
        # the reference's key order
        out = {key: stats[key] for key in ("lookup_probes", "lookup_hits", "lookup_pending")}
        out["read"] = dict(stats["read"])
        out["write"] = dict(stats["write"])
        out["evictions"] = pool.evictions
        out["cross_worker_read_blocks"] = stats["cross_worker_read_blocks"]
        out["resident_blocks"] = len(pool) - pool.pending
        out["pending_blocks"] = pool.pending
        out["bypassed_restores"] = stats["bypassed_restores"]
        if self.jobs:
            writers = self.writer
            for end, job in self._project():
                self._count(out, end, job)
                if job[_DIR] == _WRITE:
                    out["pending_blocks"] -= len(job[_KEYS])
                    out["resident_blocks"] += len(job[_KEYS])
                else:
                    me = job[_WORKER]
                    out["cross_worker_read_blocks"] += sum(
                        1 for h in job[_KEYS] if writers.get(h, me) != me)
        return out


# the summary's g3_offload object of a run (its collector) and the ranks it sums
_REPORTS = WeakKeyDictionary()


class VllmG3Rank(VllmOffloadRank):
    def __init__(self, engine, timer, pool, *, callbacks, worker_idx=0, dp_rank=0,
                 scheduler_id=0):
        super().__init__(engine, timer, pool, callbacks=callbacks, worker_idx=worker_idx,
                         dp_rank=dp_rank, scheduler_id=scheduler_id)
        self.use_storage(Storage(engine.g3_offload, False, self.block_bytes))
        self._report = None         # (the summary's object, the ranks it sums), once known
        self._stored = []           # keys of the stores that ended, to write behind
        self._ended = 0             # transfers ended (host jobs, this rank's storage jobs)
        self._seen = 0              # the storage's epoch when this rank last took its jobs
        self._rewait = None         # the end of the idle wait in flight
        self._store_at = {}         # id(store keys) -> the pass end that submitted it
        self._wait_mark = None      # _mark() when the idle wait in flight began
        self._waits = {}            # uuid -> the transfers ended when its lookup made it wait
        self._rounds = {}           # uuid -> restore rounds in a row while the rank stalls
        self._bypass = set()        # uuids that compute what G1 and the host do not hold
        self._looking = False       # the lookup running is bypassed
        self._promoted = False      # ... and submitted promotions

    @staticmethod
    def shared_storage(engine):
        """The one storage of all workers for ``cluster_shared`` (runtime/build.py hands it to
        every rank with ``use_storage``), or None."""
        g3 = getattr(engine, "g3_offload", None)
        if g3 is None or g3.scope != "cluster_shared":
            return None
        return Storage(g3, True, engine.block_size * engine.kv_cache_bytes_per_token)

    def use_storage(self, storage):
        """Use ``storage`` (this rank's own, or the cluster's)."""
        self.storage = storage
        storage.ranks.append(self)
        self.g3 = storage.pool
        self._owner = self.scheduler_id if storage.shared else 0
        self._worker = self.worker_idx if storage.shared else 0

    def schedule(self, now_ms):
        if self._report is None:
            self._join_report()
        storage = self.storage
        if storage.boundaries:
            self._flush_boundaries(now_ms)
        before = storage.epoch, storage._order
        if now_ms == self._rewait:
            # woken for a transfer end that another worker's job pushed back: if nothing
            # ended since the wait began, the worker sleeps on as if never woken
            self._finish_transfers(now_ms)
            upcoming = self.next_transfer_ms()
            if self._mark() == self._wait_mark and upcoming is not None and upcoming > now_ms:
                self._idle_wait = self._empty_wait = True
                self.pass_effect = False
                self.pass_end_ms = self._rewait = upcoming
                if storage.shared and (storage.epoch, storage._order) != before:
                    self._wake_others(now_ms)
                self._refresh_report()
                return upcoming
        self._rewait = None
        end = super().schedule(now_ms)
        if self._scheduled and self._rounds:
            self._rounds.clear()    # the rank made progress: no request's thrash counts
        if self._idle_wait:
            self._rewait = end
            self._wait_mark = self._mark()
        if storage.shared and (storage.epoch, storage._order) != before:
            self._wake_others(now_ms)
        self._refresh_report()
        return end

    def _wake_others(self, now_ms):
        """A storage job this pass submitted or saw done moves the next storage event of the
        workers waiting idle for one (their requests wait for a transfer): each is woken at
        its new next event if earlier, as the reference asks each worker for its next event
        anew (settled on the reference: features_g3/g3_shared_wake_*)."""
        sim = None
        for rank in self.storage.ranks:
            wake = rank._rewait
            if rank is self or wake is None or not rank.waiting:
                continue
            t = rank.next_transfer_ms()
            if t is None or t >= wake:
                continue
            if t < now_ms:
                t = now_ms
            if sim is None:
                sim = self.cb.sim
                workers = {id(r): w for w in sim.workers for r in w.ranks}
            worker = workers.get(id(rank))
            if worker is None or not worker.busy:
                continue
            end = sim.cut_pass(worker, t)
            if end is not None:
                rank._rewait = end

    def complete(self):
        # the engine boundary at the pass end: the transfers done by then are seen before any
        # pass starts at that time, this worker's or another's, in worker order (settled on
        # the reference: features_g3/g3_boundary_*)
        end = self.pass_end_ms
        super().complete()
        self.storage.boundaries.append((end, self.worker_idx, self.dp_rank, self))

    def _flush_boundaries(self, now_ms):
        """The engine boundaries of the storage's ranks due by ``now_ms``, in time and worker
        order."""
        storage = self.storage
        due = [b for b in storage.boundaries if b[0] <= now_ms]
        storage.boundaries = [b for b in storage.boundaries if b[0] > now_ms]
        due.sort(key=lambda b: b[:3])
        for end, _, _, rank in due:
            before = storage.epoch, storage._order
            rank._finish_transfers(end)
            if storage.shared and (storage.epoch, storage._order) != before:
                rank._wake_others(end)

    def _finish_job(self, done, kind, payload):
        self._ended += 1
        super()._finish_job(done, kind, payload)

    def _join_report(self):
        """Sum this rank's storage into its run's ``g3_offload`` summary object."""
        collector = self.cb.sim.collector
        report = _REPORTS.get(collector)
        if report is None:
            report = _REPORTS[collector] = ({}, [])
            collector.add_extra("g3_offload", report[0])
        report[1].append(self)
        self._report = report

    def _refresh_report(self):
        summary, ranks = self._report
        out = None
        storages = {id(rank.storage): rank.storage for rank in ranks}  # a shared one once
        for storage in storages.values():
            part = storage.report()
            if out is None:
                out = part
                continue
            for key, value in part.items():
                if isinstance(value, dict):
                    for k, v in value.items():
                        out[key][k] += v
                else:
                    out[key] += value
        if not out["bypassed_restores"]:
            del out["bypassed_restores"]    # the reference reports it only when nonzero
        summary.clear()
        summary.update(out)

    # ------------------------------------------------------------------ events in time order
    def next_transfer_ms(self):
        storage = self.storage
        if storage.epoch != self._seen:
            # a storage job done that this rank has not seen: it looks again now
            lane = storage.now
        else:
            # the end of any worker's storage job wakes this one (it looks up again)
            lane = storage.next_done(self._owner, storage.shared)
        host = super().next_transfer_ms()
        times = [t for t in (host, lane) if t is not None]
        return min(times) if times else None

    def _submit_stores(self, stores, end_ms):
        super()._submit_stores(stores, end_ms)
        at = self._store_at
        for _, keys, _ in stores:
            at[id(keys)] = end_ms

    def _finish_transfers(self, now_ms):
        """The transfers done by ``now_ms``, as the reference's engine boundary sees them: the
        host jobs submitted before (the writes behind the stores among them submitted now),
        then this rank's storage jobs done (a write's host entries unpinned, a read's
        resident), then the stores the pass ending now submitted, if done (their writes),
        and the storage jobs again (settled on the reference: features_g3/g3_boundary_order)."""
        jobs = self._jobs
        if jobs and jobs[0][0] <= now_ms:
            due = []
            while jobs and jobs[0][0] <= now_ms:
                due.append(heapq.heappop(jobs))
            at = self._store_at
            now = []
            for job in due:
                if job[2] == _D2H and at.get(id(job[3])) == now_ms:
                    now.append(job)
                else:
                    self._see(job, now_ms)
            self._take(now_ms)
            for job in now:
                self._see(job, now_ms)
        self._take(now_ms)
        self._seen = self.storage.epoch

    def _see(self, job, now_ms):
        done, _, kind, payload = job
        self._store_at.pop(id(payload), None)
        self._stored = []
        self._finish_job(done, kind, payload)
        for keys in self._stored:
            self._write(keys, now_ms)

    def _take(self, now_ms):
        for done, job in self.storage.take_completed(self._owner, now_ms):
            self._ended += 1
            keys = job[_KEYS]
            if job[_DIR] == _WRITE:
                self.host.unpin(keys, shared=True)
            else:
                # a read's blocks land on the host in the order they were promoted (the
                # request's block order), not in hash order (settled on the reference:
                # features_g3/g3_read_lands_in_block_order)
                self.host.complete(keys, shared=False)

    # ------------------------------------------------------------------ writes
    def _stored_hook(self, done_ms, keys):
        self._stored.append(keys)           # its write is submitted now

    def _write(self, keys, now_ms):
        written = self.storage.submit(self._owner, self._worker, _WRITE, keys, now_ms)
        if written:
            self.host.pin(written)

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

    # ------------------------------------------------------------------ reads
    def _mark(self):
        return self._ended, self.storage.epoch

    def extend(self, horizon_ms, cutoff_ms, max_passes=0):
        # every pass on its own: the storage's lanes and write-behind run outside the host's
        # transfers, which is all VllmOffloadRank.extend checks
        return self.pass_end_ms

    def _may_look_up(self, r):
        # a request whose lookup made it wait is looked up again only once a transfer has
        # ended since (a host job or storage job of this rank, or any storage job)
        mark = self._waits.get(r.uuid)
        if mark is None:
            return True
        if mark == self._mark():
            return False
        del self._waits[r.uuid]
        return True

    def _deferred(self, r):
        self._waits[r.uuid] = self._mark()

    # ------------------------------------------------------------------ the restore bypass
    # A prefix larger than the host pool can make each promotion evict one the same request
    # promoted earlier, so it never reaches compute. A lookup that submits promotions is a
    # restore round; the rounds of a request count while its rank schedules nothing, and after
    # BYPASS_ROUNDS of them it stops reading from G3 until it is admitted or preempted
    # (settled on the reference: features_g3/g3_restore_bypass).
    def _host_lookup(self, r, now_ms):
        uuid = r.uuid
        rounds = self._rounds.get(uuid, 0)
        if rounds >= BYPASS_ROUNDS:
            del self._rounds[uuid]
            self._bypass.add(uuid)
            self.storage.stats["bypassed_restores"] += 1
        self._looking = uuid in self._bypass
        self._promoted = False
        outcome = super()._host_lookup(r, now_ms)
        if self._promoted:
            self._rounds[uuid] = rounds + 1
        return outcome

    def _run_chunk(self, r, tokens):
        if self._bypass:
            self._bypass.discard(r.uuid)    # admitted: the bypass ends
        super()._run_chunk(r, tokens)

    def _preempt(self, r, P):
        super()._preempt(r, P)
        self._rounds.pop(r.uuid, None)
        self._bypass.discard(r.uuid)

    def _probe_below(self, h, refs, reads):
        if self._looking:
            return None     # bypassed: what the host misses is computed
        stats = self.storage.stats
        stats["lookup_probes"] += 1
        g3 = self.g3
        state = g3.state(h)[0]
        if state == ABSENT:
            return None
        if state == PENDING:
            stats["lookup_pending"] += 1
            return False
        stats["lookup_hits"] += 1
        g3.touch([h])
        if self.host.reserve([h]) is None:
            return None     # no host slot for it: the probe stops here
        reads.append(h)
        return True

    def _read_below(self, keys, now_ms):
        self._promoted = True
        self.storage.submit(self._owner, self._worker, _READ, keys, now_ms)
