"""``aisimulate sweep``: real runs of small payloads; answers checked against exhaustive runs."""

import csv
import json
import sys

import pytest

from aisimulate_core.api import run_replay
from aisimulate_core.cli import main
from aisimulate_core.overrides import load_with_overrides, override_from
from aisimulate_core.sweep import SweepError, comparable, load_sweep, run_sweep
from aisimulate_core.sweep.executors import LocalExecutor, RayExecutor
from aisimulate_core.sweep.goals import pareto_front
from aisimulate_core.sweep.point import TraceDigests, apply_shape, payload_hash, point_document
from aisimulate_core.sweep.spec import parse_shape
from reference import ROOT

POISSON = json.loads((ROOT / "examples/synthetic_poisson.json").read_text())
# 400 requests at 150 req/s with a 30 ms TTFT bound: the share within SLA grows with workers
SET = {"traffic.request_count": 400, "traffic.request_rate": 150.0, "spec.sla.ttft_ms": 30.0,
       "spec.engine.rank.num_gpu_blocks": 4096}
WORKERS = "spec.topology.workers.initial_workers"
SEQS = "spec.engine.rank.max_num_seqs"
OPTIONS = (True, ())


def sweep(spec, jobs=1, **options):
    """run_sweep on ``jobs`` local processes, the pool closed after."""
    executor = LocalExecutor(jobs, OPTIONS)
    try:
        return run_sweep(spec, executor, jobs=jobs, **options)
    finally:
        executor.close()


def sweep_file(tmp_path, name="sweep.json", **fields):
    document = {"base": POISSON, "set": SET, "goal": {"kind": "min_gpus", "min_good_fraction": 0.8},
                **fields}
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def good_fraction(overrides):
    payload = load_with_overrides(POISSON, [override_from(k, v) for k, v in
                                            {**SET, **overrides}.items()])
    summary = run_replay(payload).summary
    return summary["goodput_completed_requests"] / summary["num_requests"]


@pytest.fixture(scope="module")
def exhaustive():
    """The share within SLA of every point of the 8 x 2 grid, each run on its own."""
    return {(w, s): good_fraction({WORKERS: w, SEQS: s}) for w in range(1, 9) for s in (32, 256)}


AXES = {WORKERS: {"from": 1, "to": 8}, SEQS: [32, 256]}


def test_grid_and_bisect_find_the_exhaustive_minimum(tmp_path, exhaustive):
    feasible = [(w, s) for (w, s), f in exhaustive.items() if f >= 0.8]
    assert feasible and len(feasible) < len(exhaustive)  # the goal cuts the grid
    fewest = min(w for w, _ in feasible)
    per_seqs = {s: min(w for w, t in feasible if t == s) for s in (32, 256)}

    grid = sweep(load_sweep(sweep_file(tmp_path, "grid.json", axes=AXES)), 1, plots=False)
    assert len(grid.rows) == 16
    for row in grid.rows:
        key = (row["overrides"][WORKERS], row["overrides"][SEQS])
        assert row["good_fraction"] == pytest.approx(exhaustive[key], abs=0)
    assert grid.chosen["gpus"] == fewest == grid.chosen["overrides"][WORKERS]

    bisect = sweep(load_sweep(sweep_file(tmp_path, "bisect.json", axes=AXES,
                                             search={"policy": "bisect", "axis": WORKERS})), 2, plots=False)
    assert bisect.chosen["gpus"] == fewest
    assert {m["others"][SEQS]: m["minimum"] for m in bisect.details["bisect"]["minima"]} == per_seqs
    assert len(bisect.rows) < len(grid.rows)  # it did not run every point


