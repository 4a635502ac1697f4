"""``mooncake`` and ``mooncake-delta``: one JSON request per line (SEMANTICS.md 1.1, 1.2).

Rows with the same ``session_id`` are the turns of one session in file order; a row without
one is a session of its own. A later turn's think delay is its ``delay`` when given, else the
gap between its ``timestamp`` and the session's previous timestamp, else 0. ``input_length``
defaults to the capacity of ``hash_ids`` (ids x trace block size). Raw hash ids are interned
in first-seen order across the file.

``mooncake-delta`` reads the same rows; each later turn's ``input_length``/``hash_ids``
describe only its new input, which the core appends to the session's history.
"""

from __future__ import annotations

from array import array
from itertools import accumulate, chain

import msgspec

from aisimulate_core.kv.hash_counts import hash_counts
from aisimulate_core.workload.formats import TraceFormat
from aisimulate_core.workload.lone_turns import LoneTurns, int64s
from aisimulate_core.workload.trace import HashInterner, Session, Trace, Turn

from .rows import (I32, U32, U64_MAX, Milliseconds, NonNegative, TokenLength, check_prompt_tokens, check_u64,
                   decode_all, decode_rows, fail, first_of, model_block_size, row_decoder,
                   small_file)


class MooncakeRow(msgspec.Struct, kw_only=True):
    request_id: str | None = None
    session_id: str | None = None
    input_length: TokenLength | None = None
    input_tokens: TokenLength | None = None          # alias of input_length
    output_length: TokenLength | None = None
    output_tokens: TokenLength | None = None         # alias of output_length
    output_token_ids: list[U32] | None = None
    hash_ids: list[NonNegative] | None = None
    timestamp: Milliseconds | None = None
    created_time: Milliseconds | None = None         # alias of timestamp
    delay: Milliseconds | None = None
    delay_ms: Milliseconds | None = None             # alias of delay
    priority: I32 | None = None
    strict_priority: U32 | None = None
    policy_class: str | None = None


row_decoder(MooncakeRow)   # built as the plugin loads, not in a run


class MooncakeBuilder:
    """Rows -> sessions, one row at a time (also used for Dynamo's standard traces)."""

    def __init__(self, block_size, *, accumulate_deltas=False):
        self.block_size = block_size
        self.accumulate_deltas = accumulate_deltas
        self.intern = HashInterner()
        self.sessions = []
        self._by_id = {}
        self._last_timestamp = []
        self._history = []           # per session: tokens its next delta turn's prompt starts with

    def add(self, where, ordinal, session_id, input_length, output_length, hash_ids,
            timestamp=None, delay=None, output_token_ids=None, priority=None,
            strict_priority=None, policy_class=None):
        """``ordinal`` (1-based row position) names a session without an id, as the
        reference does (``request_<ordinal>``), so ids share one namespace."""
        if hash_ids is None:
            fail(where, "hash_ids", "is required")
        if output_length is None:
            fail(where, "output_length", "is required")
        if hash_ids and max(hash_ids) > U64_MAX:
            check_u64(where, "hash_ids", hash_ids)
        capacity = len(hash_ids) * self.block_size
        if input_length is None:
            input_length = capacity
            check_prompt_tokens(where, "input_length", capacity, "the default (the capacity of "
                                f"hash_ids, {len(hash_ids)} x trace_block_size {self.block_size})")
        elif input_length > capacity:
            fail(where, "input_length", f"{input_length} exceeds the capacity of hash_ids, "
                 f"{len(hash_ids)} x trace_block_size {self.block_size} = {capacity} tokens")
        key = session_id if session_id is not None else f"request_{ordinal}"
        index = self._by_id.get(key)
        if index is None:
            index = self._by_id[key] = len(self.sessions)
            self.sessions.append(Session(key, timestamp, [], where=where))
            self._last_timestamp.append(timestamp)
            self._history.append(0)
        session = self.sessions[index]
        if self.accumulate_deltas:
            # the prompt is the session's earlier inputs and outputs followed by this input
            prompt = self._history[index] + input_length
            check_prompt_tokens(where, "input_length", prompt, f"the prompt of session {key!r} "
                                "(its earlier inputs and outputs plus this input)")
            self._history[index] = prompt + output_length
        if not session.turns:
            delay_ms = 0.0 if delay is None else delay  # the core rejects a non-zero one
            if output_token_ids is None and not priority and not strict_priority \
                    and policy_class is None:
                # the usual row: a session's first turn, nothing optional (Turn's defaults)
                session.turns.append(Turn(input_length, output_length, self.intern(hash_ids),
                                          delay_ms, where=where))
                if timestamp is not None:
                    self._last_timestamp[index] = timestamp
                return
        elif delay is not None:
            delay_ms = delay
        elif timestamp is not None:
            previous = self._last_timestamp[index]
            if previous is None:
                fail(where, "timestamp", f"cannot give a think delay: no earlier row of "
                     f"session {key!r} has a timestamp (set delay instead)")
            delay_ms = timestamp - previous
            if delay_ms < 0:
                fail(where, "timestamp", f"{timestamp} is earlier than the previous row of "
                     f"session {key!r} ({previous})")
        else:
            delay_ms = 0.0
        session.turns.append(Turn(
            input_length, output_length, self.intern(hash_ids), delay_ms,
            output_token_ids=output_token_ids, priority=priority or 0,
            strict_priority=strict_priority or 0, policy_class=policy_class, where=where))
        if timestamp is not None:
            self._last_timestamp[index] = timestamp

    def trace(self):
        return Trace(model_block_size(self.block_size), self.sessions,
                     accumulate_deltas=self.accumulate_deltas)


