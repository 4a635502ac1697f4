"""The README's capacity question (examples/sweeps/capacity_mooncake_qwen3_32b.json) on the first
minute of the Mooncake trace (goal 80 % within SLA): its bisection over shape families chooses
what an exhaustive grid over the same space chooses. (bench/capacity_question.py checks the
whole trace at the README's 90 %.)"""

import json
import shutil

import attrs
import pytest

from aisimulate_core.api import run_replay
from aisimulate_core.overrides import override_from
from aisimulate_core.sweep import load_sweep, run_sweep
from aisimulate_core.sweep.executors import LocalExecutor
from aisimulate_core.sweep.goals import feasible
from aisimulate_core.sweep.point import point_document
from reference import ROOT

TRACE = ROOT.parent / "shared/data/mooncake/conversation_trace.jsonl"
MINUTE = override_from("spec.max_sim_time_ms", 60_000.0)
GOAL = 0.8
OPTIONS = (True, ())

pytest.importorskip("aisimulate_aic_timing")


def question(tmp_path, policy):
    """The README's sweep file with ``policy``, cut to the first minute of the trace."""
    if not TRACE.is_file():
        pytest.skip(f"the shared Mooncake trace is not beside the checkout ({TRACE})")
    document = json.loads((ROOT / "examples/sweeps/capacity_mooncake_qwen3_32b.json").read_text())
    document["base"]["traffic"]["trace_path"] = str(TRACE.resolve())
    # in a minute, the requests still running at its end count as missing the SLA: a lower bar
    document["goal"]["min_good_fraction"] = GOAL
    if policy == "grid":
        document["search"] = {"policy": "grid"}
    path = tmp_path / f"{policy}.json"
    path.write_text(json.dumps(document))
    spec = load_sweep(path)
    return attrs.evolve(spec, fixed=(*spec.fixed, MINUTE))


def test_the_search_answers_what_the_exhaustive_grid_answers(tmp_path):
    executor = LocalExecutor(2, OPTIONS)
    try:
        grid = run_sweep(question(tmp_path, "grid"), executor, jobs=2, plots=False)
        assert len(grid.rows) == grid.spec.size == 83
        assert all(row["status"] == "ok" for row in grid.rows), [r["error"] for r in grid.rows]
        shapes = grid.spec.axes[0].values
        fractions = {row["overrides"]["deployment"]: row["good_fraction"] for row in grid.rows}
        # the exhaustive answer, from the grid's rows: the fewest GPUs meeting the goal
        feasible_rows = [row for row in grid.rows if feasible(row, grid.spec.goal)]
        assert feasible_rows and len(feasible_rows) < len(grid.rows)  # the goal cuts the space
        fewest = min(row["gpus"] for row in feasible_rows)
        assert grid.chosen["gpus"] == fewest
        per_family = {}
        for shape in sorted(shapes, key=lambda s: s.scale):
            per_family.setdefault(shape.family, None)
            if per_family[shape.family] is None and fractions[shape.name] >= GOAL:
                per_family[shape.family] = shape.name

        # bisection, with the grid's ledger: it reads the points it probes from there
        search_spec = question(tmp_path, "bisect")
        search_spec.output.mkdir(parents=True)
        shutil.copyfile(grid.spec.output / "ledger.jsonl", search_spec.output / "ledger.jsonl")
        search = run_sweep(search_spec, executor, jobs=2, plots=False)
    finally:
        executor.close()
    assert search.reused == len(search.rows) < len(grid.rows) / 2
    assert search.chosen["overrides"] == grid.chosen["overrides"]
    assert {m["others"]["family"]: m["minimum"] for m in search.details["bisect"]["minima"]} \
        == per_family

    # the grid's chosen point is what a bare run of its payload gives
    index = [s.name for s in shapes].index(grid.chosen["overrides"]["deployment"])
    document = point_document(grid.spec.base, grid.spec.fixed, grid.spec.axes, (index,))
    summary = run_replay(document).summary
    assert summary["goodput_completed_requests"] / summary["num_requests"] == grid.chosen["good_fraction"]
