"""Workload drivers: they hand ready requests to the runtime and hear about terminal ones.

The runtime asks ``next_ready_ms()`` for the time the next request becomes ready and
``pop_ready(now_ms, limit)`` for at most ``limit`` requests ready by ``now_ms`` (in order); it
stamps each popped request's arrival with ``now_ms``, so under a concurrency cap the time spent
waiting outside the system is not part of TTFT.

Drivers: ``TimedDriver`` (a flat request list), ``sessions.SessionDriver`` (session traces,
by timestamps or closed loop) and ``agentic.AgenticDriver`` (dependency graphs).
"""

from __future__ import annotations

import heapq
import math

_INF = math.inf


class WorkloadDriver:
    total = 0  # requests this driver will produce when known (progress display), else 0

    def next_ready_ms(self) -> float:
        raise NotImplementedError

    def pop_ready(self, now_ms, limit):
        raise NotImplementedError

    def on_terminal(self, request, now_ms, status) -> None:
        """A request this driver produced reached a terminal status at ``now_ms``."""

    # Optional: ``report_extras(collector)`` adds driver-specific summary keys at report time
    # (the agentic driver's trajectories).

    def is_drained(self) -> bool:
        return math.isinf(self.next_ready_ms())


class HeapDriver(WorkloadDriver):
    """A driver whose ready work sits in a min-heap of ``(ready_ms, tie_break, item)``;
    subclasses turn a popped item into a request with ``_request(tie_break, item, now_ms)``."""

    _heap: list

    def next_ready_ms(self):
        heap = self._heap   # the runtime asks at every event
        return heap[0][0] if heap else _INF

    def pop_ready(self, now_ms, limit):
        heap = self._heap
        if not heap or heap[0][0] > now_ms:
            return ()  # the runtime asks at every event; most of the time nothing is due
        out = []
        while heap and heap[0][0] <= now_ms and len(out) < limit:
            _, key, item = heapq.heappop(heap)
            out.append(self._request(key, item, now_ms))
        return out

    def _request(self, key, item, now_ms):
        raise NotImplementedError


class TimedDriver(HeapDriver):
    """Requests known up front, each ready at its own time (a flat request list)."""

    def __init__(self, factories):
        # factories: iterable of (ready_ms, make) where make(now_ms) builds the SimRequest
        self._heap = [(t, i, make) for i, (t, make) in enumerate(factories)]
        heapq.heapify(self._heap)
        self.total = len(self._heap)

    def _request(self, key, make, now_ms):
        return make(now_ms)
