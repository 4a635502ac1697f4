"""The payload spec: structuring, defaults, value rules, support list, error messages."""

import copy
import glob
import json
import os

import attrs
import pytest

from aisimulate_core.errors import ConfigError
from aisimulate_core.spec import (
    UNSUPPORTED,
    AggregatedTopology,
    DisaggregatedTopology,
    EngineConfig,
    Payload,
    ReplaySpec,
    SyntheticTraffic,
    TimingModelConfig,
    TraceTraffic,
    load_payload,
    spec_to_dict,
)

BENCH = sorted(glob.glob("/work/shared/bench/*.json"))


def bare(**spec):
    """A minimal valid bare ReplaySpec, updated with `spec`."""
    doc = {"topology": {"kind": "aggregated", "workers": {"initial_workers": 1}}, "requests": []}
    doc.update(spec)
    return doc


def envelope(rank=None, **spec):
    doc = bare(**spec)
    if rank is not None:
        doc["engine"] = {"rank": rank}
    return {"spec": doc, "traffic": {"source_type": "synthetic", "isl": 8, "osl": 4, "concurrency": 2, "request_count": 4}}


def request(i, t=0.0, **fields):
    return {"id": f"r{i}", "arrival_time_ms": t, "input_tokens": 4, "output_tokens": 2, **fields}


def problems(data, **kwargs):
    with pytest.raises(ConfigError) as info:
        load_payload(data, **kwargs)
    return str(info.value).splitlines()


def rank_problems(**rank):
    return problems(envelope(rank=rank))


# -- bench payloads -------------------------------------------------------------------------


@pytest.mark.parametrize("path", BENCH, ids=os.path.basename)
def test_every_bench_payload_loads(path):
    with open(path) as f:
        text = f.read()
    payload = load_payload(text)
    if "disagg" in path:
        assert isinstance(payload.spec.topology, DisaggregatedTopology)
        assert payload.spec.engine.rank.kv_transfer_bytes_per_token == 131072
    else:
        assert isinstance(payload.spec.topology, AggregatedTopology)
    assert payload.spec.engine.rank.block_size == 16
    assert payload.spec.engine.num_gpu_blocks_is_explicit is True
    assert load_payload(json.loads(text), check_support=False) == payload


@pytest.mark.parametrize("path", BENCH, ids=os.path.basename)
def test_spec_to_dict_round_trips(path):
    payload = load_payload(open(path).read(), check_support=False)
    echoed = spec_to_dict(payload)
    assert json.loads(json.dumps(echoed)) == echoed
    assert load_payload(echoed, check_support=False) == payload


def test_bench_values():
    b1 = load_payload(open("/work/shared/bench/b1_poisson_fixed.json").read())
    assert b1.spec.engine.rank.timing_model == TimingModelConfig(type="fixed", params={"prefill_ms": 10.0, "decode_ms": 5.0})
    assert b1.spec.record_per_request is False
    assert isinstance(b1.traffic, SyntheticTraffic) and b1.traffic.request_rate == 40.0
    b3 = load_payload(open("/work/shared/bench/b3_mooncake_conversation_4w.json").read())
    assert isinstance(b3.traffic, TraceTraffic)
    assert b3.traffic.paths == ("../shared/data/mooncake/conversation_trace.jsonl",)
    assert b3.spec.sla.ttft_ms == 2000.0 and b3.spec.sla.itl_ms == 50.0 and b3.spec.sla.is_set
    assert b3.spec.topology.workers.initial_workers == 4


# -- JSON text ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"a": 1,\n "b" 2}', "$: invalid JSON: Expecting ':' delimiter (line 2, column 6)"),
        ("", "$: invalid JSON: Expecting value (line 1, column 1)"),
        ('{"version": 1', "$: invalid JSON: Expecting ',' delimiter (line 1, column 14)"),
        ('{"a": NaN}', "$: invalid JSON: NaN is not valid JSON"),
        (b"\xff", "$: invalid JSON: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
        ("[1, 2]", "$: expected an object, got [1, 2]"),
        ('"spec"', '$: expected an object, got "spec"'),
    ],
)
def test_malformed_json(text, message):
    assert problems(text) == [message]


def test_text_bytes_and_dict_give_the_same_payload():
    doc = bare(requests=[request(1)])
    text = json.dumps(doc)
    assert load_payload(text) == load_payload(text.encode()) == load_payload(doc)


def test_input_dict_is_not_modified():
    doc = envelope(rank={"kv_bytes_per_token": 8})
    before = copy.deepcopy(doc)
    load_payload(doc)
    assert doc == before


# -- shapes and paths -----------------------------------------------------------------------


def test_bare_and_envelope_paths():
    assert problems(bare(engine={"rank": {"block_size": 0}})) == ["$.engine.rank.block_size: must be > 0, got 0"]
    assert problems(envelope(rank={"block_size": 0})) == ["$.spec.engine.rank.block_size: must be > 0, got 0"]


