"""Trace traffic -> driver: the envelope's rules, and formats from other packages."""

import json
import os
from pathlib import Path

import pytest

from aisimulate_core import hookimpl, make_plugin_manager, run_replay
from aisimulate_core.errors import ConfigError, PluginError, TraceError, UnknownPluginError
from aisimulate_core.registry import collect_registries
from aisimulate_core.spec import load_payload
from aisimulate_core.workload.agentic import AgenticDriver
from aisimulate_core.workload.formats import TraceFormat
from aisimulate_core.workload.graph import AgenticNode, AgenticTrace
from aisimulate_core.workload.lowering import build_driver, check_agentic_envelope
from aisimulate_core.workload.sessions import SessionDriver
from aisimulate_core.workload.trace import HashInterner, Session, Trace, Turn
from reference import ROOT, load_fixture, record_mismatches

PAYLOADS = ROOT / "tests" / "fixtures" / "payloads"


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def payload(name, **traffic):
    data = json.loads((PAYLOADS / f"{name}.json").read_text())
    data["traffic"].update(traffic)
    data["traffic"] = {k: v for k, v in data["traffic"].items() if v is not None}
    return data


def config_error(data, **kwargs):
    with pytest.raises(ConfigError) as info:
        run_replay(data, **kwargs)
    return str(info.value)


def driver_of(data, plugin_manager=None):
    pm = plugin_manager or make_plugin_manager()
    return build_driver(load_payload(data), collect_registries(pm).trace_formats,
                        request_factories=None)


# -- the envelope ------------------------------------------------------------------------------


def test_agentic_dynamo_trace_paces_itself():
    data = payload("trace_dynamo_agentic", replay_concurrency=2, max_sim_time_ms=50.0,
                   execution_model=None)
    data["spec"]["max_in_flight"] = 4
    assert config_error(data) == "\n".join([
        "$.traffic.execution_model: is required for an agentic trace (trace_format 'dynamo')",
        "$.traffic.replay_concurrency: is not allowed for an agentic trace (trace_format 'dynamo'), got 2",
        "$.traffic.max_sim_time_ms: is not allowed for an agentic trace (trace_format 'dynamo'), got 50.0",
        "$.spec.max_in_flight: is not allowed for an agentic trace (trace_format 'dynamo'), got 4",
    ])


def test_agentic_trace_runs_on_a_disaggregated_topology_too():
    # the envelope accepts it, as the reference does (tests/fixtures/reference/agentic holds a
    # recorded 1P+1D agentic Dynamo case)
    data = payload("trace_dynamo_agentic")
    data["spec"]["topology"] = {"kind": "disaggregated", "prefill": {"initial_workers": 1},
                                "decode": {"initial_workers": 1}}
    assert check_agentic_envelope(load_payload(data, check_support=False)) is None


def test_agentic_trace_rejects_the_spec_time_cutoff():
    data = payload("trace_dynamo_agentic")
    data["spec"]["max_sim_time_ms"] = 100.0
    assert config_error(data) == (
        "$.spec.max_sim_time_ms: is not allowed for an agentic trace (trace_format 'dynamo'), got 100.0")


def test_the_same_dynamo_files_without_agent_context_take_a_concurrency_cap():
    driver, cap = driver_of(payload("trace_dynamo_standard", replay_concurrency=2))
    assert isinstance(driver, SessionDriver) and driver.max_sessions == 2 and cap is None


def test_concurrency_cap_is_the_smaller_of_traffic_and_spec():
    data = payload("trace_mooncake_sessions", replay_concurrency=3)
    data["spec"]["max_in_flight"] = 2
    assert driver_of(data)[0].max_sessions == 2
    data = payload("trace_mooncake_sessions")
    data["spec"]["max_in_flight"] = 2
    assert driver_of(data)[0].max_sessions == 2


def test_timestamp_replay_needs_first_timestamps(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"input_length": 4, "output_length": 1, "hash_ids": [1]}\n')
    data = payload("sem_one_isl16_osl4", trace_path=str(trace))
    with pytest.raises(TraceError) as info:
        run_replay(data)
    assert str(info.value) == (f"{trace}:1: timestamp: is required on the first row of each "
                               "session when replaying by timestamps (or set replay_concurrency)")
    # a closed loop does not need them
    assert run_replay(payload("sem_one_isl16_osl4", trace_path=str(trace), replay_concurrency=1)
                      ).summary["completed_requests"] == 1


def test_unknown_format_lists_the_installed_ones():
    with pytest.raises(UnknownPluginError) as info:
        run_replay(payload("sem_one_isl16_osl4", trace_format="csv"))
    assert str(info.value) == ("unknown trace format 'csv'; installed: agentic_mooncake, "
                               "applied_compute_agentic, dynamo, mooncake, mooncake-delta, weka")


