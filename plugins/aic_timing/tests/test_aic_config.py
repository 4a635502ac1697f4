"""The aic config: fields, aliases and every rule with its exact message."""

import pytest
from aic_helpers import PATH, QWEN, context

from aisimulate_aic_timing.config import AicConfig, check_engine_agreement, parse_config
from aisimulate_core.errors import ConfigError

P = PATH


def problems(**config):
    with pytest.raises(ConfigError) as info:
        parse_config(config, P)
    return str(info.value).splitlines()


def qwen_problems(**fields):
    return problems(**{**QWEN, **fields})


def test_minimal_config_gets_the_original_defaults():
    config = parse_config(dict(QWEN), P)
    assert config == AicConfig(model="Qwen/Qwen3-32B", backend="vllm", system="h200_sxm", tp=1)
    assert (config.pp, config.attention_dp, config.nextn) == (1, 1, 0)
    assert config.backend_version is None and config.moe_tp_size is None and config.kv_block_size is None


def test_every_field_is_accepted():
    config = parse_config({
        **QWEN, "backend_version": "0.24.0", "pp": 1, "attention_dp": 1, "moe_tp_size": 1,
        "moe_ep_size": 1, "gemm_dtype": "fp8", "moe_dtype": "fp8", "fmha_dtype": "bfloat16",
        "kv_cache_dtype": "fp8", "comm_dtype": "half", "nextn": 2, "kv_block_size": 16,
        "gpu_memory_utilization": 0.8, "mem_fraction_static": 0.7, "free_gpu_memory_fraction": 0.6,
        "systems_path": "/tmp"}, P)
    assert (config.gemm_dtype, config.kv_cache_dtype, config.comm_dtype) == ("fp8", "fp8", "half")
    assert (config.nextn, config.kv_block_size, config.systems_path) == (2, 16, "/tmp")


def test_aliases_map_to_their_fields():
    config = parse_config({"model": "m", "system": "s", "backend": "vllm", "tp_size": 2,
                           "gemm_quant_mode": "fp8", "moe_quant_mode": "bfloat16",
                           "fmha_quant_mode": "fp8", "kvcache_quant_mode": "int8",
                           "comm_quant_mode": "fp8"}, P)
    assert config.tp == 2
    assert (config.gemm_dtype, config.moe_dtype, config.fmha_dtype) == ("fp8", "bfloat16", "fp8")
    assert (config.kv_cache_dtype, config.comm_dtype) == ("int8", "fp8")


def test_null_leaves_an_optional_field_unset():
    config = parse_config({**QWEN, "backend_version": None, "moe_tp_size": None, "moe_ep_size": None,
                           "gpu_memory_utilization": None, "kv_block_size": None}, P)
    assert config == parse_config(dict(QWEN), P)


