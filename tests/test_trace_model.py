"""The core's session-trace model: the rules every format's output must meet, and transforms."""

import pytest

from aisimulate_core.errors import TraceError
from aisimulate_core.workload.graph import AgenticNode, AgenticTrace, Dependency
from aisimulate_core.workload.trace import (HashInterner, Session, Trace, Turn, check_timestamped,
                                            validate_trace)
from aisimulate_core.workload.transforms import (normalize_graph_starts, normalize_session_starts,
                                                 speed_up_graph, speed_up_timing)


def one_turn_trace(turn, start=0.0, block_size=4):
    return Trace(block_size, [Session("s", start, [turn], where="x.jsonl:1")])


def message(trace):
    with pytest.raises(TraceError) as info:
        validate_trace(trace)
    return str(info.value)


@pytest.mark.parametrize("turn, expected", [
    (Turn(0, 1, [1], where="x.jsonl:1"), "x.jsonl:1: input_length: must be > 0, got 0"),
    (Turn(9, 1, [1, 2], where="x.jsonl:1"),
     "x.jsonl:1: input_length: 9 exceeds the capacity of hash_ids, 2 x block size 4 = 8 tokens"),
    (Turn(4, 2, [1], output_token_ids=[7], where="x.jsonl:1"),
     "x.jsonl:1: output_token_ids: holds 1 ids but output_length is 2"),
    (Turn(4, 2, [1], 2.0, where="x.jsonl:1"),
     "x.jsonl:1: delay: must be 0 on the first turn of a session, got 2.0"),
    (Turn(4, 2, [1], float("nan"), where="x.jsonl:1"), "x.jsonl:1: delay: must be finite and >= 0, got nan"),
])
def test_turn_rules(turn, expected):
    assert message(one_turn_trace(turn)) == expected


def test_trace_rules():
    assert message(Trace(4, [])) == "the trace holds no requests"
    assert message(Trace(0, [])) == "trace block size must be a positive integer, got 0"
    assert message(Trace(4, [Session("s", 0.0, [], where="x.jsonl:2")])) == (
        "x.jsonl:2: session 's' has no turns")
    assert message(one_turn_trace(Turn(4, 1, [1]), start=float("inf"))) == (
        "x.jsonl:1: timestamp: must be finite, got inf")


def test_timestamp_replay_needs_every_session_start():
    trace = one_turn_trace(Turn(4, 1, [1]), start=None)
    with pytest.raises(TraceError) as info:
        check_timestamped(trace)
    assert str(info.value) == ("x.jsonl:1: timestamp: is required on the first row of each session "
                               "when replaying by timestamps (or set replay_concurrency)")


def test_interner_is_dense_in_first_seen_order_and_keeps_big_ids_apart():
    intern = HashInterner()
    assert list(intern([7, 2**40, 7, 2**40 + 7])) == [0, 1, 0, 2]
    assert list(intern([2**64 - 1, 2**40])) == [3, 1]


def test_normalize_then_speed_up_sessions():
    trace = Trace(4, [Session("a", 100.0, [Turn(4, 1, [1]), Turn(4, 1, [1], 30.0)]),
                      Session("b", None, [Turn(4, 1, [1])]),
                      Session("c", 60.0, [Turn(4, 1, [1])])])
    speed_up_timing(normalize_session_starts(trace), 4.0)
    assert [s.start_ms for s in trace.sessions] == [10.0, None, 0.0]
    assert trace.sessions[0].turns[1].delay_ms == 7.5


def test_normalize_then_speed_up_graph():
    nodes = [AgenticNode("a", "p", "s", 4, 1, [1], 40.0),
             AgenticNode("b", "p", "s", 4, 1, [1], 90.0, [Dependency("a", "completion", 8.0, "sequence")])]
    graph = AgenticTrace.build(4, nodes, source_format="t", source_digest="d", origin="g")
    speed_up_graph(normalize_graph_starts(graph), 2.0)
    assert [n.not_before_ms for n in graph.nodes] == [0.0, 25.0]
    assert graph.nodes[1].dependencies[0].delay_ms == 4.0
