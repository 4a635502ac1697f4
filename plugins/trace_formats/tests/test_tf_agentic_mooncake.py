"""agentic_mooncake: v2 and legacy files become dependency graphs; every rule with its message."""

import json

import pytest

from aisimulate_core.workload.graph import AgenticTrace
from aisimulate_trace_formats import AgenticMooncake
from tf_helpers import ROOT, deps, error_of, load, load_text


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_v2_nodes_plays_and_dependencies():
    graph = load(AgenticMooncake, "agentic_v2.jsonl", trace_block_size=512)
    assert isinstance(graph, AgenticTrace)
    assert graph.block_size == 16  # the header owns it
    assert (graph.source_format, graph.source_digest) == ("hand", "v2-fixture")
    # nodes sorted by request id, plays by play id
    assert [n.request_id for n in graph.nodes] == ["q1", "q2", "r1", "r2", "r3", "r4"]
    assert [(p.play_id, p.nodes, p.roots) for p in graph.plays] == [
        ("p1", [2, 3, 4, 5], [2]), ("p2", [0, 1], [0])]
    by_id = {n.request_id: n for n in graph.nodes}
    assert deps(by_id["r2"]) == [("r1", "dispatch", 12.0, "spawn")]
    assert deps(by_id["r3"]) == [("r1", "completion", 5.0, "sequence")]
    assert deps(by_id["r4"]) == [("r2", "completion", 2.0, "join"),
                                 ("r3", "completion", 2.0, "join")]
    r4 = by_id["r4"]
    assert (r4.input_length, r4.max_output_tokens, r4.hash_ids) == (64, 2, [1, 2, 3, 4])
    assert (by_id["r1"].not_before_ms, by_id["q2"].not_before_ms) == (100.0, 400.0)
    assert (by_id["r2"].session_id, by_id["r2"].model) == ("sub", "m-small")
    assert by_id["q1"].priority == 2
    assert graph.models() == ["m-large", "m-small"]
    assert by_id["r3"].where == "tests/fixtures/traces/agentic_v2.jsonl:4"


def test_legacy_rows_become_completion_edges_and_component_plays():
    graph = load(AgenticMooncake, "agentic_legacy.jsonl")
    assert graph.block_size == 16  # the payload's trace_block_size
    assert (graph.source_format, graph.source_digest) == (
        "legacy_agentic_mooncake", "tests/fixtures/traces/agentic_legacy.jsonl:5")
    by_id = {n.request_id: n for n in graph.nodes}
    assert deps(by_id["l2"]) == [("l1", "completion", 16.0, "sequence")]  # delay + tool_wait_ms
    assert deps(by_id["l3"]) == [("l1", "completion", 4.0, "sequence")]   # delay_ms
    assert deps(by_id["l4"]) == [("l2", "completion", 0.0, "join"), ("l3", "completion", 0.0, "join")]
    # only roots keep their timestamp
    assert {i: n.not_before_ms for i, n in by_id.items()} == {
        "l1": 20.0, "l2": 0.0, "l3": 0.0, "l4": 0.0, "m1": 5.0}
    assert {i: n.play_id for i, n in by_id.items()} == {
        "l1": "legacy-play:l1", "l2": "legacy-play:l1", "l3": "legacy-play:l1",
        "l4": "legacy-play:l1", "m1": "legacy-play:m1"}
    assert (by_id["l3"].session_id, by_id["l3"].model) == ("agentic-session", "unknown")
    assert by_id["l3"].max_output_tokens == 2  # output_tokens alias


def test_legacy_play_label_is_the_earliest_root(tmp_path, monkeypatch):
    rows = [{"request_id": "z", "timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": [1]},
            {"request_id": "a", "timestamp": 7, "input_length": 4, "output_length": 1, "hash_ids": [2]},
            {"request_id": "y", "timestamp": 1, "input_length": 4, "output_length": 1, "hash_ids": [3]},
            {"request_id": "j", "wait_for": ["z", "a", "y"], "input_length": 4, "output_length": 1,
             "hash_ids": [4]}]
    graph = load_text(tmp_path, monkeypatch, AgenticMooncake,
                      "".join(json.dumps(r) + "\n" for r in rows))
    # three roots joined by one node: one play, named by the earliest root, ties by id
    assert {n.play_id for n in graph.nodes} == {"legacy-play:y"}
    assert [(p.play_id, [graph.nodes[i].request_id for i in p.roots]) for p in graph.plays] == [
        ("legacy-play:y", ["a", "y", "z"])]


