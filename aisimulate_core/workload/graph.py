"""The agentic dependency graph a trace format may load into (SEMANTICS.md 1.3, 5).

Every node is one request. A node waits for its dependencies: a ``dispatch`` edge fires when
the source request is dispatched, a ``completion`` edge when it completes; each adds its
delay. Plays group nodes (no edge crosses a play) and are what trajectory metrics count.

``AgenticTrace.build`` checks the graph as the reference does and fixes its order: nodes
sorted by request id, plays by ``source_play_ordinal`` when every play has one, else by play
id. Node ``where`` strings ("trace.jsonl:3") locate each node's row for messages; field names
are those of the agentic Mooncake v2 row.
"""

from __future__ import annotations

import json
import math
from collections import deque

import blake3

from ..errors import TraceError

TRIGGERS = ("dispatch", "completion")
RELATIONS = ("sequence", "spawn", "join", "replay_barrier")
# (relation, trigger) pairs the reference accepts: spawn may fire on either
ALLOWED_EDGES = frozenset({("sequence", "completion"), ("spawn", "dispatch"),
                           ("spawn", "completion"), ("join", "completion"),
                           ("replay_barrier", "completion")})


class Dependency:
    __slots__ = ("request_id", "trigger", "delay_ms", "relation")

    def __init__(self, request_id, trigger, delay_ms, relation):
        self.request_id = request_id
        self.trigger = trigger
        self.delay_ms = delay_ms
        self.relation = relation


class AgenticNode:
    __slots__ = ("request_id", "play_id", "session_id", "model", "input_length",
                 "max_output_tokens", "output_token_ids", "hash_ids", "not_before_ms",
                 "dependencies", "source_play_ordinal", "priority", "strict_priority",
                 "policy_class", "recorded_api_time_ms", "where")

    def __init__(self, request_id, play_id, session_id, input_length, max_output_tokens,
                 hash_ids, not_before_ms=0.0, dependencies=(), *, model="unknown",
                 output_token_ids=None, source_play_ordinal=None, priority=0,
                 strict_priority=0, policy_class=None, recorded_api_time_ms=None, where=None):
        self.request_id = request_id
        self.play_id = play_id
        self.session_id = session_id
        self.model = model
        self.input_length = input_length
        self.max_output_tokens = max_output_tokens
        self.output_token_ids = output_token_ids
        self.hash_ids = hash_ids              # raw u64 ids at the graph's block size
        self.not_before_ms = not_before_ms
        self.dependencies = list(dependencies)
        self.source_play_ordinal = source_play_ordinal
        self.priority = priority
        self.strict_priority = strict_priority
        self.policy_class = policy_class
        self.recorded_api_time_ms = recorded_api_time_ms  # provenance: part of the identity only
        self.where = where


class Play:
    __slots__ = ("play_id", "nodes", "roots")

    def __init__(self, play_id, nodes, roots):
        self.play_id = play_id
        self.nodes = nodes                    # node indices, ascending
        self.roots = roots                    # the nodes without dependencies


