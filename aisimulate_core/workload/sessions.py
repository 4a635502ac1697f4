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
at the same instant leave in session order, as in the reference.

With ``session_metadata`` requests carry their session id and turn index (records show them,
placement sees the session); without, they look like independent requests.
"""

from __future__ import annotations

import heapq

from ..engine.request import SimRequest
from .delta import History, OutputPlanner
from .driver import HeapDriver
from .prompt import Prompt

# terminal statuses after which the session goes on with its next turn
_CONTINUES = frozenset(("completed", "rejected"))


class SessionDriver(HeapDriver):
    def __init__(self, trace, *, max_sessions=None, session_metadata=True):
        self.sessions = trace.sessions
        self.session_metadata = session_metadata
        self.block_size = trace.block_size
        self.total = trace.total_turns
        self.max_sessions = max_sessions
        self._heap = []
        self._active = 0
        self._next_pending = 0
        self._histories = None
        self._planned = None
        if trace.accumulate_deltas:
            self._plan_outputs()
        if max_sessions is None:
            self._heap = [(s.start_ms or 0.0, i, 0) for i, s in enumerate(self.sessions)]
            heapq.heapify(self._heap)
            self._next_pending = len(self.sessions)
        else:
            self._activate(0.0)

    def _plan_outputs(self):
        # planned in session/turn order at setup, as the reference does
        planner = OutputPlanner()
        self._histories = [History() for _ in self.sessions]
        self._planned = [
            [turn.output_token_ids if turn.output_token_ids is not None
             else planner.plan(turn.max_output_tokens) for turn in session.turns]
            for session in self.sessions]

    def _activate(self, now_ms):
        sessions = self.sessions
        while self._active < self.max_sessions and self._next_pending < len(sessions):
            heapq.heappush(self._heap, (now_ms, self._next_pending, 0))
            self._next_pending += 1
            self._active += 1

    # ------------------------------------------------------------------ runtime contract
    def _request(self, index, turn_index, now_ms):
        session = self.sessions[index]
        turn = session.turns[turn_index]
        if self._histories is None:
            prompt = Prompt.from_hash_ids(turn.hash_ids, turn.input_length, self.block_size)
            outputs = turn.output_token_ids
        else:
            history = self._histories[index]
            history.add_input(turn.hash_ids, turn.input_length, self.block_size)
            prompt = Prompt(*history.runs())
            outputs = self._planned[index][turn_index]
        named = self.session_metadata
        return SimRequest(0, prompt, turn.max_output_tokens, now_ms,
                          session_id=session.session_id if named else None,
                          turn_index=turn_index if named else None,
                          output_token_ids=outputs, driver_ref=(index, turn_index))

    def on_terminal(self, request, now_ms, status):
        index, turn_index = request.driver_ref
        turns = self.sessions[index].turns
        following = turn_index + 1
        if status in _CONTINUES and following < len(turns):
            if status == "completed" and self._histories is not None:
                self._histories[index].add_outputs(request.output_token_ids, request.generated)
            heapq.heappush(self._heap, (now_ms + turns[following].delay_ms, index, following))
        elif self.max_sessions is not None:
            self._active -= 1
            self._activate(now_ms)


__all__ = ["SessionDriver"]