def test_bare_spec_needs_requests_envelope_does_not():
    doc = bare()
    del doc["requests"]
    assert problems(doc) == ["$.requests: is required"]
    payload = load_payload({"spec": doc, "traffic": envelope()["traffic"]})
    assert payload.spec.requests == ()


def test_envelope_without_traffic():
    payload = load_payload({"spec": bare(requests=[request(1)])})
    assert payload.traffic is None and len(payload.spec.requests) == 1
    assert load_payload({"spec": bare(), "traffic": None}).traffic is None


@pytest.mark.parametrize(
    "doc, expected",
    [
        ({"spec": bare(), "trafic": {}}, ["$.trafic: unknown field (did you mean 'traffic'?)"]),
        ({"traffic": {"source_type": "trace", "trace_path": "t"}}, ["$.spec: is required"]),
        ({"spec": [1]}, ["$.spec: expected an object, got [1]"]),
        (bare(tpology={}), ["$.tpology: unknown field (did you mean 'topology'?)"]),
        (bare(zzz=1), ["$.zzz: unknown field"]),
        (bare(**{"odd key": 1}), ['$["odd key"]: unknown field']),
        ({"requests": []}, ["$.topology: is required"]),
    ],
)
def test_top_level_shape(doc, expected):
    assert problems(doc) == expected


# -- types ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "doc, expected",
    [
        (bare(topology={"kind": "aggregated", "workers": {"initial_workers": "2"}}),
         '$.topology.workers.initial_workers: expected an integer, got "2"'),
        (bare(topology={"kind": "aggregated", "workers": {"initial_workers": True}}),
         "$.topology.workers.initial_workers: expected an integer, got true"),
        (bare(topology={"kind": "aggregated", "workers": {"initial_workers": 1.0}}),
         "$.topology.workers.initial_workers: expected an integer, got 1.0"),
        (bare(topology={"kind": "aggregated", "workers": {"initial_workers": -1}}),
         "$.topology.workers.initial_workers: must be >= 0, got -1"),
        (bare(topology={"kind": "aggregated", "workers": {"initial_workers": 2**64}}),
         "$.topology.workers.initial_workers: must be <= 18446744073709551615, got 18446744073709551616"),
        (bare(topology={"kind": "aggregated", "workers": {"initial_workers": 1, "startup_delay_ms": "0"}}),
         '$.topology.workers.startup_delay_ms: expected a number, got "0"'),
        (bare(topology={"kind": "aggregated", "workers": {"initial_workers": 1, "startup_delay_ms": False}}),
         "$.topology.workers.startup_delay_ms: expected a number, got false"),
        (bare(record_per_request=1), "$.record_per_request: expected a boolean, got 1"),
        (bare(record_per_request=None), "$.record_per_request: expected a boolean, got null"),
        (bare(adapters={"placement": {"provider": 3}}), "$.adapters.placement.provider: expected a string, got 3"),
        (bare(topology={"kind": "aggregated", "workers": 1}), "$.topology.workers: expected an object, got 1"),
        (bare(topology={"kind": "aggregated"}), "$.topology.workers: is required"),
        (bare(topology={"workers": {"initial_workers": 1}}), "$.topology.kind: is required"),
        (bare(topology={"kind": "agg"}), "$.topology.kind: must be one of 'aggregated', 'disaggregated', got \"agg\""),
        (bare(requests={}), "$.requests: expected an array, got {}"),
        (bare(engine={"rank": None}), "$.engine.rank: expected an object, got null"),
        (bare(engine={"rank": {"num_gpu_blocks": None}}), "$.engine.rank.num_gpu_blocks: expected an integer, got null"),
        (bare(engine={"rank": {"backend": "tgi"}}), "$.engine.rank.backend: must be one of 'vllm', 'sglang', 'trtllm', got \"tgi\""),
        (bare(engine={"rank": {"preemption_mode": "random"}}), "$.engine.rank.preemption_mode: must be one of 'lifo', 'fifo', got \"random\""),
        (bare(engine={"rank": {"worker_type": 1}}), "$.engine.rank.worker_type: must be one of 'aggregated', 'prefill', 'decode', got 1"),
        (bare(engine={"rank": {"kv_transfer_timing_mode": "x"}}),
         "$.engine.rank.kv_transfer_timing_mode: must be one of 'full_prompt', 'destination_missing', got \"x\""),
    ],
)
def test_wrong_types(doc, expected):
    assert problems(doc) == [expected]


def test_integers_are_accepted_for_floats():
    payload = load_payload(bare(max_sim_time_ms=5, sla={"ttft_ms": 100}))
    assert payload.spec.max_sim_time_ms == 5.0 and type(payload.spec.max_sim_time_ms) is float
    assert type(payload.spec.sla.ttft_ms) is float


def test_unknown_fields_suggest_the_close_match():
    assert rank_problems(blok_size=16) == ["$.spec.engine.rank.blok_size: unknown field (did you mean 'block_size'?)"]
    assert rank_problems(num_gpu_block=16) == ["$.spec.engine.rank.num_gpu_block: unknown field (did you mean 'num_gpu_blocks'?)"]
    assert rank_problems(watermark=0.01) == ["$.spec.engine.rank.watermark: unknown field"]
    assert problems(bare(engine={"dp": 2})) == ["$.engine.dp: unknown field"]


