"""``weka``: kv-cache-tester / AgentX agent recordings, lowered to the agentic graph
(CLUSTER.md 5).

Each trace object is one play: top-level requests (``"type": "n"`` or ``"s"``) and subagent
markers holding their own requests. Lowering follows the reference:

* ids ``weka:<h>:request:outer:<i>[:inner:<j>]``, play ``weka:<h>:play:<id>``, sessions
  ``weka:<h>:session:root`` and ``...:subagent:<i>:<agent_id>`` (plus ``:worker:<k>`` streams,
  ``weka_streams``), ``<h>`` the first 16 hex digits of BLAKE3(source name);
* ``not_before_ms`` = (t - the play's earliest t) x 1000; within a stream each request waits
  for the previous one's completion plus the recorded gap ``t - (prev t + prev api_time)``;
* a subagent's first request is spawned by the latest parent request before its marker (at
  that request's dispatch if it starts before the request ended, else at its completion); a
  blocking (``completed``) subagent is joined by the first later parent request starting at
  or after the subagent's end; a background (``async_launched``) one joins nothing;
* streams of one scope (a subagent's, or the top level's) wait for each other's requests that
  ended before they start (``replay_barrier``); a stream with no natural parent is spawned at
  the root's dispatch;
* hash ids become identities per source name, so equal ids share KV within one play's source
  only; a partial last block is private to its request.

``traffic.weka_nested_timestamp_basis`` says how a subagent's inner ``t`` is read:
``absolute`` (already play-relative), ``relative`` (from the marker), or ``auto`` (relative
when some inner request of the corpus precedes its marker, else absolute). The resolved basis
is reported as the summary key ``weka_nested_timestamp_basis``.
"""

from __future__ import annotations

import math

import blake3

from aisimulate_core.spec.converter import show
from aisimulate_core.workload.formats import TraceFormat
from aisimulate_core.workload.graph import AgenticNode, AgenticTrace, Dependency

from .rows import U64_MAX, check_u64, fail, model_block_size
from .weka_source import Subagent, corpus_digest, plays, source_files
from .weka_streams import EPSILON_S, Item, streams

BASES = ("auto", "absolute", "relative")
STATUSES = {"completed": True, "async_launched": False}   # status -> blocking


def to_ms(seconds):
    """A recorded interval as a delay in ms, floored at 0 and kept to whole nanoseconds
    (halves away from zero, as the reference rounds)."""
    ns = max(seconds, 0.0) * 1e9
    whole = math.floor(ns)
    return (whole + (ns - whole >= 0.5)) / 1e6


def _finite_nonnegative(where, field, value):
    if not (math.isfinite(value) and value >= 0.0):
        fail(where, field, f"must be finite and >= 0, got {show(value)}")


# ---------------------------------------------------------------------------- checks (pass 1)


class Evidence:
    """What ``auto`` decides on: are there subagent requests, does one precede its marker."""

    __slots__ = ("subagents", "relative_witness")

    def __init__(self):
        self.subagents = 0
        self.relative_witness = None

    def resolve(self, requested):
        if requested in ("absolute", "relative"):
            return requested
        if self.subagents == 0:
            return "not_applicable"
        return "relative" if self.relative_witness is not None else "absolute"


def _check_request(where, request, models, i, j=None):
    """Request ``j`` of subagent ``i``, or top-level request ``i`` (``j`` None); its field
    path is only spelled out for a message."""
    if not (math.isfinite(request.t) and request.t >= 0.0):
        _finite_nonnegative(where, _request_field(i, j) + ".t", request.t)
    if not request.model.strip():
        fail(where, _request_field(i, j) + ".model", "must not be empty")
    if models and request.model not in models:
        fail(where, _request_field(i, j) + ".model", f"{request.model!r} is not one of the "
             f"play's models {sorted(models)}")
    if request.input_length == 0:
        fail(where, _request_field(i, j) + ".in", "must be > 0, got 0")
    if request.api_time is not None and not (math.isfinite(request.api_time)
                                             and request.api_time >= 0.0):
        _finite_nonnegative(where, _request_field(i, j) + ".api_time", request.api_time)
    if request.hash_ids and max(request.hash_ids) > U64_MAX:
        check_u64(where, _request_field(i, j) + ".hash_ids", request.hash_ids)


