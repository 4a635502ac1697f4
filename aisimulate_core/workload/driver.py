"""Workload drivers: they hand ready requests to the runtime and hear about terminal ones.

The runtime asks ``next_ready_ms()`` for the time the next request becomes ready and
``pop_ready(now_ms, limit)`` for at most ``limit`` requests ready by ``now_ms`` (in order); it
stamps each popped request's arrival with ``now_ms``, so under a concurrency cap the time spent
waiting outside the system is not part of TTFT.
"""

from __future__ import annotations

import heapq
import math


class WorkloadDriver:
    total = 0  # requests this driver will produce when known (progress display), else 0

    def next_ready_ms(self) -> float:
        raise NotImplementedError

    def pop_ready(self, now_ms, limit):
        raise NotImplementedError

    def on_terminal(self, request, now_ms, status) -> None:
        """A request this driver produced reached a terminal status at ``now_ms``."""

    def is_drained(self) -> bool:
        return math.isinf(self.next_ready_ms())


class TimedDriver(WorkloadDriver):
    """Requests known up front, each ready at its own time (a flat request list)."""

    def __init__(self, factories):
        # factories: iterable of (ready_ms, make) where make(now_ms) builds the SimRequest
        self._heap = [(t, i, make) for i, (t, make) in enumerate(factories)]
        heapq.heapify(self._heap)
        self.total = len(self._heap)

    def next_ready_ms(self):
        return self._heap[0][0] if self._heap else math.inf

    def pop_ready(self, now_ms, limit):
        out = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms and len(out) < limit:
            _, _, make = heapq.heappop(heap)
            out.append(make(now_ms))
        return out


class SessionDriver(WorkloadDriver):
    """Sessions of turns: the first turn is ready at the session start, each later turn at the
    previous turn's completion plus its think delay; a failed turn ends its session.

    ``max_sessions`` (closed loop): only that many sessions are active at once; a session
    holds its slot through all its turns and think times, and the next pending session (in
    order) starts when one ends. Session starts are then ignored (everything is ready at 0).
    """

    def __init__(self, sessions, *, max_sessions=None):
        # sessions: list of objects with .start_ms (float|None), .turns (list), .make(turn_idx, now)
        self.sessions = sessions
        self.total = sum(len(s.turns) for s in sessions)
        self._heap = []
        self._seq = 0
        self._next_session = 0
        self.max_sessions = max_sessions
        if max_sessions is None:
            for s in sessions:
                self._push(s.start_ms or 0.0, s, 0)
            self._next_session = len(sessions)
        else:
            for _ in range(min(max_sessions, len(sessions))):
                self._activate(0.0)

    def _push(self, ready_ms, session, turn):
        self._seq += 1
        heapq.heappush(self._heap, (ready_ms, self._seq, session, turn))

    def _activate(self, now_ms):
        if self._next_session < len(self.sessions):
            session = self.sessions[self._next_session]
            self._next_session += 1
            self._push(now_ms, session, 0)

    def next_ready_ms(self):
        return self._heap[0][0] if self._heap else math.inf

    def pop_ready(self, now_ms, limit):
        out = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms and len(out) < limit:
            _, _, session, turn = heapq.heappop(heap)
            out.append(session.make(turn, now_ms))
        return out

    def on_terminal(self, request, now_ms, status):
        session, turn = request.driver_ref
        nxt = turn + 1
        if status == "completed" and nxt < len(session.turns):
            session.on_turn_completed(request, turn)
            self._push(now_ms + session.turns[nxt].delay_ms, session, nxt)
        elif self.max_sessions is not None:
            self._activate(now_ms)
