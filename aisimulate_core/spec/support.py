"""What this release does not simulate yet, as data.

The reference accepts every field below; this release rejects any value outside the
listed ones with `<path>: '<value>' is not supported yet` (or `<path>: not supported yet`
for objects). A field given at an accepted value (its default) passes. To support a
feature, delete its line.
"""

from typing import Any

from .converter import show
from .engine import ReplayEngineConfig
from .replay import Payload
from .topology import AggregatedTopology
from .validate import role_path

# (scope, field, accepted values). Scopes: payload (the envelope), spec, topology,
# engine (each rank group the topology uses), rank (its EngineConfig), disaggregated_rank
# (the same, in a disaggregated topology only), traffic.
UNSUPPORTED: tuple[tuple[str, str, tuple[Any, ...]], ...] = (
    ("payload", "capture_performance_diagnostics", (False,)),
    ("spec", "encoder", (None,)),
    ("rank", "backend", ("vllm", "trtllm", "sglang")),
    ("rank", "frontend", (None,)),
    ("rank", "vision", (False,)),
    ("traffic", "cached_prefix_tokens", (0,)),
    ("traffic", "agentic_snapshot", (None,)),
    ("traffic", "agentic_warmup", (False,)),
)

_MISSING = object()


_SCOPE_NOTES = {"disaggregated_rank": " in a disaggregated topology"}


def _message(value: Any, note: str = "") -> str:
    if isinstance(value, str):
        return f"'{value}' is not supported yet{note}"
    if value is None or isinstance(value, (bool, int, float)):
        return f"{show(value)} is not supported yet{note}"
    return "not supported yet" + note


def unsupported(payload: Payload, root: str) -> list[tuple[str, str]]:
    """`(path, rule)` for every value of `payload` this release cannot simulate."""
    spec = payload.spec
    engine: ReplayEngineConfig = spec.engine
    aggregated = isinstance(spec.topology, AggregatedTopology)
    stages = ("aggregated",) if aggregated else ("prefill", "decode")
    groups = {role_path(engine, stage, root + ".engine"): engine.role(stage) for stage in stages}
    ranks = [(path + ".rank", group.rank) for path, group in groups.items()]
    objects: dict[str, list[tuple[str, Any]]] = {
        "payload": [("$", payload)],
        "spec": [(root, spec)],
        "topology": [(root + ".topology", spec.topology)],
        "engine": list(groups.items()),
        "rank": ranks,
        "disaggregated_rank": [] if aggregated else ranks,
        "traffic": [("$.traffic", payload.traffic)] if payload.traffic is not None else [],
    }
    problems = []
    for scope, field, accepted in UNSUPPORTED:
        for path, obj in objects[scope]:
            value = getattr(obj, field, _MISSING)
            if value is _MISSING or any(value == ok and type(value) is type(ok) for ok in accepted):
                continue
            problems.append((f"{path}.{field}", _message(value, _SCOPE_NOTES.get(scope, ""))))
    return problems


__all__ = ["UNSUPPORTED", "unsupported"]