def test_lowering_validates_and_transforms_the_loaded_trace():
    driver, _ = driver_of(payload("trace_mooncake_sessions_speedup"))
    # starts 1000, 1004, 1010, 1003 normalized, then divided by 2.5
    assert [s.start_ms for s in driver.sessions] == [0.0, 1.6, 4.0, 1.2]
    assert driver.sessions[0].turns[1].delay_ms == 5.0
    driver, _ = driver_of(payload("trace_agentic_v2_speedup"))
    assert isinstance(driver, AgenticDriver)
    assert [n.not_before_ms for n in driver.graph.nodes] == [65.0, 200.0, 50.0, 0.0, 0.0, 0.0]


# -- formats from other packages ----------------------------------------------------------------


class Tiny(TraceFormat):
    """One request per line: ``start_ms isl osl hash_id...`` (whitespace separated)."""

    NAME = "tiny"

    def load(self, paths, *, trace_block_size):
        intern = HashInterner()
        sessions = []
        for number, line in enumerate(Path(paths[0]).read_text().splitlines(), 1):
            start, isl, osl, *ids = line.split()
            turn = Turn(int(isl), int(osl), intern(int(i) for i in ids), where=f"{paths[0]}:{number}")
            sessions.append(Session(f"line-{number}", float(start), [turn], where=turn.where))
        return Trace(trace_block_size, sessions)


class TinyGraph(TraceFormat):
    NAME = "tiny-graph"

    def load(self, paths, *, trace_block_size):
        nodes = [AgenticNode("only", "play", "s", 4, 1, [1], where=f"{paths[0]}:1")]
        return AgenticTrace.build(trace_block_size, nodes, source_format="tiny",
                                  source_digest="1", origin=paths[0])


class Broken(TraceFormat):
    NAME = "broken"

    def load(self, paths, *, trace_block_size):
        return [paths]


class TinyPlugin:
    @hookimpl
    def aisimulate_register_trace_formats(self, register):
        register(Tiny)
        register(TinyGraph)
        register(Broken)


def tiny_manager():
    return make_plugin_manager(autoload=False, plugins=[TinyPlugin(), "placement"])


def test_a_format_from_another_package_replays_like_a_bundled_one(tmp_path):
    # the three requests of the sem_three_isl16_osl4 Mooncake fixture, in the tiny format
    (tmp_path / "three.txt").write_text("5 16 4 1\n5 16 4 2\n5 16 4 3\n")
    data = payload("sem_three_isl16_osl4", trace_format="tiny",
                   trace_path=str(tmp_path / "three.txt"))
    report = run_replay(data, plugin_manager=tiny_manager())
    fixture = load_fixture("sem_three_isl16_osl4")
    assert record_mismatches(report.per_request, fixture["per_request"]) == []
    assert report.summary["completed_requests"] == 3


def test_installed_formats_are_those_of_the_plugins_given():
    with pytest.raises(UnknownPluginError) as info:
        run_replay(payload("sem_one_isl16_osl4"), plugin_manager=tiny_manager())
    assert str(info.value) == "unknown trace format 'mooncake'; installed: broken, tiny, tiny-graph"


def test_a_plugin_graph_follows_the_agentic_rules():
    data = payload("sem_one_isl16_osl4", trace_format="tiny-graph", replay_concurrency=1)
    assert config_error(data, plugin_manager=tiny_manager()) == "\n".join([
        "$.traffic.execution_model: is required for an agentic trace (trace_format 'tiny-graph')",
        "$.traffic.replay_concurrency: is not allowed for an agentic trace (trace_format "
        "'tiny-graph'), got 1"])
    data = payload("sem_one_isl16_osl4", trace_format="tiny-graph", execution_model="m")
    report = run_replay(data, plugin_manager=tiny_manager())
    assert (report.summary["total_trajectories"], report.summary["completed_trajectories"]) == (1, 1)
    (record,) = report.per_request
    assert (record["request_id"], record["play_id"], record["dispatched_at_ms"]) == ("only", "play", 0.0)


def test_a_plugin_returning_something_else_is_named():
    with pytest.raises(PluginError) as info:
        run_replay(payload("sem_one_isl16_osl4", trace_format="broken"),
                   plugin_manager=tiny_manager())
    assert str(info.value) == ("trace format 'broken' returned list, expected a Trace or an "
                               "AgenticTrace")


def test_paths_are_relative_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = payload("sem_one_isl16_osl4")
    with pytest.raises(TraceError) as info:
        run_replay(data)
    assert str(info.value) == ("tests/fixtures/traces/sem_one_isl16_osl4.jsonl: cannot read the "
                               "trace file: No such file or directory")
    assert os.getcwd() == str(tmp_path)