class AgenticTrace:
    """A validated graph: ``nodes`` (by request id), ``plays`` in replay order."""

    __slots__ = ("block_size", "source_format", "source_digest", "nodes", "plays", "index",
                 "summary_extras")

    def __init__(self, block_size, source_format, source_digest, nodes, plays,
                 summary_extras=None):
        self.block_size = block_size
        self.source_format = source_format
        self.source_digest = source_digest
        self.nodes = nodes
        self.plays = plays
        self.index = {node.request_id: i for i, node in enumerate(nodes)}
        # format-specific summary keys (weka's resolved timestamp basis), reported last
        self.summary_extras = dict(summary_extras or {})

    @classmethod
    def build(cls, block_size, nodes, *, source_format, source_digest, origin,
              summary_extras=None):
        """Validate ``nodes`` and order them; ``origin`` names the file(s) for graph-wide
        messages; ``summary_extras`` are added to the report's summary as given."""
        if not isinstance(block_size, int) or block_size <= 0:
            raise TraceError(f"{origin}: block_size: must be > 0, got {block_size!r}")
        if not nodes:
            raise TraceError(f"{origin}: the trace holds no requests")
        seen = {}
        for node in nodes:
            _check_node(node, block_size)
            first = seen.setdefault(node.request_id, node)
            if first is not node:
                _fail(node.where, "request_id", f"{node.request_id!r} repeats the request at "
                      f"{first.where}")
        nodes = sorted(nodes, key=lambda n: n.request_id)
        index = {node.request_id: i for i, node in enumerate(nodes)}
        by_play = {}
        for i, node in enumerate(nodes):
            by_play.setdefault(node.play_id, []).append(i)
            for k, dep in enumerate(node.dependencies):
                source = index.get(dep.request_id)
                field = f"dependencies[{k}].request_id"
                if source is None:
                    _fail(node.where, field, f"unknown request {dep.request_id!r}")
                if source == i:
                    _fail(node.where, field, "a request cannot depend on itself")
                if nodes[source].play_id != node.play_id:
                    _fail(node.where, field, f"request {dep.request_id!r} is in play "
                          f"{nodes[source].play_id!r}, not in {node.play_id!r}")
        _check_acyclic(nodes, index, origin)
        plays = [_play(play_id, members, nodes) for play_id, members in by_play.items()]
        return cls(block_size, source_format, source_digest, nodes, _ordered(plays, nodes, origin),
                   summary_extras)

    @property
    def total_turns(self):
        return len(self.nodes)

    def models(self):
        return sorted({node.model for node in self.nodes})

    def digest(self):
        """The graph's identity as the reference computes it: BLAKE3 of the compact JSON of
        ``{"block_size", "nodes"}``, the nodes by request id with their dependencies sorted
        (source, trigger, relation, delay), each node's fields in the reference's order."""
        hasher = blake3.blake3()
        hasher.update(b'{"block_size":%d,"nodes":[' % self.block_size)
        for k, node in enumerate(self.nodes):
            hasher.update(_node_json(node, first=k == 0).encode())
        hasher.update(b"]}")
        return hasher.hexdigest()

_TRIGGER_RANK = {trigger: k for k, trigger in enumerate(TRIGGERS)}
_RELATION_RANK = {relation: k for k, relation in enumerate(RELATIONS)}


def json_float(x):
    """``x`` as serde_json writes an f64 (Rust's ryu): the shortest round-trip digits, a ``.0``
    on whole numbers, plain decimals from 1e-5 up to 1e16, exponents (``1e16``, ``1.5e-7``)
    beyond."""
    if 1e-4 <= abs(x) < 1e16:
        return repr(x)                      # Python's repr agrees in this range
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign, text = ("-", repr(-x)) if x < 0 else ("", repr(x))
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + int(exponent or 0) - (len(digits) - len(digits.lstrip("0")))
    digits = digits.strip("0")
    n = len(digits)
    if n <= point <= 16:
        body = digits + "0" * (point - n) + ".0"
    elif 0 < point <= 16:
        body = digits[:point] + "." + digits[point:]
    elif -5 < point <= 0:
        body = "0." + "0" * -point + digits
    else:
        body = digits[0] + ("." + digits[1:] if n > 1 else "") + f"e{point - 1}"
    return sign + body


