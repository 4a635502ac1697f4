"""A sweep run: points through an executor into the ledger, a search policy, the outputs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

import attrs

from aisimulate_core.overrides import override_from
from aisimulate_core.sweep.goals import choose, derived, goal_metric, pareto_front
from aisimulate_core.sweep.ledger import Ledger, write_csv, write_json
from aisimulate_core.sweep.point import (TraceDigests, payload_hash, point_document,
                                         point_overrides)
from aisimulate_core.sweep.search import POLICIES
from aisimulate_core.sweep.spec import DEPLOYMENT, SweepSpec


@attrs.define
class Progress:
    """What the progress line shows; ``update`` is called after every point."""

    done: int = 0
    failed: int = 0
    reused: int = 0
    expected: int = 0
    started: float = attrs.field(factory=time.monotonic)


class Sweep:
    """The points evaluated so far (by grid index), the ledger, the executor."""

    def __init__(self, spec: SweepSpec, executor, *, jobs: int, retry_failed: bool = False,
                 on_progress: Callable[[Progress], None] | None = None,
                 digests: TraceDigests | None = None) -> None:
        self.spec = spec
        self.executor = executor
        self.jobs = max(1, jobs)
        self.retry_failed = retry_failed
        self.on_progress = on_progress
        self.digests = digests or TraceDigests()
        self.ledger = Ledger(spec.output)
        self.rows_by_point: dict[tuple, dict] = {}
        self.documents: dict[tuple, dict] = {}
        self.progress = Progress()
        self._strides = []
        stride = 1
        for axis in reversed(spec.axes):
            self._strides.insert(0, stride)
            stride *= len(axis.values)

    @property
    def expected(self) -> int:
        return self.progress.expected

    @expected.setter
    def expected(self, count: int) -> None:
        self.progress.expected = count

    def index(self, point: tuple) -> int:
        return sum(i * s for i, s in zip(point, self._strides))

    def _labels(self, point: tuple) -> tuple:
        labels = list(self.spec.fixed)
        for axis, i in zip(self.spec.axes, point):
            if not axis.is_deployment:
                labels.append(override_from(axis.name, axis.values[i], "axis"))
        return tuple(labels)

    def _row(self, point: tuple, digest: str, result: dict) -> dict:
        row = {"point": self.index(point), "payload_hash": digest,
               "overrides": point_overrides(self.spec.axes, point),
               "status": result["status"], "error": result["error"],
               "wall_time_s": result["wall_time_s"], "gpus": result["gpus"],
               "kv_blocks": result["kv_blocks"]}
        row.update(derived(result["summary"], result["gpus"]))
        row["summary"] = result["summary"]
        return row

    def _count(self, row: dict, reused: bool = False) -> None:
        self.progress.done += 1
        self.progress.failed += row["status"] != "ok"
        self.progress.reused += reused
        if self.on_progress is not None:
            self.on_progress(self.progress)

    def evaluate(self, points: list[tuple]) -> list[dict]:
        """The rows of ``points``: from memory, from the ledger, or run now (in parallel)."""
        waiting: dict[str, list[tuple]] = {}
        tasks = []
        for point in dict.fromkeys(points):
            if point in self.rows_by_point:
                continue
            document = point_document(self.spec.base, self.spec.fixed, self.spec.axes, point)
            self.documents[point] = document
            digest = payload_hash(document, self.digests)
            old = self.ledger.rows.get(digest)
            if old is not None and (old.get("status") == "ok" or not self.retry_failed):
                row = {**old, "point": self.index(point),
                       "overrides": point_overrides(self.spec.axes, point)}
                self.rows_by_point[point] = row
                self._count(row, reused=True)
                continue
            if digest not in waiting:
                tasks.append((digest, document, self._labels(point)))
            waiting.setdefault(digest, []).append(point)
        for digest, result in self.executor.run(tasks):
            for n, point in enumerate(waiting[digest]):
                row = self._row(point, digest, result)
                if n == 0:
                    self.ledger.append(row)
                self.rows_by_point[point] = row
                self._count(row)
        return [self.rows_by_point[point] for point in points]

    def rows(self) -> list[dict]:
        return sorted(self.rows_by_point.values(), key=lambda row: row["point"])


@attrs.frozen
class SweepResult:
    spec: SweepSpec
    rows: list
    chosen: dict | None
    front: list
    details: dict
    wall_time_s: float
    reused: int
    files: dict  # what was written: name -> path


def run_sweep(spec: SweepSpec, executor, *, jobs: int, retry_failed: bool = False,
              on_progress: Callable[[Progress], None] | None = None,
              plots: bool = True, on_warning: Callable[[str], None] | None = None) -> SweepResult:
    """Search the sweep's grid with its policy, keep every point in the ledger, write the
    outputs into ``spec.output``; returns what was found."""
    started = time.perf_counter()
    sweep = Sweep(spec, executor, jobs=jobs, retry_failed=retry_failed, on_progress=on_progress)
    try:
        details = POLICIES[spec.search.policy](sweep)
    finally:
        sweep.ledger.close()
    rows = sweep.rows()
    chosen = choose(rows, spec.goal)
    front = pareto_front(rows, spec.goal) if spec.goal.kind == "pareto" else []
    point_of = {sweep.index(p): p for p in sweep.rows_by_point}
    files = write_outputs(spec, rows, chosen, front, details,
                          sweep.documents.get(point_of.get(chosen["point"])) if chosen else None,
                          getattr(executor, "plugin_options", (True, ())), on_warning)
    if plots:
        files.update(write_plots(spec, rows, chosen, front, on_warning))
    return SweepResult(spec, rows, chosen, front, details, time.perf_counter() - started,
                       sweep.progress.reused, files)


def describe_goal(spec: SweepSpec) -> dict[str, Any]:
    goal = spec.goal
    out: dict[str, Any] = {"kind": goal.kind, "min_good_fraction": goal.min_good_fraction}
    if goal.kind == "pareto":
        out.update(metrics=list(goal.metrics), directions=list(goal.directions))
    else:
        out["metric"] = goal_metric(goal)
    return out


def write_outputs(spec: SweepSpec, rows: list, chosen: dict | None, front: list,
                  details: dict, chosen_document: dict | None, plugin_options: tuple = (True, ()),
                  on_warning: Callable[[str], None] | None = None) -> dict[str, Path]:
    out = spec.output
    axes = [axis.name for axis in spec.axes]
    files = {"ledger": out / "ledger.jsonl", "csv": out / "results.csv", "json": out / "results.json"}
    write_csv(files["csv"], rows, axes)
    write_json(files["json"], {
        "sweep": str(spec.path), "axes": axes, "goal": describe_goal(spec),
        "search": attrs.asdict(spec.search), **details,
        "chosen": None if chosen is None else chosen["point"],
        "front": [row["point"] for row in front] if spec.goal.kind == "pareto" else None,
        "points": rows})
    chosen_dir = out / "chosen"
    if chosen is not None and chosen_document is not None:
        files.update(write_chosen(chosen_dir, chosen, chosen_document, plugin_options, on_warning))
    else:  # a rerun that finds nothing must not leave an earlier answer standing
        for name in CHOSEN_FILES:
            (chosen_dir / name).unlink(missing_ok=True)
    if spec.goal.kind == "pareto":
        files["front"] = out / "front.json"
        write_json(files["front"], front)
    return files


CHOSEN_FILES = ("payload.json", "report.json", "point.json")


def write_chosen(directory: Path, chosen: dict, document: dict, plugin_options: tuple,
                 on_warning: Callable[[str], None] | None) -> dict[str, Path]:
    """``payload.json``; ``report.json``, the report ``aisimulate run --output`` writes (when
    the payload keeps per-request records, the point is run once more here to get them; not
    again while the chosen point stays the same); ``point.json``, its ledger row."""
    from aisimulate_core.errors import AisimError
    from aisimulate_core.sweep.point import plugin_manager

    directory.mkdir(exist_ok=True)
    files = {"chosen_payload": directory / "payload.json",
             "chosen_report": directory / "report.json", "chosen_point": directory / "point.json"}
    try:
        before = json.loads(files["chosen_point"].read_text(encoding="utf-8")).get("payload_hash")
    except (OSError, ValueError, AttributeError):
        before = None
    write_json(files["chosen_payload"], document)
    if before != chosen["payload_hash"] or not files["chosen_report"].exists():
        report_json = None
        try:
            from aisimulate_core.api import run_replay
            from aisimulate_core.spec import load_payload

            payload = load_payload(document)
            if payload.spec.record_per_request:
                report_json = run_replay(payload, plugin_manager=plugin_manager(plugin_options)).to_json()
        except AisimError as error:
            if on_warning is not None:
                on_warning(f"chosen/report.json has no per-request records: {str(error).splitlines()[0]}")
        if report_json is None:
            write_json(files["chosen_report"], chosen["summary"])
        else:
            temp = files["chosen_report"].with_name(".report.json.tmp")
            temp.write_text(report_json, encoding="utf-8")
            os.replace(temp, files["chosen_report"])
    write_json(files["chosen_point"], {k: v for k, v in chosen.items() if k != "summary"})
    return files


def plot_axis(spec: SweepSpec) -> str:
    """The axis a goal plot runs along: bisect's, else the first numeric axis, else the first."""
    if spec.search.axis is not None:
        return spec.search.axis
    for axis in spec.axes:
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in axis.values):
            return axis.name
    return spec.axes[0].name


