"""`aisimulate plot`: the PNGs are written and their data series are what the report, the
records and the telemetry say (real runs of small payloads; matplotlib's Agg canvas)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from aisimulate_core.cli import main
from aisimulate_core.cli.record_formats import read_json_lines, read_records
from aisimulate_core.viz import plot_latency_cdfs, plot_request_timeline, plot_telemetry
from aisimulate_core.viz.runs import REPORT_QUANTILES
from tests.plot_support import CLUSTER, FIXTURES, assert_plausible_png, png_size

ROOT = Path(__file__).resolve().parents[1]


def run_case(payload: Path, out: Path, *extra: str) -> dict[str, Path]:
    paths = {"report": out / "run.json", "records": out / "run.jsonl",
             "samples": out / "run.samples.jsonl"}
    argv = ["run", str(payload), "--output", str(paths["report"]), "--per-request",
            str(paths["records"]), "--telemetry", str(paths["samples"]),
            "--telemetry-interval-ms", "20", "--quiet", *extra]
    assert main(argv) == 0
    return paths


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    """s1: schedule scaling 2 -> 4 -> 3 -> 1 -> 2 workers, 40 requests, telemetry every 20 ms."""
    out = tmp_path_factory.mktemp("s1")
    cwd = Path.cwd()
    import os

    os.chdir(ROOT)  # the case names its trace from the checkout's parent
    try:
        paths = run_case(CLUSTER / "s1_schedule_scaling_agg_rr.json", out)
    finally:
        os.chdir(cwd)
    report = json.loads(paths["report"].read_text())
    return paths, report, list(read_records(paths["records"])), list(read_json_lines(paths["samples"]))


def test_plot_writes_three_pngs(scaled, tmp_path, capsys):
    paths, _, _, _ = scaled
    argv = ["plot", str(paths["report"]), "--per-request", str(paths["records"]),
            "--telemetry", str(paths["samples"]), "--out", str(tmp_path / "pictures")]
    assert main(argv) == 0
    out = capsys.readouterr()
    names = ["run.latency_cdf.png", "run.timeline.png", "run.telemetry.png"]
    assert out.out == "".join(f"wrote {tmp_path / 'pictures' / n}\n" for n in names)
    assert out.err == ""
    for name in names:
        assert_plausible_png(tmp_path / "pictures" / name)
    assert png_size(tmp_path / "pictures" / "run.latency_cdf.png") == (1000, 750)


def order_statistic(values, p):
    values = sorted(values)
    return values[round((len(values) - 1) * p / 100)]


def test_latency_cdfs_are_the_records_and_agree_with_the_report(scaled, tmp_path):
    _, report, records, _ = scaled
    plot = plot_latency_cdfs(records, report, tmp_path / "cdf.png")
    assert_plausible_png(plot.path)
    series = plot.series
    completed = [r for r in records if r["terminal_status"] == "completed"]
    for name, key, stem in (("ttft", "ttft_ms", "ttft"), ("tpot", "itl_ms", "tpot"),
                            ("e2e", "e2e_latency_ms", "e2e_latency")):
        data = series[name]
        assert data["source"] == "records"
        assert data["x"] == sorted(r[key] for r in completed if r[key] is not None)
        assert data["y"][-1] == 1.0 and len(data["y"]) == len(data["x"])
        count_key = {"e2e": "num_e2e_latency_samples"}.get(name, f"num_{name}_samples")
        assert len(data["x"]) == report[count_key]
        # the CDF's order statistics are the report's percentiles
        for p, prefix in ((50, "median"), (90, "p90"), (99, "p99")):
            assert order_statistic(data["x"], p) == pytest.approx(report[f"{prefix}_{stem}_ms"])
    itl = series["itl"]
    assert itl["source"] == "report percentiles"
    assert itl["x"] == [report[f"{prefix}_itl_ms"] for prefix, _ in REPORT_QUANTILES]
    assert itl["y"] == [fraction for _, fraction in REPORT_QUANTILES]


def test_the_timeline_shows_an_even_sample_of_the_records(scaled, tmp_path):
    _, _, records, _ = scaled
    plot = plot_request_timeline(records, tmp_path / "timeline.png", sample=10)
    assert_plausible_png(plot.path)
    chosen = sorted(records, key=lambda r: r["arrival_time_ms"])[::4]
    assert len(records) == 40
    assert plot.series == {"uuid": [r["uuid"] for r in chosen],
                           "arrival": [r["arrival_time_ms"] for r in chosen],
                           "first_token": [r["first_token_ms"] for r in chosen],
                           "finish": [r["terminal_time_ms"] for r in chosen],
                           "status": ["completed"] * 10}


def test_telemetry_series_are_the_samples_and_the_workers_follow_the_operations(scaled, tmp_path):
    _, report, _, samples = scaled
    operations = report["lifecycle_operations"]
    plot = plot_telemetry(samples, operations, tmp_path / "telemetry.png")
    assert_plausible_png(plot.path)
    series = plot.series
    assert series["t_ms"] == [s["sampled_at_ms"] for s in samples]
    ranks = [s["decode_scheduler_metrics"] for s in samples]
    assert series["queues"]["agg waiting"] == [sum(r["waiting_requests"] for r in rs) for rs in ranks]
    assert series["queues"]["agg running"] == [sum(r["running_requests"] for r in rs) for rs in ranks]
    assert series["kv_usage"]["agg max"] == [max(r["active_cache_usage"] for r in rs) for rs in ranks]
    assert series["workers"]["agg active"] == [len(s["active_decode_ids"]) for s in samples]
    assert [m["at_ms"] for m in series["operations"]] == [op["at_ms"] for op in operations]
    assert len(operations) == 8 and set(series["workers"]["agg active"]) == {1, 2, 3}
    # at every sample the active workers are those the last operation before it left
    for t, active in zip(series["t_ms"], series["workers"]["agg active"]):
        before = [op for op in operations if op["at_ms"] <= t]
        if before:
            assert active == len(before[-1]["state_after_batch"]["active"]), t


def test_a_disaggregated_run_plots_both_pools(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    paths = run_case(CLUSTER / "s2_schedule_scaling_disagg_rr.json", tmp_path)
    samples = list(read_json_lines(paths["samples"]))
    report = json.loads(paths["report"].read_text())
    plot = plot_telemetry(samples, report["lifecycle_operations"], tmp_path / "t.png")
    assert_plausible_png(plot.path)
    workers = plot.series["workers"]
    assert workers["prefill active"] == [len(s["active_prefill_ids"]) for s in samples]
    assert workers["decode active"] == [len(s["active_decode_ids"]) for s in samples]
    assert {m["pool"] for m in plot.series["operations"]} <= {"prefill", "decode"}


def test_a_report_alone_draws_its_percentiles(tmp_path, capsys):
    payload = json.loads((FIXTURES / "arr_poisson_s1_r40.json").read_text())
    payload["spec"]["record_per_request"] = False
    (tmp_path / "p.json").write_text(json.dumps(payload))
    assert main(["run", str(tmp_path / "p.json"), "--output", str(tmp_path / "r.json"),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["plot", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr()
    assert out.out == f"wrote {tmp_path / 'r.latency_cdf.png'}\n"
    assert out.err.splitlines() == [
        "aisimulate: timeline: not drawn, no per-request records (give --per-request RECORDS; "
        "CDFs drawn from the report's percentiles)",
        "aisimulate: telemetry: not drawn, no samples (give --telemetry SAMPLES.jsonl, written "
        "by run --telemetry)"]
    assert_plausible_png(tmp_path / "r.latency_cdf.png")
    report = json.loads((tmp_path / "r.json").read_text())
    series = plot_latency_cdfs(None, report, tmp_path / "again.png").series
    assert series["ttft"] == {"x": [report[f"{p}_ttft_ms"] for p, _ in REPORT_QUANTILES],
                              "y": [f for _, f in REPORT_QUANTILES],
                              "source": "report percentiles"}


def test_records_kept_in_the_report_or_given_as_csv_draw_the_same(tmp_path, capsys):
    payload = FIXTURES / "arr_poisson_s1_r40.json"
    assert main(["run", str(payload), "--output", str(tmp_path / "kept.json"), "--quiet"]) == 0
    assert main(["run", str(payload), "--output", str(tmp_path / "r.json"), "--per-request",
                 str(tmp_path / "r.csv"), "--quiet"]) == 0
    report = json.loads((tmp_path / "kept.json").read_text())
    assert len(report["per_request"]) == 40
    from_report = plot_latency_cdfs(report["per_request"], report, tmp_path / "a.png").series
    from_csv = plot_latency_cdfs(list(read_records(tmp_path / "r.csv")), report,
                                 tmp_path / "b.png").series
    assert from_report == from_csv and from_report["ttft"]["source"] == "records"
    assert main(["plot", str(tmp_path / "kept.json"), "--out", str(tmp_path / "o")]) == 0
    assert "timeline" not in capsys.readouterr().err  # the kept records made the timeline
    assert (tmp_path / "o" / "kept.timeline.png").exists()


def test_bad_inputs_are_one_line(tmp_path, capsys):
    (tmp_path / "x.json").write_text('{"samples": []}')
    assert main(["plot", str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err == (
        f"aisimulate: error: {tmp_path / 'x.json'}: not an aisimulate report (a JSON object "
        "with the summary keys, as run --output writes)\n")
    assert main(["plot", str(tmp_path / "none.json")]) == 2
    assert capsys.readouterr().err == (
        f"aisimulate: error: cannot read report {tmp_path / 'none.json'}: no such file\n")
    (tmp_path / "f").write_text("")
    (tmp_path / "r.json").write_text('{"num_requests": 0}')
    assert main(["plot", str(tmp_path / "r.json"), "--out", str(tmp_path / "f")]) == 2
    assert capsys.readouterr().err == f"aisimulate: error: --out {tmp_path / 'f'}: not a directory\n"


def test_without_matplotlib_plot_is_one_line_and_run_still_works(tmp_path):
    script = ("import sys; sys.modules['matplotlib'] = None\n"
              "from aisimulate_core.cli import main\n"
              f"assert main(['run', {str(FIXTURES / 'sem_one_osl1.json')!r}, '--output', "
              f"{str(tmp_path / 'r.json')!r}, '--quiet']) == 0\n"
              f"sys.exit(main(['plot', {str(tmp_path / 'r.json')!r}]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr == ("aisimulate: error: plotting needs matplotlib, which is not "
                           "installed: pip install 'aisimulate-core[plot]'\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_the_core_does_not_import_matplotlib_or_pyarrow():
    script = ("import sys, aisimulate_core, aisimulate_core.cli.main, aisimulate_core.viz, "
              "aisimulate_core.cli.record_formats\n"
              "print(sorted(m for m in ('matplotlib', 'pyarrow') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout == "[]\n", done.stderr
