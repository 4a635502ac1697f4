"""The agentic driver on hand-built graphs: triggers, delays, failures and trajectories."""

import math

import pytest

from aisimulate_core.errors import TraceError
from aisimulate_core.report import Collector
from aisimulate_core.workload.agentic import AgenticDriver
from aisimulate_core.workload.graph import AgenticNode, AgenticTrace, Dependency


def node(rid, play="p", not_before=0.0, *deps, output=2):
    return AgenticNode(rid, play, "s", 4, output, [hash(rid) & 0xFFFF], not_before,
                       [Dependency(*d) for d in deps], where=f"g.jsonl:{rid}")


def driver(*nodes):
    return AgenticDriver(AgenticTrace.build(4, list(nodes), source_format="test",
                                            source_digest="d", origin="g.jsonl"))


def rids(requests):
    return [r.request_id for r in requests]


def end(d, request, now_ms, status="completed"):
    d.on_terminal(request, now_ms, status)


def test_roots_wait_for_not_before_and_dispatch_edges_fire_at_dispatch():
    d = driver(node("a", "p", 10.0),
               node("b", "p", 0.0, ("a", "dispatch", 0.0, "spawn")),
               node("c", "p", 0.0, ("a", "dispatch", 4.0, "spawn")))
    assert d.total == 3 and d.next_ready_ms() == 10.0
    # b is released by a's dispatch and leaves in the same call
    batch = d.pop_ready(10.0, 10)
    assert rids(batch) == ["a", "b"]
    assert (batch[0].play_id, batch[0].session_id, batch[0].turn_index) == ("p", "s", None)
    assert d.next_ready_ms() == 14.0
    assert rids(d.pop_ready(14.0, 10)) == ["c"]


def test_completion_edges_take_the_latest_of_not_before_and_all_triggers():
    d = driver(node("a"), node("b"),
               node("j", "p", 30.0, ("a", "completion", 2.0, "join"), ("b", "completion", 5.0, "join")))
    a, b = d.pop_ready(0.0, 10)
    end(d, a, 10.0)
    assert math.isinf(d.next_ready_ms())          # j still waits for b
    end(d, b, 20.0)
    assert d.next_ready_ms() == 30.0              # 20 + 5 < its own not_before 30
    (j,) = d.pop_ready(30.0, 10)
    end(d, j, 41.0)
    assert d.trajectories() == (1, [41.0])


def test_a_failed_node_fails_its_play_and_skips_what_was_not_dispatched():
    d = driver(node("a1", "A"), node("a2", "A", 0.0, ("a1", "completion", 0.0, "sequence")),
               node("a3", "A", 0.0, ("a2", "completion", 0.0, "sequence")),
               node("a4", "A", 0.0, ("a1", "dispatch", 1.0, "spawn")),
               node("b1", "B", 3.0))
    (a1,) = d.pop_ready(0.0, 10)
    (a4,) = d.pop_ready(1.0, 10)
    (b1,) = d.pop_ready(3.0, 10)
    end(d, a1, 10.0)
    (a2,) = d.pop_ready(10.0, 10)
    end(d, a2, 12.0, "rejected")
    assert math.isinf(d.next_ready_ms())          # a3 is skipped
    end(d, b1, 15.0)
    end(d, a4, 30.0)                              # still runs to completion
    assert d.trajectories() == (2, [12.0])        # only B: 15 - 3
    assert d.play_outcomes() == [
        {"play_id": "A", "status": "failed", "causal_terminal_ms": 12.0, "settled_at_ms": 30.0,
         "failure_request_id": "a2", "failure_status": "rejected"},
        {"play_id": "B", "status": "completed", "causal_terminal_ms": 15.0, "settled_at_ms": 15.0}]
    # 4 dispatched x (dispatch, terminal, quiescence) + 1 skipped + 2 settled plays
    assert d.lifecycle_events == 15


def test_trajectory_extras_reach_the_report():
    d = driver(node("a"), node("b", "q", 5.0))
    a, = d.pop_ready(0.0, 10)
    end(d, a, 7.0)
    b, = d.pop_ready(5.0, 10)
    end(d, b, 9.0)
    collector = Collector(record_per_request=False)
    d.report_extras(collector)
    summary = collector.finalize(wall_time_ms=1.0).summary
    assert (summary["total_trajectories"], summary["completed_trajectories"],
            summary["incomplete_trajectories"]) == (2, 2, 0)
    assert (summary["mean_trajectory_e2e_latency_ms"], summary["max_trajectory_e2e_latency_ms"],
            summary["p50_trajectory_e2e_latency_ms"]) == (5.5, 7.0, 7.0)
    graph = summary["agentic_graph"]
    assert graph.pop("graph_digest") == d.graph.digest()
    assert graph == {"source": {"format": "test", "digest": "d"}, "block_size": 4,
                     "node_count": 2, "play_count": 2, "source_models": ["unknown"]}
    assert summary["agentic_lifecycle_event_count"] == 8


def test_graph_rules_need_a_block_size_and_nodes():
    with pytest.raises(TraceError) as info:
        AgenticTrace.build(0, [node("a")], source_format="t", source_digest="d", origin="g.jsonl")
    assert str(info.value) == "g.jsonl: block_size: must be > 0, got 0"
    with pytest.raises(TraceError) as info:
        AgenticTrace.build(4, [], source_format="t", source_digest="d", origin="g.jsonl")
    assert str(info.value) == "g.jsonl: the trace holds no requests"
    with pytest.raises(TraceError) as info:
        driver(AgenticNode("a", "p", "s", 9, 1, [1, 2], where="g.jsonl:1"))
    assert str(info.value) == ("g.jsonl:1: input_length: 9 exceeds the capacity of hash_ids, "
                               "2 x block size 4 = 8 tokens")
