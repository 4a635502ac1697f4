"""The library boundary: JSON in, report out."""

from __future__ import annotations

from .runtime.build import build_simulation
from .runtime.simulation import raise_gc_threshold, restore_gc_threshold
from .spec import load_payload


def run_replay(payload, *, plugin_manager=None, progress=None, on_event=None, on_record=None,
               telemetry_interval_ms=None, on_sample=None, scaling_policy=None):
    """Run one payload (JSON text, bytes, a parsed dict or a loaded ``Payload``); returns a Report.

    Telemetry (CLUSTER.md §4) is sampled every ``telemetry_interval_ms`` of virtual time when it
    is given (or when ``on_sample`` is, at 1000 ms): each sample dict goes to
    ``on_sample(sample)`` as it is taken, or, without a callback, is kept on
    ``report.telemetry = {"sample_interval_ms": X, "samples": [...]}``.

    ``scaling_policy``: any object with ``initial_tick_ms()`` and ``on_tick(snapshot)`` (the
    reference's Python contract), used instead of ``spec.adapters.scaling``.

    With ``on_record``, every per-request record (the dict the report would carry) is passed to
    ``on_record(record)`` during the run instead of being kept, whatever
    ``spec.record_per_request`` says, and the report's ``per_request`` is None. Records come in
    the report's order, each as soon as the records before it are known (see
    ``Collector.stream_records_to``), so memory does not grow with the records.

    Bad input raises an ``AisimError`` subclass whose message names the JSON path and the rule.

    While it runs, the garbage collector's young-generation threshold is raised (see
    ``runtime.simulation.RUN_GC_THRESHOLD``) and then restored.
    """
    thresholds = raise_gc_threshold()
    try:
        return _run_replay(payload, plugin_manager, progress, on_event, on_record,
                           telemetry_interval_ms, on_sample, scaling_policy)
    finally:
        restore_gc_threshold(thresholds)


def _run_replay(payload, plugin_manager, progress, on_event, on_record, telemetry_interval_ms,
                on_sample, scaling_policy):
    loaded = payload if hasattr(payload, "spec") else load_payload(payload)
    sim = build_simulation(loaded, plugin_manager=plugin_manager, progress=progress,
                           on_event=on_event, scaling_policy=scaling_policy)
    if on_record is not None:
        sim.collector.stream_records_to(on_record)
    kept = None
    if telemetry_interval_ms is not None or on_sample is not None:
        interval = 1000.0 if telemetry_interval_ms is None else telemetry_interval_ms
        if on_sample is None:
            kept = []
            on_sample = kept.append
        sim.sample_telemetry(interval, on_sample)
    sim.run()
    report = sim.report()
    if kept is not None:
        report.telemetry = {"sample_interval_ms": float(interval), "samples": kept}
    return report


def run_replay_json(payload: str, *, plugin_manager=None) -> str:
    """The JSON boundary: an execution payload in, the report JSON out."""
    return run_replay(payload, plugin_manager=plugin_manager).to_json()