def test_every_problem_is_reported_once_in_path_order():
    doc = bare(
        engine={"rank": {"blok_size": 3, "max_num_seqs": "2", "backend": "x"}},
        requests=[request(i) for i in range(12)],
    )
    doc["requests"][10]["id"] = 5
    doc["requests"][2]["input_tokens"] = "4"
    assert problems(doc) == [
        "$.engine.rank.backend: must be one of 'vllm', 'sglang', 'trtllm', got \"x\"",
        "$.engine.rank.blok_size: unknown field (did you mean 'block_size'?)",
        '$.engine.rank.max_num_seqs: expected an integer, got "2"',
        '$.requests[2].input_tokens: expected an integer, got "4"',
        "$.requests[10].id: expected a string, got 5",
    ]


def test_config_error_lists_problems():
    with pytest.raises(ConfigError) as info:
        load_payload(bare(version=2, max_in_flight=0))
    assert info.value.problems == ("$.max_in_flight: must be > 0, got 0", "$.version: must be 1, got 2")


# -- engine defaults ----------------------------------------------------------------------------


def test_defaults():
    spec = load_payload(bare()).spec
    assert spec.version == 1
    assert spec.engine.dp_size == 1 and spec.engine.tensor_parallel_size == 1
    assert spec.engine.rank == EngineConfig()
    rank = spec.engine.rank
    assert (rank.backend, rank.block_size, rank.num_gpu_blocks) == ("vllm", 64, 16384)
    assert (rank.max_num_seqs, rank.max_num_batched_tokens, rank.max_model_len) == (256, 8192, None)
    assert rank.prefill_schedule_interval == 1 and rank.prefill_decode_interval == 0
    assert rank.enable_prefix_caching and rank.enable_chunked_prefill
    assert rank.speedup_ratio == 1.0 and rank.decode_speedup_ratio == 1.0
    assert rank.preemption_mode == "lifo" and rank.worker_type == "aggregated"
    assert rank.kv_transfer_timing_mode == "full_prompt" and rank.aic_mtp_seed == 42
    assert rank.timing_model == TimingModelConfig(type="polynomial")
    assert rank.sglang.max_prefill_tokens == 16384 and rank.sglang.vlm_cache_bytes == 100 * 1024 * 1024
    assert rank.trtllm.capacity_scheduler_policy == "guaranteed_no_evict"
    assert spec.engine.num_gpu_blocks_is_explicit is False
    assert spec.adapters.placement.provider == "round_robin" and spec.adapters.scaling.provider == "none"
    assert spec.record_per_request is True and not spec.sla.is_set
    assert spec.max_sim_time_ms is None and spec.max_in_flight is None and spec.encoder is None
    assert load_payload(bare(engine=None)).spec.engine == spec.engine


@pytest.mark.parametrize(
    "rank, block_size",
    [
        ({}, 64),
        ({"backend": "vllm"}, 64),
        ({"backend": "sglang"}, 1),
        ({"backend": "trtllm"}, 32),
        ({"backend": "sglang", "block_size": 16}, 16),
        ({"backend": "trtllm", "block_size": None}, 32),
    ],
)
def test_block_size_defaults_by_backend(rank, block_size):
    payload = load_payload(bare(engine={"rank": rank}), check_support=False)
    assert payload.spec.engine.rank.block_size == block_size


@pytest.mark.parametrize(
    "engine, explicit",
    [
        ({}, False),
        ({"rank": {}}, False),
        ({"rank": {"num_gpu_blocks": 100}}, True),
        ({"rank": {"num_gpu_blocks": 100}, "num_gpu_blocks_is_explicit": False}, False),
        ({"rank": {}, "num_gpu_blocks_is_explicit": True}, True),
        ({"rank": {}, "num_gpu_blocks_is_explicit": None}, False),
    ],
)
def test_num_gpu_blocks_explicitness(engine, explicit):
    assert load_payload(bare(engine=engine)).spec.engine.num_gpu_blocks_is_explicit is explicit


def test_roles_record_explicitness_and_fall_back_to_the_aggregated_rank():
    engine = {
        "dp_size": 1,
        "rank": {"num_gpu_blocks": 100, "block_size": 16},
        "decode": {"tensor_parallel_size": 2, "rank": {"block_size": 32}},
    }
    spec = load_payload(bare(engine=engine)).spec
    prefill, decode = spec.engine.role("prefill"), spec.engine.role("decode")
    assert prefill.num_gpu_blocks_is_explicit is True and prefill.rank.num_gpu_blocks == 100
    assert prefill.rank.worker_type == "prefill" and prefill.rank.block_size == 16
    assert decode.num_gpu_blocks_is_explicit is False and decode.rank.num_gpu_blocks == 16384
    assert decode.rank.worker_type == "decode" and decode.gpus_per_worker == 2
    aggregated = spec.engine.role("aggregated")
    assert aggregated.rank == spec.engine.rank and aggregated.num_gpu_blocks_is_explicit is True


