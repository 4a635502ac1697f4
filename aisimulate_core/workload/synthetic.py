"""Synthetic traffic (SEMANTICS 1.7): sessions of fixed-length turns with seeded arrivals.

Prompts are hash-id blocks at the engine block size: the first ``round(blocks × ratio)`` blocks
come from a per-group namespace (the group drawn uniformly per session from the generator seeded
with 42), the rest are fresh ids. First-turn arrivals come from their own generator seeded
with ``arrival_seed``, the first at 0.
"""

from __future__ import annotations

from .driver import SessionDriver
from .rng import StdRng
from .sessions import Session, Turn


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


def synthetic_sessions(resolved):
    """Sessions of the synthetic trace. Hash ids need only be distinct where blocks differ:
    shared block j of group g is ``g * shared + j``, fresh blocks count up after all groups."""
    block = resolved.block_size
    rng = StdRng(SHAPE_SEED)
    arrivals = first_arrivals(resolved)
    n_blocks = -(-resolved.isl // block)
    grouped = resolved.shared_prefix_ratio > 0 and resolved.num_prefix_groups > 0
    shared = 0
    if grouped:
        shared = min(n_blocks, _round_half_away(n_blocks * resolved.shared_prefix_ratio))
    fresh = resolved.num_prefix_groups * shared
    delay = resolved.inter_turn_delay_ms or 0.0
    sessions = []
    for i in range(resolved.session_count):
        turns = []
        for t in range(resolved.turns):
            if t == 0 and shared:
                base = rng.gen_range(0, resolved.num_prefix_groups) * shared
                ids = list(range(base, base + shared))
                ids.extend(range(fresh, fresh + n_blocks - shared))
                fresh += n_blocks - shared
            else:
                if t == 0 and grouped:
                    rng.gen_range(0, resolved.num_prefix_groups)
                ids = range(fresh, fresh + n_blocks)
                fresh += n_blocks
            turns.append(Turn(resolved.isl, resolved.osl, ids, delay if t else 0.0))
        sessions.append(Session(f"session_{i}", arrivals[i], turns, block, named=grouped))
    return sessions


def synthetic_driver(resolved):
    sessions = synthetic_sessions(resolved)
    return SessionDriver(sessions, max_sessions=resolved.max_in_flight)
