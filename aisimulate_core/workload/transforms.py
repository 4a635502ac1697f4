"""Timing transforms applied to a loaded trace before replay (SEMANTICS.md 1.8).

Both work in place and return the trace. Sessions without a start keep None.
"""

from __future__ import annotations

import math

from .lone_turns import LoneTurns

_UNKNOWN = object()


def normalize_session_starts(trace, earliest=_UNKNOWN):
    """Shift every session start so that the earliest is 0 (``earliest``: the earliest start,
    as ``min`` picks it, when known; None: no session has one)."""
    sessions = trace.sessions
    lone = type(sessions) is LoneTurns   # (its columns, not sessions made of them)
    if earliest is _UNKNOWN:
        starts = [s for s in sessions.starts if s is not None] if lone else \
            [s.start_ms for s in sessions if s.start_ms is not None]
        earliest = min(starts) if starts else None
    if earliest is None or (earliest == 0.0 and math.copysign(1.0, earliest) > 0.0):
        return trace   # x - 0.0 == x, bit for bit (-0.0 too): nothing to shift
    if lone:
        sessions.shifted(earliest)
        return trace
    for session in sessions:
        if session.start_ms is not None:
            session.start_ms -= earliest
    return trace


def speed_up_timing(trace, ratio):
    """Divide session starts and think delays by ``ratio`` (> 0)."""
    if ratio == 1.0:
        return trace  # x / 1.0 == x: nothing to do
    if type(trace.sessions) is LoneTurns:
        trace.sessions.scaled(ratio)
        return trace
    for session in trace.sessions:
        if session.start_ms is not None:
            session.start_ms /= ratio
        for turn in session.turns:
            turn.delay_ms /= ratio
    return trace


def normalize_graph_starts(graph):
    """Shift every node's ``not_before_ms`` so that the earliest is 0."""
    first = min(node.not_before_ms for node in graph.nodes)
    for node in graph.nodes:
        node.not_before_ms -= first
    return graph


def speed_up_graph(graph, ratio):
    """Divide ``not_before_ms`` and every dependency delay by ``ratio`` (> 0)."""
    if ratio == 1.0:
        return graph
    for node in graph.nodes:
        node.not_before_ms /= ratio
        for dep in node.dependencies:
            dep.delay_ms /= ratio
    return graph


__all__ = ["normalize_graph_starts", "normalize_session_starts", "speed_up_graph",
           "speed_up_timing"]
