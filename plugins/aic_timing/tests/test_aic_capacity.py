"""KV capacity: estimated by aiconfigurator-core only when a role did not set num_gpu_blocks."""

import math

import pytest
from aic_helpers import MODEL, PATH, SYSTEM, aic_timing, payload

from aiconfigurator_core.sdk.memory import estimate_num_gpu_blocks
from aisimulate_aic_timing import aic_calls
from aisimulate_core import build_simulation, collect_registries, load_payload, make_plugin_manager
from aisimulate_core.errors import ConfigError
from aisimulate_core.runtime.build import materialize_capacity


def package_blocks(backend="vllm", block_size=16, kind="of_total", fraction=0.9, version="0.24.0",
                   max_num_tokens=8192, max_batch_size=256, **kwargs):
    """The package's own estimate for the same deployment."""
    return estimate_num_gpu_blocks(
        MODEL, SYSTEM, backend, version, scheduler_block_size=block_size,
        max_num_tokens=max_num_tokens, max_batch_size=max_batch_size,
        memory_fraction_kind=kind, memory_fraction_value=fraction, **kwargs)


@pytest.fixture(scope="module")
def registries():
    return collect_registries(make_plugin_manager())


def materialize(registries, data, stage="aggregated"):
    spec = load_payload(data, check_support=False).spec
    path = "$.spec.engine" if stage == "aggregated" else f"$.spec.engine.{stage}"
    return materialize_capacity(registries, spec.engine.role(stage), stage, path)


def estimator_calls():
    info = aic_calls.estimated_num_gpu_blocks.cache_info()
    return info.hits + info.misses


def test_estimate_equals_the_package_estimate(registries):
    role = materialize(registries, payload())
    assert role.rank.num_gpu_blocks == package_blocks() == 15616


def test_estimate_uses_the_engine_limits_and_block_size(registries):
    rank = {"block_size": 32, "max_num_batched_tokens": 4096, "max_num_seqs": 64}
    role = materialize(registries, payload(rank=rank))
    assert role.rank.num_gpu_blocks == package_blocks(block_size=32, max_num_tokens=4096, max_batch_size=64)


def test_estimate_follows_parallelism_and_quant_modes(registries):
    data = payload(engine={"tensor_parallel_size": 2},
                   rank={"timing_model": aic_timing(tp=2, kv_cache_dtype="fp8")})
    role = materialize(registries, data)
    assert role.rank.num_gpu_blocks == package_blocks(tp_size=2, kvcache_quant_mode="fp8")


@pytest.mark.parametrize(
    "backend, fields, kind, fraction",
    [
        ("vllm", {}, "of_total", 0.9),
        ("vllm", {"gpu_memory_utilization": 0.8}, "of_total", 0.8),
        ("sglang", {}, "of_total", 0.88),
        ("trtllm", {}, "of_free", 0.9),
        ("trtllm", {"free_gpu_memory_fraction": 0.7}, "of_free", 0.7),
    ],
)
def test_memory_fraction_per_backend(registries, backend, fields, kind, fraction):
    version = {"vllm": "0.24.0", "sglang": "0.5.14", "trtllm": "1.3.0rc20"}[backend]
    data = payload(rank={"backend": backend, "timing_model": aic_timing(backend=backend, **fields)})
    role = materialize(registries, data)
    assert role.rank.num_gpu_blocks == package_blocks(backend, 16, kind, fraction, version)


def test_an_explicit_capacity_never_calls_the_estimator(registries):
    calls = estimator_calls()
    role = materialize(registries, payload(rank={"num_gpu_blocks": 17}))
    assert role.rank.num_gpu_blocks == 17
    assert estimator_calls() == calls


def test_an_explicit_capacity_is_still_checked_against_the_engine():
    data = payload(rank={"num_gpu_blocks": 17, "timing_model": aic_timing(tp=2)})
    with pytest.raises(ConfigError) as info:
        build_simulation(load_payload(data))
    assert str(info.value) == f"{PATH}.tp: must match the engine's tensor_parallel_size 1, got 2"


def test_explicit_capacity_is_detected_per_role():
    engine = {"prefill": {"rank": {"num_gpu_blocks": 17}}, "decode": {"rank": {}}}
    topology = {"kind": "aggregated", "workers": {"initial_workers": 1}}
    spec = load_payload({"topology": topology, "engine": engine, "requests": []}).spec
    assert spec.engine.role("prefill").num_gpu_blocks_is_explicit is True
    assert spec.engine.role("decode").num_gpu_blocks_is_explicit is False


def test_each_role_is_materialized_on_its_own(registries):
    timed = {"block_size": 16, "timing_model": aic_timing()}
    data = payload(engine={"prefill": {"rank": {**timed, "num_gpu_blocks": 17}},
                           "decode": {"rank": dict(timed)}})
    calls = estimator_calls()
    prefill = materialize(registries, data, "prefill")
    assert prefill.rank.num_gpu_blocks == 17 and estimator_calls() == calls
    decode = materialize(registries, data, "decode")
    assert decode.rank.num_gpu_blocks == package_blocks()


def test_an_out_of_range_memory_fraction_is_rejected_naming_the_field(registries):
    data = payload(rank={"timing_model": aic_timing(gpu_memory_utilization=1.1)})
    with pytest.raises(ConfigError) as info:
        materialize(registries, data)
    assert str(info.value) == f"{PATH}.gpu_memory_utilization: must be a finite number in [0, 1], got 1.1"


def test_zero_estimated_blocks_is_an_error(registries):
    # 249,864 KV tokens fit one H200 at 0.9: not one block of 262,144 tokens
    with pytest.raises(ConfigError) as info:
        materialize(registries, payload(rank={"block_size": 262144}))
    assert str(info.value) == (
        "$.spec.engine.rank.num_gpu_blocks: aiconfigurator-core estimated 0 KV blocks of 262144 "
        "tokens for Qwen/Qwen3-32B on h200_sxm with vllm 0.24.0, tp 1, pp 1, attention_dp 1; the "
        "model leaves no room for KV cache (set num_gpu_blocks or use more GPUs)")


def test_no_kv_budget_is_an_error_naming_the_deployment(registries):
    data = payload(rank={"timing_model": aic_timing(gpu_memory_utilization=0.3)})
    with pytest.raises(ConfigError) as info:
        materialize(registries, data)
    assert str(info.value).startswith(
        f"{PATH}: aiconfigurator-core cannot estimate the KV capacity of Qwen/Qwen3-32B on h200_sxm "
        "with vllm 0.24.0, tp 1, pp 1, attention_dp 1: ValueError: no KV budget: non-KV memory")


def test_estimated_capacity_sizes_the_pool_and_feeds_kv_capacity_fraction_loads():
    traffic = {"source_type": "synthetic", "load_type": "kv_capacity_fraction", "kv_load_ratio": 0.5,
               "isl": 1024, "osl": 128, "request_count": 8}
    sim = build_simulation(load_payload(payload(traffic=traffic)))
    assert sim.workers[0].ranks[0].pool.num_blocks == 15616
    # 15616 blocks x 16 tokens hold 229 requests of 1024 + 128/2 tokens; half of them in flight
    assert sim.driver.max_sessions == math.floor(0.5 * (15616 * 16 // (1024 + 64))) == 114
