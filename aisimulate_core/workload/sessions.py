"""The session driver: replays a ``Trace`` by timestamps or in a closed loop (SEMANTICS.md 5).

Within a session turns are sequential and completion driven: turn k+1 is ready at the
completion of turn k plus its think delay (authored timestamps of later turns only gave that
delay). A completed or rejected turn lets the session go on; a cancelled or failed one ends it.

* By timestamps (``max_sessions`` None) sessions are independent: each starts at its
  (normalized, sped-up) first arrival, 0 when it has none.
* Closed loop (``max_sessions`` = N): the first N sessions in trace order start at 0; a session
  holds its slot through all its turns and think times, and when it ends the next pending
  session starts at that moment. Authored starts are ignored.

Ready turns wait in one heap keyed (ready time, session index, turn index), so requests ready
at the same instant leave in session order, as in the reference. Sessions not started yet are
not in the heap: their starts come from ``start_order`` in key order, and the heap holds only
the next one. Every start still waiting has a key at least that one's, so the heap's minimum,
and so the order requests leave in, is the same as with every start pushed up front, while
the heap stays as large as the sessions in flight.

The sessions are a ``Trace``'s list, or any sequence with ``release(index)`` and
``start_order()`` (``synthetic.SyntheticSessions``, which makes each session when its first
turn is asked for, in session order, and forgets it once released). Requests and their prompts
are made only when a turn becomes ready; the driver keeps nothing of a request once it is
terminal, and the per-session state (delta histories) only while the session runs.

With ``session_metadata`` requests carry their session id and turn index (records show them,
placement sees the session); without, they look like independent requests.
"""

from __future__ import annotations

import heapq
from array import array

from ..engine.request import SimRequest
from .delta import History, OutputPlanner
from .driver import HeapDriver
from .prompt import Prompt

# terminal statuses after which the session goes on with its next turn
_CONTINUES = frozenset(("completed", "rejected"))
_AUTHORED = (1 << 64) - 1  # a planned-output start meaning "the turn authored its outputs"


def trace_start_order(sessions):
    """(start_ms, index) of a trace's sessions in (start, index) order; no start counts as 0."""
    starts = [s.start_ms or 0.0 for s in sessions]      # the sessions' own values (no copies)
    order = array("Q", sorted(range(len(sessions)), key=starts.__getitem__))  # stable: by index
    return ((starts[i], i) for i in order)


class SessionDriver(HeapDriver):
    def __init__(self, trace, *, max_sessions=None, session_metadata=True, total_turns=None):
        """``total_turns``: ``trace.total_turns``, when the caller counted it already."""
        self.sessions = trace.sessions
        self.session_metadata = session_metadata
        self.block_size = trace.block_size
        self.total = trace.total_turns if total_turns is None else total_turns
        self.max_sessions = max_sessions
        self._release = getattr(self.sessions, "release", None)
        self._heap = []
        self._active = 0
        self._next_pending = 0
        self._starts = None
        self._histories = None
        self._planned = None
        if trace.accumulate_deltas:
            self._plan_outputs()
        if max_sessions is None:
            order = getattr(self.sessions, "start_order", None)
            self._starts = order() if order is not None else trace_start_order(self.sessions)
            self._next_pending = len(self.sessions)
            self._push_next_start()
        else:
            self._activate(0.0)

    def _plan_outputs(self):
        # Planned in session/turn order at setup, as the reference does; only where each
        # turn's planned values start is kept (the values count up from there), and a
        # session's history exists while it runs.
        planner = OutputPlanner()
        self._histories = {}
        self._turn_base = array("Q")          # index of each session's first turn
        self._planned = array("Q")            # planned-output start of each turn
        for session in self.sessions:
            self._turn_base.append(len(self._planned))
            for turn in session.turns:
                if turn.output_token_ids is not None:
                    self._planned.append(_AUTHORED)
                else:
                    self._planned.append(planner.reserve(turn.max_output_tokens))

    def _push_next_start(self):
        entry = next(self._starts, None)
        if entry is not None:
            heapq.heappush(self._heap, (entry[0], entry[1], 0))

    def _activate(self, now_ms):
        sessions = self.sessions
        while self._active < self.max_sessions and self._next_pending < len(sessions):
            heapq.heappush(self._heap, (now_ms, self._next_pending, 0))
            self._next_pending += 1
            self._active += 1

    # ------------------------------------------------------------------ runtime contract
    def _request(self, index, turn_index, now_ms):
        if turn_index == 0 and self._starts is not None:
            self._push_next_start()           # this start left the heap: the next one joins
        session = self.sessions[index]
        turn = session.turns[turn_index]
        if self._histories is None:
            prompt = Prompt.from_hash_ids(turn.hash_ids, turn.input_length, self.block_size)
            outputs = turn.output_token_ids
        else:
            history = self._histories.get(index)
            if history is None:
                history = self._histories[index] = History()
            history.add_input(turn.hash_ids, turn.input_length, self.block_size)
            prompt = Prompt(*history.runs())
            start = self._planned[self._turn_base[index] + turn_index]
            outputs = (turn.output_token_ids if start == _AUTHORED
                       else OutputPlanner.values(start, turn.max_output_tokens))
        named = self.session_metadata
        return SimRequest(0, prompt, turn.max_output_tokens, now_ms,
                          session_id=session.session_id if named else None,
                          turn_index=turn_index if named else None,
                          output_token_ids=outputs, driver_ref=(index, turn_index),
                          priority=turn.priority, strict_priority=turn.strict_priority)

    def on_terminal(self, request, now_ms, status):
        if request.driver_ref is None:
            return  # submitted by an embedder, not one of this driver's turns
        index, turn_index = request.driver_ref
        turns = self.sessions[index].turns
        following = turn_index + 1
        if status in _CONTINUES and following < len(turns):
            if status == "completed" and self._histories is not None:
                self._histories[index].add_outputs(request.output_token_ids, request.generated)
            heapq.heappush(self._heap, (now_ms + turns[following].delay_ms, index, following))
            return
        # the session ended
        if self._histories is not None:
            self._histories.pop(index, None)
        if self._release is not None:
            self._release(index)
        if self.max_sessions is not None:
            self._active -= 1
            self._activate(now_ms)


__all__ = ["SessionDriver"]