def _request_field(i, j=None):
    return f"requests[{i}]" if j is None else f"requests[{i}].requests[{j}]"


def check_play(where, play, evidence):
    if not play.id.strip():
        fail(where, "id", "must not be empty")
    if play.block_size == 0:
        fail(where, "block_size", "must be > 0, got 0")
    if play.hash_id_scope != "local":
        fail(where, "hash_id_scope", f"must be 'local', got {show(play.hash_id_scope)}")
    for k, model in enumerate(play.models):
        if not model.strip():
            fail(where, f"models[{k}]", "must not be empty")
    models = set(play.models)
    top_level = 0
    for i, entry in enumerate(play.requests):
        if not isinstance(entry, Subagent):
            _check_request(where, entry, models, i)
            top_level += 1
            continue
        field = f"requests[{i}]"
        _finite_nonnegative(where, field + ".t", entry.t)
        if not entry.agent_id.strip():
            fail(where, field + ".agent_id", "must not be empty")
        if entry.duration_ms is not None and entry.duration_ms < 0:
            fail(where, field + ".duration_ms", f"must be >= 0, got {entry.duration_ms}")
        if entry.status not in STATUSES:
            fail(where, field + ".status", f"must be 'completed' (blocking) or "
                 f"'async_launched' (background), got {show(entry.status)}")
        if STATUSES[entry.status] and not entry.requests:
            fail(where, field + ".requests", "a blocking subagent needs at least one request "
                 "(external waits are not modelled)")
        for j, inner in enumerate(entry.requests):
            _check_request(where, inner, models, i, j)
            if inner.t < entry.t - EPSILON_S and evidence.relative_witness is None:
                evidence.relative_witness = (where, f"{field}.requests[{j}]")
        evidence.subagents += bool(entry.requests)
    if top_level == 0:
        fail(where, "requests", "holds no top-level request")


# ---------------------------------------------------------------------------- lowering (pass 2)


def _nested_t(where, i, j, inner_t, marker_t, basis):
    """The play-relative start of request ``j`` of the subagent at ``requests[i]``."""
    if basis == "relative":
        t = marker_t + inner_t
        if not math.isfinite(t):
            fail(where, _request_field(i, j) + ".t",
                 f"{show(inner_t)} after its marker {show(marker_t)} overflows")
        return t
    if inner_t < marker_t - EPSILON_S:
        fail(where, _request_field(i, j) + ".t", f"{show(inner_t)} precedes its subagent "
             f"marker at {show(marker_t)} under weka_nested_timestamp_basis 'absolute'")
    return max(inner_t, marker_t)  # producer rounding must not start a child before its marker


def _subagent_end(subagent, inner_items):
    if subagent.duration_ms is not None:
        return subagent.t + subagent.duration_ms / 1000.0
    return max([subagent.t, *(item.end for item in inner_items)])


class _Edges:
    """The dependencies of every request; an edge repeating (source, trigger, relation) keeps
    the first one's delay."""

    def __init__(self, row_id):
        self.row_id = row_id
        self.of = {}

    def add(self, target, source, trigger, delay_ms, relation):
        edges = self.of.setdefault(target, [])
        source_row = self.row_id(source)
        for dep in edges:
            if (dep.request_id, dep.trigger, dep.relation) == (source_row, trigger, relation):
                return
        edges.append(Dependency(source_row, trigger, delay_ms, relation))


def _replay_barriers(all_streams, edges):
    """A request waits for the latest request of each other stream of its scope that ended
    by its start, unless another such request started after that one ended."""
    scopes = {}
    for stream in all_streams:
        scopes.setdefault(stream.scope, []).append(stream)
    for members in scopes.values():
        if len(members) < 2:
            continue
        for stream in members:
            for target in stream.items:
                frontier = []
                for other in members:
                    if other is stream:
                        continue
                    done = [c for c in other.items
                            if c.t < target.t and c.end <= target.t + EPSILON_S]
                    if done:
                        frontier.append(max(done, key=lambda c: (c.end, c.t, c.source_id)))
                for c in frontier:
                    if not any(c.t < later.t and c.end <= later.t + EPSILON_S
                               for later in frontier):
                        edges.add(target.source_id, c.source_id, "completion", 0.0,
                                  "replay_barrier")


