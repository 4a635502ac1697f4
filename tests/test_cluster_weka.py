"""The ``weka`` format and what every agentic run reports, against the reference (issue 9 item 5).

Compared in CLUSTER.md 7.2's canonical form: host-speed keys and per-request ``uuid`` left out,
numbers to 10 significant digits (values within 1e-9 of zero equal), weka records matched by
``request_id``, and the two identities whose bytes the reference does not document
(``agentic_graph.graph_digest``, ``agentic_lifecycle_digest``) by their shape, 64 hex digits.
Everything else, the weka source digest included, is equal to the reference's; and so are those
two digests, byte for byte (``test_digests_are_the_references``).
"""

from __future__ import annotations

import json
import os
import re

import pytest

from aisimulate_core import run_replay
from aisimulate_core.cli.main import main
from aisimulate_core.errors import TraceError
from reference import ROOT, load_fixture, run_fixture

CLUSTER = ROOT.parent / "shared" / "bench" / "cluster"
HOST_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s",
             "outer_wall_s"}
SHAPED = {"graph_digest", "agentic_lifecycle_digest"}
HEX64 = re.compile(r"[0-9a-f]{64}")


def canonical(value, key=None):
    if key in SHAPED:
        return "<64 hex digits>" if isinstance(value, str) and HEX64.fullmatch(value) else value
    if isinstance(value, dict):
        return {k: canonical(v, k) for k, v in value.items() if k not in HOST_KEYS and k != "uuid"}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    if isinstance(value, float):
        return 0.0 if abs(value) < 1e-9 else float(f"{value:.9e}")
    return value


def canonical_records(records):
    return {r["request_id"]: canonical(r) for r in records}


def assert_canonically_equal(summary, records, ref_summary, ref_records):
    ours, theirs = canonical(summary), canonical(ref_summary)
    assert list(ours) == list(theirs)
    assert ours == theirs
    mine, expected = canonical_records(records), canonical_records(ref_records)
    assert list(mine) == list(expected)          # the reference's order: by request id
    for request_id, record in expected.items():
        assert list(mine[request_id]) == list(record), request_id
        assert mine[request_id] == record, request_id


def _in_root(function, *args):
    cwd = os.getcwd()
    os.chdir(ROOT)        # payload paths are relative to the project root
    try:
        return function(*args)
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def w1():
    if not (CLUSTER / "w1_weka_two_plays.json").is_file():
        pytest.skip(f"no cluster cases at {CLUSTER}")
    expected = json.loads((CLUSTER / "w1_weka_two_plays.expected.json").read_text())
    return CLUSTER / "w1_weka_two_plays.json", expected


def test_w1_two_plays_through_the_cli_matches_the_reference(w1, tmp_path):
    payload, expected = w1
    report, records = tmp_path / "report.json", tmp_path / "records.jsonl"
    status = _in_root(main, ["run", str(payload), "--output", str(report), "--per-request",
                             str(records), "--quiet"])
    assert status == 0
    ref_records = expected.pop("per_request")
    assert_canonically_equal(json.loads(report.read_text()),
                             [json.loads(line) for line in records.read_text().splitlines()],
                             expected, ref_records)


def test_w1_figures(w1):
    payload, expected = w1
    summary = _in_root(run_replay, payload.read_text()).summary
    # the reference's own BLAKE3 source digest (names, sizes and bytes of the corpus, basis)
    assert summary["agentic_graph"]["source"] == expected["agentic_graph"]["source"]
    assert summary["weka_nested_timestamp_basis"] == "absolute"
    assert [o["play_id"] for o in summary["agentic_play_outcomes"]] == [
        "weka:2484a9d05e6abf7b:play:alpha", "weka:d62594fc3d660888:play:beta"]


WEKA_FIXTURES = ["weka_doc_play", "weka_corpus_dir", "weka_corpus_disagg",
                 "weka_cached_prefill_only", "weka_short_duration_streams",
                 "weka_disagg_late_release", "weka_disagg_prefill_only"]
AGENTIC_FIXTURES = ["trace_agentic_v2", "trace_agentic_v2_speedup", "trace_agentic_failure",
                    "trace_dynamo_agentic", "trace_dynamo_agentic_disagg", *WEKA_FIXTURES]


