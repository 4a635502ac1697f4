"""Worker lifecycle under scaling: states, worker-seconds and ``lifecycle_operations``.

A worker is ``starting`` (added by scaling, not ready yet), ``active`` (takes placements),
``draining`` (takes nothing new, finishes what it holds) or ``removed``; ids are per pool and
never reused (the next id is one past the largest ever used). Initial workers are active from
0. This module keeps the bookkeeping and the record of every operation in the reference's shape
(CLUSTER.md §3.3, §3.7); the simulation performs the changes on its workers and routers.

Transitions inside one ``planner_scale`` operation come in the reference's order: starts, then
cancellations and drains in descending id, then removals of idle drained workers in ascending id.
"""

from __future__ import annotations

STARTING, ACTIVE, DRAINING, REMOVED = "starting", "active", "draining", "removed"


class PoolLifecycle:
    """The workers of one pool (``agg``, ``prefill`` or ``decode``) over the run."""

    __slots__ = ("kind", "state", "added_ms", "removed_ms", "origin", "next_id", "draining")

    def __init__(self, kind, initial_workers):
        self.kind = kind
        self.state = {i: ACTIVE for i in range(initial_workers)}
        self.added_ms = {i: 0.0 for i in range(initial_workers)}
        self.removed_ms = {}
        self.origin = {}          # worker id -> the operation that began its current action
        self.next_id = initial_workers
        self.draining = 0         # workers draining now (the loop asks at every pass end)

    # ``state`` holds every worker ever added, in ascending id: ids are given out in order
    # (``next_id``) and a removed worker keeps its entry, so its walks need no sort
    def ids(self, state):
        return [i for i, s in self.state.items() if s == state]

    def non_draining(self):
        return [i for i, s in self.state.items() if s == ACTIVE or s == STARTING]

    def worker_seconds(self, end_ms):
        total = 0.0
        for worker_id, added in self.added_ms.items():
            end = self.removed_ms.get(worker_id, end_ms)
            if end > added:
                total += (end - added) / 1000.0
        return total

    def snapshot_counts(self, prefix):
        """The scaling snapshot's count and id keys of this pool (``prefix``: prefill/decode)."""
        active, starting, draining = self.ids(ACTIVE), self.ids(STARTING), self.ids(DRAINING)
        return {
            f"active_{prefix}_count": len(active), f"active_{prefix}_ids": active,
            f"starting_{prefix}_count": len(starting), f"starting_{prefix}_ids": starting,
            f"draining_{prefix}_count": len(draining), f"draining_{prefix}_ids": draining,
            f"non_draining_{prefix}_count": len(active) + len(starting),
            f"total_{prefix}_count": len(active) + len(starting) + len(draining),
        }


class Operation:
    """One entry of ``lifecycle_operations`` being built."""

    __slots__ = ("record", "pool", "owner")

    def __init__(self, owner, ordinal, at_ms, pool, cause, tick_ordinal, origin):
        self.owner = owner        # the Lifecycle: it counts the draining workers of all pools
        self.pool = pool
        self.record = {
            "operation_ordinal": ordinal, "at_ms": at_ms, "pool": pool.kind, "cause": cause,
            "planner_tick_ordinal": tick_ordinal, "origin_operation_ordinal": origin,
            "transitions": [], "state_after_batch": None, "topology_released_request_uuids": [],
        }

    @property
    def ordinal(self):
        return self.record["operation_ordinal"]

    def transition(self, worker_id, transition, new_state, origin, reason=None):
        pool = self.pool
        prior = pool.state.get(worker_id)
        change = (new_state == DRAINING) - (prior == DRAINING)
        if change:
            pool.draining += change
            self.owner.draining += change
        entry = {"worker_id": worker_id, "transition": transition, "prior_state": prior,
                 "state": new_state}
        if reason is not None:
            entry["reason"] = reason
        entry["origin_operation_ordinal"] = origin
        self.record["transitions"].append(entry)
        pool.state[worker_id] = new_state


class Lifecycle:
    """Every pool's lifecycle and the operations log (kept only when ``record`` is set)."""

    def __init__(self, pools, *, record):
        self.pools = pools            # kind -> PoolLifecycle
        self.record = record
        self.operations = []
        self._count = 0
        self.draining = 0             # draining workers over all pools

    def begin(self, at_ms, pool, cause, tick_ordinal=None, origin=None):
        op = Operation(self, self._count, at_ms, pool, cause, tick_ordinal, origin)
        self._count += 1
        return op

    def commit(self, op, released_uuids=()):
        """Close ``op``: its state after the batch; kept unless it changed nothing."""
        if not op.record["transitions"]:
            self._count -= 1     # a tick whose targets change nothing records no operation
            return
        pool = op.pool
        op.record["state_after_batch"] = {"active": pool.ids(ACTIVE), "starting": pool.ids(STARTING),
                                          "draining": pool.ids(DRAINING)}
        op.record["topology_released_request_uuids"] = list(released_uuids)
        if self.record:
            self.operations.append(op.record)
