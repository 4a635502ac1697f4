"""The G3 storage tier behind the G2 host tier (FEATURES.md §6), ``worker_local`` scope.

``VllmG3Rank`` is ``VllmOffloadRank`` (engine/vllm_offload.py) with a storage pool behind the
host pool (kv/offload_tier.py, recency by a global counter: a probe hit and a completed job
move an entry to the LRU's tail, one by one):

* writes: when a D2H store ends, its blocks not in the storage pool yet are written as one job
  (free slots, then the least recently used entries neither pending nor pinned are evicted;
  if there are not enough the whole write is dropped); the host entries stay pinned until it
  ends;
* reads: a block the host lookup misses is probed in storage: resident, a host slot is
  reserved for it (evicting host victims) and it joins one read job; pending, the request
  waits; absent, the probe stops. A request whose lookup started a read waits for it; once
  read, the blocks are resident on the host and the lookup goes on as without storage
  (an H2D into G1). Storage hits count as host reuse;
* timing (``FairLane``): a job is ready ``latency_to_first_byte_ms`` after its submission and
  then moves its bytes; the ready jobs of one direction share its bandwidth equally (reads
  and writes have separate budgets); bandwidth 0 moves them at once.

The summary's ``g3_offload`` object counts probes, hits, jobs, bytes and transfer times, as the
reference's.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from ..errors import ConfigError
from ..kv.offload_tier import ABSENT, PENDING, offload_tier
from .vllm_offload import VllmOffloadRank


class FairLane:
    """One direction's jobs (a read or write lane of one worker): each ready job moves its
    bytes at ``bandwidth / n`` over the ``n`` ready jobs. ``advance(t)`` returns the jobs done
    by ``t`` with their end times, in that order; ``next_event()`` is the next time a job
    becomes ready or ends (with no job added meanwhile)."""

    def __init__(self, gbps, latency_ms):
        self.rate = gbps * 1e6           # bytes per ms; 0: instantaneous
        self.latency = latency_ms
        self.clock = 0.0
        self.jobs = []                   # [ready_ms, bytes left, submitted_ms, order, payload]
        self._order = 0

    def add(self, now_ms, size, payload):
        self._order += 1
        self.jobs.append([now_ms + self.latency, float(size), now_ms, self._order, payload])

    def __bool__(self):
        return bool(self.jobs)

    def next_event(self):
        if not self.jobs:
            return None
        ready = [j for j in self.jobs if j[0] <= self.clock]
        waiting = [j[0] for j in self.jobs if j[0] > self.clock]
        t = min(waiting) if waiting else float("inf")
        if ready:
            if self.rate == 0:
                return self.clock
            least = min(j[1] for j in ready)
            t = min(t, self.clock + least * len(ready) / self.rate)
        return t

    def next_done(self):
        """When the next job ends (with no job added meanwhile), or None."""
        if not self.jobs:
            return None
        clock = self.clock
        left = {j[3]: j[1] for j in self.jobs}
        while True:
            ready = [j for j in self.jobs if j[0] <= clock]
            waiting = [j[0] for j in self.jobs if j[0] > clock]
            t = min(waiting) if waiting else float("inf")
            if ready:
                if self.rate == 0:
                    return clock
                least = min(left[j[3]] for j in ready)
                end = clock + least * len(ready) / self.rate
                if end <= t:
                    return end
                for j in ready:
                    left[j[3]] -= (t - clock) * self.rate / len(ready)
            clock = t

    def advance(self, t_ms):
        done = []
        while self.jobs:
            t = self.next_event()
            if t > t_ms:
                break
            ready = [j for j in self.jobs if j[0] <= self.clock]
            if ready and self.rate:
                moved = (t - self.clock) * self.rate / len(ready)
                for j in ready:
                    j[1] -= moved
            self.clock = t
            finished = [j for j in self.jobs if j[0] <= t and (self.rate == 0 or j[1] <= 1e-6)]
            finished.sort(key=lambda j: j[3])
            for j in finished:
                self.jobs.remove(j)
                done.append((t, j))
        if t_ms > self.clock:
            ready = [j for j in self.jobs if j[0] <= self.clock]
            if ready and self.rate:
                moved = (t_ms - self.clock) * self.rate / len(ready)
                for j in ready:
                    j[1] -= moved
            self.clock = t_ms
        return done


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
        g3 = engine.g3_offload
        if g3.scope != "worker_local":     # spec/validate.py refuses it first
            raise ConfigError(f"g3_offload.scope: '{g3.scope}' is not supported yet")
        self.g3 = offload_tier(g3.num_g3_blocks)
        self._reads = FairLane(g3.read_bandwidth_gbps, g3.latency_to_first_byte_ms)
        self._writes = FairLane(g3.write_bandwidth_gbps, g3.latency_to_first_byte_ms)
        self.g3_stats = {"lookup_probes": 0, "lookup_hits": 0, "lookup_pending": 0,
                         "read": _direction(), "write": _direction()}
        self._report = None         # (the summary's object, the ranks it sums), once known
        self._stored = []           # keys of the stores that ended, to write behind

    def schedule(self, now_ms):
        if self._report is None:
            self._join_report()
        end = super().schedule(now_ms)
        self._refresh_report()
        return end

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
        for rank in ranks:
            stats = rank.g3_stats
            for key in ("lookup_probes", "lookup_hits", "lookup_pending"):
                out[key] += stats[key]
            for direction in ("read", "write"):
                for key, value in stats[direction].items():
                    out[direction][key] += value
            g3 = rank.g3
            out["evictions"] += g3.evictions
            out["resident_blocks"] += len(g3) - g3.pending
            out["pending_blocks"] += g3.pending
        summary.clear()
        summary.update(out)

    # ------------------------------------------------------------------ events in time order
    def next_transfer_ms(self):
        times = [t for t in (super().next_transfer_ms(), self._reads.next_done(),
                             self._writes.next_done()) if t is not None]
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
        # the write behind a store not seen ended yet follows it
        return done > end_ms or any(self.host.state(h)[0] == PENDING for h in keys)

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
        victims = g3.reserve(new, protect=keys)
        if victims is None:
            return          # not enough room: the whole write is dropped
        self.host.pin(new)
        self._writes.add(done_ms, len(new) * self.block_bytes, new)
        self.g3_stats["write"]["submitted_jobs"] += 1

    def _write_done(self, done_ms, job):
        keys = job[4]
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
        self._reads.add(now_ms, len(keys) * self.block_bytes, list(keys))
        self.g3_stats["read"]["submitted_jobs"] += 1

    def _read_done(self, done_ms, job):
        keys = job[4]
        self.host.complete(keys, shared=True)
        self.g3.unpin(keys, shared=True)
        self._count("read", done_ms, job, len(keys))