def test_source_play_ordinal_orders_plays(tmp_path, monkeypatch):
    rows = [HEADER] + [dict(NODE, request_id=rid, play_id=pid, source_play_ordinal=o)
                       for rid, pid, o in (("a", "z-play", 0), ("b", "a-play", 1))]
    graph = load_text(tmp_path, monkeypatch, AgenticMooncake, lines(*rows))
    assert [p.play_id for p in graph.plays] == ["z-play", "a-play"]


HEADER = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 4,
          "hash_id_scope": "local", "source": {"format": "f", "digest": "d"}}
NODE = {"request_id": "r1", "play_id": "p", "session_id": "s", "model": "m", "not_before_ms": 0,
        "input_length": 4, "output_length": 1, "hash_ids": [1]}


def lines(*rows):
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def node(**fields):
    out = dict(NODE, **fields)
    return {k: v for k, v in out.items() if v is not None}


def dep(rid="r1", trigger="completion", delay=0.0, relation="sequence"):
    return {"request_id": rid, "trigger": trigger, "delay_ms": delay, "relation": relation}


V2_RULES = [
    (lines(dict(HEADER, version=3), NODE), "t.jsonl:1: version: must be 2, got 3"),
    (lines(dict(HEADER, block_size=0), NODE), "t.jsonl:1: block_size: must be > 0, got 0"),
    (lines(dict(HEADER, hash_id_scope="global"), NODE),
     "t.jsonl:1: hash_id_scope: invalid enum value 'global'"),
    (lines(dict(HEADER, source={"format": " ", "digest": "d"}), NODE),
     "t.jsonl:1: source.format: must not be empty"),
    (lines(dict(HEADER, source={"format": "f", "digest": ""}), NODE),
     "t.jsonl:1: source.digest: must not be empty"),
    (lines({k: v for k, v in HEADER.items() if k != "source"}, NODE), "t.jsonl:1: source: is required"),
    (lines(HEADER), "t.jsonl: holds no requests after its header"),
    (lines(HEADER, node(play_id=None)), "t.jsonl:2: play_id: is required"),
    (lines(HEADER, node(not_before_ms=None)), "t.jsonl:2: not_before_ms: is required"),
    (lines(HEADER, node(input_length=None)), "t.jsonl:2: input_length: is required"),
    (lines(HEADER, node(output_length=None)), "t.jsonl:2: output_length: is required"),
    (lines(HEADER, node(hash_ids=None)), "t.jsonl:2: hash_ids: is required"),
    (lines(HEADER, node(hash_ids=[])), "t.jsonl:2: hash_ids: must not be empty"),
    (lines(HEADER, node(input_length=0)), "t.jsonl:2: input_length: must be > 0, got 0"),
    (lines(HEADER, node(input_length=8)),
     "t.jsonl:2: hash_ids: must hold one id per block of input_length 8 at block_size 4 (2), got 1"),
    (lines(HEADER, node(hash_ids=[1, 2])),
     "t.jsonl:2: hash_ids: must hold one id per block of input_length 4 at block_size 4 (1), got 2"),
    (lines(HEADER, node(model="")), "t.jsonl:2: model: must not be empty"),
    (lines(HEADER, node(request_id=" ")), "t.jsonl:2: request_id: must not be empty"),
    (lines(HEADER, node(session_id="")), "t.jsonl:2: session_id: must not be empty"),
    (lines(HEADER, node(not_before_ms=-1)), "t.jsonl:2: not_before_ms: must be finite and >= 0, got -1.0"),
    (lines(HEADER, node(recorded_api_time_ms=-2)),
     "t.jsonl:2: recorded_api_time_ms: must be finite and >= 0, got -2.0"),
    (lines(HEADER, node(output_token_ids=[5, 6])),
     "t.jsonl:2: output_token_ids: holds 2 ids but output_length is 1"),
    (lines(HEADER, NODE, NODE), "t.jsonl:3: request_id: 'r1' repeats the request at t.jsonl:2"),
    (lines(HEADER, NODE, node(request_id="r2", dependencies=[dep("r9")])),
     "t.jsonl:3: dependencies[0].request_id: unknown request 'r9'"),
    (lines(HEADER, NODE, node(request_id="r2", dependencies=[dep("r2")])),
     "t.jsonl:3: dependencies[0].request_id: a request cannot depend on itself"),
    (lines(HEADER, NODE, node(request_id="r2", play_id="q", dependencies=[dep()])),
     "t.jsonl:3: dependencies[0].request_id: request 'r1' is in play 'p', not in 'q'"),
    (lines(HEADER, NODE, node(request_id="r2", dependencies=[dep(trigger="dispatch")])),
     "t.jsonl:3: dependencies[0]: a sequence dependency cannot have trigger 'dispatch'"),
    (lines(HEADER, NODE, node(request_id="r2", dependencies=[dep(trigger="dispatch", relation="join")])),
     "t.jsonl:3: dependencies[0]: a join dependency cannot have trigger 'dispatch'"),
    (lines(HEADER, NODE, node(request_id="r2", dependencies=[dep(trigger="dispatch",
                                                                 relation="replay_barrier")])),
     "t.jsonl:3: dependencies[0]: a replay_barrier dependency cannot have trigger 'dispatch'"),
    (lines(HEADER, NODE, node(request_id="r2", dependencies=[dep(trigger="later")])),
     "t.jsonl:3: dependencies[0].trigger: invalid enum value 'later'"),
    (lines(HEADER, NODE, node(request_id="r2", dependencies=[dep(relation="child")])),
     "t.jsonl:3: dependencies[0].relation: invalid enum value 'child'"),
    (lines(HEADER, NODE, node(request_id="r2", dependencies=[dep(delay=-2)])),
     "t.jsonl:3: dependencies[0].delay_ms: must be finite and >= 0, got -2.0"),
    (lines(HEADER, NODE, node(request_id="r2", dependencies=[dep("r3")]),
           node(request_id="r3", dependencies=[dep("r2")])),
     "t.jsonl: dependencies: cycle among 2 requests; blocked: r2, r3"),
    (lines(HEADER, NODE, node(request_id="r2", play_id="q", source_play_ordinal=0)),
     "t.jsonl: source_play_ordinal: must be set on every play when any play sets it"),
    (lines(HEADER, node(source_play_ordinal=0), node(request_id="r2", play_id="q", source_play_ordinal=2)),
     "t.jsonl: source_play_ordinal: must be unique and contiguous from 0, got [0, 2]"),
    (lines(HEADER, node(source_play_ordinal=0), node(request_id="r2", source_play_ordinal=1)),
     "t.jsonl:3: source_play_ordinal: play 'p' has both 0 and 1"),
    (lines(HEADER, "{oops"), "t.jsonl:2: invalid JSON: object keys must be strings (byte 1)"),
]