def test_alias_maps_to_the_canonical_field():
    payload = load_payload(envelope(rank={"kv_bytes_per_token": 131072}))
    assert payload.spec.engine.rank.kv_transfer_bytes_per_token == 131072
    echoed = spec_to_dict(payload)["spec"]["engine"]["rank"]
    assert echoed["kv_transfer_bytes_per_token"] == 131072 and "kv_bytes_per_token" not in echoed


def test_alias_and_canonical_together_is_an_error():
    assert rank_problems(kv_bytes_per_token=1, kv_transfer_bytes_per_token=2) == [
        "$.spec.engine.rank.kv_bytes_per_token: cannot be given together with 'kv_transfer_bytes_per_token' (same field)"
    ]


# -- timing model ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "timing, expected",
    [
        ({"type": "polynomial"}, TimingModelConfig(type="polynomial")),
        ({"type": "fixed", "prefill_ms": 10, "decode_ms": 5.5}, TimingModelConfig(type="fixed", params={"prefill_ms": 10.0, "decode_ms": 5.5})),
        ({"type": "external", "provider": "aic", "config": {"model": "m", "tp": 2}},
         TimingModelConfig(type="external", provider="aic", config={"model": "m", "tp": 2})),
        ({"type": "external", "provider": "mine"}, TimingModelConfig(type="external", provider="mine")),
    ],
)
def test_timing_models(timing, expected):
    assert load_payload(envelope(rank={"timing_model": timing})).spec.engine.rank.timing_model == expected


@pytest.mark.parametrize(
    "timing, expected",
    [
        ({"type": "aic"}, ["type: must be one of 'fixed', 'polynomial', 'external', got \"aic\""]),
        ({}, ["type: is required"]),
        ({"kind": "fixed"}, ["type: is required (the tag is 'type', not 'kind')"]),
        ({"type": "fixed", "prefill_ms": 1}, ["decode_ms: is required"]),
        ({"type": "fixed", "prefill_ms": "1", "decode_ms": 1}, ['prefill_ms: expected a number, got "1"']),
        ({"type": "fixed", "prefill_ms": -1, "decode_ms": 1}, ["prefill_ms: must be finite and >= 0, got -1.0"]),
        ({"type": "fixed", "prefill_ms": 1, "decode_ms": 1, "prefil_ms": 2}, ["prefil_ms: unknown field (did you mean 'prefill_ms'?)"]),
        ({"type": "polynomial", "prefill_ms": 1}, ["prefill_ms: unknown field"]),
        ({"type": "external"}, ["provider: is required"]),
        ({"type": "external", "provider": " "}, ['provider: must not be empty, got " "']),
        ({"type": "external", "provider": "aic", "extra": 1}, ["extra: unknown field"]),
        ("fixed", ['expected an object, got "fixed"']),
    ],
)
def test_timing_model_rules(timing, expected):
    prefix = "$.spec.engine.rank.timing_model"
    got = rank_problems(timing_model=timing)
    assert got == [f"{prefix}.{line}" if not line.startswith("expected") else f"{prefix}: {line}" for line in expected]


def test_timing_model_round_trips():
    for timing in ({"type": "fixed", "prefill_ms": 1.0, "decode_ms": 2.0}, {"type": "external", "provider": "aic", "config": {"a": [1]}}):
        payload = load_payload(envelope(rank={"timing_model": timing}))
        assert spec_to_dict(payload)["spec"]["engine"]["rank"]["timing_model"] == timing


# -- engine value rules ---------------------------------------------------------------------------


R = "$.spec.engine.rank"


