"""The loop's fast paths against the general ones (runtime/simulation.py, router.py).

A plain aggregated run (no scaling, telemetry or windows) goes through
``Simulation._run_plain``, the arrivals of the built-in round robin through
``RoundRobin.place_unpinned`` (no ``PlacementRequest``), and a C rank's terminals through
``finish_all``. With ``Simulation._plain`` false the same run goes through ``_next_time`` and
``_step``; a round robin whose ``UNPINNED_PLACE`` is not its ``place`` through ``place()``;
an ``on_event`` callback sends terminals through ``_terminal`` one by one. Every combination
must give the same report, records included, on random payloads and on the cluster fixtures
(scaling: the round robin's cursor across workers that come and go).
"""

from __future__ import annotations

import json
import os

import pytest
from aisimulate_placement.round_robin import RoundRobin
from hypothesis import HealthCheck, given, settings

from aisimulate_core import AisimError, run_replay
from aisimulate_core.hookspecs import hookimpl
from aisimulate_core.plugins import make_plugin_manager
from aisimulate_core.runtime.simulation import Simulation
from reference import ROOT
from report_invariants import comparable
from strategies import cases

CLUSTER = ROOT / "tests" / "fixtures" / "cluster"


def _report(payload, *, general, on_event=None):
    """The report's comparable dict, or the error's line; ``general``: through ``_next_time``
    and ``_step`` (a progress display listening either way)."""
    try:
        with pytest.MonkeyPatch.context() as patch:
            if general:
                patch.setattr(Simulation, "_plain", lambda self: False)
            report = run_replay(payload, progress=lambda *_: None, on_event=on_event)
    except AisimError as error:
        return f"{type(error).__name__}: {error}"
    return comparable(json.loads(report.to_json()))


def _with_trace(case, directory):
    """The case's payload, reading its trace rows (if any) from a file in ``directory``."""
    payload, rows = case
    if rows is None:
        return payload
    path = directory / "trace.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    payload = json.loads(json.dumps(payload))
    payload["traffic"]["trace_path"] = str(path)
    return payload


def _both(payload, monkeypatch):
    """(the report with every fast path, the report with none)."""
    fast = _report(payload, general=False)
    with monkeypatch.context() as patch:
        patch.setattr(RoundRobin, "UNPINNED_PLACE", None)
        general = _report(payload, general=True, on_event=lambda *_: None)
    return fast, general


def test_random_runs_are_the_same_through_the_fast_and_the_general_paths(tmp_path, monkeypatch):
    monkeypatch.delenv("AISIMULATE_CHECK", raising=False)   # (the checker takes _step over)
    seen = {"report": 0, "error": 0}

    @settings(max_examples=120, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(cases())
    def run(case):
        payload = _with_trace(case, tmp_path)
        fast, general = _both(payload, monkeypatch)
        assert fast == general
        seen["error" if isinstance(fast, str) else "report"] += 1

    run()
    assert seen["report"] >= 60, seen


def test_random_runs_give_the_same_summary_with_records_off(tmp_path, monkeypatch):
    """Without per-request records a terminal hands the collector a summary record
    (records.make_summary_record), in the plain loop's finish_all and in the general
    _on_finish: the summary must be the one the full records give."""
    monkeypatch.delenv("AISIMULATE_CHECK", raising=False)
    seen = {"report": 0}

    @settings(max_examples=80, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(cases())
    def run(case):
        payload = _with_trace(case, tmp_path)
        kept = _report(payload, general=False)
        if isinstance(kept, str):
            return
        off = json.loads(json.dumps(payload))
        spec = off.get("spec", off)
        spec["record_per_request"] = False
        kept.pop("per_request")
        for general in (False, True):
            assert _report(off, general=general) == kept, general
        seen["report"] += 1

    run()
    assert seen["report"] >= 40, seen


SCALING = sorted(path.stem for path in CLUSTER.glob("*.json")
                 if not path.stem.endswith(".expected"))


@pytest.mark.parametrize("name", SCALING)
def test_scaling_round_robin_is_the_same_without_placement_requests(name, monkeypatch):
    """Scaling and telemetry runs take the general loop; the round robin's unpinned answers
    must follow its cursor across workers that join, drain and leave exactly as place(), in
    aggregated pools and in prefill and decode pools."""
    monkeypatch.delenv("AISIMULATE_CHECK", raising=False)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        fast, general = _both((CLUSTER / f"{name}.json").read_text(), monkeypatch)
    finally:
        os.chdir(cwd)
    assert not isinstance(fast, str), fast
    assert fast == general


class _Reversed(RoundRobin):
    """A third party's round robin that changes how place() chooses without overriding it:
    the highest worker id first (aggregated pools) and the last scheduler first (others)."""

    NAME = "reversed_round_robin"

    def _place_aggregated(self, request):
        worker = self._workers[-1 - (self._cursor % len(self._workers))]
        self._cursor += 1
        return worker.worker_id, 0

    def _place_flattened(self, request):
        scheduler = self._schedulers[-1 - (self._cursor % len(self._schedulers))]
        self._cursor += 1
        return scheduler


class _ReversedPlugin:
    @hookimpl
    def aisimulate_register_placement_policies(self, register):
        register(_Reversed)


@pytest.mark.parametrize("kind", ["aggregated", "disaggregated"])
def test_a_round_robin_subclass_goes_through_its_own_place(kind):
    topology = ({"kind": "aggregated", "workers": {"initial_workers": 3}} if kind == "aggregated"
                else {"kind": "disaggregated", "prefill": {"initial_workers": 3},
                      "decode": {"initial_workers": 2}})
    payload = {"version": 1, "topology": topology,
               "engine": {"rank": {"backend": "vllm", "num_gpu_blocks": 512,
                                   "timing_model": {"type": "fixed", "prefill_ms": 10.0,
                                                    "decode_ms": 5.0}}},
               "adapters": {"placement": {"provider": "reversed_round_robin"}},
               "record_per_request": True,
               "requests": [{"id": f"r{i}", "arrival_time_ms": 100.0 * i, "input_tokens": 32,
                             "output_tokens": 2} for i in range(4)]}
    pm = make_plugin_manager(autoload=False, plugins=[_ReversedPlugin()])
    records = sorted(run_replay(json.dumps(payload), plugin_manager=pm).per_request,
                     key=lambda r: r["arrival_time_ms"])
    if kind == "aggregated":
        assert [r["decode_worker_idx"] for r in records] == [2, 1, 0, 2]
    else:
        assert [r["prefill_worker_idx"] for r in records] == [2, 1, 0, 2]
