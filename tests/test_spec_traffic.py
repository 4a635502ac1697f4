"""The envelope's traffic: rules, defaults, and `resolve_synthetic` arithmetic."""

import json

import attrs
import pytest

from aisimulate_core.errors import ConfigError
from aisimulate_core.spec import (
    ResolvedSynthetic,
    SyntheticTraffic,
    TraceTraffic,
    kv_capacity,
    load_payload,
    resolve_synthetic,
    round_half_away,
    spec_to_dict,
)

SPEC = {
    "version": 1,
    "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
    "engine": {"rank": {"block_size": 16, "num_gpu_blocks": 2048}},
    "requests": [],
}
DISAGG = {"kind": "disaggregated", "prefill": {"initial_workers": 1}, "decode": {"initial_workers": 2}}


def payload(traffic, spec=None, **kwargs):
    return load_payload({"spec": spec or SPEC, "traffic": traffic}, **kwargs)


def problems(traffic, spec=None, **kwargs):
    with pytest.raises(ConfigError) as info:
        payload(traffic, spec, **kwargs)
    return str(info.value).splitlines()


def synthetic(**fields):
    return {"source_type": "synthetic", "load_type": "concurrency", "concurrency": 4, "isl": 1024, "osl": 128, "request_count": 100, **fields}


def session(**fields):
    return {**synthetic(**fields), "source_type": "synthetic-session"}


def trace(**fields):
    return {"source_type": "trace", "trace_path": "t.jsonl", **fields}


# -- structure and defaults -----------------------------------------------------------------


def test_synthetic_defaults():
    t = payload({"source_type": "synthetic", "isl": 8, "osl": 4, "concurrency": 2, "request_count": 3}).traffic
    assert isinstance(t, SyntheticTraffic)
    assert t.load_type == "concurrency" and t.arrival_seed == 42 and t.turns_per_session is None
    assert (t.shared_prefix_ratio, t.num_prefix_groups, t.inter_turn_delay_ms, t.cached_prefix_tokens) == (0.0, 0, 0.0, 0)
    assert payload(session()).traffic.turns_per_session == 4
    assert payload(session(turns_per_session=2)).traffic.turns_per_session == 2


def test_trace_defaults():
    t = payload(trace()).traffic
    assert isinstance(t, TraceTraffic)
    assert (t.trace_format, t.trace_block_size, t.arrival_speedup_ratio, t.load_type) == ("mooncake", 512, 1.0, None)
    assert t.paths == ("t.jsonl",) and t.replay_concurrency is None and t.max_sim_time_ms is None
    dynamo = payload(trace(trace_format="dynamo", trace_paths=["a", "b"], trace_path=None)).traffic
    assert dynamo.trace_block_size is None and dynamo.paths == ("a", "b")
    assert payload(trace(trace_block_size=64)).traffic.trace_block_size == 64


def test_null_traffic_fields_are_absent():
    t = payload(synthetic(request_rate=None, arrival_seed=None, shared_prefix_ratio=None)).traffic
    assert t.request_rate is None and t.arrival_seed == 42 and t.shared_prefix_ratio == 0.0


def test_reference_runner_payload_shapes_load():
    # The reference runner adds trace_block_size to every traffic and writes both
    # request_count and num_request_ratio, and both trace_path and trace_paths.
    t = payload(synthetic(trace_block_size=512, num_request_ratio=25.0)).traffic
    assert t.request_count == 100 and t.num_request_ratio == 25.0
    doc = trace(trace_paths=["t.jsonl"], load_type="trace_timestamps", arrival_speedup_ratio=2.0, max_sim_time_ms=1000.0)
    spec = {**SPEC, "max_sim_time_ms": 1000.0}
    loaded = payload(doc, spec)
    assert loaded.traffic.paths == ("t.jsonl",) and loaded.max_sim_time_ms == 1000.0


def test_spec_to_dict_round_trips_traffic():
    for doc in (session(shared_prefix_ratio=0.5, num_prefix_groups=4), trace(replay_concurrency=3, load_type="concurrency")):
        loaded = payload(doc)
        echoed = spec_to_dict(loaded)
        assert load_payload(json.loads(json.dumps(echoed))) == loaded


