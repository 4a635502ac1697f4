"""``agentic_mooncake``: request nodes with typed dependencies (SEMANTICS.md 1.3).

The first non-blank line decides the dialect. A v2 file starts with a header
(``"schema": "dynamo.agentic_mooncake"``, ``version`` 2, ``block_size``, ``hash_id_scope``
``local``, ``source {format, digest}``) and then holds one node per line with explicit
``play_id``, ``not_before_ms`` and ``dependencies``; the header owns the block size and each
node has exactly ``ceil(input_length / block_size)`` hash ids.

A legacy flat file has no header: each row's ``wait_for`` ids become completion dependencies
delayed by ``delay`` (or ``delay_ms``) plus ``tool_wait_ms``, a ``join`` when it waits for
several, a ``sequence`` otherwise; only roots keep their ``timestamp`` as ``not_before_ms``.
Plays are the connected components. The payload's ``trace_block_size`` is the block size.
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

import msgspec

from aisimulate_core.workload.formats import TraceFormat
from aisimulate_core.workload.graph import AgenticNode, AgenticTrace, Dependency

from .plays import assign_component_plays
from .rows import (I32, U32, Milliseconds, NonNegative, TokenLength, check_u64, decode_line,
                   decode_rows, fail, first_of, iter_lines, model_block_size, row_decoder)

SCHEMA = "dynamo.agentic_mooncake"
VERSION = 2


class Source(msgspec.Struct):
    format: str
    digest: str


class Header(msgspec.Struct):
    schema: str
    version: NonNegative
    block_size: NonNegative
    hash_id_scope: Literal["local"]
    source: Source


class DependencyRow(msgspec.Struct):
    request_id: str
    trigger: Literal["dispatch", "completion"]
    delay_ms: Milliseconds
    relation: Literal["sequence", "spawn", "join", "replay_barrier"]


class NodeRow(msgspec.Struct, kw_only=True):
    request_id: str
    play_id: str
    source_play_ordinal: NonNegative | None = None
    session_id: str
    model: str
    input_length: TokenLength | None = None
    input_tokens: TokenLength | None = None          # alias of input_length
    output_length: TokenLength | None = None
    output_tokens: TokenLength | None = None         # alias of output_length
    output_token_ids: list[U32] | None = None
    hash_ids: list[NonNegative] | None = None
    not_before_ms: Milliseconds
    recorded_api_time_ms: Milliseconds | None = None
    priority: I32 | None = None
    strict_priority: U32 | None = None
    policy_class: str | None = None
    dependencies: list[DependencyRow] = []


class LegacyRow(msgspec.Struct, kw_only=True):
    request_id: str
    session_id: str | None = None
    input_length: TokenLength | None = None
    input_tokens: TokenLength | None = None
    output_length: TokenLength | None = None
    output_tokens: TokenLength | None = None
    output_token_ids: list[U32] | None = None
    hash_ids: list[NonNegative]
    timestamp: Milliseconds | None = None
    created_time: Milliseconds | None = None
    delay: Milliseconds | None = None
    delay_ms: Milliseconds | None = None
    tool_wait_ms: Milliseconds = 0.0
    wait_for: list[str] = []
    priority: I32 | None = None
    strict_priority: U32 | None = None
    policy_class: str | None = None


def graph_node(where, block_size, *, request_id, play_id, session_id, model, input_length,
               output_length, hash_ids, not_before_ms, dependencies, output_token_ids=None,
               source_play_ordinal=None, priority=None, strict_priority=None,
               policy_class=None, recorded_api_time_ms=None):
    """One node, with the rules the graph builder does not know: required lengths and
    exactly one hash id per block (also used for Dynamo's agentic traces)."""
    if hash_ids is None:
        fail(where, "hash_ids", "is required")
    if not hash_ids:
        fail(where, "hash_ids", "must not be empty")
    check_u64(where, "hash_ids", hash_ids)
    if input_length is None:
        fail(where, "input_length", "is required")
    if input_length == 0:
        fail(where, "input_length", "must be > 0, got 0")
    needed = -(-input_length // block_size)
    if len(hash_ids) != needed:
        fail(where, "hash_ids", f"must hold one id per block of input_length {input_length} at "
             f"block_size {block_size} ({needed}), got {len(hash_ids)}")
    if not model.strip():
        fail(where, "model", "must not be empty")
    if output_length is None:
        fail(where, "output_length", "is required")
    return AgenticNode(request_id, play_id, session_id, input_length, output_length, hash_ids,
                       not_before_ms, dependencies, model=model,
                       output_token_ids=output_token_ids,
                       source_play_ordinal=source_play_ordinal, priority=priority or 0,
                       strict_priority=strict_priority or 0, policy_class=policy_class,
                       recorded_api_time_ms=recorded_api_time_ms, where=where)


def _header(path, number, line):
    where = f"{path}:{number}"
    header = decode_line(row_decoder(Header), where, line)
    if header.version != VERSION:
        fail(where, "version", f"must be {VERSION}, got {header.version}")
    if header.block_size == 0:
        fail(where, "block_size", "must be > 0, got 0")
    if not header.source.format.strip():
        fail(where, "source.format", "must not be empty")
    if not header.source.digest.strip():
        fail(where, "source.digest", "must not be empty")
    return header


def load_v2(path, number, line, lines):
    """``number``/``line``: the header; ``lines`` yields the rest of the file."""
    header = _header(path, number, line)
    block = header.block_size
    nodes = []
    for number, row in decode_rows(path, NodeRow, lines):
        where = f"{path}:{number}"
        recorded = row.recorded_api_time_ms
        if recorded is not None and not (math.isfinite(recorded) and recorded >= 0.0):
            fail(where, "recorded_api_time_ms", f"must be finite and >= 0, got {recorded}")
        nodes.append(graph_node(
            where, block, request_id=row.request_id, play_id=row.play_id,
            session_id=row.session_id, model=row.model,
            input_length=first_of(where, row, "input_length", "input_tokens"),
            output_length=first_of(where, row, "output_length", "output_tokens"),
            hash_ids=row.hash_ids, not_before_ms=row.not_before_ms,
            dependencies=[Dependency(d.request_id, d.trigger, d.delay_ms, d.relation)
                          for d in row.dependencies],
            output_token_ids=row.output_token_ids, source_play_ordinal=row.source_play_ordinal,
            priority=row.priority, strict_priority=row.strict_priority,
            policy_class=row.policy_class, recorded_api_time_ms=recorded))
    if not nodes:
        fail(path, "", "holds no requests after its header")
    return AgenticTrace.build(model_block_size(block), nodes, source_format=header.source.format,
                              source_digest=header.source.digest, origin=path)


def _legacy_node(where, row, block_size):
    if not row.request_id.strip():
        fail(where, "request_id", "must not be empty")
    if not row.hash_ids:
        fail(where, "hash_ids", "must not be empty")
    wait = row.tool_wait_ms
    if not (math.isfinite(wait) and wait >= 0.0):
        fail(where, "tool_wait_ms", f"must be finite and >= 0, got {wait}")
    delay = first_of(where, row, "delay", "delay_ms")
    delay = (delay or 0.0) + wait
    if not (math.isfinite(delay) and delay >= 0.0):
        fail(where, "delay", f"plus tool_wait_ms must be finite and >= 0, got {delay}")
    relation = "join" if len(row.wait_for) > 1 else "sequence"
    deps = [Dependency(rid, "completion", delay, relation) for rid in row.wait_for]
    timestamp = first_of(where, row, "timestamp", "created_time")
    return graph_node(
        where, block_size, request_id=row.request_id, play_id="",
        session_id=row.session_id if row.session_id is not None else "agentic-session",
        model="unknown", input_length=first_of(where, row, "input_length", "input_tokens"),
        output_length=first_of(where, row, "output_length", "output_tokens"),
        hash_ids=row.hash_ids, not_before_ms=0.0 if deps else (timestamp or 0.0),
        dependencies=deps, output_token_ids=row.output_token_ids, priority=row.priority,
        strict_priority=row.strict_priority, policy_class=row.policy_class)


def load_legacy(path, lines, block_size):
    numbers, rows = [], []
    for number, row in decode_rows(path, LegacyRow, lines):
        numbers.append(number)
        rows.append(row)
    known = {row.request_id for row in rows}
    for number, row in zip(numbers, rows):
        for k, rid in enumerate(row.wait_for):  # named by the legacy field, not the graph's
            if rid not in known:
                fail(f"{path}:{number}", f"wait_for[{k}]", f"unknown request {rid!r}")
            if rid == row.request_id:
                fail(f"{path}:{number}", f"wait_for[{k}]", "a request cannot wait for itself")
    nodes = [_legacy_node(f"{path}:{number}", row, block_size)
             for number, row in zip(numbers, rows)]
    assign_component_plays(nodes, "legacy-play")
    return AgenticTrace.build(model_block_size(block_size), nodes,
                              source_format="legacy_agentic_mooncake",
                              source_digest=f"{path}:{len(nodes)}", origin=path)


def _is_v2(first_line):
    try:
        value = msgspec.json.decode(first_line)
    except (msgspec.DecodeError, RecursionError):
        return False  # the row decoder reports the bad JSON with its line
    return isinstance(value, dict) and value.get("schema") == SCHEMA


class AgenticMooncake(TraceFormat):
    NAME = "agentic_mooncake"

    def load(self, paths, *, trace_block_size):
        path = paths[0]
        lines = iter_lines(path)
        first = next(lines, None)
        if first is None:
            fail(path, "", "holds no requests")
        if _is_v2(first[1]):
            return load_v2(path, *first, lines)
        return load_legacy(path, itertools.chain((first,), lines), trace_block_size or 512)


__all__ = ["AgenticMooncake", "graph_node", "load_legacy", "load_v2"]