def json_value(value):
    """Compact JSON as serde_json writes it (non-ASCII kept, floats as ``json_float``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if value.isprintable() and '"' not in value and "\\" not in value:
            return f'"{value}"'             # nothing to escape (the usual id)
        return json.dumps(value, ensure_ascii=False)
    if all(type(item) is int for item in value):
        return "[" + ",".join(map(str, value)) + "]"
    return "[" + ",".join(map(json_value, value)) + "]"


def sorted_dependencies(node):
    """A node's dependencies in the reference's canonical order: by source, trigger, relation,
    delay (its graph identity, and the spawn that names a request's parent, follow it)."""
    return sorted(node.dependencies, key=lambda d: (
        d.request_id, _TRIGGER_RANK[d.trigger], _RELATION_RANK[d.relation], d.delay_ms))


def _node_json(node, first):
    deps = sorted_dependencies(node)
    parts = [f'"request_id":{json_value(node.request_id)}', f'"play_id":{json_value(node.play_id)}']
    if node.source_play_ordinal is not None:
        parts.append(f'"source_play_ordinal":{node.source_play_ordinal}')
    parts += [f'"session_id":{json_value(node.session_id)}', f'"model":{json_value(node.model)}',
              f'"input_length":{node.input_length}',
              f'"max_output_tokens":{node.max_output_tokens}',
              f'"output_token_ids":{json_value(node.output_token_ids)}',
              # the reference's replay key of authored outputs is not reproduced: null
              '"replay_key":null', f'"hash_ids":{json_value(node.hash_ids)}',
              f'"not_before_ms":{json_float(float(node.not_before_ms))}']
    if node.recorded_api_time_ms is not None:
        parts.append(f'"recorded_api_time_ms":{json_float(float(node.recorded_api_time_ms))}')
    parts += [f'"priority":{node.priority}', f'"strict_priority":{node.strict_priority}',
              f'"policy_class":{json_value(node.policy_class)}',
              '"dependencies":[' + ",".join(
                  f'{{"request_id":{json_value(d.request_id)},"trigger":"{d.trigger}",'
                  f'"delay_ms":{json_float(float(d.delay_ms))},"relation":"{d.relation}"}}'
                  for d in deps) + "]"]
    return ("" if first else ",") + "{" + ",".join(parts) + "}"


def _fail(where, field, rule):
    raise TraceError(f"{where}: {field}: {rule}")


def _check_node(node, block_size):
    where = node.where
    if not node.request_id.strip():
        _fail(where, "request_id", "must not be empty")
    if not node.play_id.strip():
        _fail(where, "play_id", "must not be empty")
    if not node.session_id.strip():
        _fail(where, "session_id", "must not be empty")
    if node.input_length <= 0:
        _fail(where, "input_length", f"must be > 0, got {node.input_length}")
    if node.input_length > len(node.hash_ids) * block_size:
        _fail(where, "input_length", f"{node.input_length} exceeds the capacity of hash_ids, "
              f"{len(node.hash_ids)} x block size {block_size} = "
              f"{len(node.hash_ids) * block_size} tokens")
    outputs = node.output_token_ids
    if outputs is not None and len(outputs) != node.max_output_tokens:
        _fail(where, "output_token_ids", f"holds {len(outputs)} ids but output_length is "
              f"{node.max_output_tokens}")
    if not (math.isfinite(node.not_before_ms) and node.not_before_ms >= 0.0):
        _fail(where, "not_before_ms", f"must be finite and >= 0, got {node.not_before_ms}")
    for k, dep in enumerate(node.dependencies):
        if not dep.request_id.strip():
            _fail(where, f"dependencies[{k}].request_id", "must not be empty")
        if not (math.isfinite(dep.delay_ms) and dep.delay_ms >= 0.0):
            _fail(where, f"dependencies[{k}].delay_ms", f"must be finite and >= 0, got {dep.delay_ms}")
        if (dep.relation, dep.trigger) not in ALLOWED_EDGES:
            _fail(where, f"dependencies[{k}]", f"a {dep.relation} dependency cannot have "
                  f"trigger {dep.trigger!r}")


def _check_acyclic(nodes, index, origin):
    # Kahn's algorithm; what is never released sits on (or behind) a cycle
    indegree = [len(node.dependencies) for node in nodes]
    dependents = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for dep in node.dependencies:
            dependents[index[dep.request_id]].append(i)
    ready = deque(i for i, d in enumerate(indegree) if d == 0)
    visited = 0
    while ready:
        i = ready.popleft()
        visited += 1
        for j in dependents[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                ready.append(j)
    if visited != len(nodes):
        blocked = [nodes[i].request_id for i, d in enumerate(indegree) if d > 0][:8]
        raise TraceError(f"{origin}: dependencies: cycle among {len(nodes) - visited} "
                         f"requests; blocked: {', '.join(blocked)}")


def _play(play_id, members, nodes):
    ordinal = nodes[members[0]].source_play_ordinal
    for i in members:
        if nodes[i].source_play_ordinal != ordinal:
            _fail(nodes[i].where, "source_play_ordinal", f"play {play_id!r} has both "
                  f"{ordinal} and {nodes[i].source_play_ordinal}")
    # every play has a root: edges stay inside plays and the graph is acyclic
    return Play(play_id, members, [i for i in members if not nodes[i].dependencies])


def _ordered(plays, nodes, origin):
    ordinals = [nodes[p.nodes[0]].source_play_ordinal for p in plays]
    given = sum(o is not None for o in ordinals)
    if given == 0:
        return sorted(plays, key=lambda p: p.play_id)
    if given != len(plays):
        raise TraceError(f"{origin}: source_play_ordinal: must be set on every play when "
                         "any play sets it")
    if sorted(ordinals) != list(range(len(plays))):
        raise TraceError(f"{origin}: source_play_ordinal: must be unique and contiguous "
                         f"from 0, got {sorted(ordinals)}")
    return [p for _, p in sorted(zip(ordinals, plays), key=lambda pair: pair[0])]


__all__ = ["ALLOWED_EDGES", "AgenticNode", "AgenticTrace", "Dependency", "Play", "RELATIONS",
           "TRIGGERS", "sorted_dependencies"]