@pytest.mark.parametrize("text, message", V2_RULES, ids=[m for _, m in V2_RULES])
def test_v2_rules(tmp_path, monkeypatch, text, message):
    assert error_of(tmp_path, monkeypatch, AgenticMooncake, text) == message


LEGACY = {"request_id": "l1", "input_length": 4, "output_length": 1, "hash_ids": [1]}

LEGACY_RULES = [
    ("", "t.jsonl: holds no requests"),
    (lines({k: v for k, v in LEGACY.items() if k != "request_id"}), "t.jsonl:1: request_id: is required"),
    (lines(dict(LEGACY, request_id=" ")), "t.jsonl:1: request_id: must not be empty"),
    (lines(dict(LEGACY, hash_ids=[])), "t.jsonl:1: hash_ids: must not be empty"),
    (lines({k: v for k, v in LEGACY.items() if k != "hash_ids"}), "t.jsonl:1: hash_ids: is required"),
    (lines({k: v for k, v in LEGACY.items() if k != "input_length"}), "t.jsonl:1: input_length: is required"),
    (lines({k: v for k, v in LEGACY.items() if k != "output_length"}),
     "t.jsonl:1: output_length: is required"),
    (lines(dict(LEGACY, tool_wait_ms=-1)), "t.jsonl:1: tool_wait_ms: must be finite and >= 0, got -1.0"),
    (lines(dict(LEGACY, delay=1, delay_ms=2)), "t.jsonl:1: delay_ms: cannot be combined with delay"),
    (lines(dict(LEGACY, delay=-5)),
     "t.jsonl:1: delay: plus tool_wait_ms must be finite and >= 0, got -5.0"),
    (lines(dict(LEGACY, wait_for=["zz"])), "t.jsonl:1: wait_for[0]: unknown request 'zz'"),
    (lines(dict(LEGACY, wait_for=["l1"])), "t.jsonl:1: wait_for[0]: a request cannot wait for itself"),
    (lines(dict(LEGACY, input_length=8)),
     "t.jsonl:1: hash_ids: must hold one id per block of input_length 8 at block_size 4 (2), got 1"),
    (lines(LEGACY, LEGACY), "t.jsonl:2: request_id: 'l1' repeats the request at t.jsonl:1"),
    (lines(dict(LEGACY, request_id="a", wait_for=["b"]), dict(LEGACY, request_id="b", wait_for=["a"])),
     "t.jsonl: dependencies: cycle among 2 requests; blocked: a, b"),
]


@pytest.mark.parametrize("text, message", LEGACY_RULES, ids=[m for _, m in LEGACY_RULES])
def test_legacy_rules(tmp_path, monkeypatch, text, message):
    assert error_of(tmp_path, monkeypatch, AgenticMooncake, text) == message
