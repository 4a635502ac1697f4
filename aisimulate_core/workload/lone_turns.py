"""A trace's sessions of one turn each, held as columns (``LoneTurns``).

Most request traces (Mooncake's among them) are rows of lone requests: every row is a session
of one turn. A loader that sees such a file can hand the core these columns instead of a list
of ``Session`` objects. They read as that list (indexing, iteration, ``len``), each session
made on first access, so any consumer of ``Trace.sessions`` works unchanged; the lowering and
the C loops read the columns themselves and never make a session: one object pair a row was
about 20K instructions of a millisecond run (ISSUE 10), and C wants arrays anyway.

The columns are replaced, never changed in place, so a copy shares nothing that can change
under it. A transform (``shifted``, ``scaled``) drops the sessions made so far: they would
show the old times.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

from .trace import Session, TraceFacts, Turn


class LoneTurns(Sequence):
    """``n`` sessions of one turn, session ``i`` named ``request_<i + 1>`` (the reference's
    name of a row without a session id) and located at ``<path>:<i + 1>``.

    Columns (index ``i``): ``inputs``/``outputs`` (array q: input and output lengths),
    ``delays`` (array d: each turn's think delay), ``starts`` (list: the session's start in ms
    or None), ``ids_off`` (array q of n + 1: turn ``i``'s canonical hash ids are
    ``ids[ids_off[i]:ids_off[i + 1]]``), ``ids`` (array I), ``priorities`` and ``stricts``
    (lists of int, or None when all are 0), ``policies`` (list, or None when none is given).
    ``checked_block``: the block size at which the loader checked every input against its hash
    ids' capacity (None: unchecked)."""

    __slots__ = ("path", "inputs", "outputs", "delays", "starts", "ids_off", "ids",
                 "priorities", "stricts", "policies", "checked_block", "_made")

    def __init__(self, path, inputs, outputs, delays, starts, ids_off, ids, priorities=None,
                 stricts=None, policies=None, checked_block=None):
        self.path = path
        self.inputs, self.outputs, self.delays, self.starts = inputs, outputs, delays, starts
        self.ids_off, self.ids = ids_off, ids
        self.priorities, self.stricts, self.policies = priorities, stricts, policies
        self.checked_block = checked_block
        self._made = [None] * len(inputs)

    # ------------------------------------------------------------------ the list it reads as
    def __len__(self):
        return len(self.inputs)

    def __getitem__(self, index):
        if type(index) is not int:
            return [self[i] for i in range(len(self))[index]]
        made = self._made
        session = made[index]
        if session is None:
            session = made[index] = self._session(range(len(made))[index])
        return session

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def _session(self, i):
        number = i + 1
        where = f"{self.path}:{number}"
        off = self.ids_off
        turn = Turn(self.inputs[i], self.outputs[i], self.ids[off[i]:off[i + 1]],
                    self.delays[i], None,
                    0 if self.priorities is None else self.priorities[i],
                    0 if self.stricts is None else self.stricts[i],
                    None if self.policies is None else self.policies[i], where)
        return Session(f"request_{number}", self.starts[i], [turn], where)

    def copy(self):
        """Columns of their own (the loader's cache hands each run a copy)."""
        return LoneTurns(self.path, self.inputs[:], self.outputs[:], self.delays[:],
                         self.starts[:], self.ids_off[:], self.ids[:],
                         _copied(self.priorities), _copied(self.stricts),
                         _copied(self.policies), self.checked_block)

    # ------------------------------------------------------------------ what the core reads
    def facts(self, block):
        """``validate_trace``'s facts, from the columns; None when a row breaks a rule (the
        caller then validates the sessions, which words the first error as for any trace)."""
        inputs = self.inputs
        if type(block) is not int or block <= 0 or not inputs or min(inputs) <= 0 \
                or self.delays.count(0.0) != len(inputs):
            return None   # (a lone turn is a first turn: its delay must be 0)
        if self.checked_block != block:
            off = self.ids_off
            if any(length > (off[i + 1] - off[i]) * block for i, length in enumerate(inputs)):
                return None
        earliest = unstarted = None
        present = [start for start in self.starts if start is not None]
        if len(present) != len(inputs):
            unstarted = self[self.starts.index(None)]
        if present:
            if not all(map(math.isfinite, present)):
                return None
            earliest = min(present)   # (the first of equal values, as validate_trace's walk)
        return TraceFacts(len(inputs), True, earliest, unstarted)

    def start_order(self):
        """``sessions.trace_start_order`` of these sessions: (start, index) in (start, index)
        order, no start counting as 0."""
        starts = [start or 0.0 for start in self.starts]
        order = array("Q", sorted(range(len(starts)), key=starts.__getitem__))
        # (pairs zipped in C: a C loop that has run the trace skips its starts at C speed)
        return zip(array("d", [starts[i] for i in order]), order)

    def shifted(self, earliest):
        """Every start less ``earliest`` (transforms.normalize_session_starts)."""
        self.starts = [None if start is None else start - earliest for start in self.starts]
        self._made = [None] * len(self._made)

    def scaled(self, ratio):
        """Starts and delays divided by ``ratio`` (transforms.speed_up_timing)."""
        self.starts = [None if start is None else start / ratio for start in self.starts]
        self.delays = array("d", [delay / ratio for delay in self.delays])
        self._made = [None] * len(self._made)


def int64s(values):
    """``array("q", values)`` of integers known to be >= 0 and below 2**63, made as an
    unsigned array first: an int64 array converts each item through PyArg_Parse, more than
    twice the instructions of the unsigned conversion and a copy of the bytes."""
    return array("q", array("Q", values).tobytes())


def _copied(values):
    return None if values is None else values[:]


__all__ = ["LoneTurns", "int64s"]