@pytest.mark.parametrize(
    "traffic, expected",
    [
        ({"isl": 3}, ["$.traffic.source_type: is required"]),
        ({"source_type": "synth"}, ["$.traffic.source_type: must be one of 'synthetic', 'synthetic-session', 'trace', got \"synth\""]),
        ("trace", ['$.traffic: expected an object, got "trace"']),
        (synthetic(load_type="gamma"),
         ["$.traffic.load_type: must be one of 'concurrency', 'poisson', 'constant_rate', 'kv_capacity_fraction', got \"gamma\""]),
        (synthetic(isl="8"), ['$.traffic.isl: expected an integer, got "8"']),
        (synthetic(requst_rate=1.0), ["$.traffic.requst_rate: unknown field (did you mean 'request_rate'?)"]),
        (synthetic(trace_path="x", replay_concurrency=3), ["$.traffic.replay_concurrency: only applies to trace traffic",
                                                             "$.traffic.trace_path: only applies to trace traffic"]),
        (synthetic(max_sim_time_ms=10), ["$.traffic.max_sim_time_ms: only applies to trace traffic"]),
        (trace(isl=8, concurrency=2), ["$.traffic.concurrency: only applies to synthetic traffic",
                                        "$.traffic.isl: only applies to synthetic traffic"]),
        (trace(load_type="poisson"), ["$.traffic.load_type: must be one of 'trace_timestamps', 'concurrency', got \"poisson\""]),
        (trace(agentic_warmup=None), ["$.traffic.agentic_warmup: expected a boolean, got null"]),
        (trace(trace_paths="a"), ['$.traffic.trace_paths: expected an array, got "a"']),
    ],
)
def test_traffic_structure(traffic, expected):
    assert problems(traffic) == expected


# -- synthetic rules ------------------------------------------------------------------------


T = "$.traffic"


@pytest.mark.parametrize(
    "traffic, expected",
    [
        (synthetic(isl=None), [f"{T}.isl: is required for synthetic traffic"]),
        (synthetic(osl=0), [f"{T}.osl: must be > 0, got 0"]),
        (synthetic(request_count=0), [f"{T}.request_count: must be > 0, got 0"]),
        (synthetic(request_count=None), [f"{T}.request_count: is required (or num_request_ratio)"]),
        (synthetic(request_count=None, num_request_ratio=0), [f"{T}.num_request_ratio: must be finite and > 0, got 0.0"]),
        (synthetic(request_count=None, num_request_ratio=-1.0), [f"{T}.num_request_ratio: must be finite and > 0, got -1.0"]),
        (synthetic(load_type="poisson", concurrency=None, request_rate=None, request_count=None, num_request_ratio=2.0),
         [f"{T}.num_request_ratio: requires a load to scale: concurrency, request_rate or arrival_interval_ms",
          f"{T}.request_rate: is required for load_type 'poisson'"]),
        (synthetic(concurrency=None), [f"{T}.concurrency: is required for load_type 'concurrency'"]),
        (synthetic(concurrency=0), [f"{T}.concurrency: must be > 0, got 0"]),
        (synthetic(load_type="poisson", concurrency=None), [f"{T}.request_rate: is required for load_type 'poisson'"]),
        (synthetic(load_type="poisson", request_rate=0), [f"{T}.request_rate: must be finite and > 0, got 0.0"]),
        (synthetic(load_type="poisson", request_rate=float("inf")), [f"{T}.request_rate: must be finite and > 0, got Infinity"]),
        (synthetic(load_type="constant_rate"), [f"{T}.arrival_interval_ms: is required for load_type 'constant_rate' (or request_rate)"]),
        (synthetic(load_type="constant_rate", arrival_interval_ms=0), [f"{T}.arrival_interval_ms: must be finite and > 0, got 0.0"]),
        (synthetic(load_type="constant_rate", arrival_interval_ms=10, request_rate=5),
         [f"{T}.arrival_interval_ms: cannot be combined with request_rate, got 10.0"]),
        (synthetic(load_type="kv_capacity_fraction", concurrency=None),
         [f"{T}.kv_load_ratio: is required for load_type 'kv_capacity_fraction'"]),
        (synthetic(load_type="kv_capacity_fraction", concurrency=None, kv_load_ratio=[0.5, 1.0]),
         [f"{T}.kv_load_ratio: must be one number, got [0.5, 1.0]"]),
        (synthetic(load_type="kv_capacity_fraction", concurrency=None, kv_load_ratio=True), [f"{T}.kv_load_ratio: must be one number, got true"]),
        (synthetic(load_type="kv_capacity_fraction", concurrency=None, kv_load_ratio=0), [f"{T}.kv_load_ratio: must be finite and > 0, got 0.0"]),
        (synthetic(load_type="kv_capacity_fraction", kv_load_ratio=0.5),
         [f"{T}.concurrency: cannot be combined with load_type 'kv_capacity_fraction', got 4"]),
        (synthetic(shared_prefix_ratio=1.5), [f"{T}.shared_prefix_ratio: must be between 0 and 1, got 1.5"]),
        (synthetic(shared_prefix_ratio=-0.1), [f"{T}.shared_prefix_ratio: must be between 0 and 1, got -0.1"]),
        (synthetic(shared_prefix_ratio=0.5), [f"{T}.num_prefix_groups: must be > 0 when shared_prefix_ratio > 0, got 0"]),
        (synthetic(inter_turn_delay_ms=-1), [f"{T}.inter_turn_delay_ms: must be finite and >= 0, got -1.0"]),
        (synthetic(turns_per_session=4), [f"{T}.turns_per_session: must be 1 for source_type 'synthetic', got 4"]),
        (session(turns_per_session=0), [f"{T}.turns_per_session: must be > 0, got 0"]),
        (synthetic(cached_prefix_tokens=2048), [f"{T}.cached_prefix_tokens: must be <= isl (1024), got 2048",
                                                f"{T}.cached_prefix_tokens: 2048 is not supported yet"]),
        (synthetic(arrival_seed=-1), [f"{T}.arrival_seed: must be >= 0, got -1"]),
    ],
)
def test_synthetic_rules(traffic, expected):
    assert problems(traffic) == expected


