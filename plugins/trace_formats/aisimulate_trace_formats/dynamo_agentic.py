"""Agentic Dynamo traces: one graph node per request (SEMANTICS.md 1.5).

Consecutive requests of a session are a completion ``sequence``. A child session
(``parent_session_id``) is spawned at the dispatch of its parent request, named by a Claude
tool's ``source_request_id``, else the latest parent request starting no later than the
child; unless the tool runs in the background it is joined by the parent request that
consumes it (``consumer_request_id``, else the first one starting after the child's last
request ends). An edge's delay is the target's start minus the source's start (dispatch) or
end (completion); a negative one is an error, as in the reference. Plays are the connected
components.
"""

from __future__ import annotations

from aisimulate_core.workload.graph import AgenticTrace, Dependency

from .agentic_mooncake import graph_node
from .dynamo_records import SCHEMA, check_prompt, output_length
from .plays import assign_component_plays
from .rows import fail


def _edge(entries, source, target, trigger, relation):
    at = entries[source].start_ms if trigger == "dispatch" else entries[source].end_ms
    start = entries[target].start_ms
    if start < at:
        event = "is dispatched" if trigger == "dispatch" else "ends"
        fail(entries[target].where, "request", f"starts at {start} ms, before request "
             f"{entries[source].request_id!r} {event} at {at} ms, which it depends on "
             f"({relation})")
    return Dependency(entries[source].request_id, trigger, float(start - at), relation)


def _add_edge(deps, edge):
    if not any(d.request_id == edge.request_id and d.trigger == edge.trigger for d in deps):
        deps.append(edge)


def _explicit_tools(tools, entries, index, by_session):
    """Claude tool events naming a child session that exists in the trace, by child."""
    by_child = {}
    for tool in tools:
        claude = tool.claude
        if claude is None:
            continue
        if claude.execution_mode not in ("blocking", "background"):
            fail(tool.where, "tool.claude.execution_mode", "must be 'blocking' or "
                 f"'background', got {claude.execution_mode!r}")
        for field, rid in (("source_request_id", claude.source_request_id),
                           ("consumer_request_id", claude.consumer_request_id)):
            if rid is None:
                continue
            if rid not in index:
                fail(tool.where, f"tool.claude.{field}", f"unknown request {rid!r}")
            owner = entries[index[rid]].context.session_id
            if owner != tool.session_id:
                fail(tool.where, f"tool.claude.{field}", f"request {rid!r} belongs to session "
                     f"{owner!r}, not {tool.session_id!r}")
        child = claude.child_session_id
        if child is None or child not in by_session:
            continue
        if child in by_child:
            fail(tool.where, "tool.claude.child_session_id", f"session {child!r} is already "
                 f"the child of the tool at {by_child[child].where}")
        by_child[child] = tool
    return by_child


def lower_agentic(entries, tools, block):
    first_start = min(e.start_ms for e in entries)
    index = {e.request_id: i for i, e in enumerate(entries)}
    by_session, parent_of = {}, {}
    for i, entry in enumerate(entries):
        context = entry.context
        if not context.session_id.strip():
            fail(entry.where, "agent_context.session_id", "must not be empty")
        by_session.setdefault(context.session_id, []).append(i)
        parent = context.parent_session_id
        if parent is not None:
            known = parent_of.setdefault(context.session_id, parent)
            if known != parent:
                fail(entry.where, "agent_context.parent_session_id", f"session "
                     f"{context.session_id!r} already has parent {known!r}, got {parent!r}")
    for members in by_session.values():
        members.sort(key=lambda i: entries[i].order())
    deps = [[] for _ in entries]
    for members in by_session.values():
        for source, target in zip(members, members[1:]):
            _add_edge(deps[target], _edge(entries, source, target, "completion", "sequence"))
    explicit = _explicit_tools(tools, entries, index, by_session)
    for child, parent in sorted(parent_of.items()):
        children = by_session[child]
        parents = by_session.get(parent)
        if parents is None:
            fail(entries[children[0]].where, "agent_context.parent_session_id",
                 f"unknown session {parent!r}")
        first_child = children[0]
        last_child = max(children, key=lambda i: (entries[i].end_ms, entries[i].start_ms,
                                                   entries[i].request_id))
        tool = explicit.get(child)
        if tool is not None:
            spawn = index[tool.claude.source_request_id]
            if spawn not in parents:
                fail(tool.where, "tool.claude.source_request_id", f"request "
                     f"{tool.claude.source_request_id!r} is not in parent session {parent!r}")
            _add_edge(deps[first_child], _edge(entries, spawn, first_child, "dispatch", "spawn"))
            consumer = tool.claude.consumer_request_id
            if consumer is not None:
                join = index[consumer]
                if join not in parents:
                    fail(tool.where, "tool.claude.consumer_request_id", f"request "
                         f"{consumer!r} is not in parent session {parent!r}")
                _add_edge(deps[join], _edge(entries, last_child, join, "completion", "join"))
            continue
        child_start = entries[first_child].start_ms
        earlier = [i for i in parents if entries[i].start_ms <= child_start]
        if earlier:
            # the latest start wins; among equal starts the last in session order
            spawn = max(reversed(earlier), key=lambda i: entries[i].start_ms)
            _add_edge(deps[first_child], _edge(entries, spawn, first_child, "dispatch", "spawn"))
        child_end = entries[last_child].end_ms
        later = [i for i in parents if entries[i].start_ms >= child_end]
        if later:
            join = min(later, key=lambda i: entries[i].start_ms)
            _add_edge(deps[join], _edge(entries, last_child, join, "completion", "join"))
    nodes = []
    for i, entry in enumerate(entries):
        check_prompt(entry, block, exact=True)
        replay = entry.request.replay
        nodes.append(graph_node(
            entry.where, block, request_id=entry.request_id, play_id="",
            session_id=entry.context.session_id, model=entry.request.model or "unknown",
            input_length=replay.input_length, output_length=output_length(entry),
            hash_ids=replay.input_sequence_hashes,
            not_before_ms=0.0 if deps[i] else float(entry.start_ms - first_start),
            dependencies=deps[i]))
    assign_component_plays(nodes, "dynamo-play")
    return AgenticTrace.build(block, nodes, source_format=SCHEMA,
                              source_digest=f"requests:{len(nodes)};tools:{len(tools)}",
                              origin=", ".join(sorted({e.where.rsplit(':', 1)[0]
                                                       for e in entries})))


__all__ = ["lower_agentic"]
