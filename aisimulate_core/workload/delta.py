"""Accumulating-delta prompts (SEMANTICS.md 1.2): a session's history grows turn by turn.

When turn k is dispatched its new input joins the history and the request's prompt is the
whole history. When it completes and another turn follows, the tokens the engine emitted join
too, so the next turn re-hits the KV blocks this turn computed, outputs included.

Outputs are planned at setup: authored ``output_token_ids`` when the trace has them, else
values drawn from one counter above every trace id, so they are unique per token across the
whole run (the reference draws random u32s; only their distinctness is observable). Only where
each turn's values start is kept; a turn's array is made when it is dispatched. The
request carries its plan as ``output_token_ids``, which makes the engine hash output blocks by
content: the same blocks the next turn's history hashes to.
"""

from __future__ import annotations

from array import array

_ONES = array("I", [1])
# Planned outputs count up from here; canonical trace ids are dense from 0 and stay far below.
PLANNED_OUTPUT_BASE = 0x8000_0000


class OutputPlanner:
    """Unique output token values, handed out in session/turn order."""

    __slots__ = ("next_value",)

    def __init__(self):
        self.next_value = PLANNED_OUTPUT_BASE

    def reserve(self, count):
        """The first of ``count`` values planned now (``values`` gives them)."""
        start = self.next_value
        if start + count > 0xFFFF_FFFF:
            start = PLANNED_OUTPUT_BASE  # wraps only after 2**31 planned tokens
        self.next_value = start + count
        return start

    @staticmethod
    def values(start, count):
        return array("I", range(start, start + count))


class History:
    """The token runs of one session's prompt so far."""

    __slots__ = ("values", "lengths")

    def __init__(self):
        self.values = array("I")
        self.lengths = array("I")

    def add_input(self, hash_ids, input_length, block_size):
        """A delta turn's input: ``block_size`` copies of each id, cut at ``input_length``."""
        n = -(-input_length // block_size)
        self.values.extend(hash_ids[:n])
        runs = array("I", [block_size]) * n
        runs[-1] = input_length - (n - 1) * block_size
        self.lengths.extend(runs)

    def add_outputs(self, tokens, count):
        """The first ``count`` output tokens the engine emitted."""
        if count > 0:
            self.values.extend(tokens[:count])
            self.lengths.extend(_ONES * count)

    def runs(self):
        """Copies of (values, lengths): the prompt of the turn dispatched now."""
        return array("I", self.values), array("I", self.lengths)


__all__ = ["History", "OutputPlanner", "PLANNED_OUTPUT_BASE"]