@pytest.mark.parametrize("name", AGENTIC_FIXTURES)
def test_agentic_runs_report_what_the_reference_reports(name):
    report, fixture = run_fixture("agentic/" + name)
    assert_canonically_equal(report.summary, report.per_request, fixture["summary"],
                             fixture["per_request"])


@pytest.mark.parametrize("name", [*AGENTIC_FIXTURES, "trace_agentic_legacy_as_v2"])
def test_digests_are_the_references(name):
    # the graph as the reference serializes it (nodes by id, sorted edges, its field order);
    # the lifecycle transcript with one instant's ends batched in graph order
    report, fixture = run_fixture("agentic/" + name)
    for key in ("agentic_graph", "agentic_lifecycle_event_count", "agentic_lifecycle_digest"):
        assert report.summary[key] == fixture["summary"][key], key


def test_w1_digests_are_the_references(w1):
    payload, expected = w1
    summary = _in_root(run_replay, payload.read_text()).summary
    assert summary["agentic_graph"] == expected["agentic_graph"]
    assert summary["agentic_lifecycle_digest"] == expected["agentic_lifecycle_digest"]


def test_the_doc_example_resolves_auto_to_relative_and_joins_late():
    report, fixture = run_fixture("agentic/weka_doc_play")
    assert report.summary["weka_nested_timestamp_basis"] == "relative"
    times = {r["request_id"].rsplit(":request:", 1)[1]: (r["arrival_time_ms"],
             r["terminal_time_ms"]) for r in report.per_request}
    # CLUSTER.md 5.3: outer:2 is not blocked by the subagent; outer:3 joins it 330 ms after
    # its last request ended (565 + (0.5 - (0.15 + 0.02)) s)
    assert times == {"outer:0": (0.0, 15.0), "outer:1:inner:0": (100.0, 115.0),
                     "outer:1:inner:1": (150.0, 565.0), "outer:2": (200.0, 225.0),
                     "outer:3": (895.0, 910.0)}


def test_the_doc_example_under_absolute_is_the_references_error_as_one_line():
    fixture = load_fixture("agentic/weka_doc_play_absolute")
    assert "precedes its marker at 0.1 under absolute" in fixture["error"]
    payload = (ROOT / fixture["payload"]).read_text()
    with pytest.raises(TraceError) as info:
        _in_root(run_replay, payload)
    assert str(info.value) == (
        "tests/fixtures/traces/weka/doc_play.json:1: requests[1].requests[0].t: 0.0 precedes "
        "its subagent marker at 0.1 under weka_nested_timestamp_basis 'absolute'")


def test_the_agentic_object_names_root_and_spawning_parent():
    report, _ = run_fixture("agentic/trace_agentic_v2")
    agentic = {r["request_id"]: r["agentic"] for r in report.per_request}
    assert agentic["r2"] == {"request_id": "r2", "play_id": "p1", "conversation_id": "sub",
                             "root_id": "r1", "parent_id": "r1"}      # spawned by r1
    assert agentic["r4"] == {"request_id": "r4", "play_id": "p1", "conversation_id": "main",
                             "root_id": "r1"}                         # joins, not spawned


