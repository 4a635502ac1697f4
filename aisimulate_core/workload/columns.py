"""The trace model a column at a time: one field of every session or turn gathered, or many
sessions and turns made, by C loops (map, chain, compress) instead of a Python step per object.

A millisecond case spends much of its run walking its trace otherwise: loading, validating and
handing it to the C loop each walk every turn (``validate_trace``, the Mooncake loader's
one-turn rows and its per-process copy, plain_native's arrays)."""

from __future__ import annotations

from collections import deque
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


def column(objects, name):
    """The list of each object's ``name``."""
    return list(map(attrgetter(name), objects))


def any_given(values):
    """Whether any of ``values`` is not None."""
    return any(map(is_not, values, repeat(None)))


def given(values):
    """The values of the list ``values`` that are not None, in order."""
    return compress(values, map(is_not, values, repeat(None)))


def replaced(values, replacements):
    """Each value of the list ``values``, or its replacement where it is a key of the dict
    ``replacements`` (matched as dict keys are: 0 stands for 0.0, -0.0 and False too)."""
    return map(replacements.get, values, values)


def made(cls, count, columns):
    """``count`` new ``cls`` objects (a slotted class: Turn, Session), the i-th holding the
    i-th value of each of ``columns`` (slot name -> ``count`` values) in that slot, set without
    an ``__init__`` call per object. ``columns`` names every slot, so nothing is left unset."""
    if set(columns) != set(cls.__slots__):
        raise TypeError(f"{cls.__name__} columns {sorted(columns)} are not its slots "
                        f"{sorted(cls.__slots__)}")
    objects = list(map(object.__new__, repeat(cls, count)))
    for name, values in columns.items():
        deque(map(getattr(cls, name).__set__, objects, values), 0)
    return objects


__all__ = ["all_turns", "any_given", "column", "given", "made", "replaced", "session_start",
           "session_turns", "turn_authored", "turn_delay", "turn_hash_ids", "turn_input",
           "turn_output"]
