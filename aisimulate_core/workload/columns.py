"""The trace model a column at a time: one field of every session or turn gathered by C loops
(map, chain, compress) instead of a Python step per object.

A millisecond case spends much of its run walking its trace otherwise: loading, validating and
handing it to the C loop each walk every turn (``validate_trace``, plain_native's arrays)."""

from __future__ import annotations

from itertools import chain, compress, repeat
from operator import attrgetter, is_not

session_turns = attrgetter("turns")
session_start = attrgetter("start_ms")
turn_input = attrgetter("input_length")
turn_output = attrgetter("max_output_tokens")
turn_delay = attrgetter("delay_ms")
turn_hash_ids = attrgetter("hash_ids")
turn_authored = attrgetter("output_token_ids")


def all_turns(sessions):
    """Every turn of ``sessions``, in session and turn order."""
    return list(chain.from_iterable(map(session_turns, sessions)))


def any_given(values):
    """Whether any of ``values`` is not None."""
    return any(map(is_not, values, repeat(None)))


def given(values):
    """The values of the list ``values`` that are not None, in order."""
    return compress(values, map(is_not, values, repeat(None)))


__all__ = ["all_turns", "any_given", "given", "session_start",
           "session_turns", "turn_authored", "turn_delay", "turn_hash_ids", "turn_input",
           "turn_output"]
