"""The shipped AIC payloads: the bench variant of b1 and the capacity-planning example."""

import json
from pathlib import Path

import pytest

from aisimulate_core import load_payload, run_replay

ROOT = Path(__file__).resolve().parents[3]
B1 = ROOT.parent / "shared" / "bench" / "b1_poisson_fixed.json"
AIC_B1 = ROOT / "bench" / "aic_b1.json"
EXAMPLE = ROOT / "examples" / "aic_qwen3_32b_h200.json"


@pytest.mark.skipif(not B1.exists(), reason="the shared bench payloads are not beside the project")
def test_aic_b1_is_b1_with_the_timing_model_replaced():
    original, aic = json.loads(B1.read_text()), json.loads(AIC_B1.read_text())
    timing = aic["spec"]["engine"]["rank"].pop("timing_model")
    original["spec"]["engine"]["rank"].pop("timing_model")
    assert aic == original
    assert timing == {"type": "external", "provider": "aic", "config": {
        "model": "Qwen/Qwen3-32B", "system": "h200_sxm", "backend": "vllm", "tp": 1}}


def test_aic_b1_replays_to_the_end():
    # the first 1,000 of b1's 20,000 requests; `make bench` runs them all
    data = json.loads(AIC_B1.read_text())
    data["traffic"]["request_count"] = 1000
    summary = json.loads(run_replay(data).to_json())
    assert summary["completed_requests"] == summary["num_requests"] == 1000
    assert summary["aic_backend_version"] == "0.24.0"


def test_the_example_is_timed_by_aic_with_estimated_capacity():
    payload = load_payload(EXAMPLE.read_text())
    assert payload.spec.engine.num_gpu_blocks_is_explicit is False
    assert payload.spec.engine.rank.timing_model.provider == "aic"
