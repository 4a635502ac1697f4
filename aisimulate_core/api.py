"""The library boundary: JSON in, report out."""

from __future__ import annotations

from .runtime.build import build_simulation
from .spec import load_payload


def run_replay(payload, *, plugin_manager=None, progress=None, on_event=None, on_record=None):
    """Run one payload (JSON text, bytes, a parsed dict or a loaded ``Payload``); returns a Report.

    With ``on_record``, every per-request record (the dict the report would carry) is passed to
    ``on_record(record)`` during the run instead of being kept, whatever
    ``spec.record_per_request`` says, and the report's ``per_request`` is None. Records come in
    the report's order, each as soon as the records before it are known (see
    ``Collector.stream_records_to``), so memory does not grow with the records.

    Bad input raises an ``AisimError`` subclass whose message names the JSON path and the rule.
    """
    loaded = payload if hasattr(payload, "spec") else load_payload(payload)
    sim = build_simulation(loaded, plugin_manager=plugin_manager, progress=progress,
                           on_event=on_event)
    if on_record is not None:
        sim.collector.stream_records_to(on_record)
    sim.run()
    return sim.report()


def run_replay_json(payload: str, *, plugin_manager=None) -> str:
    """The JSON boundary: an execution payload in, the report JSON out."""
    return run_replay(payload, plugin_manager=plugin_manager).to_json()
