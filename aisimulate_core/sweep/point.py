"""One point of a sweep: its payload document, its identity, and its evaluation (in a worker).

``point_document`` builds the payload of a point (base, fixed overrides, the point's axis
values, a deployment shape); ``payload_hash`` identifies it (the document's canonical JSON and
the content of its trace files), so that a rerun finds it in the ledger. ``evaluate`` runs it
and returns what the ledger keeps; it never raises for a bad point: the error line is the
result.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from aisimulate_core.overrides import Override, apply_overrides, override_from
from aisimulate_core.sweep.spec import Axis, Shape

# summary keys that measure this host, not the deployment: left out when two ledgers compare
HOST_KEYS = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")


def _timing_configs(rank: Any):
    """The AIC config of a rank document, where the rank uses the ``aic`` provider."""
    if type(rank) is not dict:
        return None
    model = rank.get("timing_model")
    if type(model) is dict and model.get("provider") == "aic" and type(model.get("config")) is dict:
        return model["config"]
    return None


def _sync_aic(config: dict | None, tp: int, dp: int) -> None:
    """The ``aic`` provider's tp / attention_dp must equal the role's sizes: keep them so."""
    if config is None:
        return
    config["tp"] = tp
    config.pop("tp_size", None)
    if dp != 1 or "attention_dp" in config:
        config["attention_dp"] = dp


def apply_shape(document: dict, shape: Shape) -> dict:
    """The payload document with its topology and parallel sizes set to ``shape`` (the base's
    pool settings, such as startup delays, kept)."""
    doc = json.loads(json.dumps(document))
    spec = doc.setdefault("spec", {}) if "spec" in doc or "traffic" in doc else doc
    if type(spec) is not dict:
        return doc  # the payload's own validation says what is wrong
    topology = spec.get("topology") if type(spec.get("topology")) is dict else {}
    if type(spec.get("engine")) is not dict:
        spec["engine"] = {}
    engine = spec["engine"]
    if shape.kind == "aggregated":
        workers, tp, dp = shape.pools[0]
        pool = topology.get("workers") if type(topology.get("workers")) is dict else \
            (topology.get("decode") if type(topology.get("decode")) is dict else {})
        spec["topology"] = {"kind": "aggregated",
                            "workers": {**pool, "initial_workers": workers}}
        engine["tensor_parallel_size"] = tp
        engine["dp_size"] = dp
        engine.pop("prefill", None)
        engine.pop("decode", None)
        _sync_aic(_timing_configs(engine.get("rank")), tp, dp)
        return doc
    new = {"kind": "disaggregated"}
    for (workers, tp, dp), role in zip(shape.pools, ("prefill", "decode")):
        pool = topology.get(role) if type(topology.get(role)) is dict else \
            (topology.get("workers") if type(topology.get("workers")) is dict else {})
        new[role] = {**pool, "initial_workers": workers}
        group = engine.get(role) if type(engine.get(role)) is dict else {}
        rank = group.get("rank", engine.get("rank", {}))
        rank = json.loads(json.dumps(rank if rank is not None else {}))
        group = {**group, "tensor_parallel_size": tp, "dp_size": dp, "rank": rank}
        _sync_aic(_timing_configs(rank), tp, dp)
        engine[role] = group
    if "handoff_latency_ms" in topology:
        new["handoff_latency_ms"] = topology["handoff_latency_ms"]
    spec["topology"] = new
    return doc


def point_overrides(axes: tuple[Axis, ...], indices: tuple[int, ...]) -> dict[str, Any]:
    """``{axis name: value}`` of a point (a shape by its name): the ledger's ``overrides``."""
    return {axis.name: axis.label(i) for axis, i in zip(axes, indices)}


def point_document(base: dict, fixed: tuple[Override, ...], axes: tuple[Axis, ...],
                   indices: tuple[int, ...]) -> dict:
    """The payload document of one point: the base, the fixed overrides, then the axes in
    order (a deployment shape where its axis stands)."""
    doc = apply_overrides(base, fixed)
    if doc is base:
        doc = json.loads(json.dumps(base))
    for axis, i in zip(axes, indices):
        value = axis.values[i]
        if isinstance(value, Shape):
            doc = apply_shape(doc, value)
        else:
            doc = apply_overrides(doc, [override_from(axis.name, value)])
    return doc


def trace_paths(document: Any) -> list[str]:
    """The trace files a payload document names (``traffic.trace_path`` / ``trace_paths``)."""
    traffic = document.get("traffic") if type(document) is dict else None
    if type(traffic) is not dict:
        return []
    paths = []
    if isinstance(traffic.get("trace_path"), str):
        paths.append(traffic["trace_path"])
    if type(traffic.get("trace_paths")) is list:
        paths.extend(p for p in traffic["trace_paths"] if isinstance(p, str))
    return paths


class TraceDigests:
    """The SHA-256 of each regular trace file, read once per sweep (by path, size and mtime)."""

    def __init__(self) -> None:
        self._known: dict[tuple, str] = {}

    def of(self, path: str) -> str:
        try:
            status = os.stat(path)
        except OSError:
            return "missing"
        if not os.path.isfile(path):
            return "not a file"
        key = (os.path.realpath(path), status.st_size, status.st_mtime_ns)
        digest = self._known.get(key)
        if digest is None:
            sha = hashlib.sha256()
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    sha.update(chunk)
            digest = self._known[key] = sha.hexdigest()
        return digest