def test_resume_skips_finished_points(tmp_path):
    path = sweep_file(tmp_path, axes={WORKERS: [1, 2, 3, 4, 5, 6]})
    spec = load_sweep(path)
    first = sweep(spec, 1, plots=False)
    assert first.reused == 0
    ledger = spec.output / "ledger.jsonl"
    lines = ledger.read_text().splitlines()
    assert len(lines) == 6
    # an interrupt: two points finished, the third's line cut short
    ledger.write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])
    again = sweep(load_sweep(path), 1, plots=False)
    assert again.reused == 2
    assert [comparable(r) for r in again.rows] == [comparable(r) for r in first.rows]
    rows = [json.loads(line) for line in ledger.read_text().splitlines()[2:] if line.startswith("{") and line.endswith("}")]
    assert len(rows) == 4  # only the four missing points ran again
    third = sweep(load_sweep(path), 1, plots=False)
    assert third.reused == 6


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path):
    path = sweep_file(tmp_path, axes={WORKERS: [1, 8], "spec.engine.rank.backend": ["vllm", "nope"]})
    result = sweep(load_sweep(path), 2, plots=False)
    statuses = {(r["overrides"][WORKERS], r["overrides"]["spec.engine.rank.backend"]): r for r in result.rows}
    assert [statuses[(w, "vllm")]["status"] for w in (1, 8)] == ["ok", "ok"]
    for w in (1, 8):
        failed = statuses[(w, "nope")]
        assert failed["status"] == "failed" and failed["summary"] is None
        assert failed["error"] == ('axis spec.engine.rank.backend="nope": $.spec.engine.rank.backend: '
                                   "must be one of 'vllm', 'sglang', 'trtllm', got \"nope\"")
    ledger = [json.loads(line) for line in (result.spec.output / "ledger.jsonl").read_text().splitlines()]
    assert sorted(r["status"] for r in ledger) == ["failed", "failed", "ok", "ok"]
    assert result.chosen["overrides"] == {WORKERS: 8, "spec.engine.rank.backend": "vllm"}


def test_csv_has_one_row_per_point_with_every_summary_key(tmp_path):
    path = sweep_file(tmp_path, axes={WORKERS: [2, 6], "spec.engine.rank.backend": ["vllm", "bad"]})
    result = sweep(load_sweep(path), 1, plots=False)
    with open(result.files["csv"], newline="") as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == 4
    summary = next(r["summary"] for r in result.rows if r["status"] == "ok")
    assert set(summary) - set(table[0]) == set()
    assert [row["point"] for row in table] == ["0", "1", "2", "3"]
    for row, point in zip(table, result.rows):
        assert row["status"] == point["status"]
        if point["status"] == "ok":
            assert float(row["p90_ttft_ms"]) == point["summary"]["p90_ttft_ms"]
            assert int(row["goodput_completed_requests"]) == point["summary"]["goodput_completed_requests"]
        else:
            assert row["error"] == point["error"] and row["p90_ttft_ms"] == ""
    saved = json.loads(result.files["json"].read_text())
    assert saved["chosen"] == result.chosen["point"] and len(saved["points"]) == 4
    # the chosen point's whole report, its per-request records included (the payload keeps them)
    report = json.loads(result.files["chosen_report"].read_text())
    assert len(report.pop("per_request")) == report["num_requests"]
    assert comparable({"summary": report}) == comparable({"summary": result.chosen["summary"]})
    chosen = json.loads(result.files["chosen_payload"].read_text())
    assert chosen["spec"]["topology"]["workers"]["initial_workers"] == result.chosen["gpus"]
    assert json.loads(result.files["chosen_point"].read_text())["point"] == result.chosen["point"]
    written = result.files["chosen_report"].stat().st_mtime_ns
    again = sweep(load_sweep(path), 1, plots=False)
    assert again.reused == 4 and again.files["chosen_report"].stat().st_mtime_ns == written


def test_optuna_searches_the_same_space(tmp_path, exhaustive):
    pytest.importorskip("optuna")
    feasible = [(w, s) for (w, s), f in exhaustive.items() if f >= 0.8]
    path = sweep_file(tmp_path, axes=AXES, search={"policy": "optuna", "trials": 40, "seed": 3})
    result = sweep(load_sweep(path), 2, plots=False)
    # 40 trials over 16 points: the space is exhausted, so the answer is the grid's
    assert len(result.rows) == 16
    assert result.chosen["gpus"] == min(w for w, _ in feasible)
    again = sweep(load_sweep(path), 2, plots=False)
    assert again.reused == 16


