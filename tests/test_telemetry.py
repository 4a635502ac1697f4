"""Telemetry samples of real runs (CLUSTER.md §4): when they are taken (intervals that do and do
not divide the run), what the engine gauges, preemption counts and traffic windows show, that
nothing is sampled unless asked, the command line's ``--telemetry`` file and its refusal of a bad
``--telemetry-interval-ms``, and the same samples kept on the report or passed to a callback.

The cases are tests/fixtures/cluster/telemetry_*.json with the reference's samples recorded
beside them (record.py there); ``test_matches_the_reference`` compares every sample whole.
"""

import json
import math

import pytest

from aisimulate_core.cli import main
from test_cluster_lifecycle import expected, parity_problems, payload, run_case

# requests of 64/4, 64/10 and 32/3 tokens at 0, 40 and 60 on one worker: the run ends at E = 105
THREE = "telemetry_three"


def times(report):
    return [(s["sample_ordinal"], s["kind"], s["interval_start_ms"], s["sampled_at_ms"])
            for s in report.telemetry["samples"]]


def row(sample):
    """The one scheduler row of a one-worker aggregated run."""
    (only,) = sample["decode_scheduler_metrics"]
    return only


@pytest.mark.parametrize("name, variant", [(THREE, "i52.5"), (THREE, "i40"), (THREE, "i1000"),
                                           ("telemetry_gauges", ""),
                                           ("telemetry_preemption", "")])
def test_matches_the_reference(name, variant):
    assert parity_problems(name, variant) == []


def test_an_interval_that_divides_the_run_has_no_final_sample():
    report = run_case(THREE, telemetry_interval_ms=52.5)
    assert report.summary["duration_ms"] == 105.0
    assert times(report) == [(0, "baseline", 0.0, 0.0), (1, "periodic", 0.0, 52.5),
                             (2, "periodic", 52.5, 105.0)]
    assert report.telemetry["sample_interval_ms"] == 52.5


def test_an_interval_that_does_not_divide_the_run_ends_with_a_final_sample():
    report = run_case(THREE, telemetry_interval_ms=40)
    assert times(report) == [(0, "baseline", 0.0, 0.0), (1, "periodic", 0.0, 40.0),
                             (2, "periodic", 40.0, 80.0), (3, "final", 80.0, 105.0)]
    longer = run_case(THREE, telemetry_interval_ms=1000)
    assert times(longer) == [(0, "baseline", 0.0, 0.0), (1, "final", 0.0, 105.0)]


def test_the_baseline_shows_the_request_placed_at_0_as_waiting():
    baseline = run_case(THREE, telemetry_interval_ms=40).telemetry["samples"][0]
    assert baseline["kind"] == "baseline"
    # placed at 0, its first pass (starting at 0) not yet seen
    assert (row(baseline)["waiting_requests"], row(baseline)["running_requests"]) == (1, 0)
    # the baseline counts no traffic: the arrival at 0 goes to the first periodic sample
    assert baseline["traffic"]["arriving_requests"] == 0
    first = run_case(THREE, telemetry_interval_ms=40).telemetry["samples"][1]
    assert first["traffic"]["arriving_requests"] == 2          # at 0 and at 40, in (0, 40]


def test_traffic_windows_count_decode_steps_and_completions():
    samples = run_case(THREE, telemetry_interval_ms=40).telemetry["samples"]
    traffic = [s["traffic"] for s in samples[1:]]
    # (0, 40]: the first request's 3 steps after its first token; (40, 80]: 4 + 1 steps of
    # the two later requests in mixed passes; (80, 105]: the remaining 5 + 1
    assert [t["accept_length_forward_count"] for t in traffic] == [3, 5, 6]
    assert [t["completed_requests"] for t in traffic] == [1, 0, 2]
    assert [t["avg_accept_length"] for t in traffic] == [1.0, 1.0, 1.0]
    assert [t["duration_s"] for t in traffic] == pytest.approx([0.04, 0.04, 0.025], rel=1e-12)


def test_engine_gauges():
    # a 64/4 request at 0 (finished at 25) then a 64/20 one at 100, sampled every 50 ms
    samples = run_case("telemetry_gauges", telemetry_interval_ms=50).telemetry["samples"]
    gauges = {s["sampled_at_ms"]: row(s) for s in samples}
    # the finished 64+4 request leaves its 4 full blocks cached and unreferenced
    assert (gauges[50.0]["active_blocks"], gauges[50.0]["inactive_blocks"]) == (0, 4)
    assert gauges[50.0]["physical_cache_usage"] == 4 / 1024
    # the second request, placed at 100, is waiting: its first pass starts at 100
    assert (gauges[100.0]["waiting_requests"], gauges[100.0]["running_requests"]) == (1, 0)
    # mid-decode a 64-token prompt holds its 4 full blocks and one partial block
    assert (gauges[150.0]["active_blocks"], gauges[150.0]["running_requests"]) == (5, 1)
    assert gauges[150.0]["active_cache_usage"] == 5 / 1024
    assert gauges[150.0]["total_blocks"] == 1024


def test_preemptions_are_counted_in_the_interval_they_happen():
    # two 64-token requests with 40 output tokens each on a 9-block cache: one is preempted
    samples = run_case("telemetry_preemption", telemetry_interval_ms=100).telemetry["samples"]
    assert [s["decode_interval_metrics"]["preemptions"] for s in samples] == [0, 1, 0, 0, 0, 0]
    assert samples[1]["prefill_interval_metrics"] == {"cache_hit_tokens": 0,
                                                      "cache_total_tokens": 0, "preemptions": 0}


