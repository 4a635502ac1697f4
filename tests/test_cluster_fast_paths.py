"""Scaling without the costs a run does not need, and the same run as with them.

* ``schedule`` reads nothing of the snapshot but its tick count: it gets ``tick_ordinal`` and
  ``now_ms`` only, and no traffic window is fed (arrivals, placements and terminals run as
  without scaling); the run is the one an embedded schedule that reads full snapshots gives.
* An aggregated run with scaling (no telemetry) runs in ``Simulation._run_plain``, scaling's
  ticks and ready workers tested inline; it is the run the generic ``_step`` loop gives.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisimulate_core import run_replay
from aisimulate_core.runtime.build import build_simulation
from aisimulate_core.spec import load_payload
from reference import HOST_KEYS
from test_scaling_embedding import SCHEDULED, EmbeddedSchedule, shared_case

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT.parent / "shared" / "bench" / "cluster"
OWN = ROOT / "tests" / "fixtures" / "cluster_reference"


def simulated(report):
    return ({k: v for k, v in report.summary.items() if k not in HOST_KEYS}, report.per_request)


def case(path):
    loaded = json.loads(Path(path).read_text())
    traffic = loaded.get("traffic") or {}
    if "trace_path" in traffic:
        traffic["trace_path"] = str((ROOT / traffic["trace_path"]).resolve())
    return loaded


class Recording(EmbeddedSchedule):
    """A schedule that reads full snapshots (no ``reads_snapshot`` declared)."""


@pytest.mark.parametrize("name", sorted(SCHEDULED))
def test_schedule_gets_no_traffic_window_and_the_same_run(name):
    loaded, ticks, _ = shared_case(name)
    sim = build_simulation(load_payload(case(BENCH / f"{name}.json")))
    assert sim.cluster.window is None and sim.windows == ()
    fast = run_replay(case(BENCH / f"{name}.json"))
    recording = Recording(ticks)
    full = run_replay(loaded, scaling_policy=recording)
    assert all("traffic" in s for s in recording.snapshots)
    assert simulated(fast) == simulated(full)


def test_schedule_sees_its_tick_count_and_time():
    from aisimulate_core.runtime.scaling import ScheduledScaling
    seen = []

    class Seeing(ScheduledScaling):
        def on_tick(self, snapshot):
            seen.append(snapshot)
            return super().on_tick(snapshot)

    loaded, ticks, _ = shared_case("s1_schedule_scaling_agg_rr")
    policy = Seeing({"ticks": [{"at_ms": at, "prefill_target": p, "decode_target": d}
                               for at, p, d in ticks]})
    run_replay(loaded, scaling_policy=policy)
    assert seen == [{"tick_ordinal": i, "now_ms": at} for i, (at, _, _) in enumerate(ticks)]


def scaled_aggregated_cases():
    found = []
    for path in sorted(BENCH.glob("*.json")) + sorted(OWN.glob("*.json")):
        if path.name.endswith(".expected.json") or not path.is_file():
            continue
        loaded = json.loads(path.read_text())
        spec = loaded.get("spec", {})
        scaling = (spec.get("adapters") or {}).get("scaling") or {}
        if spec.get("topology", {}).get("kind") == "aggregated" and \
                scaling.get("provider", "none") != "none":
            found.append(path)
    return found


@pytest.mark.parametrize("path", scaled_aggregated_cases(), ids=lambda p: p.stem)
def test_the_inline_loop_is_the_generic_one(path):
    fast = build_simulation(load_payload(case(path)))
    assert fast._plain()
    fast.run()
    generic = build_simulation(load_payload(case(path)))
    generic._step = generic._step      # an instance's own _step: the generic loop runs
    assert not generic._plain()
    generic.run()
    assert fast.now_ms == generic.now_ms
    assert fast.cluster.lifecycle.operations == generic.cluster.lifecycle.operations
    assert simulated(fast.report()) == simulated(generic.report())