def load_mooncake(path, block_size, *, accumulate_deltas=False):
    """The file's Trace; a file read before in this process, unchanged since, is rebuilt from
    what that read kept (``_LOADED``) instead of decoded again."""
    digest, data = small_file(path, CACHED_FILE_BYTES)
    key = (path, block_size, accumulate_deltas)
    kept = _LOADED.get(key)
    if kept is not None and digest is not None and kept[0] == digest:
        return _rebuild(*kept[1])
    trace = _decode_mooncake(path, block_size, accumulate_deltas, data)
    if digest is not None:
        _LOADED.pop(key, None)
        while len(_LOADED) >= _KEEP_FILES:
            del _LOADED[next(iter(_LOADED))]   # the oldest
        _LOADED[key] = (digest, _snapshot(trace))
    return trace


# Repeated runs of one small trace (a capacity search, a benchmark) decode it once: the rows
# of up to _KEEP_FILES files of at most CACHED_FILE_BYTES are kept per process, keyed by path
# and options and checked against the file's size, time and CRC (rows.file_digest) at every
# load, so an edited file is decoded again. A rebuilt Trace is made of new objects (arrays copied): a run that
# changes its trace (the timing transforms do) changes nothing kept.
CACHED_FILE_BYTES = 8 << 20
_KEEP_FILES = 4
_LOADED = {}


def _snapshot(trace):
    sessions = trace.sessions
    if type(sessions) is LoneTurns:
        return trace.block_size, trace.accumulate_deltas, sessions.copy()
    sessions = [(s.session_id, s.start_ms, s.where,
                 [(t.input_length, t.max_output_tokens, t.hash_ids[:], t.delay_ms,
                   None if t.output_token_ids is None else t.output_token_ids[:], t.priority, t.strict_priority, t.policy_class, t.where)
                  for t in s.turns]) for s in sessions]
    return trace.block_size, trace.accumulate_deltas, sessions


def _rebuild(block_size, accumulate_deltas, sessions):
    if type(sessions) is LoneTurns:
        return Trace(block_size, sessions.copy(), accumulate_deltas=accumulate_deltas)
    out = []
    for session_id, start_ms, where, turns in sessions:
        made = []
        for (input_length, output_length, hash_ids, delay_ms, outputs, priority, strict,
             policy_class, turn_where) in turns:
            made.append(Turn(input_length, output_length, hash_ids[:], delay_ms,
                             None if outputs is None else outputs[:], priority, strict,
                             policy_class, turn_where))
        out.append(Session(session_id, start_ms, made, where))
    return Trace(block_size, out, accumulate_deltas=accumulate_deltas)


