"""Step times of the aic provider against aiconfigurator-core's own predictions."""

import json

import pytest
from aic_helpers import MODEL, PATH, SYSTEM, aic_timing, context, payload

import aiconfigurator_core
from aiconfigurator_core.sdk.engine import compile_engine
from aisimulate_aic_timing import AicTiming, AicTimingModel, aic_calls
from aisimulate_core import build_simulation, collect_registries, load_payload, make_plugin_manager, run_replay
from aisimulate_core.engine.timing import modeled_ms
from aisimulate_core.errors import ConfigError, SimulationError
from aisimulate_core.runtime.build import resolve_timing

PREFILL_POINTS = [(1, 1024, 0), (1, 1024, 512), (4, 4096, 2048), (3, 17, 5), (1, 32768, 0), (2, 1024, 1023)]
DECODE_POINTS = [(1, 1024), (8, 1024), (64, 8192), (256, 1024), (7, 1), (32, 40000)]


@pytest.fixture(scope="module")
def package_engine():
    """The package's own engine for Qwen3-32B on an H200 with vLLM, compiled without the plugin."""
    return aiconfigurator_core.AicEngine.from_spec(
        compile_engine(MODEL, SYSTEM, "vllm", "0.24.0", tp_size=1), None)


@pytest.fixture(scope="module")
def model():
    return AicTiming.from_config(aic_timing()["config"], context())


def test_registered_through_the_entry_point():
    pm = make_plugin_manager(autoload=False, plugins=["aic_timing"])
    assert collect_registries(pm).timing.get("aic") is AicTiming


@pytest.mark.parametrize("point", PREFILL_POINTS)
def test_prefill_equals_the_package_prediction(model, package_engine, point):
    assert model.prefill_ms(*point) == package_engine.predict_prefill_latency(*point)


@pytest.mark.parametrize("batch_size, context_length", DECODE_POINTS)
def test_decode_is_one_step_of_the_package_at_the_mean_context(model, package_engine, batch_size, context_length):
    expected = package_engine.predict_decode_latency(batch_size, context_length, 2)
    # the KV occupancy arguments are not AIC inputs
    assert model.decode_ms(batch_size, 0, context_length, 0) == expected
    assert model.decode_ms(batch_size, 10**6, context_length, 10**7) == expected


def test_known_values_of_the_package(model):
    # values measured on aiconfigurator-core 0.12.0 for Qwen3-32B, h200_sxm, vllm 0.24.0, TP1
    assert round(model.prefill_ms(1, 1024, 0), 3) == 93.191
    assert round(model.decode_ms(8, 8192, 1024, 0), 3) == 19.320


def test_the_engine_timer_scales_package_predictions_to_whole_nanoseconds(package_engine):
    spec = load_payload(payload(), check_support=False).spec
    registries = collect_registries(make_plugin_manager())
    timer = resolve_timing(registries, spec.engine.role("aggregated"), "aggregated", "$.spec.engine")
    assert timer.prefill(2, 2048, 64) == modeled_ms(package_engine.predict_prefill_latency(2, 2048, 64), 1.0)
    assert timer.decode(16, 16 * 900, 900, 10**6) == modeled_ms(package_engine.predict_decode_latency(16, 900, 2), 1.0)


def test_empty_batches_and_fully_cached_prompts_cost_nothing(model):
    assert model.prefill_ms(0, 1024, 0) == 0.0
    assert model.prefill_ms(1, 512, 512) == 0.0
    assert model.decode_ms(0, 0, 1024, 0) == 0.0


def test_predictions_are_memoized_on_their_exact_arguments(package_engine):
    model = AicTimingModel(package_engine, None, None)
    first = model.decode_ms(8, 100, 1000, 5000)
    assert model.decode_ms(8, 200, 1000, 9000) is first  # same AIC arguments: no new call
    assert model._decode_memo == {(8, 1000): first}
    model.prefill_ms(2, 300, 100)
    model.prefill_ms(2, 300, 100)
    model.prefill_ms(2, 300, 101)
    assert list(model._prefill_memo) == [(2, 300, 100), (2, 300, 101)]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: m.decode_ms(1, 0, 2**32, 0), "timing 'aic': mean context length 4294967296 exceeds AIC's u32 limit (4294967295)"),
        (lambda m: m.decode_ms(2**32, 0, 1, 0), "timing 'aic': decode batch size 4294967296 exceeds AIC's u32 limit (4294967295)"),
        (lambda m: m.prefill_ms(1, 2**32, 0), "timing 'aic': mean input length 4294967296 exceeds AIC's u32 limit (4294967295)"),
        (lambda m: m.prefill_ms(2**33, 8, 0), "timing 'aic': prefill batch size 8589934592 exceeds AIC's u32 limit (4294967295)"),
    ],
)
def test_values_above_u32_are_errors(model, call, message):
    with pytest.raises(SimulationError) as info:
        call(model)
    assert str(info.value) == message


def test_one_request_replay_starts_decoding_after_the_package_prefill(package_engine):
    report = run_replay(payload(rank={"num_gpu_blocks": 4096}, traffic={
        "source_type": "synthetic", "isl": 1024, "osl": 2, "concurrency": 1, "request_count": 1}))
    summary = json.loads(report.to_json())
    prefill = modeled_ms(package_engine.predict_prefill_latency(1, 1024, 0), 1.0)
    assert summary["mean_ttft_ms"] == pytest.approx(prefill, abs=1e-6)
    assert summary["aic_backend_version"] == "0.24.0"
    assert summary["aic_backend_version_source"] == "database current"


def test_an_explicit_version_is_reported_as_explicit():
    model = AicTiming.from_config(aic_timing(backend_version="next")["config"], context())
    assert model.report_extras() == {"aic_backend_version": "0.27.0", "aic_backend_version_source": "explicit"}


def test_each_engine_is_compiled_once_per_run():
    loaded = load_payload(payload(rank={"num_gpu_blocks": 512}), check_support=False)
    compiles = aic_calls.compiled_engine.cache_info().misses
    first = build_simulation(loaded)
    second = build_simulation(loaded)
    assert aic_calls.compiled_engine.cache_info().misses - compiles <= 1
    assert first.workers[0].ranks[0].timer.model.engine is second.workers[0].ranks[0].timer.model.engine


@pytest.mark.parametrize(
    "config, expected",
    [
        ([1], [f"{PATH}: must be an object, got [1]"]),
        (None, [f"{PATH}.{field}: is required" for field in ("model", "backend", "system", "tp")]),
    ],
)
def test_a_payload_config_that_is_not_a_config_object(config, expected):
    data = payload()
    data["spec"]["engine"]["rank"]["timing_model"]["config"] = config
    with pytest.raises(ConfigError) as info:
        run_replay(data)
    assert str(info.value).splitlines() == expected


def test_a_model_the_package_cannot_build_is_a_config_error(tmp_path):
    # a local checkpoint directory needs no network; Mistral is not an architecture AIC models
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["MistralForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
        "vocab_size": 32000, "max_position_embeddings": 32768}))
    config = aic_timing(model=str(tmp_path))["config"]
    with pytest.raises(ConfigError) as info:
        AicTiming.from_config(config, context())
    assert str(info.value).startswith(
        f"{PATH}: aiconfigurator-core cannot time {tmp_path} on h200_sxm with vllm 0.24.0, tp 1, pp 1, "
        "attention_dp 1: ValueError: The model's architecture MistralForCausalLM is not supported.")