@pytest.mark.parametrize(
    "rank, expected",
    [
        ({"num_gpu_blocks": 0}, [f"{R}.num_gpu_blocks: must be > 0, got 0"]),
        ({"block_size": 0}, [f"{R}.block_size: must be > 0, got 0"]),
        ({"block_size": 1}, [f"{R}.block_size: must be >= 2 for backend 'vllm', got 1"]),
        ({"backend": "trtllm", "block_size": 1}, [f"{R}.block_size: must be >= 2 for backend 'trtllm', got 1"]),
        ({"backend": "sglang", "block_size": 1}, []),
        ({"max_num_seqs": 0}, [f"{R}.max_num_seqs: must be > 0, got 0"]),
        ({"max_num_batched_tokens": 0}, [f"{R}.max_num_batched_tokens: must be > 0, got 0"]),
        ({"prefill_schedule_interval": 0}, [f"{R}.prefill_schedule_interval: must be > 0, got 0"]),
        ({"backend": "sglang", "prefill_schedule_interval": 4}, [f"{R}.prefill_schedule_interval: requires backend 'vllm', got 4"]),
        ({"prefill_decode_interval": 2}, [f"{R}.prefill_decode_interval: requires backend 'sglang', got 2"]),
        ({"backend": "sglang", "prefill_decode_interval": 2}, []),
        ({"sglang": {"host_loop": True}}, [f"{R}.sglang.host_loop: requires backend 'sglang', got true"]),
        ({"vision": True, "backend": "trtllm"}, [f"{R}.vision: requires backend 'sglang', got true"]),
        ({"max_model_len": 0}, [f"{R}.max_model_len: must be > 0, got 0"]),
        ({"max_model_len": 128}, []),
        ({"speedup_ratio": -1}, [f"{R}.speedup_ratio: must be finite and >= 0, got -1.0"]),
        ({"speedup_ratio": 0}, []),
        ({"decode_speedup_ratio": float("inf")}, [f"{R}.decode_speedup_ratio: must be finite and >= 0, got Infinity"]),
        ({"aic_nextn": 0}, [f"{R}.aic_nextn: must be > 0, got 0"]),
        ({"aic_nextn": 2, "aic_nextn_accept_rates": "0.8, 1.2,x"},
         [f"{R}.aic_nextn_accept_rates: entry 1 must be a number in [0, 1], got \"1.2\"",
          f"{R}.aic_nextn_accept_rates: entry 2 must be a number in [0, 1], got \"x\""]),
        ({"aic_nextn": 2, "decode_speedup_ratio": 2}, [f"{R}.decode_speedup_ratio: must be 1.0 with aic_nextn, got 2.0"]),
        ({"aic_nextn": 2, "aic_nextn_accept_rates": "0.8,0.5"}, []),
        ({"aic_nextn_accept_rates": "0.5"}, [f"{R}.aic_nextn_accept_rates: requires aic_nextn, got \"0.5\""]),
        ({"backend": "sglang", "enable_chunked_prefill": False}, [f"{R}.enable_chunked_prefill: false is not allowed for backend 'sglang'"]),
        ({"enable_chunked_prefill": False}, []),
        ({"backend": "sglang", "sglang": {"max_prefill_tokens": 0, "chunked_prefill_size": 0, "schedule_conservativeness": -1}},
         [f"{R}.sglang.chunked_prefill_size: must be > 0, got 0", f"{R}.sglang.max_prefill_tokens: must be > 0, got 0",
          f"{R}.sglang.schedule_conservativeness: must be finite and >= 0, got -1.0"]),
        ({"sglang": {"max_prefill_tokens": 0}}, []),
        ({"backend": "sglang", "block_size": 16, "sglang": {"chunked_prefill_size": 1000}},
         [f"{R}.sglang.chunked_prefill_size: must be a multiple of block_size 16, got 1000"]),
        ({"sglang": {"schedule_policy": "lpm"}}, []),
        ({"emit_kv_token_ids": True}, [f"{R}.emit_kv_token_ids: requires emit_kv_events true, got true"]),
        ({"kv_transfer_bytes_per_token": 0}, [f"{R}.kv_transfer_bytes_per_token: must be > 0, got 0"]),
        ({"kv_bytes_per_token": 0}, [f"{R}.kv_transfer_bytes_per_token: must be > 0, got 0"]),
        ({"kv_cache_bytes_per_token": 0}, [f"{R}.kv_cache_bytes_per_token: must be > 0, got 0"]),
        ({"kv_transfer_bandwidth": -1}, [f"{R}.kv_transfer_bandwidth: must be finite and >= 0, got -1.0"]),
        ({"kv_transfer_bandwidth": 0, "kv_transfer_timing_mode": "destination_missing"}, []),
        ({"frontend": {"stages": []}},
         [f"{R}.frontend: requires backend 'sglang' with sglang.host_loop true", f"{R}.frontend.stages: must not be empty, got []"]),
        ({"backend": "sglang", "sglang": {"host_loop": True},
          "frontend": {"stages": [{"service_ms": -1, "workers": 0}, {"service_ms": 1, "workers": 2, "concurrency_scale": [1, 0, 1]}]}},
         [f"{R}.frontend.stages[0].service_ms: must be finite and >= 0, got -1.0",
          f"{R}.frontend.stages[0].workers: must be > 0, got 0",
          f"{R}.frontend.stages[1].concurrency_scale: must have one entry per worker (2), got 3 entries",
          f"{R}.frontend.stages[1].concurrency_scale[1]: must be finite and > 0, got 0.0"]),
        ({"g3_offload": {"scope": "worker_local", "num_g3_blocks": 0, "read_bandwidth_gbps": -1}},
         [f"{R}.g3_offload: requires native_host_offload", f"{R}.g3_offload.num_g3_blocks: must be > 0, got 0",
          f"{R}.g3_offload.read_bandwidth_gbps: must be finite and >= 0, got -1.0"]),
        ({"native_host_offload": {"num_host_blocks": 0, "d2h_bandwidth_gbps": -1}, "enable_prefix_caching": False, "aic_nextn": 1},
         [f"{R}.native_host_offload: requires enable_prefix_caching true, got false",
          f"{R}.native_host_offload: cannot be combined with aic_nextn",
          f"{R}.native_host_offload: requires kv_cache_bytes_per_token",
          f"{R}.native_host_offload.d2h_bandwidth_gbps: must be finite and >= 0, got -1.0",
          f"{R}.native_host_offload.num_host_blocks: must be > 0, got 0"]),
        ({"native_host_offload": {"num_host_blocks": 8}, "kv_cache_bytes_per_token": 16, "backend": "sglang"},
         [f"{R}.native_host_offload: requires backend 'vllm', got \"sglang\""]),
        ({"state_cache": {"bytes_per_request": 1500}, "kv_cache_bytes_per_token": 16, "num_gpu_blocks": 2},
         [f"{R}.num_gpu_blocks: must be >= 3 to hold one token block and one state, got 2"]),
        ({"state_cache": {"bytes_per_request": 1500}, "kv_cache_bytes_per_token": 16, "num_gpu_blocks": 3}, []),
        ({"state_cache": {"bytes_per_request": 0}, "kv_transfer_bandwidth": 1.0, "kv_transfer_timing_mode": "destination_missing"},
         [f"{R}.state_cache: cannot be combined with kv_transfer_bandwidth",
          f"{R}.state_cache: requires kv_transfer_timing_mode 'full_prompt', got \"destination_missing\"",
          f"{R}.state_cache: requires kv_cache_bytes_per_token",
          f"{R}.state_cache.bytes_per_request: must be > 0, got 0"]),
    ],
)
def test_rank_rules(rank, expected):
    # Support is checked separately; these are the reference's value rules.
    if expected:
        assert problems(envelope(rank=rank), check_support=False) == expected
    else:
        load_payload(envelope(rank=rank), check_support=False)