class _Identities:
    """Raw hash ids -> u64 block identities of one play (BLAKE3 of the identity string, the
    first free nonce on a collision)."""

    def __init__(self):
        self.value_of = {}
        self.owner_of = {}
        # raw hash id -> its full block's identity: the play's one source name makes the
        # identity string a function of the raw id, so a repeated id is not formatted again
        self.of_raw = {}
        # one hasher, reset per identity: making a BLAKE3 hasher costs more than hashing these
        # few bytes
        self._hasher = blake3.blake3()

    def __call__(self, domain, identity):
        key = (domain, identity)
        value = self.value_of.get(key)
        if value is not None:
            return value
        hasher = self._hasher
        nonce = 0
        while True:
            hasher.reset()
            hasher.update(f"{domain}\0{identity}\0{nonce}".encode())
            value = int.from_bytes(hasher.digest(8), "little")   # the digest's first 8 bytes
            owner = self.owner_of.setdefault(value, key)
            if owner == key:
                self.value_of[key] = value
                return value
            nonce += 1


def _block_ids(identities, name, request_id, request, block_size):
    full = request.input_length // block_size
    hash_ids = request.hash_ids
    known = min(full, len(hash_ids))
    of_raw = identities.of_raw
    ids = []
    for k in range(known):
        raw = hash_ids[k]
        value = of_raw.get(raw)
        if value is None:
            value = of_raw[raw] = identities("weka-full-block", f"source:{name}:{raw}")
        ids.append(value)
    for k in range(known, full):
        ids.append(identities("weka-full-block", f"private:missing:{request_id}:{k}"))
    if request.input_length % block_size:
        ids.append(identities("weka-partial-tail",
                              f"{request_id}:{full}:{request.input_length}"))
    return ids


def namespace(name):
    return "weka:" + blake3.blake3(name.encode()).hexdigest()[:16]


def lower_play(where, name, play, ordinal, basis):
    """The graph nodes of one play (checked by ``check_play``)."""
    ns = namespace(name)
    play_id = f"{ns}:play:{play.id}"
    top = [Item(f"outer:{i}", i, entry.t, entry) for i, entry in enumerate(play.requests)
           if not isinstance(entry, Subagent)]
    all_streams = streams(ns, "root", top)
    parents = list(all_streams)
    joins = []
    for i, sub in enumerate(play.requests):
        if not isinstance(sub, Subagent):
            continue
        owner = max(((stream, item) for stream in parents for item in stream.items
                     if item.order < i), key=lambda pair: pair[1].order, default=None)
        if owner is None:
            fail(where, f"requests[{i}]", f"subagent {sub.agent_id!r} has no parent request "
                 "before it")
        owner_stream, spawner = owner
        inner = [Item(f"outer:{i}:inner:{j}", j,
                      _nested_t(where, i, j, req.t, sub.t, basis),
                      req) for j, req in enumerate(sub.requests)]
        if not inner:
            continue
        children = streams(ns, f"subagent:{i}:{sub.agent_id}", inner)
        children[0].fork_source = spawner.source_id
        for child in children:
            child.scope = children[0].session_id
        if STATUSES[sub.status]:
            end = _subagent_end(sub, inner)
            later = [item for item in owner_stream.items
                     if item.order > i and item.t + EPSILON_S >= end]
            if later:
                target = min(later, key=lambda item: item.order)
                joins.append((target, [child.items[-1] for child in children]))
        all_streams.extend(children)

    by_id = {item.source_id: item for stream in all_streams for item in stream.items}
    edges = _Edges(lambda source: f"{ns}:request:{source}")
    for stream in all_streams:
        for prev, item in zip(stream.items, stream.items[1:]):
            edges.add(item.source_id, prev.source_id, "completion", to_ms(item.t - prev.end),
                      "sequence")
    for stream in all_streams:
        if stream.fork_source is None:
            continue
        first, parent = stream.items[0], by_id[stream.fork_source]
        if first.t < parent.end:
            edges.add(first.source_id, parent.source_id, "dispatch", to_ms(first.t - parent.t),
                      "spawn")
        else:
            edges.add(first.source_id, parent.source_id, "completion",
                      to_ms(first.t - parent.end), "spawn")
    _replay_barriers(all_streams, edges)
    for target, terminals in joins:
        for terminal in terminals:
            # a duration_ms shorter than the subagent's own requests joins at once (delay 0):
            # the wheel accepts it (the public weka.rs later refuses it)
            edges.add(target.source_id, terminal.source_id, "completion",
                      to_ms(target.t - terminal.end), "join")
    root = all_streams[0].items[0]
    for stream in all_streams:
        first = stream.items[0]
        if first is not root and not edges.of.get(first.source_id):
            # a disjoint stream: started at the root's dispatch, not behind a completion
            edges.add(first.source_id, root.source_id, "dispatch", to_ms(first.t - root.t),
                      "spawn")

    start = min(item.t for item in by_id.values())
    identities = _Identities()
    nodes = []
    for stream in all_streams:
        for item in stream.items:
            request_id = edges.row_id(item.source_id)
            request = item.request
            nodes.append(AgenticNode(
                request_id, play_id, stream.session_id, request.input_length,
                request.output_length,
                _block_ids(identities, name, request_id, request, play.block_size),
                to_ms(item.t - start), edges.of.get(item.source_id, ()), model=request.model,
                source_play_ordinal=ordinal, where=where, recorded_api_time_ms=(
                    None if request.api_time is None else to_ms(request.api_time))))
    return nodes