@pytest.mark.parametrize(
    "config, expected",
    [
        # shape, unknown fields, aliases
        ([1], [f"{P}: must be an object, got [1]"]),
        ({**QWEN, "forward_model": "fpm"}, [f"{P}.forward_model: unknown field"]),
        ({**QWEN, "tp_size": 1}, [f"{P}.tp_size: is an alias of tp; give only one of them"]),
        ({**QWEN, "kv_cache_dtype": "fp8", "kvcache_quant_mode": "fp8"},
         [f"{P}.kvcache_quant_mode: is an alias of kv_cache_dtype; give only one of them"]),
        # required, non-empty model and system
        ({}, [f"{P}.model: is required", f"{P}.backend: is required", f"{P}.system: is required",
              f"{P}.tp: is required"]),
        ({**QWEN, "model": ""}, [f'{P}.model: must not be empty, got ""']),
        ({**QWEN, "system": "  "}, [f'{P}.system: must not be empty, got "  "']),
        ({**QWEN, "model": None}, [f"{P}.model: must be a string, got null"]),
        ({**QWEN, "system": 5}, [f"{P}.system: must be a string, got 5"]),
        # backend
        ({**QWEN, "backend": "tgi"}, [f"{P}.backend: must be one of 'vllm', 'sglang', 'trtllm', got \"tgi\""]),
        ({**QWEN, "backend_version": ""}, [f'{P}.backend_version: must not be empty, got ""']),
        # positive parallel sizes
        ({**QWEN, "tp": 0}, [f"{P}.tp: must be a positive integer, got 0"]),
        ({**QWEN, "tp": None}, [f"{P}.tp: must be a positive integer, got null"]),
        ({**QWEN, "tp": 1.5}, [f"{P}.tp: must be a positive integer, got 1.5"]),
        ({**QWEN, "tp": True}, [f"{P}.tp: must be a positive integer, got true"]),
        ({**QWEN, "tp": 2**32}, [f"{P}.tp: must be at most 4294967295, got 4294967296"]),
        ({**QWEN, "pp": 0}, [f"{P}.pp: must be a positive integer, got 0"]),
        ({**QWEN, "attention_dp": -1}, [f"{P}.attention_dp: must be a positive integer, got -1"]),
        ({**QWEN, "moe_tp_size": 0, "moe_ep_size": 1}, [f"{P}.moe_tp_size: must be a positive integer, got 0"]),
        ({**QWEN, "moe_tp_size": 1, "moe_ep_size": "1"}, [f'{P}.moe_ep_size: must be a positive integer, got "1"']),
        ({**QWEN, "kv_block_size": 0}, [f"{P}.kv_block_size: must be a positive integer, got 0"]),
        # nextn in 0..=5
        ({**QWEN, "nextn": 6}, [f"{P}.nextn: must be an integer in 0..=5, got 6"]),
        ({**QWEN, "nextn": -1}, [f"{P}.nextn: must be an integer in 0..=5, got -1"]),
        # memory fractions finite in [0, 1]
        ({**QWEN, "gpu_memory_utilization": 1.1}, [f"{P}.gpu_memory_utilization: must be a finite number in [0, 1], got 1.1"]),
        ({**QWEN, "mem_fraction_static": -0.1}, [f"{P}.mem_fraction_static: must be a finite number in [0, 1], got -0.1"]),
        ({**QWEN, "free_gpu_memory_fraction": float("nan")}, [f"{P}.free_gpu_memory_fraction: must be a finite number in [0, 1], got NaN"]),
        ({**QWEN, "gpu_memory_utilization": "0.9"}, [f'{P}.gpu_memory_utilization: must be a finite number in [0, 1], got "0.9"']),
        # quant modes are the package's names
        ({**QWEN, "kv_cache_dtype": "fp4"}, [f"{P}.kv_cache_dtype: must be one of 'bfloat16', 'int8', 'fp8', got \"fp4\""]),
        ({**QWEN, "comm_quant_mode": "bf16"}, [f"{P}.comm_quant_mode: must be one of 'half', 'int8', 'fp8', got \"bf16\""]),
        ({**QWEN, "systems_path": "/no/such/dir"},
         [f'{P}.systems_path: must be a directory holding aiconfigurator-core system files, got "/no/such/dir"']),
        # cross-field rules
        ({**QWEN, "moe_tp_size": 1}, [f"{P}.moe_ep_size: is required with moe_tp_size (they are set together)"]),
        ({**QWEN, "moe_ep_size": 1}, [f"{P}.moe_tp_size: is required with moe_ep_size (they are set together)"]),
        ({**QWEN, "tp": 2, "moe_tp_size": 1, "moe_ep_size": 4},
         [f"{P}: tp * attention_dp must equal moe_tp_size * moe_ep_size, got 2 * 1 != 1 * 4"]),
        ({**{k: v for k, v in QWEN.items() if k != "tp"}, "tp_size": 2, "attention_dp": 2, "moe_tp_size": 2, "moe_ep_size": 1},
         [f"{P}: tp_size * attention_dp must equal moe_tp_size * moe_ep_size, got 2 * 2 != 2 * 1"]),
    ],
)
def test_rule_messages(config, expected):
    with pytest.raises(ConfigError) as info:
        parse_config(config, P)
    assert str(info.value).splitlines() == expected