@pytest.mark.parametrize(
    "engine, expected",
    [
        ({"dp_size": 0}, ["$.engine.dp_size: must be > 0, got 0"]),
        ({"tensor_parallel_size": 0}, ["$.engine.tensor_parallel_size: must be > 0, got 0"]),
        ({"dp_size": 2**32}, ["$.engine.dp_size: must be <= 4294967295, got 4294967296"]),
        ({"prefill": {"dp_size": 0, "rank": {"block_size": 0}}},
         ["$.engine.prefill.dp_size: must be > 0, got 0", "$.engine.prefill.rank.block_size: must be > 0, got 0"]),
        ({"prefill": None, "decode": None}, []),
        ({"dp_size": 2, "rank": {"native_host_offload": {"num_host_blocks": 8}, "kv_cache_bytes_per_token": 8}},
         ["$.engine.dp_size: must be 1 with native_host_offload, got 2"]),
    ],
)
def test_engine_rules(engine, expected):
    if expected:
        assert problems(bare(engine=engine), check_support=False) == expected
    else:
        load_payload(bare(engine=engine), check_support=False)


def test_host_offload_requires_aggregated_topology():
    engine = {"rank": {"native_host_offload": {"num_host_blocks": 8}, "kv_cache_bytes_per_token": 8}}
    topology = {"kind": "disaggregated", "prefill": {"initial_workers": 1}, "decode": {"initial_workers": 1}}
    assert problems(bare(engine=engine, topology=topology), check_support=False) == [
        "$.engine.rank.native_host_offload: requires aggregated topology"
    ]


# -- spec value rules -----------------------------------------------------------------------------


DISAGG = {"kind": "disaggregated", "prefill": {"initial_workers": 1}, "decode": {"initial_workers": 2}}


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({"version": 2}, ["$.version: must be 1, got 2"]),
        ({"topology": {"kind": "aggregated", "workers": {"initial_workers": 0}}},
         ["$.topology.workers.initial_workers: must be > 0, got 0"]),
        ({"topology": {"kind": "aggregated", "workers": {"initial_workers": 1, "startup_delay_ms": -5}}},
         ["$.topology.workers.startup_delay_ms: must be finite and >= 0, got -5.0"]),
        ({"topology": {**DISAGG, "handoff_latency_ms": -1, "decode": {"initial_workers": 0}}},
         ["$.topology.decode.initial_workers: must be > 0, got 0", "$.topology.handoff_latency_ms: must be finite and >= 0, got -1.0"]),
        ({"max_sim_time_ms": -1}, ["$.max_sim_time_ms: must be finite and >= 0, got -1.0"]),
        ({"max_sim_time_ms": 0}, []),
        ({"max_in_flight": 0}, ["$.max_in_flight: must be > 0, got 0"]),
        ({"adapters": {"placement": {"provider": ""}}}, ['$.adapters.placement.provider: must not be empty, got ""']),
        ({"adapters": {"placement": {"provider": "kv", "config": {"a": 1}}}}, []),
        ({"sla": {"ttft_ms": 0}}, ["$.sla.ttft_ms: must be finite and > 0, got 0.0"]),
        ({"sla": {"itl_ms": -1}}, ["$.sla.itl_ms: must be finite and > 0, got -1.0"]),
        ({"sla": {"e2e_ms": 5, "ttft_ms": 100}}, ["$.sla.e2e_ms: cannot be combined with ttft_ms or itl_ms, got 5.0"]),
        ({"sla": {"e2e_ms": 5, "itl_ms": 1}}, ["$.sla.e2e_ms: cannot be combined with ttft_ms or itl_ms, got 5.0"]),
        ({"sla": {"e2e_ms": 5}}, []),
        ({"sla": {"ttft_ms": 5}}, []),
        ({"sla": {"ttft_ms": None}}, []),
        ({"encoder": {"instances": 0, "max_batch": 2, "preprocess_ms": -1, "forward_ms_by_batch": [1, -1, 2],
                      "transfer_bytes_per_request": 1, "transfer_bandwidth_gb_s": 0}},
         ["$.encoder.forward_ms_by_batch: must have max_batch (2) entries, got 3",
          "$.encoder.forward_ms_by_batch[1]: must be finite and >= 0, got -1.0",
          "$.encoder.instances: must be > 0, got 0",
          "$.encoder.preprocess_ms: must be finite and >= 0, got -1.0",
          "$.encoder.transfer_bandwidth_gb_s: must be finite and > 0, got 0.0"]),
    ],
)
def test_spec_rules(spec, expected):
    if expected:
        assert problems(bare(**spec), check_support=False) == expected
    else:
        load_payload(bare(**spec), check_support=False)


