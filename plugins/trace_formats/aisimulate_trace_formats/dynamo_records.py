"""Dynamo request-trace records (``dynamo.request.trace.v1``): decoding and request times.

A line may wrap its record in ``{"event": {...}}``; ``request_payload`` and ``tool_start``
events are skipped, lines that are not objects ignored (as in the reference). A request starts
at ``request_received_ms`` (else its event time minus ``total_time_ms``) and ends
``round(total_time_ms)`` later (else at its event time), in whole milliseconds.
"""

from __future__ import annotations

import math

import msgspec

from .rows import (Milliseconds, NonNegative, TokenLength, WholeMs, check_u64, decode_line,
                   describe, fail, iter_lines)

SCHEMA = "dynamo.request.trace.v1"
_SKIPPED = ("request_payload", "tool_start")
_ACCEPTED = ("request_end", "tool_end", "tool_error")


class AgentContext(msgspec.Struct, kw_only=True):
    session_id: str
    parent_session_id: str | None = None


class ReplayMetrics(msgspec.Struct):
    trace_block_size: NonNegative
    input_length: TokenLength
    input_sequence_hashes: list[NonNegative]


class RequestMetrics(msgspec.Struct, kw_only=True):
    request_id: str
    model: str | None = None
    output_tokens: TokenLength | None = None
    request_received_ms: WholeMs | None = None
    total_time_ms: Milliseconds | None = None
    replay: ReplayMetrics


class ClaudeTool(msgspec.Struct, kw_only=True):
    source_request_id: str
    consumer_request_id: str | None = None
    child_session_id: str | None = None
    execution_mode: str


class ToolMetrics(msgspec.Struct, kw_only=True):
    tool_call_id: str
    tool_class: str
    claude: ClaudeTool | None = None
    started_at_unix_ms: WholeMs | None = None
    ended_at_unix_ms: WholeMs | None = None
    duration_ms: Milliseconds | None = None


class Record(msgspec.Struct, kw_only=True):
    schema: str
    event_type: str
    event_time_unix_ms: WholeMs
    agent_context: AgentContext | None = None
    request: RequestMetrics | None = None
    tool: ToolMetrics | None = None


class Entry:
    """A finished request: times in whole ms and where its record is."""

    __slots__ = ("start_ms", "end_ms", "context", "request", "where")

    def __init__(self, start_ms, end_ms, context, request, where):
        self.start_ms = start_ms
        self.end_ms = end_ms
        self.context = context
        self.request = request
        self.where = where

    @property
    def request_id(self):
        return self.request.request_id

    def order(self):
        return (self.start_ms, self.end_ms, self.request.request_id)


class Tool:
    __slots__ = ("session_id", "tool_call_id", "tool_class", "claude", "where")

    def __init__(self, session_id, tool, where):
        self.session_id = session_id
        self.tool_call_id = tool.tool_call_id
        self.tool_class = tool.tool_class
        self.claude = tool.claude
        self.where = where


def round_half_away(x):
    """Rust's ``f64::round`` for x >= 0 (durations here are checked non-negative)."""
    whole = math.floor(x)
    return whole + (1 if x - whole >= 0.5 else 0)


_ANY = msgspec.json.Decoder()


def _record(where, line):
    """The typed record of a line, or None for an event the replay skips."""
    value = decode_line(_ANY, where, line)
    if not isinstance(value, dict):
        return None  # the reference ignores lines that are not objects
    wrapped = isinstance(value.get("event"), dict)
    event = value["event"] if wrapped else value
    event_type = event.get("event_type", value.get("event_type"))
    if event_type in _SKIPPED:
        return None
    prefix = "event." if wrapped else ""
    if event_type not in _ACCEPTED:
        fail(where, prefix + "event_type", "must be request_end, tool_end or tool_error "
             f"(request_payload and tool_start are skipped), got {event_type!r}")
    try:
        record = msgspec.convert(event, Record)
    except msgspec.ValidationError as error:
        fail(where, *describe(error, prefix, line))
    if record.schema != SCHEMA:
        fail(where, prefix + "schema", f"must be {SCHEMA!r}, got {record.schema!r}")
    return record