def _decode_mooncake(path, block_size, accumulate_deltas, data=None):
    """The file's Trace; ``data``: its bytes, when read already (decoded in one call)."""
    rows = decode_all(data, MooncakeRow) if data is not None else None
    if rows and not accumulate_deltas:
        trace = _lone_turns(path, block_size, rows)
        if trace is not None:
            return trace
    builder = MooncakeBuilder(block_size, accumulate_deltas=accumulate_deltas)
    add = builder.add
    for number, row in (decode_rows(path, MooncakeRow) if rows is None else enumerate(rows, 1)):
        where = f"{path}:{number}"
        if (row.input_tokens is None and row.output_tokens is None and row.created_time is None
                and row.delay_ms is None):   # no alias given (the usual row): nothing to merge
            input_length, output_length = row.input_length, row.output_length
            timestamp, delay = row.timestamp, row.delay
        else:
            input_length = first_of(where, row, "input_length", "input_tokens")
            output_length = first_of(where, row, "output_length", "output_tokens")
            timestamp = first_of(where, row, "timestamp", "created_time")
            delay = first_of(where, row, "delay", "delay_ms")
        add(where, number, row.session_id, input_length, output_length, row.hash_ids,
            timestamp=timestamp, delay=delay, output_token_ids=row.output_token_ids,
            priority=row.priority, strict_priority=row.strict_priority,
            policy_class=row.policy_class)
    if not builder.sessions:
        fail(path, "", "holds no requests")
    return builder.trace()


def _lone_turns(path, block_size, rows):
    """The Trace ``MooncakeBuilder`` makes of rows that are each a session of one turn (no
    session id, alias or authored outputs, explicit lengths within the hash ids' capacity;
    priorities and a policy class may be given), as columns (workload/lone_turns.py), or
    None when a row is not one (the builder then reads them all, and words any error).

    The hash ids are interned for the whole file at once, as the builder's row-by-row
    interning numbers them: dense ids in first-seen order over the rows in file order."""
    for row in rows:
        hash_ids, input_length, output_length = row.hash_ids, row.input_length, row.output_length
        if (hash_ids is None or output_length is None or input_length is None
                or input_length > len(hash_ids) * block_size or row.session_id is not None
                or row.input_tokens is not None or row.output_tokens is not None
                or row.created_time is not None or row.delay_ms is not None
                or row.output_token_ids is not None):
            return None
    # every id at once, as HashInterner numbers them row by row (in C: one call, not a
    # dict insertion per id; the Python backend's map is a dict)
    try:   # (from a list: an array made from an iterator takes twice the instructions)
        raw = array("Q", list(chain.from_iterable([row.hash_ids for row in rows])))
    except OverflowError:
        return None   # an id beyond 64 bits
    dense = hash_counts().intern(raw)
    ids_off = int64s(list(accumulate([len(row.hash_ids) for row in rows], initial=0)))
    priorities = [row.priority or 0 for row in rows]
    stricts = [row.strict_priority or 0 for row in rows]
    policies = [row.policy_class for row in rows]
    sessions = LoneTurns(
        path, int64s([row.input_length for row in rows]),
        int64s([row.output_length for row in rows]),
        array("d", [0.0 if row.delay is None else row.delay for row in rows]),
        [row.timestamp for row in rows], ids_off, dense,
        priorities if any(priorities) else None, stricts if any(stricts) else None,
        policies if policies.count(None) != len(policies) else None,
        checked_block=block_size)
    return Trace(model_block_size(block_size), sessions)


class Mooncake(TraceFormat):
    """Every turn carries its whole prompt."""

    NAME = "mooncake"

    def load(self, paths, *, trace_block_size):
        return load_mooncake(paths[0], trace_block_size or 512)


class MooncakeDelta(TraceFormat):
    """Later turns carry only their new input; prompts accumulate per session."""

    NAME = "mooncake-delta"

    def load(self, paths, *, trace_block_size):
        return load_mooncake(paths[0], trace_block_size or 512, accumulate_deltas=True)


__all__ = ["Mooncake", "MooncakeBuilder", "MooncakeDelta", "MooncakeRow", "load_mooncake"]
