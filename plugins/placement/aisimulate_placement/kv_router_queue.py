"""The ``kv_router``'s pending queue (``router_queue_threshold``, CLUSTER.md §2.7).

Requests leave most urgent first: key ``(strict_priority, score)``, higher first, equal keys in
enqueue order. The score is fixed when the request is queued:

* ``fcfs``: ``priority⁺ − arrival_s``;
* ``lcfs``: ``priority⁺ + arrival_s``;
* ``wspt``: ``(1 + priority⁺) / max(1, uncached_tokens)``, weighted shortest processing time,

with ``priority⁺ = max(0, priority)``, ``arrival_s`` the time the request reached the router in
seconds, and ``uncached_tokens = isl − min(isl, best overlap × block size)``, the best overlap
over the candidates when it was queued (ai-dynamo/dynamo ``lib/kv-router/src/scheduling/
policy_queue.rs``, ``QueueSnapshot``; the offline router builds it from the request's overlaps at
arrival). The queue of the reference also has policy classes with deficit round robin; with the
single default class that reduces to this one heap.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable, Sequence

import attrs


@attrs.define(slots=True, eq=False)
class QueuedRequest:
    """What the router keeps of a request it holds: enough to place it later."""

    uuid: int
    input_length: int
    block_hashes: Sequence[int]
    # (worker_id, dp_rank) -> overlap blocks when the request arrived; the reference places a
    # released request with these, not with the index at release time
    overlaps: dict
    arrival_ms: float
    priority: int = 0
    strict_priority: int = 0
    uncached_tokens: int = 0


def _fcfs(request: QueuedRequest) -> float:
    return max(0, request.priority) - max(0.0, request.arrival_ms) / 1000.0


def _lcfs(request: QueuedRequest) -> float:
    return max(0, request.priority) + max(0.0, request.arrival_ms) / 1000.0


def _wspt(request: QueuedRequest) -> float:
    return (1 + max(0, request.priority)) / max(1, request.uncached_tokens)


SCORES: dict[str, Callable[[QueuedRequest], float]] = {"fcfs": _fcfs, "lcfs": _lcfs, "wspt": _wspt}


class PendingQueue:
    """A max-heap on ``(strict_priority, score)``, FIFO among equal keys; requests can be
    withdrawn (a held request that reached a terminal state) without a scan."""

    __slots__ = ("_score", "_heap", "_held", "_sequence")

    def __init__(self, policy: str) -> None:
        self._score = SCORES[policy]
        self._heap: list[tuple[float, float, int, QueuedRequest]] = []
        self._held: dict[int, QueuedRequest] = {}
        self._sequence = 0

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, uuid: Any) -> bool:
        return uuid in self._held

    def push(self, request: QueuedRequest) -> None:
        # heapq is a min-heap: negate the key, the sequence number keeps equal keys FIFO
        heapq.heappush(self._heap, (-request.strict_priority, -self._score(request),
                                    self._sequence, request))
        self._sequence += 1
        self._held[request.uuid] = request

    def pop(self) -> QueuedRequest:
        while True:
            request = heapq.heappop(self._heap)[3]
            if self._held.get(request.uuid) is request:
                del self._held[request.uuid]
                return request

    def withdraw(self, uuid: int) -> bool:
        """Forget a held request (it stays in the heap and is skipped when reached)."""
        return self._held.pop(uuid, None) is not None

    def uuids(self) -> list[int]:
        """The held requests, most urgent first (for tests and diagnostics)."""
        live = [entry for entry in self._heap if self._held.get(entry[3].uuid) is entry[3]]
        return [entry[3].uuid for entry in sorted(live, key=lambda entry: entry[:3])]