# ---------------------------------------------------------------------------- the format


# A corpus of at most this many plays is decoded once: the plays checked by _corpus are kept
# for the lowering (they are not changed by either); a larger one is decoded again, play by
# play, so that its decoded plays are never all held beside the graph being built.
KEEP_PLAYS = 1024


def _corpus(files, trace_block_size):
    """(block size, evidence, play count, the ``plays`` entries when at most KEEP_PLAYS) of a
    whole corpus: every play checked once."""
    evidence, block, first_where, count = Evidence(), None, None, 0
    kept = []
    for source in files:
        for entry in plays(source):
            where, _, play = entry
            check_play(where, play, evidence)
            if kept is not None:
                kept.append(entry)
                if len(kept) > KEEP_PLAYS:
                    kept = None
            if block is None:
                block, first_where = play.block_size, where
                if trace_block_size is not None and trace_block_size != block:
                    fail(where, "block_size", f"{block} does not match the payload's "
                         f"trace_block_size {trace_block_size}")
            elif play.block_size != block:
                fail(where, "block_size", f"{play.block_size} differs from the block size "
                     f"{block} of {first_where}; one corpus holds one block size")
            count += 1
    return block, evidence, count, kept


class Weka(TraceFormat):
    NAME = "weka"
    # traffic fields handed to load() by name (aisimulate_core.workload.lowering)
    TRAFFIC_OPTIONS = ("weka_nested_timestamp_basis",)

    def load(self, paths, *, trace_block_size, weka_nested_timestamp_basis=None):
        requested = weka_nested_timestamp_basis or "auto"
        if requested not in BASES:
            fail(paths[0], "weka_nested_timestamp_basis", f"must be one of 'auto', 'absolute', "
                 f"'relative', got {show(requested)}")
        files = source_files(paths[0])
        block, evidence, _, kept = _corpus(files, trace_block_size)
        basis = evidence.resolve(requested)
        nested = "relative" if basis == "relative" else "absolute"
        nodes, ordinal = [], 0
        every = kept if kept is not None else (
            entry for source in files for entry in plays(source))
        for where, name, play in every:
            nodes += lower_play(where, name, play, ordinal, nested)
            ordinal += 1
        return AgenticTrace.build(model_block_size(block), nodes, source_format="weka",
                                  source_digest=corpus_digest(files, basis), origin=paths[0],
                                  summary_extras={"weka_nested_timestamp_basis": basis})


__all__ = ["BASES", "Weka", "check_play", "lower_play", "namespace", "to_ms"]
