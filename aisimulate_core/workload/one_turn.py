"""The driver of synthetic traffic whose sessions are one turn each (poisson, constant rate,
concurrency, KV fraction with one turn per session).

Each session is then one request, so the request is made straight from its (ready time,
session index): its prompt's ids are the session's group prefix range and its fresh range
(``synthetic.SyntheticSessions``' layout), with no Session or Turn object and nothing kept once
it is made. It gives what ``sessions.SessionDriver`` over ``SyntheticSessions`` gives, to the
bit (tests/test_one_turn_driver.py compares the two):

* By timestamps, session i is ready at the i-th first arrival; the next arrival is the only
  pending work (the session driver's heap never holds more), so it is kept as one number.
* Closed loop (``max_sessions`` = N), sessions are ready in a heap keyed (ready time, index),
  as in the session driver: the first N at 0, the next one at each terminal.
* The group choice of session i is the i-th draw of the shape generator. Requests are made in
  index order (timed always; closed loop as long as terminals come in time order), so each
  draw is made when its request is; a session popped ahead of an earlier one gets its draw
  made in order, the earlier sessions' kept until they leave.
"""

from __future__ import annotations

import heapq
import math

from ..engine.request import SimRequest
from .driver import HeapDriver
from .prompt import IdRanges, Prompt
from .synthetic import first_arrivals

_INF = math.inf


class OneTurnDriver(HeapDriver):
    def __init__(self, sessions, *, max_sessions=None, session_metadata=True):
        self._shape = sessions
        self.total = sessions.count
        self.max_sessions = max_sessions
        self.session_metadata = self._named = session_metadata
        self._isl, self._osl = sessions._isl, sessions._osl
        self._block = sessions.resolved.block_size
        self._own = sessions._own
        self._fresh_base = sessions._fresh_base
        self._fresh_span = (1 << 32) - sessions._fresh_base
        self._drawn = 0       # sessions whose group choice is drawn
        self._ahead = {}      # index -> prefix drawn before its request was made
        self._heap = []
        if max_sessions is None:
            self._arrivals = first_arrivals(sessions.resolved)  # session i's is the i-th
            self._made = 0
            self._next_ms = next(self._arrivals, _INF)
            self.next_ready_ms = self._next_start
            self.pop_ready = self._pop_timed
            self.on_terminal = _ignore   # a session's end starts nothing
        else:
            self._active = 0
            self._next_pending = 0
            self._activate(0.0)

    # ------------------------------------------------------------------ requests
    def _prefix(self, index):
        """Session ``index``'s group prefix range, its draws made in session order."""
        if index == self._drawn and not self._ahead:
            self._drawn += 1
            return self._shape.draw_prefix()
        while self._drawn <= index:
            self._ahead[self._drawn] = self._shape.draw_prefix()
            self._drawn += 1
        return self._ahead.pop(index)

    def _request(self, index, _turn, now_ms):
        own = self._own
        start = index * own
        if start + own <= self._fresh_span:
            fresh = (self._fresh_base + start, own)
            ranges = (fresh,) if not self._shape.grouped else (self._prefix(index), fresh)
        else:   # the fresh ids wrap past 2^32
            fresh = self._shape._fresh_ranges(start, own)
            ranges = fresh if not self._shape.grouped else (self._prefix(index), *fresh)
        prompt = Prompt.from_hash_ids(IdRanges(ranges), self._isl, self._block)
        if self._named:
            return SimRequest(0, prompt, self._osl, now_ms, session_id=f"session_{index}",
                              turn_index=0, driver_ref=index)
        return SimRequest(0, prompt, self._osl, now_ms, driver_ref=index)

    # ------------------------------------------------------------------ by timestamps
    def _next_start(self):
        return self._next_ms

    def _pop_timed(self, now_ms, limit):
        t = self._next_ms
        if t > now_ms:
            return ()  # the runtime asks at every event; most of the time nothing is due
        out = []
        arrivals, make = self._arrivals, self._request
        index = self._made
        while t <= now_ms and len(out) < limit:
            out.append(make(index, 0, now_ms))
            index += 1
            t = next(arrivals, _INF)
        self._made = index
        self._next_ms = t
        return out

    # ------------------------------------------------------------------ closed loop
    def _activate(self, now_ms):
        heap, count = self._heap, self.total
        while self._active < self.max_sessions and self._next_pending < count:
            heapq.heappush(heap, (now_ms, self._next_pending, 0))
            self._next_pending += 1
            self._active += 1

    def on_terminal(self, request, now_ms, status):
        if request.driver_ref is None:
            return  # submitted by an embedder, not one of this driver's requests
        self._active -= 1
        self._activate(now_ms)


def _ignore(request, now_ms, status):
    pass


__all__ = ["OneTurnDriver"]
