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

The workload is generated as the clock reaches it, never built whole: arrivals are drawn one
at a time as the driver asks for the next session start, and a session (its group choice and
its turns) is made when its first turn becomes ready and dropped when it ends. Both generators
are drawn in session order, the order the reference draws its whole trace in, so every draw,
and so every result, is the same as building the trace up front.
"""

from __future__ import annotations

from ..errors import ConfigError
from .prompt import IdRanges
from .rng import StdRng
from .sessions import SessionDriver
from .trace import Session, Turn


# The reference's generator draws group choices (and any length jitter) from StdRng(42),
# whatever the payload says; only arrivals follow ``arrival_seed``.
SHAPE_SEED = 42
_ID_LIMIT = 1 << 32  # canonical ids are u32 tokens
# arrivals drawn per call: a call per session costs more than the draw, a chunk stays small
# (the arrival generator is its own, so drawing ahead changes no other draw)
_ARRIVAL_CHUNK = 1024


def _round_half_away(x):
    whole = int(x)
    return whole + (1 if x - whole >= 0.5 else 0)


def first_arrivals(resolved):
    """The first-turn arrival times, drawn lazily: one exponential gap per session after the
    first for Poisson (the arithmetic of ``StdRng.poisson_arrivals``, drawn ``_ARRIVAL_CHUNK``
    sessions at a time), fixed gaps for a constant rate, all at 0 for a burst."""
    n = resolved.session_count
    kind = resolved.arrival_kind
    if kind == "poisson_qps":
        rng = StdRng(resolved.arrival_seed)
        mean_gap = 1000.0 / resolved.arrival_qps
        t = 0.0
        if n:
            yield t
        left = n - 1
        while left > 0:
            chunk = rng.arrivals_after(t, min(left, _ARRIVAL_CHUNK), mean_gap)
            yield from chunk
            t = chunk[-1]
            left -= len(chunk)
    elif kind == "constant_qps":
        gap = 1000.0 / resolved.arrival_qps
        t = 0.0
        for _ in range(n):
            yield t
            t += gap
    else:
        for _ in range(n):
            yield 0.0


class SyntheticSessions:
    """The synthetic trace's sessions, made on demand in session order.

    Hash ids need only be distinct where blocks differ: shared block j of group g is
    ``g * shared + j``; fresh blocks count up after all groups, ``own`` per turn in
    session/turn order, so a turn's fresh range follows from its position alone.

    Ids are u32 tokens. Past 2**32 the fresh count wraps back to the first fresh id: a reused
    id can only meet blocks made more than 2**32 fresh blocks earlier, which no KV pool (at
    most 2**29 blocks) still holds, so a run cannot tell; runs that do not wrap are unchanged.
    """

    __slots__ = ("resolved", "count", "turns", "_rng", "grouped", "_shared", "_own",
                 "_fresh_base", "_delay", "_isl", "_osl", "_made", "_live")

    def __init__(self, resolved):
        self.resolved = resolved
        self.count = resolved.session_count
        self.turns = resolved.turns
        self._rng = StdRng(SHAPE_SEED)
        n_blocks = -(-resolved.isl // resolved.block_size)
        self.grouped = resolved.shared_prefix_ratio > 0 and resolved.num_prefix_groups > 0
        shared = 0
        if self.grouped:
            shared = min(n_blocks, _round_half_away(n_blocks * resolved.shared_prefix_ratio))
        self._shared = shared
        self._own = n_blocks - shared
        self._fresh_base = resolved.num_prefix_groups * shared
        if self._fresh_base + self._own > _ID_LIMIT:
            raise ConfigError(
                f"$.traffic.num_prefix_groups: {resolved.num_prefix_groups} groups of {shared} "
                f"shared blocks and {self._own} fresh blocks a turn need more than 2^32 hash "
                f"ids, got {self._fresh_base + self._own}")
        self._delay = resolved.inter_turn_delay_ms or 0.0
        self._isl, self._osl = resolved.isl, resolved.osl
        self._made = 0       # sessions made so far (the shape generator has drawn for these)
        self._live = {}      # index -> Session, for sessions not yet ended

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        session = self._live.get(index)
        if session is None:
            if not 0 <= index < self.count or index < self._made:
                raise IndexError(f"synthetic session {index} is not live")
            while self._made <= index:   # in session order: the shape draws stay in order
                self._live[self._made] = self._make(self._made)
                self._made += 1
            session = self._live[index]
        return session

    def release(self, index):
        """The session ended: forget it."""
        self._live.pop(index, None)

    def start_order(self):
        """(start_ms, index) of every session, in ready order (starts never decrease)."""
        return zip(first_arrivals(self.resolved), range(self.count))

    def draw_prefix(self):
        """The next session's group prefix range ``(first id, blocks)``: one draw of the shape
        generator, so sessions must ask in session order."""
        shared = self._shared
        return (self._rng.gen_range(0, self.resolved.num_prefix_groups) * shared, shared)

    def _fresh_ranges(self, offset, count):
        """The ids of ``count`` fresh blocks from the ``offset``-th fresh block on (wrapped)."""
        base = self._fresh_base
        span = _ID_LIMIT - base
        start = offset % span
        if start + count <= span:
            return ((base + start, count),)
        head = span - start
        return ((base + start, head), *self._fresh_ranges(offset + head, count - head))

    def _make(self, index):
        own = self._own
        first = index * self.turns * own      # offset of the session's first fresh id
        prefix = self.draw_prefix() if self.grouped else None
        isl, osl = self._isl, self._osl
        turns = []
        for t in range(self.turns):
            fresh = self._fresh_ranges(first + t * own, own)
            ids = IdRanges(fresh if prefix is None else (prefix, *fresh))
            turns.append(Turn(isl, osl, ids, self._delay if t else 0.0))
        return Session(f"session_{index}", None, turns)


class SyntheticTrace:
    """The ``Trace`` shape the session driver reads, over sessions made on demand."""

    __slots__ = ("block_size", "sessions")

    accumulate_deltas = False

    def __init__(self, resolved):
        self.block_size = resolved.block_size
        self.sessions = SyntheticSessions(resolved)

    @property
    def total_turns(self):
        return self.sessions.count * self.sessions.turns


def synthetic_driver(resolved, *, general=False):
    """The driver of synthetic traffic: one-turn sessions without prefix groups take
    ``one_turn.OneTurnDriver``, which makes each request straight from its index
    (``general``: the session driver for them too, which gives the same requests; the tests
    compare the two, with and without groups)."""
    # the reference's records name the session unless every session is one turn without a
    # prefix group
    trace = SyntheticTrace(resolved)
    named = trace.sessions.grouped or resolved.turns > 1
    if resolved.turns == 1 and not general:
        from .one_turn import OneTurnDriver
        return OneTurnDriver(trace.sessions, max_sessions=resolved.max_in_flight,
                             session_metadata=named)
    return SessionDriver(trace, max_sessions=resolved.max_in_flight, session_metadata=named)