# -- requests -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"id": ""}, ['$.requests[1].id: must not be empty, got ""']),
        ({"id": "r0"}, ['$.requests[1].id: must be unique (also $.requests[0].id), got "r0"']),
        ({"arrival_time_ms": -1}, ["$.requests[1].arrival_time_ms: must be finite and >= 0, got -1.0"]),
        ({"arrival_time_ms": float("nan")}, ["$.requests[1].arrival_time_ms: must be finite and >= 0, got NaN"]),
        ({"input_token_ids": [1, 2, 3]}, ["$.requests[1].input_token_ids: must have input_tokens (4) entries, got 3"]),
        ({"input_token_ids": [1, 2, -3, 4]}, ["$.requests[1].input_token_ids[2]: must be a token id in [0, 4294967295], got -3"]),
        ({"input_token_ids": [1, 2, True, 4]}, ["$.requests[1].input_token_ids[2]: expected an integer, got true"]),
        ({"input_token_ids": "abcd"}, ['$.requests[1].input_token_ids: expected an array, got "abcd"']),
        ({"input_token_ids": [1, 2, 3, 4], "output_token_ids": [9, 9, 9]}, []),
        ({"dp_rank": 1}, ["$.requests[1].dp_rank: must be < dp_size (1), got 1"]),
        ({"dp_rank": 0}, []),
        ({"prefill_dp_rank": 0}, ["$.requests[1].prefill_dp_rank: requires disaggregated topology, got 0"]),
        ({"session_id": "s", "turn_index": 3}, []),
        ({"metadata": "gold"}, ['$.requests[1].metadata: expected an object, got "gold"']),
        ({"metadata": {"priority": "high", "strict_priority": -1, "policy_class": 3, "other": [1]}},
         ['$.requests[1].metadata.policy_class: expected a string, got 3',
          '$.requests[1].metadata.priority: expected an integer, got "high"',
          "$.requests[1].metadata.strict_priority: must be in [0, 4294967295], got -1"]),
        ({"metadata": {"priority": -3, "strict_priority": 7, "policy_class": "gold", "tag": None}}, []),
        ({"extra": 1}, ["$.requests[1].extra: unknown field"]),
    ],
)
def test_request_rules(fields, expected):
    doc = bare(requests=[request(0), request(1, **fields)])
    if expected:
        assert problems(doc) == expected
    else:
        load_payload(doc)


def test_request_dp_ranks_follow_the_serving_role():
    doc = bare(topology=DISAGG, engine={"decode": {"dp_size": 2}}, requests=[request(0, dp_rank=1, prefill_dp_rank=1)])
    assert problems(doc, check_support=False) == ["$.requests[0].prefill_dp_rank: must be < prefill dp_size (1), got 1"]


def test_request_routing_metadata():
    spec = load_payload(bare(requests=[request(0, metadata={"priority": -3, "strict_priority": 7, "policy_class": "gold"}), request(1)])).spec
    assert (spec.requests[0].priority, spec.requests[0].strict_priority, spec.requests[0].policy_class) == (-3, 7, "gold")
    assert (spec.requests[1].priority, spec.requests[1].policy_class, spec.requests[1].metadata) == (0, None, None)


def test_requests_are_sorted_by_arrival_stably():
    doc = bare(requests=[request(0, 5.0), request(1, 1.0), request(2, 5.0), request(3, 0.0), request(4, 1.0)])
    spec = load_payload(doc).spec
    assert [r.id for r in spec.requests] == ["r3", "r1", "r4", "r0", "r2"]
    assert isinstance(spec.requests, tuple) and spec.requests[0].input_token_ids is None


def test_request_token_ids_are_tuples():
    spec = load_payload(bare(requests=[request(0, input_token_ids=[1, 2, 3, 4])])).spec
    assert spec.requests[0].input_token_ids == (1, 2, 3, 4)


