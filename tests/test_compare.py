"""`aisimulate compare`: two real runs side by side, relative differences, csv/json, and the
overlaid CDFs of --plot."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from aisimulate_core.cli import main
from aisimulate_core.cli.compare import HEADLINE_KEYS, relative
from aisimulate_core.cli.record_formats import read_records
from tests.plot_support import assert_plausible_png, loaded_poisson


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """One worker and three workers on the same Poisson load with a TTFT SLA: reports with
    records kept inside, and the records as files."""
    out = tmp_path_factory.mktemp("compare")
    for name, workers in (("one", 1), ("three", 3)):
        (out / f"{name}.payload.json").write_text(json.dumps(loaded_poisson(workers)))
        assert main(["run", str(out / f"{name}.payload.json"), "--output", str(out / f"{name}.json"),
                     "--per-request", str(out / f"{name}.jsonl"), "--quiet"]) == 0
        assert main(["run", str(out / f"{name}.payload.json"), "--output",
                     str(out / f"{name}.kept.json"), "--quiet"]) == 0
    return out


def report(out: Path, name: str) -> dict:
    return json.loads((out / f"{name}.json").read_text())


def test_json_rows_are_the_relative_differences_of_the_two_reports(two_runs, capsys):
    a, b = report(two_runs, "one"), report(two_runs, "three")
    assert main(["compare", str(two_runs / "one.json"), str(two_runs / "three.json"),
                 "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["baseline"] == "one"
    assert [run["label"] for run in document["runs"]] == ["one", "three"]
    rows = {row["key"]: row for row in document["rows"]}
    assert list(rows) == [k for k in HEADLINE_KEYS if k in a]
    for key, row in rows.items():
        assert row["values"] == {"one": a[key], "three": b[key]}
        expected = (b[key] - a[key]) / abs(a[key]) if a[key] else (0.0 if b[key] == 0 else None)
        assert row["relative"]["three"] == pytest.approx(expected), key
    # three workers keep more requests within the SLA and wait less for the first token
    assert a["goodput_completed_requests"] == 72 and b["goodput_completed_requests"] == 88
    assert rows["goodput_completed_requests"]["relative"]["three"] == pytest.approx(16 / 72)
    assert rows["mean_ttft_ms"]["relative"]["three"] < 0
    assert rows["gpu_hours"]["relative"]["three"] > 1.5


def test_the_table_shows_values_and_percentages(two_runs, capsys):
    a, b = report(two_runs, "one"), report(two_runs, "three")
    assert main(["compare", str(two_runs / "one.json"), str(two_runs / "three.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["one", "three", "vs", "one"]
    goodput = next(line for line in lines if line.startswith("goodput_completed_requests "))
    assert goodput.split() == ["goodput_completed_requests", "72", "88", "+22.22%"]
    ttft = next(line for line in lines if line.startswith("mean_ttft_ms "))
    change = (b["mean_ttft_ms"] - a["mean_ttft_ms"]) / a["mean_ttft_ms"] * 100
    assert ttft.split()[-1] == f"{change:+.2f}%"
    assert ttft.split()[1] == f"{a['mean_ttft_ms']:,.6g}"


def test_csv_with_every_numeric_key(two_runs, capsys):
    a, b = report(two_runs, "one"), report(two_runs, "three")
    assert main(["compare", str(two_runs / "one.json"), str(two_runs / "three.json"),
                 "--format", "csv", "--all"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    numeric = [k for k, v in a.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    assert [row["key"] for row in rows] == numeric
    assert "wall_time_ms" in numeric and "kv_eviction_policy" not in numeric
    for row in rows:
        key = row["key"]
        assert float(row["one"]) == a[key] and float(row["three"]) == b[key]
        rel = relative(b[key], a[key])
        assert (row["three relative"] == "") == (rel is None)
        if rel is not None:
            assert float(row["three relative"]) == pytest.approx(rel)


def test_relative_difference_rules():
    assert relative(110, 100) == pytest.approx(0.1)
    assert relative(-90, -100) == pytest.approx(0.1)  # against |first|
    assert relative(0, 0) == 0.0
    assert relative(5, 0) is None
    assert relative(None, 3) is None and relative(3, "x") is None


def test_plot_overlays_the_runs_cdfs_from_files_or_kept_records(two_runs, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from aisimulate_core.viz.compare import plot_cdf_overlay

    argv = ["compare", str(two_runs / "one.json"), str(two_runs / "three.json"), "--plot",
            "--per-request", str(two_runs / "one.jsonl"), str(two_runs / "three.jsonl"),
            "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert out.err == f"wrote {tmp_path / 'compare.latency_cdf.png'}\n"
    assert_plausible_png(tmp_path / "compare.latency_cdf.png")
    runs = []
    for name in ("one", "three"):
        records = list(read_records(two_runs / f"{name}.jsonl"))
        runs.append((name, records, report(two_runs, name)))
    series = plot_cdf_overlay(runs, tmp_path / "again.png").series
    for (name, records, summary), line in zip(runs, series["ttft"]):
        assert line["label"] == name and line["source"] == "records"
        assert line["x"] == sorted(r["ttft_ms"] for r in records)
    assert [line["source"] for line in series["itl"]] == ["report percentiles"] * 2
    # the reports that kept their records draw the same lines without --per-request
    kept = [(name, json.loads((two_runs / f"{name}.kept.json").read_text())) for name in ("one", "three")]
    kept_series = plot_cdf_overlay([(n, r["per_request"], r) for n, r in kept],
                                   tmp_path / "kept.png").series
    assert [l["x"] for l in kept_series["ttft"]] == [l["x"] for l in series["ttft"]]
    assert main(["compare", str(two_runs / "one.kept.json"), str(two_runs / "three.kept.json"),
                 "--plot", "--out", str(tmp_path / "k")]) == 0
    assert capsys.readouterr().err == f"wrote {tmp_path / 'k' / 'compare.latency_cdf.png'}\n"


def test_plot_without_records_says_so(two_runs, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main(["compare", str(two_runs / "one.json"), str(two_runs / "three.json"), "--plot",
                 "--out", str(tmp_path), "--format", "json"]) == 0
    out = capsys.readouterr()
    json.loads(out.out)  # stdout stays the machine-readable table
    assert out.err.splitlines() == [
        "aisimulate: compare: no per-request records for one, three: their CDFs are the "
        "reports' percentiles (give --per-request)",
        f"wrote {tmp_path / 'compare.latency_cdf.png'}"]


def test_usage_errors_are_one_line(two_runs, capsys):
    one = str(two_runs / "one.json")
    assert main(["compare", one]) == 2
    assert capsys.readouterr().err == "aisimulate: error: compare: needs at least two reports, got 1\n"
    assert main(["compare", one, one, "--plot", "--per-request", str(two_runs / "one.jsonl")]) == 2
    assert capsys.readouterr().err == ("aisimulate: error: --per-request: one records file per "
                                       "report, got 1 for 2 reports\n")
    assert main(["compare", one, str(two_runs / "one.jsonl")]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_same_file_names_are_told_apart(two_runs, tmp_path, capsys):
    (tmp_path / "one.json").write_text((two_runs / "three.json").read_text())
    assert main(["compare", str(two_runs / "one.json"), str(tmp_path / "one.json"),
                 "--format", "json"]) == 0
    labels = [run["label"] for run in json.loads(capsys.readouterr().out)["runs"]]
    assert labels == [str(two_runs / "one.json"), str(tmp_path / "one.json")]
