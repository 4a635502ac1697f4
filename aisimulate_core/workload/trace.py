"""The in-memory session trace every non-agentic workload lowers to (SEMANTICS.md 1).

A trace format plugin parses its files into a ``Trace``; the core validates it
(``validate_trace``), normalizes and speeds it up (``transforms``) and replays it. A turn's
prompt is given as canonical hash ids at the trace's ``block_size``: each id stands for
``block_size`` copies of itself as tokens and the prompt is cut at ``input_length`` (the last
block may be partial), so two prompts share KV exactly as far as their hash-id prefixes agree.

With ``accumulate_deltas`` a turn after the first carries only its *new* input: the request
prompt is the session's history (earlier inputs and the outputs the engine emitted) followed
by that delta (SEMANTICS.md 1.2).

``where`` strings ("trace.jsonl:3") locate a session's first row or a turn's row, so that a
rule the core checks still names the file and line. Messages use the Mooncake row's field
names (input_length, output_length, hash_ids, delay, timestamp).
"""

from __future__ import annotations

import math
from array import array
from typing import NamedTuple

from ..errors import TraceError


class Turn:
    """One request of a session (the reference's ``TurnTrace``)."""

    __slots__ = ("input_length", "max_output_tokens", "hash_ids", "delay_ms",
                 "output_token_ids", "priority", "strict_priority", "policy_class", "where")

    # (no keyword-only parameters: a loader's positional call skips the keyword dict a
    # class call builds and unpacks again, ~1K instructions a turn)
    def __init__(self, input_length, max_output_tokens, hash_ids, delay_ms=0.0,
                 output_token_ids=None, priority=0, strict_priority=0, policy_class=None,
                 where=None):
        self.input_length = input_length
        self.max_output_tokens = max_output_tokens
        self.hash_ids = hash_ids              # canonical ids (array('I') or list of int)
        self.delay_ms = delay_ms              # think time after the previous turn completed
        self.output_token_ids = output_token_ids  # authored outputs; length == max_output_tokens
        self.priority = priority
        self.strict_priority = strict_priority
        self.policy_class = policy_class
        self.where = where


class Session:
    """Turns replayed one after another (the reference's ``SessionTrace``).

    ``start_ms`` is the first turn's authored arrival (None: not given).
    """

    __slots__ = ("session_id", "start_ms", "turns", "where")

    def __init__(self, session_id, start_ms, turns, where=None):
        self.session_id = session_id
        self.start_ms = start_ms
        self.turns = turns
        self.where = where


class Trace:
    """Sessions of turns whose prompts are hash ids at ``block_size`` tokens per id."""

    __slots__ = ("block_size", "sessions", "accumulate_deltas")

    def __init__(self, block_size, sessions, *, accumulate_deltas=False):
        self.block_size = block_size
        self.sessions = sessions
        self.accumulate_deltas = accumulate_deltas

    @property
    def total_turns(self):
        return sum(len(s.turns) for s in self.sessions)

    def is_single_turn(self):
        return all(len(s.turns) == 1 for s in self.sessions)


class HashInterner:
    """Raw hash ids (any u64) to dense u32 canonical ids in first-seen order.

    Interning by full value keeps distinct raw ids distinct; the dense ids are what the
    prompt's tokens are made of.
    """

    __slots__ = ("ids",)

    def __init__(self):
        self.ids = {}

    def __call__(self, raw_ids):
        ids = self.ids
        intern = ids.setdefault
        # len(ids) is evaluated before each insertion: a new id gets the next dense value
        return array("I", [intern(raw, len(ids)) for raw in raw_ids])


def _fail(where, field, rule):
    raise TraceError(f"{where}: {field}: {rule}")


class TraceFacts(NamedTuple):
    """What ``validate_trace`` learns of a trace on its walk, so that the lowering walks it no
    more: its turn count, whether every session is one turn, the earliest session start
    (``min``'s pick; None: no session has one) and the first session without a start."""

    total_turns: int
    single_turn: bool
    earliest_start: float | None
    unstarted: Session | None


def validate_trace(trace):
    """The invariants the drivers rely on, whichever plugin built the trace; returns its
    ``TraceFacts``."""
    block = trace.block_size
    if not isinstance(block, int) or block <= 0:
        raise TraceError(f"trace block size must be a positive integer, got {block!r}")
    if not trace.sessions:
        raise TraceError("the trace holds no requests")
    total = 0
    single = True
    earliest = unstarted = None
    isfinite = math.isfinite
    for session in trace.sessions:
        start = session.start_ms
        if start is None:
            if unstarted is None:
                unstarted = session
        else:
            if not isfinite(start):
                _fail(session.where, "timestamp", f"must be finite, got {start}")
            if earliest is None or start < earliest:
                earliest = start
        turns = session.turns
        if not turns:
            raise TraceError(f"{session.where}: session {session.session_id!r} has no turns")
        total += len(turns)
        if len(turns) != 1:
            single = False
        for index, turn in enumerate(turns):
            length = turn.input_length
            if length <= 0:
                _fail(turn.where, "input_length", f"must be > 0, got {length}")
            capacity = len(turn.hash_ids) * block
            if length > capacity:
                _fail(turn.where, "input_length", f"{length} exceeds the capacity of "
                      f"hash_ids, {len(turn.hash_ids)} x block size {block} = {capacity} tokens")
            outputs = turn.output_token_ids
            if outputs is not None and len(outputs) != turn.max_output_tokens:
                _fail(turn.where, "output_token_ids", f"holds {len(outputs)} ids but "
                      f"output_length is {turn.max_output_tokens}")
            delay = turn.delay_ms
            if delay != 0.0:
                if not (isfinite(delay) and delay >= 0.0):
                    _fail(turn.where, "delay", f"must be finite and >= 0, got {delay}")
                if index == 0:
                    _fail(turn.where, "delay", f"must be 0 on the first turn of a session, "
                          f"got {delay}")
    return TraceFacts(total, single, earliest, unstarted)


def fail_unstarted(session):
    """``check_timestamped``'s error for a session without a start."""
    _fail(session.where, "timestamp", "is required on the first row of each session "
          "when replaying by timestamps (or set replay_concurrency)")


def check_timestamped(trace):
    """Replay by timestamps needs every session's first arrival."""
    for session in trace.sessions:
        if session.start_ms is None:
            fail_unstarted(session)


__all__ = ["HashInterner", "Session", "Trace", "TraceFacts", "Turn", "check_timestamped",
           "fail_unstarted", "validate_trace"]