def test_nothing_is_sampled_unless_asked(tmp_path):
    report = run_case(THREE)
    assert report.telemetry is None
    assert "telemetry" not in report.to_dict()
    # the command line without --telemetry writes only the outputs it was given
    path = case_file(tmp_path)
    assert main(["run", str(path), "--output", str(tmp_path / "report.json"), "--quiet"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["payload.json", "report.json"]
    assert "telemetry" not in json.loads((tmp_path / "report.json").read_text())


def case_file(tmp_path, name=THREE):
    """The case's payload as a file in ``tmp_path`` (its trace path absolute)."""
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(payload(name)))
    return path


def test_the_command_line_writes_one_json_line_per_sample(tmp_path, capsys):
    path = case_file(tmp_path)
    samples = tmp_path / "samples.jsonl"
    assert main(["run", str(path), "--telemetry", str(samples), "--telemetry-interval-ms", "40",
                 "--quiet"]) == 0
    lines = samples.read_text().splitlines()
    assert len(lines) == 4
    assert [json.loads(line) for line in lines] == \
        run_case(THREE, telemetry_interval_ms=40).telemetry["samples"]
    assert [json.loads(line) for line in lines] == \
        expected(THREE, "i40")["telemetry"]["samples"]
    # without the interval, the reference's default of 1000 ms
    assert main(["run", str(path), "--telemetry", str(samples), "--quiet"]) == 0
    assert [json.loads(line)["sampled_at_ms"] for line in samples.read_text().splitlines()] == [
        0.0, 105.0]
    capsys.readouterr()


@pytest.mark.parametrize("given", ["0", "-40", "nan", "inf", "-inf", "1e400", "forty", "",
                                   "1e-300", "0.0009"])
def test_the_command_line_refuses_a_bad_interval_with_one_line(tmp_path, capsys, given):
    path = case_file(tmp_path)
    samples = tmp_path / "samples.jsonl"
    # the "=" form: argparse would read a bare "-inf" as an option
    assert main(["run", str(path), "--telemetry", str(samples), f"--telemetry-interval-ms={given}",
                 "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"aisimulate: error: --telemetry-interval-ms: must be a finite number of ms "
                   f">= 0.001, got {given!r}\n")
    assert not samples.exists()


def test_an_interval_without_a_samples_file_is_refused(tmp_path, capsys):
    path = case_file(tmp_path)
    assert main(["run", str(path), "--telemetry-interval-ms", "40", "--quiet"]) == 2
    assert capsys.readouterr().err == (
        "aisimulate: error: --telemetry-interval-ms: needs --telemetry SAMPLES.jsonl\n")


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, "40", True])
def test_run_replay_refuses_a_bad_interval(bad):
    from aisimulate_core.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        run_case(THREE, telemetry_interval_ms=bad)
    assert str(error.value) == f"telemetry interval must be a finite number of ms >= 0.001, got {bad!r}"


@pytest.mark.parametrize("name, interval", [(THREE, 40.0), ("telemetry_preemption", 100.0),
                                            ("ws_cutoff_busy", 100.0), ("drain_queue", 10.0)])
def test_kept_samples_equal_the_callbacks(name, interval):
    kept = run_case(name, telemetry_interval_ms=interval)
    passed = []
    streamed = run_case(name, telemetry_interval_ms=interval, on_sample=passed.append)
    assert passed == kept.telemetry["samples"]
    assert streamed.telemetry is None        # given to the callback, not kept
    assert passed[-1]["sampled_at_ms"] > 0
    # a callback alone samples every 1000 ms, as telemetry_interval_ms=1000 does
    alone = []
    run_case(name, on_sample=alone.append)
    assert alone == run_case(name, telemetry_interval_ms=1000).telemetry["samples"]


def test_a_run_needing_more_samples_than_the_bound_stops_with_one_line(tmp_path):
    # a tiny interval on a long run would sample for ever (the reference hangs): bounded
    from aisimulate_core.errors import SimulationError
    import aisimulate_core
    from aisimulate_core.runtime import telemetry

    payload = json.loads(case_file(tmp_path).read_text())
    bound = telemetry.MAX_SAMPLES
    telemetry.MAX_SAMPLES = 50
    try:
        with pytest.raises(SimulationError) as error:
            aisimulate_core.run_replay(json.dumps(payload), telemetry_interval_ms=0.5)
    finally:
        telemetry.MAX_SAMPLES = bound
    assert str(error.value) == ("telemetry: sampling every 0.5 ms takes more than 50 samples; "
                                "use a larger --telemetry-interval-ms")


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_sampling_asked_for_once_the_run_is_under_way_is_one_clear_error(backend):
    from aisimulate_core import build_simulation
    from aisimulate_core.errors import SimulationError
    from aisimulate_core.spec import load_payload

    doc = payload(THREE)
    doc["spec"]["engine"]["rank"]["backend"] = backend
    sim = build_simulation(load_payload(json.dumps(doc)))
    sim.run_until(50.0)
    with pytest.raises(SimulationError, match=r"^sample_telemetry\(\): call it before the run "
                                              r"starts \(the simulation is at 50.0 ms with 2 "
                                              r"requests arrived\)$"):
        sim.sample_telemetry(10.0, lambda sample: None)
    sim.run()            # the run goes on unsampled
    assert sim.completed == 3
