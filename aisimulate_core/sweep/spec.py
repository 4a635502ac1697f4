"""The sweep file: a base payload, fixed overrides, axes, a goal, a search policy.

JSON (or YAML, where PyYAML is installed: the ``sweep`` extra). Every problem is one line
``FILE: $.field: rule, got VALUE``, all of them at once.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import attrs

from aisimulate_core.errors import ConfigError
from aisimulate_core.messages import escape_controls
from aisimulate_core.overrides import override_from, OverrideError

SWEEP_EXTRA = "aisimulate-core[sweep]"
DEPLOYMENT = "deployment"
GOALS = ("min_gpus", "max_throughput_per_gpu", "max_goodput", "pareto")
POLICIES = ("grid", "bisect", "optuna")
SAMPLERS = ("tpe", "nsga2")
DEFAULT_TRIALS = 50
MAX_POINTS = 1_000_000
_TOP_FIELDS = {"base", "set", "axes", "goal", "search", "output"}


class SweepError(ConfigError):
    """The sweep file breaks a rule; one ``FILE: $.path: rule`` line per problem."""


@attrs.frozen
class Shape:
    """A deployment shape: aggregated ``workers`` x (tp, dp), or prefill and decode pools."""

    name: str
    kind: str  # "aggregated" | "disaggregated"
    pools: tuple  # ((workers, tp, dp),) or ((P, tp, dp), (D, tp, dp))
    # a generator's prefill_workers x decode_workers shape: prefill workers over a fixed decode pool
    grows_prefill: bool = False

    @property
    def scale(self) -> int:
        """Where this shape stands in its family: the workers of an aggregated shape, the
        prefill workers of a ``prefill_workers`` shape, else gcd(P, D)."""
        if self.grows_prefill:
            return self.pools[0][0]
        return math.gcd(*(pool[0] for pool in self.pools))

    @property
    def family(self) -> str:
        """The shapes that differ from this one only in scale: ``agg tp4``, ``disagg 3:1
        tp4+tp1`` (P:D reduced), ``disagg Pxtp4+1xtp2`` (a fixed decode pool). Within a family,
        more workers never serve fewer requests within SLA, which bisect on a deployment axis
        relies on."""
        def sizes(tp, dp):
            return f"tp{tp}" + (f"xdp{dp}" if dp != 1 else "")
        if self.kind == "aggregated":
            return "agg " + sizes(*self.pools[0][1:])
        (p, ptp, pdp), (d, dtp, ddp) = self.pools
        if self.grows_prefill:
            return f"disagg Px{sizes(ptp, pdp)}+{d}x{sizes(dtp, ddp)}"
        k = self.scale
        return f"disagg {p // k}:{d // k} {sizes(ptp, pdp)}+{sizes(dtp, ddp)}"


@attrs.frozen
class Axis:
    name: str  # a payload path, or "deployment"
    values: tuple  # JSON values, or Shapes for the deployment axis

    @property
    def is_deployment(self) -> bool:
        return self.name == DEPLOYMENT

    def label(self, index: int) -> Any:
        value = self.values[index]
        return value.name if isinstance(value, Shape) else value


@attrs.frozen
class Goal:
    kind: str
    min_good_fraction: float | None = None
    metric: str | None = None  # max_goodput's (default goodput_request_throughput_rps)
    metrics: tuple = ()  # pareto's two
    directions: tuple = ()  # "max" | "min" each


@attrs.frozen
class Search:
    policy: str = "grid"
    axis: str | None = None  # bisect's
    trials: int | None = None  # optuna's
    seed: int = 0
    sampler: str | None = None


@attrs.frozen
class SweepSpec:
    path: Path  # the sweep file
    base: dict  # the base payload document (trace paths as written, read from the cwd)
    fixed: tuple  # Overrides applied to every point before its own
    axes: tuple  # Axis
    goal: Goal
    search: Search
    output: Path

    @property
    def size(self) -> int:
        return math.prod(len(axis.values) for axis in self.axes)

    def points(self):
        """Every point of the grid as a tuple of value indices, the last axis fastest."""
        return itertools.product(*(range(len(axis.values)) for axis in self.axes))


def _show(value: Any) -> str:
    from aisimulate_core.spec.converter import show

    return show(value)


def read_document(path: Path) -> Any:
    """A sweep (or payload) file as parsed JSON or YAML (by extension)."""
    shown = escape_controls(str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SweepError(f"cannot read {shown}: no such file") from None
    except IsADirectoryError:
        raise SweepError(f"cannot read {shown}: is a directory") from None
    except (OSError, UnicodeDecodeError) as error:
        raise SweepError(f"cannot read {shown}: {getattr(error, 'strerror', None) or error}") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise SweepError(f"{shown}: a YAML sweep file needs PyYAML, which is not installed: "
                             f"pip install '{SWEEP_EXTRA}' (or write the file as JSON)") from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            raise SweepError(f"{shown}: $: invalid YAML: "
                             f"{escape_controls(str(getattr(error, 'problem', error)))}{where}") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise SweepError(f"{shown}: $: invalid JSON: {error.msg} (line {error.lineno}, "
                         f"column {error.colno})") from None
    except ValueError as error:
        raise SweepError(f"{shown}: $: invalid JSON: {error}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class _Problems:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, path: str, rule: str, value: Any = attrs.NOTHING) -> None:
        self.lines.append(f"{path}: {rule}" if value is attrs.NOTHING
                          else f"{path}: {rule}, got {_show(value)}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def load_sweep(path: str | Path, output: str | Path | None = None) -> SweepSpec:
    """The sweep file at ``path``, checked; SweepError listing every problem."""
    path = Path(path)
    data = read_document(path)
    shown = escape_controls(str(path))
    problems = _Problems()
    if type(data) is not dict:
        raise SweepError(f"{shown}: $: expected an object, got {_show(data)}")
    for key in data:
        if key not in _TOP_FIELDS:
            problems.add(f"$.{key}", f"unknown field (expected one of {', '.join(sorted(_TOP_FIELDS))})")
    base = _base(data.get("base"), path, problems)
    fixed = _fixed(data.get("set", {}), problems)
    axes = _axes(data.get("axes"), problems)
    goal = _goal(data.get("goal"), problems)
    search = _search(data.get("search", {}), axes, goal, problems)
    out = data.get("output")
    if out is not None and (not isinstance(out, str) or not out):
        problems.add("$.output", "must be a directory path", out)
        out = None
    if problems.lines:
        raise SweepError("\n".join(f"{shown}: {line}" for line in sorted(problems.lines)))
    size = math.prod(len(axis.values) for axis in axes)
    if size > MAX_POINTS:
        raise SweepError(f"{shown}: $.axes: the grid has {size:,} points, more than {MAX_POINTS:,}")
    if output is not None:
        out_dir = Path(output)
    elif out is not None:
        out_dir = path.parent / out
    else:
        out_dir = path.parent / f"{path.stem}.results"
    return SweepSpec(path, base, fixed, tuple(axes), goal, search, out_dir)


def _base(base: Any, path: Path, problems: _Problems) -> dict:
    if isinstance(base, str) and base:
        try:
            document = read_document(path.parent / base)
        except SweepError as error:
            problems.add("$.base", str(error))
            return {}
        if type(document) is not dict:
            problems.add("$.base", "the payload must be a JSON object")
            return {}
        return document
    if type(base) is dict:
        return base
    problems.add("$.base", "is required: a payload file (relative to the sweep file) or an "
                 "inline payload object" if base is None else
                 "must be a payload file name or a payload object", *(() if base is None else (base,)))
    return {}


def _fixed(fixed: Any, problems: _Problems) -> tuple:
    if type(fixed) is not dict:
        problems.add("$.set", "must be an object of {payload path: value}", fixed)
        return ()
    out = []
    for key, value in fixed.items():
        try:
            out.append(override_from(key, value, "set"))
        except OverrideError as error:
            problems.add(f"$.set[{json.dumps(key)}]", str(error).split(": ", 1)[-1])
    return tuple(out)


def _axes(axes: Any, problems: _Problems) -> list[Axis]:
    if type(axes) is not dict or not axes:
        problems.add("$.axes", "must be a non-empty object of {payload path or 'deployment': "
                     "values}", axes)
        return []
    out = []
    for name, spec in axes.items():
        where = f"$.axes[{json.dumps(name)}]"
        if name == DEPLOYMENT:
            values = _shapes(spec, where, problems)
        else:
            try:
                override_from(name, None)
            except OverrideError as error:
                problems.add(where, str(error).split(": ", 1)[-1])
                continue
            values = _values(spec, where, problems)
        if values:
            if len({json.dumps(v.name if isinstance(v, Shape) else v, sort_keys=True)
                    for v in values}) != len(values):
                problems.add(where, "has a value twice")
            out.append(Axis(name, tuple(values)))
    return out


def _values(spec: Any, where: str, problems: _Problems) -> list:
    if type(spec) is list:
        if not spec:
            problems.add(where, "must list at least one value")
        return spec
    if type(spec) is dict and set(spec) <= {"from", "to", "step"} and {"from", "to"} <= set(spec):
        start, stop, step = spec["from"], spec["to"], spec.get("step", 1)
        if not all(_is_number(v) for v in (start, stop, step)) or step <= 0 or stop < start:
            problems.add(where, "a range needs numbers from <= to and step > 0", spec)
            return []
        count = int(math.floor((stop - start) / step + 1e-9)) + 1
        if count > MAX_POINTS:
            problems.add(where, f"a range of more than {MAX_POINTS:,} values", spec)
            return []
        integral = all(_is_int(v) for v in (start, stop, step))
        return [start + i * step if integral else round(start + i * step, 12) for i in range(count)]
    problems.add(where, 'must be a list of values or a range {"from": A, "to": B, "step": S} '
                 "(both ends included)", spec)
    return []


# -- deployment shapes ---------------------------------------------------------------------

_POOL = r"(\d+)(?:x?tp(\d+))?(?:x?dp(\d+))?"
_AGG = re.compile(rf"agg(?:regated)?:{_POOL}\Z", re.IGNORECASE)
_DISAGG = re.compile(rf"disagg(?:regated)?:{_POOL}\+{_POOL}\Z", re.IGNORECASE)


def shape_name(kind: str, pools: tuple) -> str:
    def pool(workers, tp, dp):
        return f"{workers}" + (f"xtp{tp}" if tp != 1 else "") + (f"xdp{dp}" if dp != 1 else "")
    if kind == "aggregated":
        return "agg:" + pool(*pools[0])
    return "disagg:" + pool(*pools[0]) + "+" + pool(*pools[1])


def _pool(workers: Any, tp: Any, dp: Any) -> tuple | None:
    values = (workers, 1 if tp is None else tp, 1 if dp is None else dp)
    if all(_is_int(v) and v > 0 for v in values):
        return tuple(values)
    return None


def parse_shape(value: Any) -> Shape | None:
    """``agg:4xtp2``, ``disagg:1xtp2+2`` (prefill + decode pools), or the same as an object."""
    if isinstance(value, str):
        if match := _AGG.match(value.strip()):
            pools = (_pool(*(None if g is None else int(g) for g in match.groups())),)
            kind = "aggregated"
        elif match := _DISAGG.match(value.strip()):
            groups = [None if g is None else int(g) for g in match.groups()]
            pools = (_pool(*groups[:3]), _pool(*groups[3:]))
            kind = "disaggregated"
        else:
            return None
    elif type(value) is dict and value.get("kind") == "aggregated" and set(value) <= {"kind", "workers", "tp", "dp"}:
        kind, pools = "aggregated", (_pool(value.get("workers"), value.get("tp"), value.get("dp")),)
    elif type(value) is dict and value.get("kind") == "disaggregated" and set(value) <= {"kind", "prefill", "decode"}:
        kind, pools = "disaggregated", tuple(
            _pool(role.get("workers"), role.get("tp"), role.get("dp"))
            if type(role := value.get(name)) is dict and set(role) <= {"workers", "tp", "dp"} else None
            for name in ("prefill", "decode"))
    else:
        return None
    if any(pool is None for pool in pools):
        return None
    return Shape(shape_name(kind, pools), kind, pools)


def _ints(spec: Any, where: str, problems: _Problems, default: list | None = None) -> list[int]:
    if spec is None and default is not None:
        return default
    values = _values(spec, where, problems) if spec is not None else []
    if spec is None or not all(_is_int(v) and v > 0 for v in values):
        problems.add(where, "must be positive integers (a list or a range)", spec)
        return []
    return values


def _ratio(text: Any) -> tuple[int, int] | None:
    if isinstance(text, str) and (match := re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)):
        p, d = int(match.group(1)), int(match.group(2))
        return (p, d) if p > 0 and d > 0 else None
    return None


def _shapes(spec: Any, where: str, problems: _Problems) -> list[Shape]:
    """A list of shapes, or generators: ``{"aggregated": {"workers", "tp", "dp"},
    "disaggregated": {"ratios": ["1:2"], "scale": [1, 2] | "prefill_workers": [1, 2],
    "decode_workers": [1], "tp" | "prefill_tp"/"decode_tp",
    "dp" | "prefill_dp"/"decode_dp"}}``."""
    shapes: list[Shape] = []
    if type(spec) is list and spec:
        for i, value in enumerate(spec):
            shape = parse_shape(value)
            if shape is None:
                problems.add(f"{where}[{i}]", "a shape is 'agg:N[xtpT][xdpD]', "
                             "'disagg:P[xtpT][xdpD]+D[xtpT][xdpD]' or an object "
                             '{"kind": "aggregated", "workers", "tp", "dp"}', value)
            else:
                shapes.append(shape)
        return shapes
    if type(spec) is not dict or not set(spec) - {"max_gpus"} or \
            not set(spec) <= {"aggregated", "disaggregated", "max_gpus"}:
        problems.add(where, "must be a list of shapes or an object with 'aggregated' and/or "
                     "'disaggregated' generators (and 'max_gpus')", spec)
        return shapes
    budget = spec.get("max_gpus")
    if budget is not None and not (_is_int(budget) and budget > 0):
        problems.add(f"{where}.max_gpus", "must be a positive integer", budget)
        budget = None
    agg = spec.get("aggregated")
    if agg is not None:
        at = f"{where}.aggregated"
        if type(agg) is not dict or not set(agg) <= {"workers", "tp", "dp"}:
            problems.add(at, "must be an object with workers, tp, dp", agg)
        else:
            for tp, dp, workers in itertools.product(
                    _ints(agg.get("tp"), f"{at}.tp", problems, [1]),
                    _ints(agg.get("dp"), f"{at}.dp", problems, [1]),
                    _ints(agg.get("workers"), f"{at}.workers", problems)):
                pools = ((workers, tp, dp),)
                shapes.append(Shape(shape_name("aggregated", pools), "aggregated", pools))
    dis = spec.get("disaggregated")
    if dis is not None:
        at = f"{where}.disaggregated"
        keys = {"ratios", "scale", "prefill_workers", "decode_workers", "tp", "dp", "prefill_tp",
                "decode_tp", "prefill_dp", "decode_dp"}
        if type(dis) is not dict or not set(dis) <= keys:
            problems.add(at, f"must be an object with {', '.join(sorted(keys))}", dis)
            return shapes
        counts = "prefill_workers" in dis or "decode_workers" in dis
        if counts and ("ratios" in dis or "scale" in dis):
            problems.add(at, "takes ratios and scale, or prefill_workers and decode_workers, "
                         "not both")
            return shapes
        if counts:  # every P x D pair; bisect grows P over each decode pool
            prefill = _ints(dis.get("prefill_workers"), f"{at}.prefill_workers", problems)
            parsed = [(p, d) for d in _ints(dis.get("decode_workers"), f"{at}.decode_workers", problems)
                      for p in prefill]
            scales = [1]
        else:
            ratios = dis.get("ratios")
            parsed = [_ratio(r) for r in ratios] if type(ratios) is list and ratios else [None]
            if None in parsed:
                problems.add(f"{at}.ratios", "must list prefill:decode ratios such as '1:2'", ratios)
                return shapes
            scales = _ints(dis.get("scale"), f"{at}.scale", problems, [1])
        both_tp = _ints(dis.get("tp"), f"{at}.tp", problems, [1])
        both_dp = _ints(dis.get("dp"), f"{at}.dp", problems, [1])
        ptp = _ints(dis.get("prefill_tp"), f"{at}.prefill_tp", problems, both_tp)
        dtp = _ints(dis.get("decode_tp"), f"{at}.decode_tp", problems, both_tp)
        pdp = _ints(dis.get("prefill_dp"), f"{at}.prefill_dp", problems, both_dp)
        ddp = _ints(dis.get("decode_dp"), f"{at}.decode_dp", problems, both_dp)
        tied = "prefill_tp" not in dis and "decode_tp" not in dis
        tied_dp = "prefill_dp" not in dis and "decode_dp" not in dis
        for (p, d), k, pt, dt, pd, dd in itertools.product(parsed, scales, ptp, dtp, pdp, ddp):
            if (tied and pt != dt) or (tied_dp and pd != dd):
                continue
            pools = ((p * k, pt, pd), (d * k, dt, dd))
            shapes.append(Shape(shape_name("disaggregated", pools), "disaggregated", pools, counts))
    if budget is not None:  # the shapes that fit in max_gpus
        shapes = [shape for shape in shapes if shape_gpus(shape) <= budget]
    if not shapes and not problems.lines:
        problems.add(where, "generates no shape", spec)
    return shapes


def shape_gpus(shape: Shape) -> int:
    """GPUs of a shape: workers x tp x dp over its pools."""
    return sum(workers * tp * dp for workers, tp, dp in shape.pools)


# -- goal and search -----------------------------------------------------------------------

def _goal(goal: Any, problems: _Problems) -> Goal:
    if type(goal) is not dict or goal.get("kind") not in GOALS:
        problems.add("$.goal.kind", f"must be one of {', '.join(GOALS)}",
                     goal.get("kind") if type(goal) is dict else goal)
        return Goal("max_goodput")
    kind = goal["kind"]
    allowed = {"kind", "min_good_fraction"} | {"max_goodput": {"metric"},
                                                "pareto": {"metrics", "directions"}}.get(kind, set())
    for key in goal:
        if key not in allowed:
            problems.add(f"$.goal.{key}", f"unknown field for goal {kind!r}")
    fraction = goal.get("min_good_fraction")
    if kind == "min_gpus" and fraction is None:
        problems.add("$.goal.min_good_fraction", "is required by min_gpus (the share of "
                     "requests that must meet the payload's SLA, e.g. 0.99)")
    elif fraction is not None and not (_is_number(fraction) and 0 <= fraction <= 1):
        problems.add("$.goal.min_good_fraction", "must be a number in [0, 1]", fraction)
        fraction = None
    metric = goal.get("metric")
    if metric is not None and not (isinstance(metric, str) and metric):
        problems.add("$.goal.metric", "must be a report key", metric)
    metrics, directions = (), ()
    if kind == "pareto":
        metrics = goal.get("metrics")
        if type(metrics) is not list or len(metrics) != 2 or not all(isinstance(m, str) and m for m in metrics):
            problems.add("$.goal.metrics", "must be two report keys", metrics)
            metrics = ["goodput_request_throughput_rps", "gpus"]
        directions = goal.get("directions", ["max", "max"])
        if type(directions) is not list or len(directions) != 2 or not all(d in ("max", "min") for d in directions):
            problems.add("$.goal.directions", "must be two of 'max' / 'min'", directions)
            directions = ["max", "max"]
    return Goal(kind, fraction, metric, tuple(metrics), tuple(directions))


def _search(search: Any, axes: list[Axis], goal: Goal, problems: _Problems) -> Search:
    if type(search) is not dict:
        problems.add("$.search", "must be an object", search)
        return Search()
    for key in search:
        if key not in ("policy", "axis", "trials", "seed", "sampler"):
            problems.add(f"$.search.{key}", "unknown field")
    policy = search.get("policy", "grid")
    if policy not in POLICIES:
        problems.add("$.search.policy", f"must be one of {', '.join(POLICIES)}", policy)
        return Search()
    axis = search.get("axis")
    if policy == "bisect":
        names = [a.name for a in axes]
        if axis is None and len(axes) == 1:
            axis = names[0]
        if axis not in names:
            problems.add("$.search.axis", f"bisect needs one of the axes ({', '.join(names)})", axis)
        else:
            values = axes[names.index(axis)].values
            if axis == DEPLOYMENT:
                pass  # bisected per shape family (agg tp4, disagg 3:1 tp4+tp1, ...) by scale
            elif not all(_is_number(v) for v in values) or list(values) != sorted(values):
                problems.add("$.search.axis", "bisect needs an axis of increasing numbers "
                             "(feasibility must not fall as it grows)", axis)
        if goal.kind == "pareto":
            problems.add("$.search.policy", "bisect cannot search a pareto goal (use grid or optuna)")
        elif goal.min_good_fraction is None:
            problems.add("$.goal.min_good_fraction", "bisect needs it: it searches the smallest "
                         "feasible value of the axis")
    elif axis is not None:
        problems.add("$.search.axis", f"only bisect takes an axis, not {policy}")
    trials = search.get("trials")
    if trials is not None and not (_is_int(trials) and trials > 0):
        problems.add("$.search.trials", "must be a positive integer", trials)
        trials = None
    seed = search.get("seed", 0)
    if not _is_int(seed) or seed < 0:
        problems.add("$.search.seed", "must be an integer >= 0", seed)
        seed = 0
    sampler = search.get("sampler")
    if sampler is not None and sampler not in SAMPLERS:
        problems.add("$.search.sampler", f"must be one of {', '.join(SAMPLERS)}", sampler)
    if policy != "optuna":
        for key in ("trials", "sampler"):
            if key in search:
                problems.add(f"$.search.{key}", f"only optuna takes {key}")
    return Search(policy, axis, trials, seed, sampler)
