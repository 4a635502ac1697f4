"""``least_loaded``: the simplest load-aware baseline, blind to cache contents.

Each request goes to the active scheduler with the fewest active requests (running + waiting,
read live from the engine), then the fewest active KV blocks, then the lowest
(worker_id, dp_rank). It needs no notifications: the scheduler views are the engines' state now.
"""

from __future__ import annotations

from aisimulate_core.errors import ConfigError, SimulationError
from aisimulate_core.placement import PlacementPolicy, PlacementRequest


class LeastLoaded(PlacementPolicy):
    NAME = "least_loaded"

    def place(self, request: PlacementRequest) -> tuple[int, int]:
        candidates = self.pool.schedulers
        if not candidates:
            raise SimulationError(f"request {request.uuid}: no active workers for least-loaded "
                                  f"placement in the {self.pool.kind} pool")
        rank = request.dp_rank
        if rank is not None:
            every = candidates
            candidates = [view for view in every if view.dp_rank == rank]
            if not candidates:
                dp_size = 1 + max(view.dp_rank for view in every)
                raise ConfigError(f"request {request.uuid}: dp_rank {rank} out of range for "
                                  f"dp_size {dp_size}")
        counts = [view.running_requests + view.waiting_requests for view in candidates]
        fewest = min(counts)
        tied = [view for view, count in zip(candidates, counts) if count == fewest]
        # block counts cost a call into the engine: read them only to break a tie
        best = tied[0] if len(tied) == 1 else min(tied, key=lambda view: view.active_blocks)
        return best.worker_id, best.dp_rank