@pytest.mark.parametrize(
    "traffic",
    [
        synthetic(turns_per_session=1),
        synthetic(load_type="poisson", concurrency=None, request_rate=2.5, arrival_seed=0),
        synthetic(load_type="poisson", request_rate=2.5),  # a poisson process under a concurrency cap
        synthetic(load_type="constant_rate", concurrency=None, request_rate=5),
        synthetic(load_type="constant_rate", concurrency=None, arrival_interval_ms=20, request_count=None, num_request_ratio=3),
        synthetic(load_type="kv_capacity_fraction", concurrency=None, kv_load_ratio=1, request_count=None, num_request_ratio=2),
        synthetic(kv_load_ratio=[0.5, 1.0]),  # only kv_capacity_fraction reads it
        session(shared_prefix_ratio=1.0, num_prefix_groups=16, inter_turn_delay_ms=100),
    ],
)
def test_valid_synthetic(traffic):
    payload(traffic)


# -- trace rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "traffic, expected",
    [
        ({"source_type": "trace"}, [f"{T}.trace_path: is required for trace traffic (or trace_paths)"]),
        (trace(trace_path=""), [f'{T}.trace_path: must not be empty, got ""']),
        (trace(trace_path=None, trace_paths=["a", ""], trace_format="dynamo"), [f'{T}.trace_paths[1]: must not be empty, got ""']),
        (trace(trace_path=None, trace_paths=["a", "b"]), [f"{T}.trace_paths: must hold exactly one path for trace_format 'mooncake', got 2"]),
        (trace(trace_paths=["a"]), [f'{T}.trace_path: must equal trace_paths[0] when both are given, got "t.jsonl"']),
        (trace(trace_format=""), [f'{T}.trace_format: must not be empty, got ""']),
        (trace(trace_block_size=0), [f"{T}.trace_block_size: must be > 0, got 0"]),
        (trace(arrival_speedup_ratio=0), [f"{T}.arrival_speedup_ratio: must be finite and > 0, got 0.0"]),
        (trace(replay_concurrency=0), [f"{T}.replay_concurrency: must be > 0, got 0"]),
        (trace(replay_concurrency=8, arrival_speedup_ratio=2.0), [f"{T}.arrival_speedup_ratio: cannot be combined with replay_concurrency, got 2.0"]),
        (trace(load_type="concurrency"), [f"{T}.replay_concurrency: is required for load_type 'concurrency'"]),
        (trace(load_type="trace_timestamps", replay_concurrency=2),
         [f"{T}.replay_concurrency: cannot be combined with load_type 'trace_timestamps', got 2"]),
        (trace(trace_format="applied_compute_agentic"),
         [f"{T}.replay_concurrency: is required for trace_format 'applied_compute_agentic' (its sessions have no timestamps)"]),
        (trace(max_sim_time_ms=-1), [f"{T}.max_sim_time_ms: must be finite and >= 0, got -1.0"]),
        (trace(trace_format="agentic_mooncake", replay_concurrency=2, max_sim_time_ms=5),
         [f"{T}.execution_model: is required for trace_format 'agentic_mooncake'",
          f"{T}.load_type: must be 'trace_timestamps' for trace_format 'agentic_mooncake', got null",
          f"{T}.max_sim_time_ms: is not allowed for trace_format 'agentic_mooncake', got 5.0",
          f"{T}.replay_concurrency: is not allowed for trace_format 'agentic_mooncake', got 2"]),
        (trace(weka_nested_timestamp_basis="relative"),
         [f'{T}.weka_nested_timestamp_basis: requires trace_format \'weka\', got "relative"']),
        (trace(agentic_lanes=2), [f"{T}.agentic_lanes: requires trace_format 'agentic_mooncake', 'weka', 'dynamo', got 2"]),
        (trace(agentic_warmup=True), [f"{T}.agentic_warmup: requires agentic_snapshot, got true",
                                      f"{T}.agentic_warmup: true is not supported yet"]),
    ],
)
def test_trace_rules(traffic, expected):
    assert problems(traffic) == expected


