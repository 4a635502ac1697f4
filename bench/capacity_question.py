"""The README's capacity question, checked against an exhaustive grid over the same space.

    .venv/bin/python bench/capacity_question.py [--jobs N] [--set PATH=VALUE ...] [--out DIR]

Runs ``aisimulate sweep examples/sweeps/capacity_mooncake_qwen3_32b.json`` as the README prints it
(bisection on worker counts, per shape family), then the same sweep file with
``"search": {"policy": "grid"}``: every point of the space. Prints both tables and asserts
that both choose the same deployment, and that bisection's smallest feasible shape of every
family is the grid's. The grid starts from a copy of the search's ledger (a point is the
same payload, so its result is the same; ``--fresh`` runs every grid point again), so it
only runs the points bisection skipped. Outputs go to bench/results/capacity/{search,grid}.

``--set spec.max_sim_time_ms=120000`` asks the same question of the first two minutes of
the trace (what tests/test_capacity_question.py does, in-process).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ROOT / "examples/sweeps/capacity_mooncake_qwen3_32b.json"


def run(sweep_file: Path, out: Path, jobs: str | None, overrides: list[str]) -> dict:
    command = [str(ROOT / ".venv/bin/aisimulate"), "sweep", str(sweep_file), "--out", str(out),
               *(["--jobs", jobs] if jobs else []), *(f"--set={o}" for o in overrides)]
    print("$", " ".join(command[1:]), flush=True)
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    print(done.stdout, flush=True)
    if done.returncode != 0:
        sys.exit(f"capacity_question: the sweep exited {done.returncode}")
    return json.loads((out / "results.json").read_text())


def minima(results: dict) -> dict:
    """{family: smallest feasible shape} from a grid's or a bisection's results."""
    from aisimulate_core.sweep import load_sweep
    from aisimulate_core.sweep.goals import feasible

    spec = load_sweep(results["sweep"])
    shapes = spec.axes[0].values
    found: dict = {}
    rows = {row["overrides"]["deployment"]: row for row in results["points"]}
    for shape in sorted(shapes, key=lambda s: s.scale):
        found.setdefault(shape.family, None)
        row = rows.get(shape.name)
        if found[shape.family] is None and row is not None and feasible(row, spec.goal):
            found[shape.family] = shape.name
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", "-j")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE")
    parser.add_argument("--out", default=str(ROOT / "bench/results/capacity"))
    parser.add_argument("--fresh", action="store_true",
                        help="run every grid point, not only those the search skipped")
    args = parser.parse_args()
    out = Path(args.out)
    search = run(SWEEP, out / "search", args.jobs, args.set)

    document = json.loads(SWEEP.read_text())
    document["search"] = {"policy": "grid"}
    grid_file = out / "capacity_grid.json"
    grid_file.write_text(json.dumps(document, indent=1))
    ledger = out / "grid" / "ledger.jsonl"
    if not args.fresh and not ledger.exists():
        ledger.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "search" / "ledger.jsonl", ledger)
    grid = run(grid_file, out / "grid", args.jobs, args.set)

    def chosen(results):
        index = results["chosen"]
        row = next((r for r in results["points"] if r["point"] == index), None)
        return None if row is None else row["overrides"]["deployment"]

    by_search, by_grid = chosen(search), chosen(grid)
    print(f"search ({len(search['points'])} points) chose {by_search}; "
          f"grid ({len(grid['points'])} points) chose {by_grid}")
    assert by_search == by_grid, (by_search, by_grid)
    search_minima = {m["others"]["family"]: m["minimum"] for m in search["bisect"]["minima"]}
    grid_minima = minima(grid)
    for family, shape in grid_minima.items():
        print(f"  {family:<22} grid: {shape or 'none':<22} bisect: {search_minima.get(family) or 'none'}")
    assert search_minima == grid_minima, (search_minima, grid_minima)
    print("OK: the search's answer is the exhaustive grid's")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
