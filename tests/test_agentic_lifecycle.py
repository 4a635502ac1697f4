"""The agentic lifecycle transcript and its digest, as the reference writes them (issue 9 item 5).

One compact JSON object a line, hashed with BLAKE3 after the reference's domain tag; the ends of
one instant are one batch: causal terminals in graph order (a failure's skips after it), then
quiescences in graph order (the play's own after its last); ends at admission come after the
passes of the instant; a request quiescent after its terminal (a disaggregated source still
held) settles its play later."""

from __future__ import annotations

import blake3

from aisimulate_core.workload.agentic import AgenticDriver
from aisimulate_core.workload.graph import AgenticNode, AgenticTrace, Dependency

DOMAIN = b"aisimulate-agentic-lifecycle-v1\0"


def node(rid, *deps, play="p"):
    return AgenticNode(rid, play, "s", 4, 1, [len(rid)], 0.0, [Dependency(*d) for d in deps],
                       where=f"g.jsonl:{rid}")


def driver(*nodes):
    return AgenticDriver(AgenticTrace.build(4, list(nodes), source_format="test",
                                            source_digest="d", origin="g.jsonl"))


def transcript(*events):
    """The digest of ``events`` = (at_ms, play_id, request_id or None, event, status or None)."""
    hasher = blake3.blake3(DOMAIN)
    for ordinal, (at, play, rid, event, status) in enumerate(events):
        line = (f'{{"schema":"aisimulate.agentic.lifecycle.v1","ordinal":{ordinal},'
                f'"at_ms":{at},"play_id":"{play}"')
        line += f',"request_id":"{rid}"' if rid else ""
        line += f',"event":"{event}"' + (f',"status":"{status}"' if status else "") + "}\n"
        hasher.update(line.encode())
    return hasher.hexdigest()


def test_one_instants_ends_are_written_in_graph_order():
    d = driver(node("a"), node("b"), node("c", ("a", "completion", 0.0, "join"),
                                              ("b", "completion", 0.0, "join")))
    a, b = d.pop_ready(0.0, 10)
    d.on_terminal(b, 10.0, "completed")          # the runtime's order: b first
    d.on_terminal(a, 10.0, "completed")
    c, = d.pop_ready(10.0, 10)
    d.on_terminal(c, 15.5, "completed")
    assert d.lifecycle_events == 10
    assert d.lifecycle_digest() == transcript(
        ("0.0", "p", "a", "dispatch", None), ("0.0", "p", "b", "dispatch", None),
        ("10.0", "p", "a", "causal_terminal", "completed"),
        ("10.0", "p", "b", "causal_terminal", "completed"),
        ("10.0", "p", "a", "quiescent", None), ("10.0", "p", "b", "quiescent", None),
        ("10.0", "p", "c", "dispatch", None),
        ("15.5", "p", "c", "causal_terminal", "completed"), ("15.5", "p", "c", "quiescent", None),
        ("15.5", "p", None, "play_quiescent", None))


def test_a_failure_skips_after_its_terminal_and_the_lowest_node_is_the_play_failure():
    d = driver(node("a"), node("b"), node("c", ("a", "completion", 0.0, "sequence")))
    a, b = d.pop_ready(0.0, 10)
    d.on_terminal(b, 3.0, "rejected")
    d.on_terminal(a, 3.0, "rejected")
    assert d.play_outcomes() == [{"play_id": "p", "status": "failed", "causal_terminal_ms": 3.0,
                                  "settled_at_ms": 3.0, "failure_request_id": "a",
                                  "failure_status": "rejected"}]
    assert d.lifecycle_digest() == transcript(
        ("0.0", "p", "a", "dispatch", None), ("0.0", "p", "b", "dispatch", None),
        ("3.0", "p", "a", "causal_terminal", "rejected"), ("3.0", "p", "c", "skipped", None),
        ("3.0", "p", "b", "causal_terminal", "rejected"),
        ("3.0", "p", "a", "quiescent", None), ("3.0", "p", "b", "quiescent", None),
        ("3.0", "p", None, "play_quiescent", None))


def test_a_request_quiescent_after_its_terminal_settles_its_play_then():
    d = driver(node("a"))
    a, = d.pop_ready(0.0, 10)
    d.on_terminal(a, 20.0, "completed", quiescent=False)   # its source blocks still held
    assert d.play_outcomes() == [{"play_id": "p", "status": "incomplete"}]
    d.on_quiescent(a, 20.5)
    assert d.play_outcomes() == [{"play_id": "p", "status": "completed",
                                  "causal_terminal_ms": 20.0, "settled_at_ms": 20.5}]
    assert d.lifecycle_digest() == transcript(
        ("0.0", "p", "a", "dispatch", None), ("20.0", "p", "a", "causal_terminal", "completed"),
        ("20.5", "p", "a", "quiescent", None), ("20.5", "p", None, "play_quiescent", None))
