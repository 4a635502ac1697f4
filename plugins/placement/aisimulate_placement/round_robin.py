"""``round_robin``: cycle through the schedulers of a pool, blind to load and cache contents."""

from __future__ import annotations

from aisimulate_core.errors import ConfigError, SimulationError
from aisimulate_core.placement import PlacementPolicy, PlacementRequest, PoolView, WorkerView


class RoundRobin(PlacementPolicy):
    """Round-robin placement as the reference runtime does it.

    Aggregated pool: a cursor over workers (ascending id); within the chosen worker its own rank
    cursor cycles 0..dp_size-1. A requested ``dp_rank`` pins the rank but the worker cursor still
    advances (3 workers x DP2: (0,0), (1,0), (2,0), (0,1), (1,1), (2,1), ...).
    Prefill and decode pools: one cursor over all (worker, rank) schedulers in worker-major order;
    a request with a ``dp_rank`` is served by the next worker exposing that rank.
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
            raise SimulationError(f"request {request.uuid}: the {self.pool.kind} pool has no workers")
        if self.pool.kind == "agg":
            return self._place_aggregated(request)
        return self._place_flattened(request)

    def on_worker_added(self, worker: WorkerView) -> None:
        index = sum(1 for other in self._workers if other.worker_id < worker.worker_id)
        self._normalize_cursor()
        if self._cursor_position(index) < self._cursor:
            self._cursor += self._cursor_width(worker)
        self._workers.insert(index, worker)
        self._rank_cursors[worker.worker_id] = 0
        self._schedulers = self._flatten()

    def on_worker_removed(self, worker: WorkerView) -> None:
        index = next((i for i, other in enumerate(self._workers) if other.worker_id == worker.worker_id), None)
        if index is None:
            return
        self._normalize_cursor()
        position = self._cursor_position(index)
        if position < self._cursor:
            self._cursor -= min(self._cursor_width(self._workers[index]), self._cursor - position)
        del self._workers[index]
        del self._rank_cursors[worker.worker_id]
        self._schedulers = self._flatten()

    # Scaling keeps the cursor on the scheduler it would have chosen next.
    def _normalize_cursor(self) -> None:
        size = len(self._workers) if self.pool.kind == "agg" else len(self._schedulers)
        self._cursor = self._cursor % size if size else 0

    def _cursor_position(self, index: int) -> int:
        if self.pool.kind == "agg":
            return index
        return sum(worker.dp_size for worker in self._workers[:index])

    def _cursor_width(self, worker: WorkerView) -> int:
        return 1 if self.pool.kind == "agg" else worker.dp_size

    def _flatten(self) -> list[tuple[int, int]]:
        return [(index, rank) for index, worker in enumerate(self._workers) for rank in range(worker.dp_size)]

    def _place_aggregated(self, request: PlacementRequest) -> tuple[int, int]:
        index = self._cursor % len(self._workers)
        self._cursor = index + 1
        worker = self._workers[index]
        if request.dp_rank is None:
            rank = self._rank_cursors[worker.worker_id]
            self._rank_cursors[worker.worker_id] = (rank + 1) % worker.dp_size
            return index, rank
        _check_rank(request, worker.dp_size)
        return index, request.dp_rank

    def _place_flattened(self, request: PlacementRequest) -> tuple[int, int]:
        if request.dp_rank is None:
            candidates = self._schedulers
        else:
            rank = request.dp_rank
            candidates = [(index, rank) for index, worker in enumerate(self._workers) if 0 <= rank < worker.dp_size]
            if not candidates:
                _check_rank(request, max(worker.dp_size for worker in self._workers))
        scheduler = candidates[self._cursor % len(candidates)]
        self._cursor += 1
        return scheduler


def _check_rank(request: PlacementRequest, dp_size: int) -> None:
    if not 0 <= request.dp_rank < dp_size:
        raise ConfigError(f"request {request.uuid}: dp_rank {request.dp_rank} out of range for dp_size {dp_size}")