def payload_hash(document: dict, digests: TraceDigests) -> str:
    """The identity of a point: the document's canonical JSON and its trace files' content."""
    canonical = json.dumps({"payload": document,
                            "traces": [digests.of(p) for p in trace_paths(document)]},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:20]


# -- evaluation (in a worker process or a Ray task) ----------------------------------------

_PLUGIN_MANAGERS: dict = {}


def plugin_manager(options: tuple) -> Any:
    """The worker's plugin manager for ``(autoload, plugins)``, made once per process."""
    pm = _PLUGIN_MANAGERS.get(options)
    if pm is None:
        from aisimulate_core.plugins import make_plugin_manager

        autoload, plugins = options
        pm = _PLUGIN_MANAGERS[options] = make_plugin_manager(autoload=autoload, plugins=list(plugins))
    return pm


def use_plugin_manager(options: tuple, pm: Any) -> None:
    """Let the points of this process (and of workers forked from it) use ``pm`` for
    ``options``: the command's own, whose plugins are loaded already."""
    _PLUGIN_MANAGERS[options] = pm


def deployment_gpus(payload: Any) -> int:
    """GPUs the deployment starts with: workers x dp_size x tensor_parallel_size per pool."""
    spec = payload.spec
    topology = spec.topology
    if topology.kind == "aggregated":
        role = spec.engine.role("aggregated")
        return topology.workers.initial_workers * role.gpus_per_worker
    return (topology.prefill.initial_workers * spec.engine.role("prefill").gpus_per_worker
            + topology.decode.initial_workers * spec.engine.role("decode").gpus_per_worker)


def kv_blocks(payload: Any, pm: Any) -> dict[str, int]:
    """KV blocks of one rank per role: the payload's, or the timing provider's estimate for
    this shape (the ``aic`` provider estimates it from the GPU, model and parallel sizes)."""
    from aisimulate_core.registry import registries_of
    from aisimulate_core.runtime.build import materialize_capacity
    from aisimulate_core.spec.validate import role_path

    spec = payload.spec
    stages = ("aggregated",) if spec.topology.kind == "aggregated" else ("prefill", "decode")
    registries = registries_of(pm)
    blocks = {}
    for stage in stages:
        path = "$.spec.engine" if stage == "aggregated" else role_path(spec.engine, stage, "$.spec.engine")
        role = materialize_capacity(registries, spec.engine.role(stage), stage, path)
        blocks[stage] = role.rank.num_gpu_blocks
    return blocks


def error_line(error: BaseException) -> str:
    """One line for the ledger: the problems of an AisimError joined by '; ', else the bug."""
    from aisimulate_core.errors import AisimError
    from aisimulate_core.messages import problem_lines

    if isinstance(error, AisimError):
        return "; ".join(problem_lines(str(error)))
    return "; ".join(problem_lines(f"internal error: {type(error).__name__}: {error}"))


def evaluate(document: dict, plugin_options: tuple, labels: tuple = ()) -> dict[str, Any]:
    """Run one point; ``{"status", "error", "wall_time_s", "gpus", "kv_blocks", "summary"}``.

    ``labels`` are the point's overrides as ``Override``s, for error lines that name them.
    Per-request records are not kept (the summary does not depend on them)."""
    import attrs

    from aisimulate_core.api import run_replay
    from aisimulate_core.overrides import naming_overrides
    from aisimulate_core.spec import load_payload

    started = time.perf_counter()
    result: dict[str, Any] = {"status": "failed", "error": None, "gpus": None,
                              "kv_blocks": None, "summary": None}
    try:
        with naming_overrides(labels):
            pm = plugin_manager(plugin_options)
            payload = load_payload(document)
            result["gpus"] = deployment_gpus(payload)
            result["kv_blocks"] = kv_blocks(payload, pm)
            if payload.spec.record_per_request:
                payload = attrs.evolve(payload, spec=attrs.evolve(payload.spec,
                                                                  record_per_request=False))
            report = run_replay(payload, plugin_manager=pm)
        result["summary"] = report.summary
        result["status"] = "ok"
    except KeyboardInterrupt:
        raise
    except Exception as error:  # a bad point is a result, never the end of the sweep
        result["error"] = error_line(error)
    result["wall_time_s"] = round(time.perf_counter() - started, 6)
    return result


def localize_traces(document: dict, files: dict[str, Path]) -> dict:
    """The document with trace paths replaced by local copies (``{given path: local path}``)."""
    if not files:
        return document
    doc = json.loads(json.dumps(document))
    traffic = doc["traffic"]
    if isinstance(traffic.get("trace_path"), str) and traffic["trace_path"] in files:
        traffic["trace_path"] = str(files[traffic["trace_path"]])
    if type(traffic.get("trace_paths")) is list:
        traffic["trace_paths"] = [str(files.get(p, p)) if isinstance(p, str) else p
                                  for p in traffic["trace_paths"]]
    return doc