# -- not supported yet ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["spec"].update(encoder={"instances": 1, "max_batch": 1, "preprocess_ms": 1, "forward_ms_by_batch": [1],
                                             "transfer_bytes_per_request": 1, "transfer_bandwidth_gb_s": 1}),
         "$.spec.encoder: not supported yet"),
        (lambda d: d.update(capture_performance_diagnostics=True), "$.capture_performance_diagnostics: true is not supported yet"),
        (lambda d: d["traffic"].update(cached_prefix_tokens=4), "$.traffic.cached_prefix_tokens: 4 is not supported yet"),
    ],
)
def test_not_supported_yet(mutate, expected):
    doc = envelope(rank={})
    mutate(doc)
    assert expected in problems(doc)
    load_payload(doc, check_support=False)


def test_engine_features_of_the_reference_are_accepted():
    """What issue 11 built loads: SGLang in a disaggregated topology, the G2 host tier, the
    state cache, MTP, prefill cadence and KV events."""
    doc = envelope(topology=DISAGG)
    doc["spec"]["engine"] = {"rank": {"backend": "sglang"}, "prefill": {"rank": {"backend": "sglang"}}}
    load_payload(doc)
    for rank in ({"native_host_offload": {"num_host_blocks": 8}, "kv_cache_bytes_per_token": 8},
                 {"state_cache": {"bytes_per_request": 8}, "kv_cache_bytes_per_token": 8,
                  "num_gpu_blocks": 64, "block_size": 16},
                 {"aic_nextn": 2}, {"prefill_schedule_interval": 4},
                 {"emit_kv_events": True, "emit_kv_token_ids": True}):
        load_payload(envelope(rank=rank))


@pytest.mark.parametrize("prefill, decode", [("vllm", "trtllm"), ("trtllm", "vllm"), ("vllm", "sglang")])
def test_disaggregated_roles_need_one_backend(prefill, decode):
    doc = envelope(topology=DISAGG)
    doc["spec"]["engine"] = {"rank": {"backend": prefill}, "decode": {"rank": {"backend": decode}}}
    assert problems(doc, check_support=False) == [
        f"$.spec.engine.decode.rank.backend: must match the prefill role's backend \"{prefill}\" "
        f"in a disaggregated topology, got \"{decode}\""]


def test_a_disaggregated_role_falls_back_to_the_aggregated_rank():
    doc = envelope(topology=DISAGG)
    doc["spec"]["engine"] = {"rank": {"backend": "trtllm", "num_gpu_blocks": 64, "block_size": 16},
                             "decode": {"rank": {"backend": "trtllm", "block_size": 16}}}
    engine = load_payload(doc).spec.engine
    assert (engine.role("prefill").rank.num_gpu_blocks, engine.role("prefill").rank.worker_type) == (64, "prefill")
    # a role given in the payload is a whole rank: its missing fields take the defaults
    assert (engine.role("decode").rank.num_gpu_blocks, engine.role("decode").rank.worker_type) == (16384, "decode")


@pytest.mark.parametrize(
    "rank",
    [
        {"backend": "vllm"},
        {"prefill_schedule_interval": 1, "emit_kv_events": False, "emit_kv_token_ids": False, "vision": False},
        {"aic_nextn": None, "native_host_offload": None, "g3_offload": None, "state_cache": None, "frontend": None},
        {"preemption_mode": "fifo", "enable_prefix_caching": False, "enable_chunked_prefill": False, "max_model_len": 100},
        {"speedup_ratio": 2.0, "decode_speedup_ratio": 0.5, "worker_type": "decode", "aic_mtp_seed": 7},
    ],
)
def test_default_values_of_unsupported_fields_are_accepted(rank):
    load_payload(envelope(rank=rank, encoder=None))


def test_support_list_is_data():
    scopes = {"payload", "spec", "topology", "engine", "rank", "disaggregated_rank", "traffic"}
    assert all(scope in scopes and isinstance(accepted, tuple) for scope, _, accepted in UNSUPPORTED)
    # what stays: fields the reference's offline API cannot exercise (README "What stays rejected")
    assert {field for _, field, _ in UNSUPPORTED} == {
        "capture_performance_diagnostics", "encoder", "backend", "frontend", "vision",
        "cached_prefix_tokens", "agentic_snapshot", "agentic_warmup"}


# -- objects --------------------------------------------------------------------------------------


def test_payload_objects_are_frozen():
    payload = load_payload(envelope())
    assert isinstance(payload, Payload) and isinstance(payload.spec, ReplaySpec)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        payload.spec.engine.rank.block_size = 3


def test_spec_to_dict_of_a_spec():
    spec = load_payload(bare(requests=[request(0, metadata={"k": None})])).spec
    echoed = spec_to_dict(spec)
    assert echoed["topology"] == {"kind": "aggregated", "workers": {"initial_workers": 1, "startup_delay_ms": 0.0}}
    assert echoed["requests"] == [{"id": "r0", "arrival_time_ms": 0.0, "input_tokens": 4, "output_tokens": 2, "metadata": {"k": None}}]
    assert echoed["engine"]["rank"]["block_size"] == 64 and "max_model_len" not in echoed["engine"]["rank"]
    assert load_payload(echoed).spec == spec
