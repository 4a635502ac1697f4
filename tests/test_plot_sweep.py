"""The sweep plots (aisimulate_core.viz.sweep) on ledger points made from real runs."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from aisimulate_core import run_replay
from aisimulate_core.viz import PlotError, plot_goal_vs_axis, plot_pareto
from tests.plot_support import assert_plausible_png, loaded_poisson

AXIS = "spec.topology.workers.initial_workers"
GOAL = "goodput_completed_requests"


@pytest.fixture(scope="module")
def ledger():
    """Points as a sweep's ledger keeps them: overrides, summary keys, status; one failed."""
    points = []
    for rate in (200.0, 400.0):
        for workers in (3, 1, 2):
            summary = run_replay(loaded_poisson(workers, rate=rate)).summary
            points.append({"overrides": {AXIS: workers, "traffic.request_rate": rate},
                           "summary": summary, "status": "ok"})
    points.append({"overrides": {AXIS: 4, "traffic.request_rate": 400.0}, "status": "failed",
                   "error": "$.spec: boom"})
    return points


def test_goal_vs_axis_draws_one_sorted_line_per_other_override(ledger, tmp_path):
    plot = plot_goal_vs_axis(ledger, AXIS, GOAL, sla_line=110, chosen=ledger[2],
                             path=tmp_path / "goal.png")
    assert_plausible_png(plot.path)
    lines = plot.series["lines"]
    assert [line["label"] for line in lines] == ["request_rate=200.0", "request_rate=400.0"]
    for line, first in zip(lines, (0, 3)):
        assert line["x"] == [1, 2, 3]
        by_workers = {p["overrides"][AXIS]: p["summary"][GOAL] for p in ledger[first:first + 3]}
        assert line["y"] == [by_workers[1], by_workers[2], by_workers[3]]
    # more workers keep more requests within the TTFT SLA on this load
    assert lines[1]["y"][0] < lines[1]["y"][2]
    assert plot.series["failed"] == [{"label": "request_rate=400.0", "x": 4}]
    assert plot.series["sla"] == 110
    assert plot.series["chosen"] == {"x": 2, "y": ledger[2]["summary"][GOAL]}


def test_goal_vs_axis_on_a_text_axis_and_a_flat_point(tmp_path, ledger):
    points = [{"overrides": {"preset": name}, GOAL: p["summary"][GOAL]}
              for name, p in zip(("tp1", "tp4", "tp2"), ledger)]
    plot = plot_goal_vs_axis(points, "preset", GOAL, None, 1, tmp_path / "text.png")
    assert_plausible_png(plot.path)
    assert plot.series["lines"][0]["x"] == ["tp1", "tp4", "tp2"]  # order of appearance
    assert plot.series["chosen"] == {"x": "tp4", "y": ledger[1]["summary"][GOAL]}


def test_pareto_keeps_the_given_front_sorted_and_counts_failures(ledger, tmp_path):
    x_key, y_key = "output_throughput_tok_s", "mean_output_token_throughput_per_user"
    front = [4, ledger[0]]
    plot = plot_pareto(ledger, x_key, y_key, front, chosen=0, path=tmp_path / "pareto.png")
    assert_plausible_png(plot.path)
    ran = ledger[:6]
    assert plot.series["points"] == {"x": [p["summary"][x_key] for p in ran],
                                     "y": [p["summary"][y_key] for p in ran]}
    members = sorted((p["summary"][x_key], p["summary"][y_key]) for p in (ledger[4], ledger[0]))
    assert list(zip(plot.series["front"]["x"], plot.series["front"]["y"])) == members
    assert plot.series["failed"] == 1
    chosen = plot.series["chosen"]
    assert (chosen["x"], chosen["y"]) == (ledger[0]["summary"][x_key], ledger[0]["summary"][y_key])
    assert chosen["label"] == f"initial_workers=3, request_rate=200.0"


def test_nothing_to_draw_is_one_clear_error(tmp_path):
    with pytest.raises(PlotError, match="no point has a value for 'missing'"):
        plot_goal_vs_axis([{"status": "ok"}], "missing", GOAL, None, None, tmp_path / "x.png")
    with pytest.raises(PlotError, match="outside the 1 points"):
        plot_pareto([{"a": 1, "b": 2}], "a", "b", [3], None, tmp_path / "y.png")