def test_every_field_problem_is_reported_at_once():
    assert qwen_problems(tp=0, nextn=9, extra=1) == [
        f"{P}.tp: must be a positive integer, got 0",
        f"{P}.nextn: must be an integer in 0..=5, got 9",
        f"{P}.extra: unknown field",
    ]


def test_moe_sizes_that_fill_the_attention_ranks_are_accepted():
    config = parse_config({**QWEN, "tp": 2, "attention_dp": 4, "moe_tp_size": 1, "moe_ep_size": 8}, P)
    assert (config.moe_tp_size, config.moe_ep_size) == (1, 8)


@pytest.mark.parametrize(
    "backend, fields, expected",
    [
        ("vllm", {}, ("of_total", 0.9)),
        ("sglang", {}, ("of_total", 0.88)),
        ("trtllm", {}, ("of_free", 0.9)),
        ("vllm", {"gpu_memory_utilization": 0.5, "mem_fraction_static": 0.1}, ("of_total", 0.5)),
        ("sglang", {"mem_fraction_static": 1, "gpu_memory_utilization": 0.1}, ("of_total", 1.0)),
        ("trtllm", {"free_gpu_memory_fraction": 0.0}, ("of_free", 0.0)),
    ],
)
def test_memory_fraction_defaults_and_the_field_each_backend_reads(backend, fields, expected):
    assert parse_config({**QWEN, "backend": backend, **fields}, P).memory_fraction() == expected


# -- agreement with the engine it times ------------------------------------------------------------


def agreement(config, rank=None, engine=None, base=QWEN):
    ctx = context(rank=rank, engine=engine)
    with pytest.raises(ConfigError) as info:
        check_engine_agreement(parse_config({**base, **config}, P), ctx, P)
    return str(info.value).splitlines()


def test_a_matching_config_agrees():
    ctx = context(engine={"dp_size": 2, "tensor_parallel_size": 2})
    check_engine_agreement(parse_config({**QWEN, "tp": 2, "attention_dp": 2, "kv_block_size": 16}, P), ctx, P)


@pytest.mark.parametrize(
    "config, rank, engine, expected",
    [
        ({"backend": "sglang"}, None, None, [f'{P}.backend: must match the engine\'s backend "vllm", got "sglang"']),
        ({"tp": 2}, None, None, [f"{P}.tp: must match the engine's tensor_parallel_size 1, got 2"]),
        ({}, None, {"tensor_parallel_size": 4}, [f"{P}.tp: must match the engine's tensor_parallel_size 4, got 1"]),
        ({"attention_dp": 2}, None, None, [f"{P}.attention_dp: must match the engine's dp_size 1, got 2"]),
        ({"kv_block_size": 32}, None, None, [f"{P}.kv_block_size: must match the engine's block_size 16, got 32"]),
        ({"nextn": 1}, None, None, [f"{P}.nextn: must match the engine's aic_nextn 0, got 1"]),
        ({"nextn": 1}, {"aic_nextn": 2}, None, [f"{P}.nextn: must match the engine's aic_nextn 2, got 1"]),
    ],
)
def test_each_disagreement_has_its_own_message(config, rank, engine, expected):
    assert agreement(config, rank, engine) == expected


def test_disagreements_are_reported_together_under_the_written_key():
    without_tp = {k: v for k, v in QWEN.items() if k != "tp"}
    assert agreement({"backend": "trtllm", "tp_size": 8}, base=without_tp) == [
        f'{P}.backend: must match the engine\'s backend "vllm", got "trtllm"',
        f"{P}.tp_size: must match the engine's tensor_parallel_size 1, got 8",
    ]
