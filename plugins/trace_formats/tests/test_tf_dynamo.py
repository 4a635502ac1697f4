"""dynamo: request traces (several files, gzip) become sessions or an agentic graph."""

import json

import pytest

from aisimulate_core.workload.graph import AgenticTrace
from aisimulate_core.workload.trace import Trace
from aisimulate_trace_formats import Dynamo
from tf_helpers import ROOT, deps, error_of, load, load_text, turns

A = "tests/fixtures/traces/dynamo_standard_a.jsonl"
B = "tests/fixtures/traces/dynamo_standard_b.jsonl.gz"


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_standard_trace_from_two_files():
    trace = load(Dynamo, "dynamo_standard_a.jsonl", "dynamo_standard_b.jsonl.gz",
                 trace_block_size=None)
    assert isinstance(trace, Trace) and trace.block_size == 16  # embedded
    # sorted by (start, end, id): a 100..110, b 120..140, c 139..160 (event 160 - round(20.5)),
    # d 139..180 (no total_time_ms: ends at its event); one-turn sessions, starts from the first
    assert [(s.start_ms, turns(s)) for s in trace.sessions] == [
        (0.0, [(32, 3, [0, 1], 0.0)]),
        (20.0, [(16, 4, [0], 0.0)]),
        (39.0, [(40, 2, [0, 1, 2], 0.0)]),
        (39.0, [(48, 1, [0, 1, 3], 0.0)]),
    ]
    assert [s.turns[0].where for s in trace.sessions] == [A + ":2", B + ":1", A + ":3", B + ":3"]


def test_a_given_block_size_must_match():
    assert load(Dynamo, "dynamo_standard_a.jsonl", trace_block_size=16).block_size == 16
    with pytest.raises(Exception) as info:
        load(Dynamo, "dynamo_standard_a.jsonl", trace_block_size=8)
    assert str(info.value) == (f"{A}:2: request.replay.trace_block_size: 16 does not match the "
                               "payload's trace_block_size 8")


def test_agentic_trace_sessions_children_and_tools():
    graph = load(Dynamo, "dynamo_agentic.jsonl", trace_block_size=None)
    assert isinstance(graph, AgenticTrace)
    assert (graph.source_format, graph.source_digest) == ("dynamo.request.trace.v1",
                                                          "requests:7;tools:1")
    by_id = {n.request_id: n for n in graph.nodes}
    assert deps(by_id["p1"]) == [] and deps(by_id["o1"]) == []
    # explicit Claude tool: child "kid" spawned at p1's dispatch, joined into p2
    assert deps(by_id["k1"]) == [("p1", "dispatch", 30.0, "spawn")]
    assert deps(by_id["k2"]) == [("k1", "completion", 10.0, "sequence")]
    assert deps(by_id["p2"]) == [("p1", "completion", 80.0, "sequence"),
                                 ("k2", "completion", 20.0, "join")]
    # timestamp fallback for child "bg": latest parent start <= 1105 is p2, first parent start
    # >= its end 1110 is p3
    assert deps(by_id["b1"]) == [("p2", "dispatch", 5.0, "spawn")]
    assert deps(by_id["p3"]) == [("p2", "completion", 10.0, "sequence"),
                                 ("b1", "completion", 30.0, "join")]
    assert {i: n.not_before_ms for i, n in by_id.items() if not n.dependencies} == {
        "p1": 0.0, "o1": 0.0}
    assert [(p.play_id, [graph.nodes[i].request_id for i in p.nodes]) for p in graph.plays] == [
        ("dynamo-play:o1", ["o1"]),
        ("dynamo-play:p1", ["b1", "k1", "k2", "p1", "p2", "p3"])]
    assert by_id["o1"].model == "other-model" and by_id["k1"].session_id == "kid"


