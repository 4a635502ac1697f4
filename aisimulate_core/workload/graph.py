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

import math
from collections import deque

import blake3
import msgspec

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
                if source is None or source == i or nodes[source].play_id != node.play_id:
                    _fail_dependency(node, k, dep, source, i, nodes)
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
        return blake3.blake3(encode_json({
            "block_size": self.block_size,
            "nodes": [_node_json(node) for node in self.nodes]})).hexdigest()

_TRIGGER_RANK = {trigger: k for k, trigger in enumerate(TRIGGERS)}
_RELATION_RANK = {relation: k for k, relation in enumerate(RELATIONS)}


# serde_json's compact JSON, which the reference hashes (the graph here, the lifecycle
# transcript in agentic.py): msgspec writes the same bytes. Floats come as Rust's ryu writes
# them (shortest round-trip digits, ".0" on whole numbers, plain decimals from 1e-5 up to 1e16,
# exponents such as 1e16 and 1.5e-7 beyond, NaN and infinities as null), strings keep
# non-ASCII and escape as serde does, so one C call writes what the reference hashes.
_SERDE_JSON = msgspec.json.Encoder()
encode_json = _SERDE_JSON.encode
encode_json_lines = _SERDE_JSON.encode_lines   # one line each, each ended by a newline


def sorted_dependencies(node):
    """A node's dependencies in the reference's canonical order: by source, trigger, relation,
    delay (its graph identity, and the spawn that names a request's parent, follow it)."""
    dependencies = node.dependencies
    if len(dependencies) < 2:   # nothing to order (sorted would still call the key)
        return list(dependencies)
    return sorted(dependencies, key=lambda d: (
        d.request_id, _TRIGGER_RANK[d.trigger], _RELATION_RANK[d.relation], d.delay_ms))


def _node_json(node):
    """The node as the reference serializes it into the graph's identity, fields in its
    order (the numbers it holds as f64 written as floats). Keys are stored one by one: an
    ``update(**fields)`` builds its keyword dict first."""
    entry = {"request_id": node.request_id, "play_id": node.play_id}
    if node.source_play_ordinal is not None:
        entry["source_play_ordinal"] = node.source_play_ordinal
    entry["session_id"] = node.session_id
    entry["model"] = node.model
    entry["input_length"] = node.input_length
    entry["max_output_tokens"] = node.max_output_tokens
    entry["output_token_ids"] = _listed(node.output_token_ids)
    # the reference's replay key of authored outputs is not reproduced: null
    entry["replay_key"] = None
    entry["hash_ids"] = _listed(node.hash_ids)
    entry["not_before_ms"] = float(node.not_before_ms)
    if node.recorded_api_time_ms is not None:
        entry["recorded_api_time_ms"] = float(node.recorded_api_time_ms)
    entry["priority"] = node.priority
    entry["strict_priority"] = node.strict_priority
    entry["policy_class"] = node.policy_class
    entry["dependencies"] = [{"request_id": d.request_id, "trigger": d.trigger,
                              "delay_ms": float(d.delay_ms), "relation": d.relation}
                             for d in sorted_dependencies(node)]
    return entry


def _listed(ids):
    # a plugin's node may hold its ids in any sequence (an array, a range): JSON has lists
    return ids if ids is None or type(ids) is list else list(ids)


def _fail_dependency(node, k, dep, source, i, nodes):
    """The error of dependency ``k`` of node ``i``, whose source (index) is unknown, itself or
    in another play."""
    field = f"dependencies[{k}].request_id"
    if source is None:
        _fail(node.where, field, f"unknown request {dep.request_id!r}")
    if source == i:
        _fail(node.where, field, "a request cannot depend on itself")
    _fail(node.where, field, f"request {dep.request_id!r} is in play "
          f"{nodes[source].play_id!r}, not in {node.play_id!r}")


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