@pytest.mark.parametrize(
    "traffic",
    [
        trace(replay_concurrency=8, load_type="concurrency"),
        trace(replay_concurrency=8, arrival_speedup_ratio=1.0),
        trace(arrival_speedup_ratio=4, load_type="trace_timestamps", max_sim_time_ms=0),
        trace(trace_format="mooncake-delta"),
        trace(trace_format="dynamo", trace_path=None, trace_paths=["a.jsonl", "b.jsonl.gz"], trace_block_size=4),
        trace(trace_format="agentic_mooncake", execution_model="m", load_type="trace_timestamps"),
        trace(trace_format="applied_compute_agentic", replay_concurrency=4),
        trace(trace_format="some_plugin_format"),  # resolved against the trace-format registry later
    ],
)
def test_valid_trace(traffic):
    payload(traffic)


# -- envelope rules ---------------------------------------------------------------------------


def test_traffic_replaces_requests():
    spec = {**SPEC, "requests": [{"id": "a", "arrival_time_ms": 0, "input_tokens": 1, "output_tokens": 1}]}
    assert problems(synthetic(), spec) == ["$.spec.requests: must be empty when traffic is given, got 1 requests"]


def test_cutoffs_must_agree():
    spec = {**SPEC, "max_sim_time_ms": 10.0}
    assert problems(trace(max_sim_time_ms=20.0), spec) == [
        "$.traffic.max_sim_time_ms: must equal $.spec.max_sim_time_ms when both are given, got 20.0"
    ]
    assert payload(trace(max_sim_time_ms=20.0)).max_sim_time_ms == 20.0
    assert payload(trace(), spec).max_sim_time_ms == 10.0


def test_delta_traces_need_an_aggregated_topology():
    assert problems(trace(trace_format="mooncake-delta"), {**SPEC, "topology": DISAGG}, check_support=False) == [
        "$.traffic.trace_format: requires aggregated topology, got \"mooncake-delta\""
    ]


# -- resolve_synthetic --------------------------------------------------------------------------


def resolve(traffic, spec=None, **kwargs):
    loaded = payload(traffic, spec, **kwargs)
    return resolve_synthetic(loaded.traffic, loaded.spec)


def test_round_half_away_from_zero():
    assert [round_half_away(x) for x in (0.0, 0.5, 1.5, 2.5, 3.5, 4.5, 2.4999999, 0.49999999999999994, 7.0)] == [0, 1, 2, 3, 4, 5, 2, 0, 7]


@pytest.mark.parametrize(
    "fields, sessions",
    [
        ({"load_type": "concurrency", "concurrency": 5, "num_request_ratio": 0.5}, 3),  # 2.5 rounds away from zero
        ({"load_type": "concurrency", "concurrency": 9, "num_request_ratio": 0.5}, 5),  # 4.5 -> 5 (Python's round gives 4)
        ({"load_type": "concurrency", "concurrency": 3, "num_request_ratio": 0.1}, 1),  # 0.3 -> 0 -> at least 1
        ({"load_type": "poisson", "request_rate": 4.5, "num_request_ratio": 1.0}, 5),
        ({"load_type": "poisson", "request_rate": 10.0, "concurrency": 3, "num_request_ratio": 2.0}, 6),  # concurrency first
        ({"load_type": "constant_rate", "arrival_interval_ms": 400.0, "num_request_ratio": 5.0}, 13),  # 2.5/s x 5 = 12.5
        ({"load_type": "constant_rate", "request_rate": 2.0, "num_request_ratio": 10.0}, 20),
        ({"load_type": "concurrency", "concurrency": 5, "num_request_ratio": 0.5, "request_count": 7}, 7),
    ],
)
def test_session_count(fields, sessions):
    traffic = {"source_type": "synthetic", "isl": 64, "osl": 8, "concurrency": None, **fields}
    assert resolve(traffic).session_count == sessions