def test_optuna_nsga2_pareto(tmp_path):
    pytest.importorskip("optuna")
    path = sweep_file(tmp_path, axes={WORKERS: {"from": 1, "to": 8}},
                      goal={"kind": "pareto", "metrics": ["goodput_request_throughput_rps", "gpus"],
                            "directions": ["max", "min"]},
                      search={"policy": "optuna", "trials": 6, "seed": 1})
    result = sweep(load_sweep(path), 1, plots=False)
    assert 1 <= len(result.rows) <= 6
    assert result.details["optuna"]["sampler"] == "nsga2"
    front = result.front
    for row in front:  # nobody beats a front point on both metrics
        g, n = row["summary"]["goodput_request_throughput_rps"], row["gpus"]
        assert not any(o["summary"]["goodput_request_throughput_rps"] >= g and o["gpus"] <= n
                       and (o["summary"]["goodput_request_throughput_rps"], o["gpus"]) != (g, n)
                       for o in result.rows)
    assert result.chosen in front
    assert json.loads(result.files["front"].read_text()) == [json.loads(json.dumps(r)) for r in front]


def test_pareto_grid_front_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    path = sweep_file(tmp_path, axes={WORKERS: {"from": 1, "to": 8}},
                      goal={"kind": "pareto", "metrics": ["goodput_request_throughput_rps",
                                                          "output_throughput_per_gpu"]})
    result = sweep(load_sweep(path), 1)
    by_workers = {r["overrides"][WORKERS]: r for r in result.rows}
    expected = pareto_front(list(by_workers.values()), result.spec.goal)
    assert result.front == expected and result.chosen in result.front
    assert result.files["pareto_plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.files["goal_plot"].stat().st_size > 5000


@pytest.mark.parametrize("text, name, pools", [
    ("agg:4", "agg:4", ((4, 1, 1),)),
    ("agg:2xtp4", "agg:2xtp4", ((2, 4, 1),)),
    ("AGG:3xTP2xDP2", "agg:3xtp2xdp2", ((3, 2, 2),)),
    ("disagg:1xtp2+2", "disagg:1xtp2+2", ((1, 2, 1), (2, 1, 1))),
    ({"kind": "disaggregated", "prefill": {"workers": 2}, "decode": {"workers": 1, "tp": 4}},
     "disagg:2+1xtp4", ((2, 1, 1), (1, 4, 1))),
])
def test_shapes(text, name, pools):
    shape = parse_shape(text)
    assert (shape.name, shape.pools) == (name, pools)


@pytest.mark.parametrize("text", ["agg:0", "agg:2xtp", "disagg:1", "mixed:1", {"kind": "aggregated"}])
def test_bad_shapes(text):
    assert parse_shape(text) is None


def test_deployment_axis_generators_and_gpus(tmp_path):
    base = json.loads((ROOT / "tests/fixtures/payloads/disagg_transfer_full_prompt.json").read_text())
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps({
        "base": base, "set": {"spec.sla.ttft_ms": 1000.0},
        "axes": {"deployment": {"aggregated": {"workers": [2], "tp": [1, 2]},
                                "disaggregated": {"ratios": ["1:1", "1:2"], "scale": [1, 2]}}},
        "goal": {"kind": "max_goodput"}}))
    spec = load_sweep(path)
    assert [s.name for s in spec.axes[0].values] == [
        "agg:2", "agg:2xtp2", "disagg:1+1", "disagg:2+2", "disagg:1+2", "disagg:2+4"]
    result = sweep(spec, 1, plots=False)
    gpus = {r["overrides"]["deployment"]: r["gpus"] for r in result.rows}
    assert gpus == {"agg:2": 2, "agg:2xtp2": 4, "disagg:1+1": 2, "disagg:2+2": 4,
                    "disagg:1+2": 3, "disagg:2+4": 6}
    assert all(r["status"] == "ok" for r in result.rows), [r["error"] for r in result.rows]
    assert set(result.rows[0]["kv_blocks"]) == {"aggregated"}
    assert set(result.rows[2]["kv_blocks"]) == {"prefill", "decode"}
    disagg = point_document(spec.base, spec.fixed, spec.axes, (5,))
    assert disagg["spec"]["topology"]["prefill"]["initial_workers"] == 2
    assert disagg["spec"]["topology"]["decode"]["initial_workers"] == 4