def family_points(spec: SweepSpec, rows: list) -> list[dict]:
    """The rows as the goal plot takes them when it runs along GPUs: each point's deployment
    shape replaced by its family (``agg tp4``), so that a family is one line."""
    shapes = {shape.name: shape for axis in spec.axes if axis.is_deployment for shape in axis.values}
    points = []
    for row in rows:
        overrides = {}
        for key, label in row["overrides"].items():
            if key == DEPLOYMENT and label in shapes:
                overrides["family"] = shapes[label].family
            else:
                overrides[key] = label
        points.append({**row, "overrides": overrides})
    return points


def write_plots(spec: SweepSpec, rows: list, chosen: dict | None, front: list,
                on_warning: Callable[[str], None] | None) -> dict[str, Path]:
    """The goal against the swept axis (the share of requests within SLA, with the goal's
    line, when the goal sets one), and for pareto the front; a missing matplotlib is one
    warning naming the extra, not a failure."""
    from aisimulate_core.errors import AisimError
    from aisimulate_core.viz import plot_goal_vs_axis, plot_pareto

    files = {}
    goal = spec.goal
    try:
        if goal.kind == "pareto":
            path = spec.output / "pareto.png"
            plot_pareto(rows, goal.metrics[0], goal.metrics[1], front, chosen, path)
            files["pareto_plot"] = path
        if any(row.get("status") == "ok" for row in rows):
            metric = ("good_fraction" if goal.min_good_fraction is not None
                      else goal_metric(goal) or goal.metrics[0])
            if metric:
                path = spec.output / "goal.png"
                axis, points, chosen_point = plot_axis(spec), rows, chosen
                if axis == DEPLOYMENT:  # against GPUs, one line per shape family
                    axis, points = "gpus", family_points(spec, rows)
                    chosen_point = next((p for p, row in zip(points, rows) if row is chosen), None)
                plot_goal_vs_axis(points, axis, metric, goal.min_good_fraction,
                                  chosen_point, path)
                files["goal_plot"] = path
    except AisimError as error:
        if on_warning is not None:
            on_warning(f"no plot: {str(error).splitlines()[0]}")
    return files


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


__all__ = ["Progress", "Sweep", "SweepResult", "default_jobs", "run_sweep"]