def record(rid, start, end, *, session=None, parent=None, block=4, length=4, hashes=(11,),
           out=2, **request):
    row = {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
           "event_time_unix_ms": end,
           "request": dict({"request_id": rid, "output_tokens": out, "request_received_ms": start,
                            "total_time_ms": end - start,
                            "replay": {"trace_block_size": block, "input_length": length,
                                       "input_sequence_hashes": list(hashes)}}, **request)}
    if session is not None:
        row["agent_context"] = {"session_id": session}
        if parent is not None:
            row["agent_context"]["parent_session_id"] = parent
    return row


def tool(source, child, *, consumer=None, mode="blocking", session="s", **fields):
    claude = {"source_request_id": source, "child_session_id": child, "execution_mode": mode}
    if consumer is not None:
        claude["consumer_request_id"] = consumer
    return {"schema": "dynamo.request.trace.v1", "event_type": "tool_end", "event_time_unix_ms": 50,
            "agent_context": {"session_id": session},
            "tool": dict({"tool_call_id": "t1", "tool_class": "agent", "claude": claude}, **fields)}


def lines(*rows):
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def test_wrapped_events_and_skipped_ones(tmp_path, monkeypatch):
    text = lines({"schema": "dynamo.request.trace.v1", "event_type": "request_payload"},
                 {"event": record("a", 100, 110)}, "[1, 2]",
                 {"event": {"event_type": "tool_start"}})
    trace = load_text(tmp_path, monkeypatch, Dynamo, text, trace_block_size=None)
    assert [turns(s) for s in trace.sessions] == [[(4, 2, [0], 0.0)]]


def test_background_tool_child_has_no_join(tmp_path, monkeypatch):
    text = lines(record("p1", 0, 10, session="s"), tool("p1", "kid", mode="background"),
                 record("k1", 20, 30, session="kid", parent="s"),
                 record("p2", 40, 50, session="s"))
    graph = load_text(tmp_path, monkeypatch, Dynamo, text, trace_block_size=None)
    by_id = {n.request_id: n for n in graph.nodes}
    assert deps(by_id["k1"]) == [("p1", "dispatch", 20.0, "spawn")]
    assert deps(by_id["p2"]) == [("p1", "completion", 30.0, "sequence")]