def test_a_shape_keeps_the_aic_config_in_step():
    aic = json.loads((ROOT / "examples/aic_qwen3_32b_h200.json").read_text())
    shaped = apply_shape(aic, parse_shape("disagg:1xtp2+2xtp4"))
    assert shaped["spec"]["engine"]["prefill"]["rank"]["timing_model"]["config"]["tp"] == 2
    assert shaped["spec"]["engine"]["decode"]["rank"]["timing_model"]["config"]["tp"] == 4
    assert shaped["spec"]["engine"]["decode"]["tensor_parallel_size"] == 4
    agg = apply_shape(aic, parse_shape("agg:3xtp2"))
    assert agg["spec"]["engine"]["rank"]["timing_model"]["config"]["tp"] == 2
    assert agg["spec"]["engine"]["tensor_parallel_size"] == 2
    assert aic["spec"]["engine"]["tensor_parallel_size"] == 1  # the base is left alone


def test_the_hash_follows_the_trace_content(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n')
    document = {"spec": {"topology": {"kind": "aggregated", "workers": {"initial_workers": 1}}},
                "traffic": {"source_type": "trace", "trace_path": str(trace), "trace_format": "mooncake"}}
    first = payload_hash(document, TraceDigests())
    assert payload_hash(json.loads(json.dumps(document)), TraceDigests()) == first
    trace.write_text('{"timestamp": 0, "input_length": 11, "output_length": 2, "hash_ids": [1]}\n')
    assert payload_hash(document, TraceDigests()) != first


@pytest.mark.parametrize("fields, lines", [
    ({"axes": {}}, ["$.axes: must be a non-empty object of {payload path or 'deployment': values}, got {}"]),
    ({"axes": {WORKERS: {"from": 3, "to": 1}}, "bogus": 1},
     ["$.axes[\"spec.topology.workers.initial_workers\"]: a range needs numbers from <= to and step > 0, "
      'got {"from": 3, "to": 1}', "$.bogus: unknown field (expected one of axes, base, goal, output, search, set)"]),
    ({"axes": {WORKERS: [1, 2]}, "goal": {"kind": "min_gpus"}},
     ["$.goal.min_good_fraction: is required by min_gpus (the share of requests that must meet "
      "the payload's SLA, e.g. 0.99)"]),
    ({"axes": {WORKERS: [2, 1]}, "search": {"policy": "bisect"}},
     ["$.search.axis: bisect needs an axis of increasing numbers (feasibility must not fall as it grows), "
      'got "spec.topology.workers.initial_workers"']),
    ({"axes": {"deployment": ["agg:x"]}},
     ["$.axes[\"deployment\"][0]: a shape is 'agg:N[xtpT][xdpD]', 'disagg:P[xtpT][xdpD]+D[xtpT][xdpD]' "
      'or an object {"kind": "aggregated", "workers", "tp", "dp"}, got "agg:x"']),
])
def test_bad_sweep_files_list_every_problem(tmp_path, fields, lines):
    path = sweep_file(tmp_path, **fields)
    with pytest.raises(SweepError) as caught:
        load_sweep(path)
    assert str(caught.value).split("\n") == [f"{path}: {line}" for line in lines]


def test_cli_sweep_prints_the_table_and_exits_0(tmp_path, capsys):
    path = sweep_file(tmp_path, axes={WORKERS: [1, 6]})
    assert main(["sweep", str(path), "--jobs", "1", "--no-plots"]) == 0
    out, err = capsys.readouterr()
    assert err == ""  # stderr is not a terminal: no progress line unless asked
    assert "chosen: point 1 (initial_workers=6): 6 GPUs" in out
    assert main(["sweep", str(path), "--jobs", "1", "--progress", "--no-plots"]) == 0
    out, err = capsys.readouterr()
    assert "2 points (0 failed, 2 from the ledger)" in out
    assert err.splitlines()[-1] == "aisimulate: sweep 2/2 points (2 from the ledger)"


def test_cli_sweep_errors_are_one_line(tmp_path, capsys):
    no_sla = sweep_file(tmp_path, axes={WORKERS: [1]}, set={})
    base = json.loads(json.dumps(POISSON))
    del base["spec"]["sla"]
    no_sla.write_text(json.dumps({"base": base, "axes": {WORKERS: [1]},
                                  "goal": {"kind": "min_gpus", "min_good_fraction": 0.9}}))
    assert main(["sweep", str(no_sla), "--quiet"]) == 2
    _, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and "sets no spec.sla" in err
    assert main(["sweep", str(tmp_path / "missing.json")]) == 2
    assert capsys.readouterr().err == f"aisimulate: error: cannot read {tmp_path / 'missing.json'}: no such file\n"
    assert main(["sweep", str(no_sla), "--jobs", "0"]) == 2
    assert capsys.readouterr().err == "aisimulate: error: --jobs: must be a positive integer, got '0'\n"


def test_yaml_sweep_file(tmp_path):
    pytest.importorskip("yaml")
    base = tmp_path / "base.json"
    base.write_text(json.dumps(POISSON))
    path = tmp_path / "sweep.yaml"
    path.write_text("base: base.json\nset:\n  traffic.request_count: 50\naxes:\n"
                    f"  {WORKERS}: [1, 2]\ngoal:\n  kind: max_goodput\n")
    spec = load_sweep(path)
    assert spec.axes[0].values == (1, 2) and spec.output == tmp_path / "sweep.results"
    assert len(sweep(spec, 1, plots=False).rows) == 2


def test_missing_extras_name_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if ray were not installed
    with pytest.raises(SweepError) as caught:
        RayExecutor(None, OPTIONS, TraceDigests())
    assert str(caught.value) == ("--executor ray needs ray, which is not installed: "
                                 "pip install 'aisimulate-core[sweep]'")
    monkeypatch.setitem(sys.modules, "optuna", None)
    path = sweep_file(tmp_path, axes={WORKERS: [1, 2]}, search={"policy": "optuna"})
    with pytest.raises(SweepError) as caught:
        sweep(load_sweep(path), 1, plots=False)
    assert str(caught.value) == ("search policy optuna needs optuna, which is not installed: "
                                 "pip install 'aisimulate-core[sweep]'")


def test_aic_estimates_the_kv_capacity_of_each_shape(tmp_path):
    pytest.importorskip("aisimulate_aic_timing")
    path = tmp_path / "aic.json"
    path.write_text(json.dumps({
        "base": json.loads((ROOT / "examples/aic_qwen3_32b_h200.json").read_text()),
        "set": {"traffic.request_count": 4},
        "axes": {"deployment": ["agg:1", "agg:1xtp2", "disagg:1+1xtp2"]},
        "goal": {"kind": "max_goodput"}}))
    result = sweep(load_sweep(path), 1, plots=False)
    blocks = {r["overrides"]["deployment"]: r["kv_blocks"] for r in result.rows}
    # Qwen3-32B on one H200 (vLLM, block 16, 0.9 of memory): the plugin README's 15,616
    assert blocks["agg:1"] == {"aggregated": 15616}
    assert blocks["agg:1xtp2"]["aggregated"] > 2 * 15616  # two GPUs hold one copy of the weights
    assert blocks["disagg:1+1xtp2"] == {"prefill": 15616, "decode": blocks["agg:1xtp2"]["aggregated"]}
    assert [r["gpus"] for r in result.rows] == [1, 2, 3]


def test_one_sweep_at_a_time_writes_a_ledger(tmp_path):
    from aisimulate_core.cli.outputs import CliError
    from aisimulate_core.sweep.ledger import Ledger

    first = Ledger(tmp_path)
    try:
        with pytest.raises(CliError, match="another sweep is writing this ledger"):
            Ledger(tmp_path)
    finally:
        first.close()
    Ledger(tmp_path).close()  # free again once the first is done


def test_an_unreachable_ray_address_is_one_line():
    pytest.importorskip("ray")
    with pytest.raises(SweepError) as caught:
        RayExecutor("127.0.0.1:9", OPTIONS, TraceDigests())  # the discard port: refused
    assert str(caught.value) == "--executor ray: cannot reach Ray at 127.0.0.1:9: Connection refused"


def test_cli_set_overrides_every_point(tmp_path, capsys):
    path = sweep_file(tmp_path, axes={WORKERS: [1, 2]})
    assert main(["sweep", str(path), "--jobs", "1", "--quiet", "--no-plots", "--out",
                 str(tmp_path / "out"), "--set", "traffic.request_count=50",
                 "--set", "spec.engine.rank.backend=nope"]) == 0
    capsys.readouterr()
    rows = [json.loads(line) for line in (tmp_path / "out/ledger.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert all(r["error"].startswith("--set spec.engine.rank.backend=nope: $.spec.engine.rank.backend:")
               for r in rows)
    assert main(["sweep", str(path), "--quiet", "--set", "spec..x=1"]) == 2
    assert capsys.readouterr().err.startswith("aisimulate: error: --set spec..x=1: cannot read the path")


def test_bisect_on_a_deployment_axis_searches_each_shape_family(tmp_path):
    """Bisect over shapes: one search per family (agg tp1, agg tp2, a disaggregated prefill
    pool over a fixed decode pool), along its worker count; the answer is the grid's."""
    base = json.loads((ROOT / "tests/fixtures/payloads/disagg_transfer_full_prompt.json").read_text())
    shapes = {"max_gpus": 10, "aggregated": {"tp": [1, 2], "workers": {"from": 1, "to": 8}},
              "disaggregated": {"prefill_workers": {"from": 1, "to": 6}, "decode_workers": [1]}}
    fields = {"base": base, "set": {"spec.sla.ttft_ms": 1000.0},
              "axes": {"deployment": shapes}, "goal": {"kind": "min_gpus", "min_good_fraction": 0.9}}
    (tmp_path / "grid.json").write_text(json.dumps(fields))
    (tmp_path / "bisect.json").write_text(json.dumps({**fields, "search": {"policy": "bisect",
                                                                           "axis": "deployment"}}))
    spec = load_sweep(tmp_path / "grid.json")
    names = [s.name for s in spec.axes[0].values]
    assert names == [*(f"agg:{w}" for w in range(1, 9)), *(f"agg:{w}xtp2" for w in range(1, 6)),
                     *(f"disagg:{p}+1" for p in range(1, 7))]  # max_gpus drops agg:6xtp2 ...
    assert {s.family for s in spec.axes[0].values} == {"agg tp1", "agg tp2", "disagg Pxtp1+1xtp1"}
    grid = sweep(spec, 2)
    fractions = {r["overrides"]["deployment"]: r["good_fraction"] for r in grid.rows}
    families = {"agg tp1": [f"agg:{w}" for w in range(1, 9)],
                "agg tp2": [f"agg:{w}xtp2" for w in range(1, 6)],
                "disagg Pxtp1+1xtp1": [f"disagg:{p}+1" for p in range(1, 7)]}
    expected = {family: next((n for n in members if fractions[n] >= 0.9), None)
                for family, members in families.items()}
    assert len(set(expected.values()) - {None}) >= 2, fractions  # the goal cuts the families

    bisect = sweep(load_sweep(tmp_path / "bisect.json"), 2)
    found = {m["others"]["family"]: m["minimum"] for m in bisect.details["bisect"]["minima"]}
    assert found == expected
    assert bisect.chosen["overrides"] == grid.chosen["overrides"]
    assert len(bisect.rows) < len(grid.rows)

    # the goal plot runs along GPUs, one line per family, the chosen point on it
    from aisimulate_core.sweep.runner import family_points
    from aisimulate_core.viz import plot_goal_vs_axis

    points = family_points(bisect.spec, bisect.rows)
    chosen = next(p for p, r in zip(points, bisect.rows) if r is bisect.chosen)
    series = plot_goal_vs_axis(points, "gpus", "good_fraction", 0.9, chosen,
                               tmp_path / "g.png").series
    assert {line["label"] for line in series["lines"]} == {f"family={f}" for f in families}
    assert series["chosen"] == {"x": bisect.chosen["gpus"], "y": bisect.chosen["good_fraction"]}
    assert (bisect.spec.output / "goal.png").stat().st_size > 10_000


def test_disaggregated_generator_needs_one_kind_of_counts(tmp_path):
    path = sweep_file(tmp_path, axes={"deployment": {"disaggregated": {
        "ratios": ["1:1"], "prefill_workers": [1], "decode_workers": [1]}, "max_gpus": 0}})
    with pytest.raises(SweepError) as error:
        load_sweep(path)
    assert str(error.value).splitlines() == [
        f"{path}: $.axes[\"deployment\"].disaggregated: takes ratios and scale, or prefill_workers "
        "and decode_workers, not both",
        f"{path}: $.axes[\"deployment\"].max_gpus: must be a positive integer, got 0"]
