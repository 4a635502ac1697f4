"""Drive a ``kv_router`` as the runtime would: a real PoolView of real SchedulerViews (the router
never reads engine state through them, so they wrap no rank), and the notifications of a
scenario at the times it gives. Hash ids stand for blocks (trace block size = engine block size,
CLUSTER.md §0); sequence hashes chain them as the engines' do, so two prompts share a block hash
exactly when they share the whole prefix up to it."""

from __future__ import annotations

from aisimulate_core.placement import PlacementRequest, PoolView, SchedulerView, WorkerView
from aisimulate_placement import KvRouter

BLOCK_SIZE = 16


def chain(ids):
    """The sequence hashes of the full blocks with these hash ids."""
    # u64 values, as the engines' sequence hashes are
    return [hash(tuple(ids[: index + 1])) & 0xFFFF_FFFF_FFFF_FFFF for index in range(len(ids))]


def full_chain(ids, isl):
    return chain(ids[: isl // BLOCK_SIZE])


class Cluster:
    """A pool with workers of ``dp_size`` ranks; ``released`` collects ``pool.release`` calls."""

    def __init__(self, config=None, workers=1, dp_size=1, kind="agg", budget=8192, first_id=0):
        self.released = []
        self.pool = PoolView(kind, block_size=BLOCK_SIZE, max_num_batched_tokens=budget,
                             release=lambda uuid, answer: self.released.append((uuid, answer)))
        self.dp_size = dp_size
        self.worker_ids = []
        for worker_id in range(first_id, first_id + workers):
            self.worker_ids.append(worker_id)
        self._refresh()
        self.router = KvRouter(config or {}, self.pool)
        self.router.decisions = []

    def _refresh(self):
        dp = self.dp_size
        self.pool.workers = tuple(WorkerView(worker_id, dp) for worker_id in self.worker_ids)
        self.pool.schedulers = tuple(SchedulerView(None, worker_id, rank, worker_id * dp + rank)
                                     for worker_id in self.worker_ids for rank in range(dp))

    def view(self, worker_id=0, dp_rank=0):
        return self.pool.scheduler(worker_id, dp_rank)

    def place(self, uuid, t, ids, isl, priority=0, strict_priority=0):
        return self.router.place(PlacementRequest(
            uuid, None, isl, None, now_ms=t, priority=priority, strict_priority=strict_priority,
            block_hashes=lambda: full_chain(ids, isl)))

    def stored(self, t, ids, worker_id=0, dp_rank=0):
        self.router.on_kv_stored(self.view(worker_id, dp_rank), chain(ids), t)

    def removed(self, t, ids, worker_id=0, dp_rank=0):
        self.router.on_kv_removed(self.view(worker_id, dp_rank), chain(ids)[-1:], t)

    def prefill_done(self, uuid, t):
        self.router.on_prefill_completed(uuid, t)

    def terminal(self, uuid, t):
        self.router.on_terminal(uuid, t)

    def add_worker(self, worker_id, t):
        self.worker_ids = sorted(self.worker_ids + [worker_id])
        self._refresh()
        self.router.on_worker_ready(WorkerView(worker_id, self.dp_size), t)

    def drain_worker(self, worker_id, t):
        self.worker_ids.remove(worker_id)
        self._refresh()
        self.router.on_worker_draining(WorkerView(worker_id, self.dp_size), t)

    def remove_worker(self, worker_id, t):
        if worker_id in self.worker_ids:
            self.worker_ids.remove(worker_id)
            self._refresh()
        self.router.on_worker_removed(WorkerView(worker_id, self.dp_size), t)

    def logits(self):
        return [decision.logit for decision in self.router.decisions]

    def released_uuids(self):
        uuids = [uuid for uuid, _ in self.released]
        self.released.clear()
        return uuids