def _times(where, record, request):
    total = request.total_time_ms
    if total is not None:
        if not (math.isfinite(total) and total >= 0.0):
            fail(where, "request.total_time_ms", f"must be finite and >= 0, got {total}")
        total = round_half_away(total)
    received = request.request_received_ms
    if received is not None and total is not None:
        end = received + total
    else:
        end = record.event_time_unix_ms
    start = received if received is not None else max(0, record.event_time_unix_ms - (total or 0))
    return start, end


def _tool(where, record):
    context, tool = record.agent_context, record.tool
    if context is None or tool is None:
        return None
    if not context.session_id.strip():
        fail(where, "agent_context.session_id", "must not be empty")
    if not tool.tool_call_id.strip():
        fail(where, "tool.tool_call_id", "must not be empty")
    if not tool.tool_class.strip():
        fail(where, "tool.tool_class", "must not be empty")
    if tool.duration_ms is not None and not (math.isfinite(tool.duration_ms)
                                             and tool.duration_ms >= 0.0):
        fail(where, "tool.duration_ms", f"must be finite and >= 0, got {tool.duration_ms}")
    end = tool.ended_at_unix_ms if tool.ended_at_unix_ms is not None else record.event_time_unix_ms
    if tool.started_at_unix_ms is not None:
        start = tool.started_at_unix_ms
    elif tool.duration_ms is not None:
        start = end - round_half_away(tool.duration_ms)
    else:
        start = end
    if end < start:
        fail(where, "tool", f"ends ({end}) before it starts ({start})")
    return Tool(context.session_id, tool, where)


def load_entries(paths):
    entries, tools, seen = [], [], {}
    for path in paths:
        for number, line in iter_lines(path):
            where = f"{path}:{number}"
            record = _record(where, line)
            if record is None:
                continue
            if record.event_type != "request_end":
                tool = _tool(where, record)
                if tool is not None:
                    tools.append(tool)
                continue
            request = record.request
            if request is None:
                fail(where, "request", "is required for a request_end record")
            if not request.request_id.strip():
                fail(where, "request.request_id", "must not be empty")
            first = seen.setdefault(request.request_id, where)
            if first != where:
                fail(where, "request.request_id", f"{request.request_id!r} repeats the request "
                     f"at {first}")
            check_u64(where, "request.replay.input_sequence_hashes",
                      request.replay.input_sequence_hashes)
            start, end = _times(where, record, request)
            entries.append(Entry(start, end, record.agent_context, request, where))
    if not entries:
        fail(", ".join(paths), "", "holds no request_end records")
    return entries, tools


def block_size_of(entries, expected):
    first = entries[0]
    block = first.request.replay.trace_block_size
    if block == 0:
        fail(first.where, "request.replay.trace_block_size", "must be > 0, got 0")
    for entry in entries:
        size = entry.request.replay.trace_block_size
        if size != block:
            fail(entry.where, "request.replay.trace_block_size", f"{size} differs from the "
                 f"block size {block} of {first.where}; one trace holds one block size")
    if expected is not None and expected != block:
        fail(first.where, "request.replay.trace_block_size", f"{block} does not match the "
             f"payload's trace_block_size {expected}")
    return block


def output_length(entry):
    if entry.request.output_tokens is None:
        fail(entry.where, "request.output_tokens", "is required")
    return entry.request.output_tokens


def check_prompt(entry, block, *, exact):
    """The prompt rules in this format's field names; agentic nodes need exactly one hash
    per block, standard rows at least enough."""
    replay = entry.request.replay
    length, hashes = replay.input_length, len(replay.input_sequence_hashes)
    if length == 0:
        fail(entry.where, "request.replay.input_length", "must be > 0, got 0")
    needed = -(-length // block)
    if hashes < needed or (exact and hashes != needed):
        fail(entry.where, "request.replay.input_sequence_hashes", f"must hold "
             f"{'exactly' if exact else 'at least'} one hash per block of input_length "
             f"{length} at trace_block_size {block} ({needed}), got {hashes}")


__all__ = ["SCHEMA", "Entry", "Tool", "block_size_of", "check_prompt", "load_entries",
           "output_length", "round_half_away"]
