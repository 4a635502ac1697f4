"""The SGLang engine in the cluster layer (engine/sglang_cluster.py, engine/sglang_fpm.py): the
forward-pass metrics rows the scaling policy is handed, the KV router's index fed by the radix
tree, and nothing of it on a run that asks for none. The CLI-level parity of the recorded SGLang
cases is in test_cluster_cases.py (``OWN``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from aisimulate_core import build_simulation
from aisimulate_core.kv import hashing
from aisimulate_core.spec import load_payload
from test_cluster_cases import _Recorder   # the payload's schedule, keeping each snapshot

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "fixtures" / "cluster_reference"
# our snapshot adds the engines' gauges and the router queues (documented extensions)
EXTENSIONS = {"prefill_scheduler_metrics", "decode_scheduler_metrics",
              "router_pending_prefill_requests", "router_pending_decode_requests"}


def _payload(name):
    case = CASES / f"{name}.json"
    payload = json.loads(case.read_text())
    if not (ROOT / payload["traffic"]["trace_path"]).exists():
        pytest.skip(f"{payload['traffic']['trace_path']} is not beside the checkout")
    return case.read_text(), payload


def _in_root(function, *args, **kwargs):
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return function(*args, **kwargs)
    finally:
        os.chdir(cwd)


# the kinds of pass a case's FPM rows show (so that the comparison is not of empty rows only)
ROWS_SEEN = {"sglang_schedule_scaling_rr": ("num_prefill_requests", "num_decode_requests"),
             "sglang_kv_queue_scaling": ("num_prefill_requests",),
             "sglang_kv_queue_retract": ("num_prefill_requests", "num_queued_prefill"),
             "sglang_rr_dp2_scaling": ("num_prefill_requests", "num_decode_requests"),
             "sglang_dp_idle_rank": ("num_decode_requests",),
             "vllm_dp_group_wall_time": ("num_prefill_requests", "num_decode_requests")}


def _check_snapshots(name):
    """Our scaling snapshots of case ``name`` (without our extensions) are the reference's."""
    from aisimulate_core import run_replay
    from cluster_compare import diff

    text, payload = _payload(name)
    theirs = json.loads((CASES / f"{name}.expected.json").read_text())
    recorder = _Recorder(payload)
    _in_root(run_replay, text, scaling_policy=recorder)
    ours = [{k: v for k, v in s.items() if k not in EXTENSIONS} for s in recorder.snapshots]
    assert diff(ours, theirs["scaling_snapshots"], "$.scaling_snapshots") == []
    rows = [row for s in recorder.snapshots for row in s["decode_fpm_snapshots"]]
    for field in ROWS_SEEN[name]:
        assert any(row[field] for row in rows), field


@pytest.mark.parametrize("name", ["sglang_schedule_scaling_rr", "sglang_kv_queue_scaling",
                                  "sglang_kv_queue_retract", "sglang_rr_dp2_scaling",
                                  "sglang_dp_idle_rank"])
def test_sglang_fpm_rows_match_the_reference(name):
    """The scaling snapshots of an SGLang run, FPM rows included (prefill-only and decode-only
    passes, queues left waiting, idle ranks, attention-DP ranks reporting the grouped pass's
    duration), are the reference's (recorded with --snapshots)."""
    _check_snapshots(name)


def test_vllm_dp_fpm_rows_report_the_grouped_pass():
    """The same rule on vLLM ranks: a 5 ms decode beside a 15 ms mixed pass reports 0.015."""
    _check_snapshots("vllm_dp_group_wall_time")


def _tree_pages(cache):
    """Sequence hashes of every page on a radix tree (each node's path from the root)."""
    pages = set()
    stack = [cache.root]
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        if node is not cache.root:
            pages.update(hashing.seq_hashes(node.src[:node.end], cache.page_size))
    return pages


def test_router_index_is_the_radix_trees_prompt_pages():
    """Fed by the SGLang ranks' "stored" and "removed" events, the KV router's index of each
    rank ends holding exactly the prompt pages of that rank's requests that its radix tree holds
    (the case evicts, so removals are needed for that)."""
    text, _ = _payload("sglang_kv_agg_2w_evicting")
    arrived = []

    def on_event(kind, now_ms, request):
        if kind == "arrival":
            arrived.append(request)

    sim = _in_root(lambda: build_simulation(load_payload(text), on_event=on_event).run())
    policy = sim.router.policy.policy
    evicted = 0
    for worker in sim.workers:
        rank = worker.ranks[0]
        ps = rank.page_size
        prompt_pages = set()
        for r in arrived:
            if r.rank is rank:
                prompt_pages.update(r.prompt.block_hashes(ps)[:r.prompt_len // ps])
        on_tree = _tree_pages(rank.cache) & prompt_pages
        assert set(policy._state((worker.worker_id, rank.dp_rank)).cached) == on_tree
        evicted += len(prompt_pages - on_tree)
    assert evicted > 0


def test_a_plain_sglang_run_keeps_no_cluster_state():
    """Without router, telemetry or scaling the SGLang rank notes nothing per pass."""
    text = (ROOT / "bench" / "sglang_poisson.json").read_text()
    ranks = set()

    def on_event(kind, now_ms, request):
        if kind == "arrival" and request.rank is not None:
            ranks.add(request.rank)

    sim = _in_root(lambda: build_simulation(load_payload(text), on_event=on_event).run())
    ranks = [rank for worker in sim.workers for rank in worker.ranks]
    assert ranks and sim.completed > 0
    for rank in ranks:
        assert not rank.watched and rank._stored is None and rank._pass_chunks == []
        assert rank.decode_steps == 0 and rank.fpm_last is None and rank._gauges is None
