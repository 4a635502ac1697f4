"""Without event lag ``kv_router`` reads its index from the engines (``"kv_index"``:
``SchedulerView.cached_prefix``) instead of keeping one from the KV events: every decision and
record must be the same as with the event-fed index, evictions included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisimulate_core import hookimpl, run_replay
from aisimulate_core.plugins import make_plugin_manager
from aisimulate_placement.kv_router import KvRouter

ROOT = Path(__file__).resolve().parents[3]
CASES = ROOT / "tests" / "fixtures" / "cluster_reference"
SHARED = ROOT.parent / "shared" / "bench" / "cluster"


class EventFedRouter(KvRouter):
    """The same router keeping its own index of the engines' KV events."""

    NAME = "kv_router_event_fed"

    def __init__(self, config, pool):
        super().__init__(config, pool)
        if self._engine_index:
            self._engine_index = False
            self.OBSERVES = frozenset({"kv_events", "prefill", "terminal"})


class Plugin:
    @hookimpl
    def aisimulate_register_placement_policies(self, register):
        register(EventFedRouter)


def _records(payload):
    report = run_replay(json.dumps(payload), plugin_manager=make_plugin_manager(plugins=[Plugin()]))
    records = [{k: v for k, v in r.items() if k != "uuid"} for r in report.per_request]
    summary = {k: v for k, v in report.summary.items()
               if k not in ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")}
    return summary, records


def _evicting(payload):
    """A small KV cache: blocks are evicted while requests still route by them."""
    payload = json.loads(json.dumps(payload))
    payload["spec"]["engine"]["rank"]["num_gpu_blocks"] = 48
    return payload


def _payload(path):
    payload = json.loads(path.read_text())
    trace = payload["traffic"]["trace_path"]
    if not (ROOT / trace).exists():
        pytest.skip(f"{trace} is not beside the checkout")
    payload["traffic"]["trace_path"] = str(ROOT / trace)
    return payload


@pytest.mark.parametrize("case, evicting", [
    (CASES / "kv_queue_fcfs_dense.json", False), (CASES / "kv_queue_fcfs_dense.json", True),
    (CASES / "kv_queue_wspt_dense.json", True), (CASES / "kv_queue_disagg_2p1d.json", False),
    (SHARED / "k1_kv_router_agg_2w.json", True), (SHARED / "k3_kv_router_dp2_chunked.json", True),
])
def test_the_engine_index_decides_as_the_event_fed_index(case, evicting):
    if not case.exists():
        pytest.skip(f"{case} is not beside the checkout")
    payload = _payload(case)
    if evicting:
        payload = _evicting(payload)
    payload["spec"]["adapters"]["placement"]["provider"] = "kv_router"
    ours = _records(payload)
    payload["spec"]["adapters"]["placement"]["provider"] = "kv_router_event_fed"
    events = _records(payload)
    assert ours[0] == events[0]
    assert ours[1] == events[1]
    # not vacuous: the evicting variants do evict, and the router saw overlaps
    routes = [route for r in ours[1] for route in r["routing_history"]]
    assert any(route["best_available_overlap_blocks"] for route in routes)