def test_resolve_poisson_bench():
    r = resolve(json.load(open("/work/shared/bench/b1_poisson_fixed.json"))["traffic"])
    assert r == ResolvedSynthetic(
        session_count=20000, turns=1, accumulate=False, isl=1024, osl=512, arrival_kind="poisson_qps", arrival_qps=40.0,
        arrival_seed=42, max_in_flight=None, shared_prefix_ratio=0.0, num_prefix_groups=0, inter_turn_delay_ms=None,
        cached_prefix_tokens=0, block_size=16,
    )


def test_resolve_sessions_bench():
    r = resolve(json.load(open("/work/shared/bench/b4_sessions_cache_pressure.json"))["traffic"])
    assert (r.session_count, r.turns, r.accumulate, r.max_in_flight, r.arrival_kind) == (4096, 4, True, 16, "burst")
    assert (r.shared_prefix_ratio, r.num_prefix_groups, r.arrival_qps) == (0.5, 16, None)


def test_resolve_arrivals():
    assert resolve(synthetic(load_type="constant_rate", concurrency=None, arrival_interval_ms=250)).arrival_qps == 4.0
    r = resolve(synthetic(load_type="constant_rate", concurrency=None, request_rate=3))
    assert (r.arrival_kind, r.arrival_qps, r.max_in_flight) == ("constant_qps", 3.0, None)
    r = resolve(session(turns_per_session=3, inter_turn_delay_ms=50))
    assert (r.turns, r.inter_turn_delay_ms, r.max_in_flight, r.arrival_kind) == (3, 50.0, 4, "burst")


def test_resolve_in_flight_cap_with_the_spec_cap():
    assert resolve(synthetic(concurrency=8), {**SPEC, "max_in_flight": 3}).max_in_flight == 3
    assert resolve(synthetic(load_type="poisson", concurrency=None, request_rate=1.0), {**SPEC, "max_in_flight": 3}).max_in_flight == 3


def kv(ratio, **fields):
    return synthetic(load_type="kv_capacity_fraction", concurrency=None, kv_load_ratio=ratio, **fields)


def test_kv_capacity_fraction():
    # 2048 blocks x 16 tokens x dp 1 x 1 worker = 32768 tokens; 1024 + 128 // 2 = 1088 per request -> 30.
    loaded = payload(kv(0.5))
    assert kv_capacity(loaded.traffic, loaded.spec) == 30
    assert resolve(kv(0.5)).max_in_flight == 15
    assert resolve(kv(0.49)).max_in_flight == 14  # floor(14.7)
    assert resolve(kv(0.01)).max_in_flight == 1  # floor(0.3) = 0, at least 1
    assert resolve(kv(2)).max_in_flight == 60
    # The KV-derived cap replaces spec.max_in_flight, as in the reference.
    assert resolve(kv(0.5), {**SPEC, "max_in_flight": 3}).max_in_flight == 15


def test_kv_capacity_scales_with_dp_and_workers():
    spec = {**SPEC, "topology": {"kind": "aggregated", "workers": {"initial_workers": 3}},
            "engine": {"dp_size": 2, "rank": {"block_size": 16, "num_gpu_blocks": 2048}}}
    r = resolve(kv(0.5, osl=129), spec, check_support=False)  # 196608 // (1024 + 64) = 180
    assert r.max_in_flight == 90


def test_kv_capacity_uses_the_decode_pool_when_disaggregated():
    spec = {**SPEC, "topology": DISAGG, "engine": {"rank": {"block_size": 32, "num_gpu_blocks": 1024},
                                                   "prefill": {"rank": {"block_size": 32, "num_gpu_blocks": 10}}}}
    r = resolve(kv(0.5), spec, check_support=False)  # decode: 2 workers -> 65536 // 1088 = 60
    assert (r.max_in_flight, r.block_size) == (30, 32)  # prompts hash at the prefill block size


def test_kv_capacity_fraction_scales_the_session_count():
    assert resolve(kv(0.5, request_count=None, num_request_ratio=2.5)).session_count == 38  # 15 x 2.5 = 37.5 -> 38


def test_kv_capacity_reads_materialized_capacity():
    loaded = payload(kv(1.0))
    engine = loaded.spec.engine
    bigger = attrs.evolve(loaded.spec, engine=attrs.evolve(engine, rank=attrs.evolve(engine.rank, num_gpu_blocks=4096)))
    assert resolve_synthetic(loaded.traffic, bigger).max_in_flight == 60


def test_kv_capacity_zero_is_an_error():
    loaded = payload(kv(0.5, isl=40000))
    with pytest.raises(ConfigError) as info:
        resolve_synthetic(loaded.traffic, loaded.spec)
    assert str(info.value) == "$.traffic.kv_load_ratio: KV capacity cannot hold one request of isl + osl/2 = 40064 tokens, got capacity 0"
