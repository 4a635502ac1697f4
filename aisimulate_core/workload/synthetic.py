"""Synthetic traffic (SEMANTICS.md 1.7): sessions of fixed-length turns with seeded arrivals.

Every turn's prompt is hash-id blocks at the engine block size: the first
``round(blocks × ratio)`` blocks come from the session's prefix group (drawn uniformly per
session from the generator seeded with 42), the rest are fresh ids. First-turn arrivals come
from their own generator seeded with ``arrival_seed``, the first at 0.

``synthetic-session`` gives ``turns_per_session`` such turns per session, each a full prompt
of ``isl`` tokens after ``inter_turn_delay_ms`` of think time. SEMANTICS.md says the binding
accumulates them as deltas; the reference release (ai-dynamo-runtime 1.6.1) does not: its
turns keep ``input_length`` = isl and re-hit only their group prefix, and matching it is what
the shared benchmarks check (b4).
"""

from __future__ import annotations

from array import array

from .rng import StdRng
from .sessions import SessionDriver
from .trace import Session, Trace, Turn


# The reference's generator draws group choices (and any length jitter) from StdRng(42),
# whatever the payload says; only arrivals follow ``arrival_seed``.
SHAPE_SEED = 42


def _round_half_away(x):
    whole = int(x)
    return whole + (1 if x - whole >= 0.5 else 0)


def first_arrivals(resolved):
    n = resolved.session_count
    kind = resolved.arrival_kind
    if kind == "poisson_qps":
        rng = StdRng(resolved.arrival_seed)
        return rng.poisson_arrivals(n, 1000.0 / resolved.arrival_qps)
    if kind == "constant_qps":
        gap = 1000.0 / resolved.arrival_qps
        times = []
        t = 0.0
        for _ in range(n):
            times.append(t)
            t += gap
        return times
    return [0.0] * n


def synthetic_trace(resolved):
    """The synthetic trace. Hash ids need only be distinct where blocks differ: shared block j
    of group g is ``g * shared + j``; fresh blocks count up after all groups."""
    block = resolved.block_size
    rng = StdRng(SHAPE_SEED)
    arrivals = first_arrivals(resolved)
    n_blocks = -(-resolved.isl // block)
    grouped = resolved.shared_prefix_ratio > 0 and resolved.num_prefix_groups > 0
    shared = 0
    if grouped:
        shared = min(n_blocks, _round_half_away(n_blocks * resolved.shared_prefix_ratio))
    fresh = resolved.num_prefix_groups * shared
    own = n_blocks - shared
    delay = resolved.inter_turn_delay_ms or 0.0
    sessions = []
    for i in range(resolved.session_count):
        prefix = array("I")
        if grouped:
            base = rng.gen_range(0, resolved.num_prefix_groups) * shared
            prefix = array("I", range(base, base + shared))
        turns = []
        for t in range(resolved.turns):
            # 4 bytes an id: at SGLang's 1-token pages a prompt has one id per token
            ids = prefix + array("I", range(fresh, fresh + own))
            turns.append(Turn(resolved.isl, resolved.osl, ids, delay if t else 0.0))
            fresh += own
        sessions.append(Session(f"session_{i}", arrivals[i], turns))
    return Trace(block, sessions)


def synthetic_driver(resolved):
    # the reference's records name the session unless every session is one turn without a
    # prefix group
    grouped = resolved.shared_prefix_ratio > 0 and resolved.num_prefix_groups > 0
    return SessionDriver(synthetic_trace(resolved), max_sessions=resolved.max_in_flight,
                         session_metadata=grouped or resolved.turns > 1)