def test_digests_follow_the_graph_and_its_lifecycle(tmp_path):
    base = json.loads((ROOT / "tests/fixtures/payloads/weka_doc_play.json").read_text())
    first = _in_root(run_replay, json.dumps(base)).summary
    again = _in_root(run_replay, json.dumps(base)).summary
    assert first["agentic_graph"] == again["agentic_graph"]
    assert first["agentic_lifecycle_digest"] == again["agentic_lifecycle_digest"]
    # a slower engine: the same graph, another lifecycle
    base["spec"]["engine"]["rank"]["timing_model"]["decode_ms"] = 6.0
    slower = _in_root(run_replay, json.dumps(base)).summary
    assert slower["agentic_graph"] == first["agentic_graph"]
    assert slower["agentic_lifecycle_digest"] != first["agentic_lifecycle_digest"]
    # naming the basis auto resolves to changes nothing
    base["traffic"]["weka_nested_timestamp_basis"] = "relative"
    assert _in_root(run_replay, json.dumps(base)).summary["agentic_graph"] == first["agentic_graph"]
    # the same file name with one recorded gap changed: the same ids, another graph and source
    trace = (ROOT / "tests/fixtures/traces/weka/doc_play.json").read_text()
    (tmp_path / "doc_play.json").write_text(trace.replace('"t": 0.5,', '"t": 0.6,'))
    base["traffic"]["trace_path"] = str(tmp_path / "doc_play.json")
    edited = _in_root(run_replay, json.dumps(base))
    assert {r["request_id"] for r in edited.per_request} == {
        r["request_id"] for r in _in_root(run_replay, json.dumps(base | {"traffic": {
            **base["traffic"], "trace_path": "tests/fixtures/traces/weka/doc_play.json"}}))
        .per_request}
    graph = edited.summary["agentic_graph"]
    assert graph["graph_digest"] != first["agentic_graph"]["graph_digest"]
    assert graph["source"]["digest"] != first["agentic_graph"]["source"]["digest"]


@pytest.mark.parametrize("traffic, expected", [
    ({"weka_nested_timestamp_basis": "sideways"},
     ["$.traffic.weka_nested_timestamp_basis: must be one of 'auto', 'absolute', 'relative', "
      "got \"sideways\""]),
    ({"execution_model": " "},
     ["$.traffic.execution_model: is required for trace_format 'weka'"]),
    ({"load_type": None},
     ["$.traffic.load_type: must be 'trace_timestamps' for trace_format 'weka', got null"]),
])
def test_weka_traffic_rules(traffic, expected):
    from aisimulate_core.errors import ConfigError
    from aisimulate_core.spec import load_payload

    payload = json.loads((ROOT / "tests/fixtures/payloads/weka_doc_play.json").read_text())
    payload["traffic"].update(traffic)
    with pytest.raises(ConfigError) as info:
        load_payload(json.dumps(payload))
    assert str(info.value).splitlines() == expected


def test_digest_json_is_written_as_serde_json_writes_it():
    from aisimulate_core.workload.graph import encode_json

    # Rust's ryu, as the reference's serde_json uses it (the small ones checked against the
    # wheel's pydantic-core, which shares the formatting below 1e16)
    cases = {0.0: "0.0", 16.0: "16.0", 0.1: "0.1", 1e-4: "0.0001",
             1e-5: "0.00001", 2.5e-5: "0.000025", 1e-6: "1e-6", 1.5e-7: "1.5e-7",
             1e15: "1000000000000000.0", 1e16: "1e16", 159.20000000000002: "159.20000000000002",
             12345000000000.0: "12345000000000.0", 1.2345678901234568e17: "1.2345678901234568e17",
             5e-324: "5e-324", -3.5e-8: "-3.5e-8"}
    assert {x: encode_json(x).decode() for x in cases} == cases
    assert encode_json(-0.0) == b"-0.0"
    # serde_json's string escapes: the two-character ones, \u00xx (lower-case hex) for the
    # other control characters, everything else (DEL, non-ASCII, U+2028) as UTF-8
    assert encode_json('\x1f\x7f"\\\b\f\n\r\t\u00e9\u2028') == \
        b'"\\u001f\x7f\\"\\\\\\b\\f\\n\\r\\t\xc3\xa9\xe2\x80\xa8"'


def test_a_disaggregated_play_settles_when_its_last_source_is_released():
    # CLUSTER.md has no rule for it; the reference counts a request quiescent when its prefill
    # worker releases its source blocks, which may come after its decode ended (275.55 ms)
    report, fixture = run_fixture("agentic/weka_disagg_late_release")
    late = [o for o in report.summary["agentic_play_outcomes"]
            if o["settled_at_ms"] != o["causal_terminal_ms"]]
    assert late == [{"play_id": "weka:ac13943353a85fbf:play:p1", "status": "completed",
                     "causal_terminal_ms": 275.55, "settled_at_ms": 276.0}]
    assert late[0] in fixture["summary"]["agentic_play_outcomes"]
