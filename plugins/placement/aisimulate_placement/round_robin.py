"""``round_robin``: cycle through the schedulers of a pool, blind to load and cache contents."""

from __future__ import annotations

from aisimulate_core.errors import ConfigError, SimulationError
from aisimulate_core.placement import PlacementPolicy, PlacementRequest, PoolView, WorkerView


class RoundRobin(PlacementPolicy):
    """Round-robin placement as the reference runtime does it.

    Aggregated pool: a positional cursor over the active workers in ascending id: the next
    placement takes the worker at (last index + 1) mod (active workers), the index kept as it
    is when workers come or go (the reference's rule, found by differential fuzzing: after one
    worker joins beside the only one the next request goes to the new worker, CLUSTER.md §3.5;
    after a removal the index may skip or repeat a worker). Within the chosen worker its own rank
    cursor cycles 0..dp_size-1. A requested ``dp_rank`` pins the rank but the worker still
    advances (3 workers x DP2: (0,0), (1,0), (2,0), (0,1), (1,1), (2,1)).
    Prefill and decode pools: the same positional cursor over all (worker, rank) schedulers in
    worker-major order; a request with a ``dp_rank`` is served by the next worker exposing that
    rank. Answers are ``(worker_id, dp_rank)``.
    """

    NAME = "round_robin"

    def __init__(self, config: dict, pool: PoolView) -> None:
        super().__init__(config, pool)
        self._workers: list[WorkerView] = sorted(pool.workers, key=lambda worker: worker.worker_id)
        self._rank_cursors: dict[int, int] = {worker.worker_id: 0 for worker in self._workers}
        self._cursor = 0
        self._schedulers = self._flatten()

    def place(self, request: PlacementRequest) -> tuple[int, int]:
        if not self._workers:
            raise SimulationError(f"request {request.uuid}: no active workers for round-robin "
                                  f"placement in the {self.pool.kind} pool")
        if self.pool.kind == "agg":
            return self._place_aggregated(request)
        return self._place_flattened(request)

    # the place() that place_unpinned() stands for; the router takes place_unpinned() only for
    # the class that defines both itself, so a subclass always goes through place()
    UNPINNED_PLACE = place

    # -- scaling: the active workers change; the cursor goes to the one after the last placed
    def on_worker_ready(self, worker: WorkerView, now_ms: float) -> None:
        self._workers = sorted([*self._workers, worker], key=lambda w: w.worker_id)
        self._rank_cursors.setdefault(worker.worker_id, 0)
        self._resync()

    def on_worker_draining(self, worker: WorkerView, now_ms: float) -> None:
        self._leave(worker)

    def on_worker_removed(self, worker: WorkerView, now_ms: float) -> None:
        self._leave(worker)
        self._rank_cursors.pop(worker.worker_id, None)

    def _leave(self, worker: WorkerView) -> None:
        kept = [w for w in self._workers if w.worker_id != worker.worker_id]
        if len(kept) != len(self._workers):
            self._workers = kept
            self._resync()

    def _resync(self) -> None:
        # the cursor is positional (the reference's): it keeps its index into the active list
        # whatever workers came or went
        self._schedulers = self._flatten()

    def _flatten(self) -> list[tuple[int, int]]:
        return [(worker.worker_id, rank) for worker in self._workers for rank in range(worker.dp_size)]

    def _place_aggregated(self, request: PlacementRequest) -> tuple[int, int]:
        if request.dp_rank is None:
            return self.place_unpinned()
        index = self._cursor % len(self._workers)
        self._cursor = index + 1
        worker = self._workers[index]
        _check_rank(request, worker.dp_size)
        return worker.worker_id, request.dp_rank

    def place_unpinned(self) -> tuple[int, int] | None:
        """``place()``'s answer for a request that asks for no ``dp_rank``, without reading
        the request; None (and nothing changed) with no active worker. The runtime's router
        calls it instead of ``place()`` while ``place`` is this class's own
        (``UNPINNED_PLACE``): no ``PlacementRequest`` is built per request."""
        workers = self._workers
        if not workers:
            return None
        if self.pool.kind != "agg":
            # prefill and decode pools: the next of all (worker, rank) schedulers
            schedulers = self._schedulers
            index = self._cursor % len(schedulers)
            self._cursor = index + 1
            return schedulers[index]
        index = self._cursor % len(workers)
        self._cursor = index + 1
        worker = workers[index]
        cursors = self._rank_cursors
        rank = cursors[worker.worker_id]
        cursors[worker.worker_id] = (rank + 1) % worker.dp_size
        return worker.worker_id, rank

    def _place_flattened(self, request: PlacementRequest) -> tuple[int, int]:
        if request.dp_rank is None:
            return self.place_unpinned()
        rank = request.dp_rank
        candidates = [(worker.worker_id, rank) for worker in self._workers if 0 <= rank < worker.dp_size]
        if not candidates:
            _check_rank(request, max(worker.dp_size for worker in self._workers))
        index = self._cursor % len(candidates)
        scheduler = candidates[index]
        self._cursor = index + 1
        return scheduler


def _check_rank(request: PlacementRequest, dp_size: int) -> None:
    if not 0 <= request.dp_rank < dp_size:
        raise ConfigError(f"request {request.uuid}: dp_rank {request.dp_rank} out of range for dp_size {dp_size}")