RULES = [
    ("", "t.jsonl: holds no request_end records"),
    (lines({"schema": "dynamo.request.trace.v1", "event_type": "tool_start"}),
     "t.jsonl: holds no request_end records"),
    (lines(dict(record("a", 0, 10), schema="dynamo.request.trace.v2")),
     "t.jsonl:1: schema: must be 'dynamo.request.trace.v1', got 'dynamo.request.trace.v2'"),
    (lines(dict(record("a", 0, 10), event_type="request_start")),
     "t.jsonl:1: event_type: must be request_end, tool_end or tool_error (request_payload and "
     "tool_start are skipped), got 'request_start'"),
    (lines({"event": dict(record("a", 0, 10), event_time_unix_ms="x")}),
     "t.jsonl:1: event.event_time_unix_ms: expected `int`, got `str`"),
    (lines({k: v for k, v in record("a", 0, 10).items() if k != "request"}),
     "t.jsonl:1: request: is required for a request_end record"),
    (lines(record("a", 0, 10, out=None)), "t.jsonl:1: request.output_tokens: is required"),
    (lines(record("a", 0, 10, total_time_ms=-1.0)),
     "t.jsonl:1: request.total_time_ms: must be finite and >= 0, got -1.0"),
    (lines(record(" ", 0, 10)), "t.jsonl:1: request.request_id: must not be empty"),
    (lines(record("a", 0, 10), record("a", 5, 10)),
     "t.jsonl:2: request.request_id: 'a' repeats the request at t.jsonl:1"),
    (lines(record("a", 0, 10, block=0)), "t.jsonl:1: request.replay.trace_block_size: must be > 0, got 0"),
    (lines(record("a", 0, 10), record("b", 5, 10, block=8)),
     "t.jsonl:2: request.replay.trace_block_size: 8 differs from the block size 4 of t.jsonl:1; "
     "one trace holds one block size"),
    (lines(record("a", 0, 10, length=0)), "t.jsonl:1: request.replay.input_length: must be > 0, got 0"),
    (lines(record("a", 0, 10, length=8)),
     "t.jsonl:1: request.replay.input_sequence_hashes: must hold at least one hash per block of "
     "input_length 8 at trace_block_size 4 (2), got 1"),
    (lines(record("a", 0, 10, session="s", hashes=(1, 2))),
     "t.jsonl:1: request.replay.input_sequence_hashes: must hold exactly one hash per block of "
     "input_length 4 at trace_block_size 4 (1), got 2"),
    (lines(record("a", 0, 10, session="s"), record("b", 5, 10)),
     "t.jsonl:2: agent_context: is missing, but other requests have one: a trace is either "
     "agentic (every request) or standard (none)"),
    (lines(record("a", 0, 10, session="s"), record("b", 5, 20, session="s")),
     "t.jsonl:2: request: starts at 5 ms, before request 'a' ends at 10 ms, which it depends on "
     "(sequence)"),
    (lines(record("a", 0, 10, session="s"), record("b", 20, 30, session="k", parent="zz")),
     "t.jsonl:2: agent_context.parent_session_id: unknown session 'zz'"),
    (lines(record("a", 0, 10, session="s"), record("b", 20, 30, session="k", parent="s"),
           record("c", 40, 50, session="k", parent="x")),
     "t.jsonl:3: agent_context.parent_session_id: session 'k' already has parent 's', got 'x'"),
    (lines(record("a", 0, 10, session="s"), tool("a", "k", mode="eager"),
           record("b", 20, 30, session="k", parent="s")),
     "t.jsonl:2: tool.claude.execution_mode: must be 'blocking' or 'background', got 'eager'"),
    (lines(record("a", 0, 10, session="s"), tool("zz", "k"), record("b", 20, 30, session="k", parent="s")),
     "t.jsonl:2: tool.claude.source_request_id: unknown request 'zz'"),
    (lines(record("a", 0, 10, session="s"), tool("a", "k", session="other"),
           record("b", 20, 30, session="k", parent="s")),
     "t.jsonl:2: tool.claude.source_request_id: request 'a' belongs to session 's', not 'other'"),
    (lines(record("a", 0, 10, session="s"), tool("a", "k"), tool("a", "k"),
           record("b", 20, 30, session="k", parent="s")),
     "t.jsonl:3: tool.claude.child_session_id: session 'k' is already the child of the tool at "
     "t.jsonl:2"),
    (lines(record("a", 0, 10, session="s"), tool("a", "k", consumer="a"),
           record("b", 20, 30, session="k", parent="s")),
     "t.jsonl:1: request: starts at 0 ms, before request 'b' ends at 30 ms, which it depends on "
     "(join)"),
    (lines(record("a", 0, 10, session="s"), tool("a", "k", tool_call_id=" "),
           record("b", 20, 30, session="k", parent="s")),
     "t.jsonl:2: tool.tool_call_id: must not be empty"),
    (lines(record("a", 0, 10, session="s"), tool("a", "k", duration_ms=-3.0),
           record("b", 20, 30, session="k", parent="s")),
     "t.jsonl:2: tool.duration_ms: must be finite and >= 0, got -3.0"),
    (lines(record("a", 0, 10, session="s"), tool("a", "k", started_at_unix_ms=60, ended_at_unix_ms=55),
           record("b", 20, 30, session="k", parent="s")),
     "t.jsonl:2: tool: ends (55) before it starts (60)"),
]


@pytest.mark.parametrize("text, message", RULES, ids=[m for _, m in RULES])
def test_rules(tmp_path, monkeypatch, text, message):
    assert error_of(tmp_path, monkeypatch, Dynamo, text, trace_block_size=None) == message
