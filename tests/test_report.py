import glob
import json
import math
import os
import uuid as uuidlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisimulate_core.report import (
    PER_REQUEST_KEYS,
    Collector,
    Report,
    RequestRecord,
    _made,
    _RecordStream,
    aggregated_record,
    disaggregated_record,
    per_request_record,
    route_entry,
    summary_keys,
)
from aisimulate_core.stats import population_std

HERE = os.path.dirname(__file__)

# Summary keys in order, as ai-dynamo-runtime 1.6.1 prints them (aggregated synthetic run, no SLA).
EXPECTED_KEYS = [
    "kv_eviction_policy", "committed_prefill_tokens",
    "num_requests", "completed_requests", "total_input_tokens", "total_output_tokens",
    "duration_ms", "wall_time_ms", "request_throughput_rps", "input_throughput_tok_s",
    "output_throughput_tok_s", "total_throughput_tok_s", "prefill_worker_seconds",
    "decode_worker_seconds", "prefill_gpus_per_worker", "decode_gpus_per_worker", "gpu_hours",
    "power_w", "power_coverage",
    "processed_tokens", "processed_tokens_per_s", "processed_output_tokens_per_s",
    "prefix_cache_reused_ratio", "first_admission_prefix_cache_reused_ratio",
    "num_ttft_samples", "num_tpot_samples", "num_e2e_latency_samples",
    "mean_ttft_ms", "min_ttft_ms", "max_ttft_ms", "median_ttft_ms", "p75_ttft_ms", "p90_ttft_ms",
    "p95_ttft_ms", "p99_ttft_ms", "std_ttft_ms",
    "mean_ttst_ms", "min_ttst_ms", "max_ttst_ms", "median_ttst_ms", "p75_ttst_ms", "p90_ttst_ms",
    "p95_ttst_ms", "p99_ttst_ms", "std_ttst_ms",
    "mean_tpot_ms", "min_tpot_ms", "max_tpot_ms", "median_tpot_ms", "p75_tpot_ms", "p90_tpot_ms",
    "p95_tpot_ms", "p99_tpot_ms", "std_tpot_ms",
    "mean_itl_ms", "min_itl_ms", "max_itl_ms", "median_itl_ms", "p75_itl_ms", "p90_itl_ms",
    "p95_itl_ms", "p99_itl_ms", "std_itl_ms",
    "mean_e2e_latency_ms", "min_e2e_latency_ms", "max_e2e_latency_ms", "median_e2e_latency_ms",
    "p75_e2e_latency_ms", "p90_e2e_latency_ms", "p95_e2e_latency_ms", "p99_e2e_latency_ms",
    "std_e2e_latency_ms",
    "mean_output_token_throughput_per_user", "min_output_token_throughput_per_user",
    "max_output_token_throughput_per_user", "median_output_token_throughput_per_user",
    "p75_output_token_throughput_per_user", "p90_output_token_throughput_per_user",
    "p95_output_token_throughput_per_user", "p99_output_token_throughput_per_user",
    "std_output_token_throughput_per_user",
]
GOODPUT_KEYS = ["goodput_completed_requests", "goodput_request_throughput_rps",
                "goodput_output_throughput_tok_s"]
EXPECTED_KEYS_WITH_SLA = (EXPECTED_KEYS[:EXPECTED_KEYS.index("power_w")] + GOODPUT_KEYS
                          + EXPECTED_KEYS[EXPECTED_KEYS.index("power_w"):])

# Per-request keys in order (aggregated and disaggregated records of ai-dynamo-runtime 1.6.1;
# request_id / play_id / metadata / first-admission G1-host split are omitted when unset).
EXPECTED_RECORD_KEYS = [
    "session_id", "turn_index", "uuid", "arrival_time_ms", "dispatched_at_ms", "first_admit_ms",
    "terminal_time_ms", "first_token_ms", "last_token_ms", "ttft_ms", "ttst_ms",
    "e2e_latency_ms", "itl_ms", "input_length", "requested_output_length", "output_length",
    "reused_input_tokens", "prefill_worker_idx", "decode_worker_idx", "prefill_admit_ms",
    "source_held_ms", "destination_reserved_ms", "destination_activated_ms", "decode_admit_ms",
    "source_released_ms", "decode_reused_input_tokens", "prefill_route_overlap_tokens",
    "decode_route_overlap_tokens", "routing_history", "admission_history", "admission_count",
    "readmission_count", "pressure_record_ordinals", "terminal_status",
]
EXPECTED_ROUTE_KEYS = [
    "pool", "outcome", "queue_entered_at_ms", "released_at_ms", "queue_wait_ms",
    "logical_worker_id", "scheduler_id", "dp_rank", "reported_overlap_tokens",
    "selected_overlap_blocks", "best_available_overlap_blocks", "overlap_regret_blocks",
    "placement_replica_id",
]
EXPECTED_ADMISSION_KEYS = ["admission_ordinal", "pool_admission_ordinal", "pool", "at_ms",
                           "reused_input_tokens", "is_readmission"]


class Sla:
    def __init__(self, ttft_ms=None, itl_ms=None, e2e_ms=None):
        self.ttft_ms, self.itl_ms, self.e2e_ms = ttft_ms, itl_ms, e2e_ms


def rec(uuid=1, *, arrival=0.0, tokens=None, status="completed", admitted=True, isl=100,
        requested=None, reused=0, first_reused=None, terminal=None, request_id=None,
        admissions=None, **kw):
    """A record whose token times are ``tokens`` (list of ms)."""
    tokens = list(tokens or [])
    if admissions is None:
        admissions = [(arrival, "agg", first_reused if first_reused is not None else reused,
                       False)] if admitted else []
    if first_reused is None:
        first_reused = reused
    fields = dict(
        uuid=uuid, request_id=request_id, session_id=None, turn_index=None, play_id=None,
        metadata=None, arrival_time_ms=arrival, dispatched_at_ms=None,
        terminal_time_ms=terminal if terminal is not None else (tokens[-1] if tokens else arrival),
        terminal_status=status, input_length=isl,
        requested_output_length=requested if requested is not None else len(tokens),
        output_length=len(tokens), first_token_ms=tokens[0] if tokens else None,
        second_token_ms=tokens[1] if len(tokens) > 1 else None,
        last_token_ms=tokens[-1] if tokens else None, reused_input_tokens=reused,
        first_admission_reused_input_tokens=first_reused if admitted else None,
        admissions=admissions, prefill_worker_idx=None, decode_worker_idx=0,
        routing=[("agg", 0, 0)],
    )
    fields.update(kw)
    return RequestRecord(**fields)


def collect(records, *, sla=None, per_request=False, gaps=True, wall_time_ms=1000.0, **kw):
    col = Collector(sla=sla, record_per_request=per_request, **kw)
    for r in records:
        col.on_arrival()
        col.on_terminal(r)
        if gaps and r.terminal_status == "completed" and r.admissions and r.output_length > 1:
            times = [r.first_token_ms, r.second_token_ms]
            col.add_itl_gaps([times[1] - times[0]], [1])
    return col


# ------------------------------------------------------------------------------ key order


def test_summary_key_order_matches_reference():
    report = collect([rec(tokens=[10.0, 15.0])]).finalize(wall_time_ms=5.0)
    assert list(report.summary) == EXPECTED_KEYS
    assert summary_keys() == EXPECTED_KEYS


def test_summary_key_order_with_sla_puts_goodput_after_gpu_hours():
    report = collect([rec(tokens=[10.0])], sla=Sla(ttft_ms=20.0)).finalize(wall_time_ms=5.0)
    assert list(report.summary) == EXPECTED_KEYS_WITH_SLA
    assert summary_keys(goodput=True) == EXPECTED_KEYS_WITH_SLA


def test_unset_sla_means_no_goodput_keys():
    for sla in (None, Sla(), {"ttft_ms": None}):
        report = collect([rec(tokens=[10.0])], sla=sla).finalize(wall_time_ms=5.0)
        assert "goodput_completed_requests" not in report.summary


def test_extras_take_their_reference_slots():
    col = collect([rec(tokens=[10.0])])
    col.add_extra("agentic_qualification", "functional_only")
    col.add_extra("power_w", 450.0)
    col.add_extra("committed_prefill_tokens", 77)
    col.add_extra("kv_eviction_policy", "belady")
    col.add_extra("kv_eviction_assumption", "global_input_trace_order_v1")
    col.add_extra("agentic_graph", {"id": "g"})
    col.set_trajectories(total=3, completed=2, e2e_latencies_ms=[10.0, 30.0])
    keys = list(col.finalize(wall_time_ms=1.0).summary)
    assert keys[:3] == ["kv_eviction_policy", "kv_eviction_assumption",
                        "committed_prefill_tokens"]
    assert keys[keys.index("gpu_hours") + 1:keys.index("gpu_hours") + 3] == [
        "power_w", "power_coverage"]
    traj = keys.index("total_trajectories")
    assert keys[traj - 1] == "std_itl_ms"
    assert keys[traj:traj + 3] == ["total_trajectories", "completed_trajectories",
                                   "incomplete_trajectories"]
    assert keys[traj + 3] == "mean_trajectory_e2e_latency_ms"
    assert keys[traj + 12:traj + 14] == ["p50_trajectory_e2e_latency_ms", "agentic_graph"]
    assert keys[traj + 14] == "mean_e2e_latency_ms"
    assert keys[-1] == "agentic_qualification"


def test_default_extras():
    summary = collect([rec(tokens=[10.0], isl=100, reused=30)]).finalize(
        wall_time_ms=1.0).summary
    assert summary["kv_eviction_policy"] == "lru"
    assert summary["power_w"] is None and summary["power_coverage"] is None
    # without the runtime's count, committed prefill = sum(input - reuse) of admitted requests
    assert summary["committed_prefill_tokens"] == 70


def test_trajectory_stats():
    col = collect([])
    col.set_trajectories(total=4, completed=3, e2e_latencies_ms=[30.0, 10.0, 20.0])
    s = col.finalize(wall_time_ms=1.0).summary
    assert (s["total_trajectories"], s["completed_trajectories"],
            s["incomplete_trajectories"]) == (4, 3, 1)
    assert s["median_trajectory_e2e_latency_ms"] == s["p50_trajectory_e2e_latency_ms"] == 20.0
    assert s["mean_trajectory_e2e_latency_ms"] == 20.0


# ------------------------------------------------------------------------------ definitions


def test_latency_definitions():
    r = rec(arrival=2.0, tokens=[12.0, 17.0, 22.0, 32.0], terminal=40.0)
    s = collect([r]).finalize(wall_time_ms=1.0).summary
    assert s["mean_ttft_ms"] == 10.0  # first token - arrival
    assert s["mean_ttst_ms"] == 5.0  # second - first
    assert s["mean_e2e_latency_ms"] == 30.0  # last token - arrival, not terminal
    assert s["mean_tpot_ms"] == 20.0 / 3  # (last - first) / (n - 1)
    assert s["duration_ms"] == 40.0  # terminal time
    assert (s["num_ttft_samples"], s["num_tpot_samples"], s["num_e2e_latency_samples"]) == (
        1, 1, 1)


def test_num_tpot_samples_counts_requests_with_two_or_more_tokens():
    records = [rec(1, tokens=[10.0]), rec(2, tokens=[10.0, 15.0]), rec(3, tokens=[10.0, 20.0, 30.0])]
    s = collect(records).finalize(wall_time_ms=1.0).summary
    assert s["num_ttft_samples"] == 3 and s["num_e2e_latency_samples"] == 3
    assert s["num_tpot_samples"] == 2
    assert s["mean_ttst_ms"] == 7.5  # TTST also only for n >= 2
    assert s["min_ttst_ms"] == 5.0 and s["max_ttst_ms"] == 10.0


def test_exact_percentiles_use_rounded_rank_and_population_std():
    ttfts = [float(v) for v in (7, 1, 4, 9, 2, 8, 3, 6, 5, 10)]
    records = [rec(i + 1, tokens=[t]) for i, t in enumerate(ttfts)]
    s = collect(records).finalize(wall_time_ms=1.0).summary
    ordered = sorted(ttfts)
    # n = 10: p50 -> round(4.5) = 5 (half away from zero), p75 -> round(6.75) = 7,
    # p90 -> round(8.1) = 8, p95 -> round(8.55) = 9, p99 -> round(8.91) = 9
    assert s["median_ttft_ms"] == ordered[5] == 6.0
    assert s["p75_ttft_ms"] == ordered[7]
    assert s["p90_ttft_ms"] == ordered[8]
    assert s["p95_ttft_ms"] == ordered[9]
    assert s["p99_ttft_ms"] == ordered[9]
    assert s["min_ttft_ms"] == 1.0 and s["max_ttft_ms"] == 10.0
    assert s["mean_ttft_ms"] == 5.5
    assert s["std_ttft_ms"] == pytest.approx(population_std(ttfts), rel=1e-15)
    assert s["std_ttft_ms"] == pytest.approx(math.sqrt(8.25), rel=1e-15)


def test_negative_latencies_clamp_to_zero():
    r = rec(arrival=20.0, tokens=[10.0, 5.0])
    s = collect([r], gaps=False).finalize(wall_time_ms=1.0).summary
    assert s["mean_ttft_ms"] == 0.0 and s["mean_ttst_ms"] == 0.0 and s["mean_tpot_ms"] == 0.0
    assert s["mean_e2e_latency_ms"] == 0.0


def test_throughputs_and_duration():
    records = [rec(1, tokens=[10.0, 20.0], isl=100, terminal=1000.0),
               rec(2, arrival=500.0, tokens=[510.0, 520.0, 2000.0], isl=300)]
    s = collect(records, gaps=False).finalize(wall_time_ms=250.0).summary
    assert s["duration_ms"] == 2000.0
    assert s["completed_requests"] == 2 and s["num_requests"] == 2
    assert s["total_input_tokens"] == 400 and s["total_output_tokens"] == 5
    assert s["request_throughput_rps"] == 1.0
    assert s["input_throughput_tok_s"] == 200.0
    assert s["output_throughput_tok_s"] == 2.5
    assert s["total_throughput_tok_s"] == 202.5
    assert s["processed_tokens"] == 405
    assert s["processed_tokens_per_s"] == 405 / 250.0 * 1000.0
    assert s["processed_output_tokens_per_s"] == 5 / 250.0 * 1000.0
    assert s["wall_time_ms"] == 250.0


def test_duration_is_relative_to_report_start():
    s = collect([rec(tokens=[1010.0], arrival=1000.0, terminal=1500.0)],
                report_start_ms=1000.0).finalize(wall_time_ms=1.0).summary
    assert s["duration_ms"] == 500.0
    s = collect([rec(tokens=[10.0], terminal=40.0)]).finalize(
        wall_time_ms=1.0, report_end_ms=100.0).summary
    assert s["duration_ms"] == 100.0


def test_zero_wall_time_gives_zero_processed_rates():
    s = collect([rec(tokens=[10.0])]).finalize(wall_time_ms=0.0).summary
    assert s["processed_tokens_per_s"] == 0.0 and s["processed_output_tokens_per_s"] == 0.0
    s = collect([rec(tokens=[10.0])]).finalize(wall_time_ms=math.nan).summary
    assert s["processed_tokens_per_s"] == 0.0


def test_prefix_cache_ratios_use_max_and_first_admission_reuse():
    records = [rec(1, tokens=[10.0], isl=100, reused=60, first_reused=20),
               rec(2, tokens=[10.0], isl=300, reused=0)]
    s = collect(records).finalize(wall_time_ms=1.0).summary
    assert s["prefix_cache_reused_ratio"] == 60 / 400
    assert s["first_admission_prefix_cache_reused_ratio"] == 20 / 400


def test_gpu_hours():
    col = collect([rec(tokens=[10.0])])
    col.set_worker_seconds(prefill_worker_seconds=360.0, decode_worker_seconds=720.0,
                           prefill_gpus_per_worker=2, decode_gpus_per_worker=4)
    s = col.finalize(wall_time_ms=1.0).summary
    assert (s["prefill_worker_seconds"], s["decode_worker_seconds"]) == (360.0, 720.0)
    assert (s["prefill_gpus_per_worker"], s["decode_gpus_per_worker"]) == (2, 4)
    assert s["gpu_hours"] == (360.0 * 2 + 720.0 * 4) / 3600.0


def test_zero_output_completed_request_counts_without_latency_samples():
    r = rec(tokens=[], isl=32, terminal=25.0, reused=8)
    s = collect([r]).finalize(wall_time_ms=1.0).summary
    assert s["completed_requests"] == 1
    assert s["total_input_tokens"] == 32 and s["total_output_tokens"] == 0
    assert s["duration_ms"] == 25.0
    assert (s["num_ttft_samples"], s["num_tpot_samples"], s["num_e2e_latency_samples"]) == (
        0, 0, 0)
    assert s["mean_ttft_ms"] == 0.0 and s["mean_e2e_latency_ms"] == 0.0
    assert s["prefix_cache_reused_ratio"] == 8 / 32


def test_rejected_and_unadmitted_requests_only_count_as_arrivals():
    records = [
        rec(1, tokens=[10.0, 15.0]),
        rec(2, status="rejected", admitted=False, terminal=5.0, isl=999),
        rec(3, status="canceled", tokens=[10.0, 20.0], terminal=900.0),
        rec(4, status="failed", tokens=[], terminal=800.0),
        rec(5, status="completed", admitted=False, tokens=[30.0], terminal=700.0),
    ]
    s = collect(records).finalize(wall_time_ms=1.0).summary
    assert s["num_requests"] == 5
    assert s["completed_requests"] == 1
    assert s["total_input_tokens"] == 100 and s["total_output_tokens"] == 2
    assert s["duration_ms"] == 15.0
    assert s["num_ttft_samples"] == 1


def test_empty_report_is_all_zeros():
    s = Collector(record_per_request=True).finalize(wall_time_ms=0.0).summary
    assert list(s) == EXPECTED_KEYS
    for key, value in s.items():
        if key == "kv_eviction_policy":
            assert value == "lru"
        elif key in ("power_w", "power_coverage"):
            assert value is None
        else:
            assert value == 0, key
    report = Collector(record_per_request=True).finalize(wall_time_ms=0.0)
    assert report.per_request == []
    assert Collector(record_per_request=False).finalize(wall_time_ms=0.0).per_request is None


# ------------------------------------------------------------------------------ ITL


def test_itl_distribution_from_bulk_gaps():
    col = collect([rec(tokens=[10.0, 15.0, 20.0, 35.0])], gaps=False)
    col.add_itl_gaps([5.0, 15.0], [2, 1])
    s = col.finalize(wall_time_ms=1.0).summary
    assert s["mean_itl_ms"] == pytest.approx(25.0 / 3, rel=1e-15)
    assert s["min_itl_ms"] == 5.0 and s["max_itl_ms"] == 15.0
    assert s["std_itl_ms"] == pytest.approx(population_std([5.0, 5.0, 15.0]), rel=1e-14)
    # n = 3: p50 -> rank 1 -> quantile 0.75 -> sketch rank 1 -> the 5 ms bucket
    assert s["median_itl_ms"] == 4.997811098765266
    assert s["p75_itl_ms"] == s["p99_itl_ms"] == 15.01425980224389
    assert s["min_output_token_throughput_per_user"] == 1000.0 / 15.0
    assert s["max_output_token_throughput_per_user"] == 200.0
    assert s["median_output_token_throughput_per_user"] == 200.13682673977726


def test_single_itl_sample_reports_exact_values():
    col = collect([rec(tokens=[10.0, 15.0])], gaps=False)
    col.add_itl_gaps([5.0], [1])
    s = col.finalize(wall_time_ms=1.0).summary
    for p in ("mean", "min", "max", "median", "p75", "p90", "p95", "p99"):
        assert s[f"{p}_itl_ms"] == 5.0
        assert s[f"{p}_output_token_throughput_per_user"] == 200.0
    assert s["std_itl_ms"] == 0.0


def test_zero_gap_is_itl_sample_but_not_rate_sample():
    col = collect([rec(tokens=[10.0, 10.0, 15.0])], gaps=False)
    col.add_itl_gaps([0.0, 5.0, -1.0], [1, 1, 1])  # a negative gap clamps to 0
    s = col.finalize(wall_time_ms=1.0).summary
    assert s["min_itl_ms"] == 0.0 and s["median_itl_ms"] == 0.0
    assert s["mean_itl_ms"] == pytest.approx(5.0 / 3, rel=1e-15)
    assert s["min_output_token_throughput_per_user"] == 200.0  # one rate sample only
    assert s["std_output_token_throughput_per_user"] == 0.0


def test_itl_gaps_accept_many_calls_and_sequences():
    col = collect([], gaps=False)
    for _ in range(1000):
        col.add_itl_gaps((5.0, 15.0), (150, 2))
    col.add_itl_gaps(iter([math.nan, math.inf]), [3, 3])  # not samples
    s = col.finalize(wall_time_ms=1.0).summary
    assert s["mean_itl_ms"] == pytest.approx((5.0 * 150 + 15.0 * 2) / 152, rel=1e-14)
    assert s["p99_itl_ms"] == 15.01425980224389  # rank 150388 of 151999 -> the 15 ms bucket
    assert s["p95_itl_ms"] == 4.997811098765266


# ------------------------------------------------------------------------------ goodput


def goodput(records, **sla):
    s = collect(records, sla=Sla(**sla), gaps=False).finalize(wall_time_ms=1.0).summary
    return s["goodput_completed_requests"], s


def test_goodput_bounds_are_inclusive():
    r = rec(tokens=[10.0, 15.0, 20.0])  # ttft 10, e2e 20, avg itl 5
    assert goodput([r], ttft_ms=10.0)[0] == 1
    assert goodput([r], ttft_ms=9.999)[0] == 0
    assert goodput([r], e2e_ms=20.0)[0] == 1
    assert goodput([r], e2e_ms=19.999)[0] == 0
    assert goodput([r], itl_ms=5.0)[0] == 1
    assert goodput([r], itl_ms=4.999)[0] == 0
    assert goodput([r], ttft_ms=10.0, itl_ms=4.999)[0] == 0


def test_goodput_itl_is_average_over_e2e_minus_ttft():
    r = rec(arrival=0.0, tokens=[10.0, 11.0, 40.0])  # (40 - 10) / 2 = 15
    assert goodput([r], itl_ms=15.0)[0] == 1
    assert goodput([r], itl_ms=14.9)[0] == 0


def test_goodput_itl_bound_skipped_for_single_token():
    assert goodput([rec(tokens=[10.0])], itl_ms=0.001)[0] == 1


def test_goodput_zero_token_request_good_only_under_e2e_only_sla():
    r = rec(tokens=[], terminal=100.0, arrival=0.0)
    assert goodput([r], e2e_ms=100.0)[0] == 1
    assert goodput([r], e2e_ms=99.0)[0] == 0
    assert goodput([r], ttft_ms=1000.0)[0] == 0
    assert goodput([r], itl_ms=1000.0)[0] == 0


def test_goodput_rates():
    records = [rec(1, tokens=[10.0, 20.0], terminal=1000.0), rec(2, tokens=[500.0, 2000.0])]
    good, s = goodput(records, ttft_ms=100.0)
    assert good == 1
    assert s["goodput_request_throughput_rps"] == 0.5
    assert s["goodput_output_throughput_tok_s"] == 1.0
    # zero-token good requests add no goodput tokens
    good, s = goodput([rec(tokens=[], terminal=1000.0)], e2e_ms=2000.0)
    assert good == 1 and s["goodput_output_throughput_tok_s"] == 0.0


def test_sla_from_dict():
    s = collect([rec(tokens=[10.0])], sla={"ttft_ms": 5.0}).finalize(wall_time_ms=1.0).summary
    assert s["goodput_completed_requests"] == 0


# ------------------------------------------------------------------------------ per-request


def test_per_request_record_keys_and_values_aggregated():
    r = rec(7, arrival=2.0, tokens=[12.0, 17.0, 22.0, 32.0], terminal=32.0, isl=64, requested=5,
            reused=16, decode_worker_idx=0, routing=[("agg", 0, 0)])
    out = per_request_record(r)
    assert list(out) == EXPECTED_RECORD_KEYS
    assert out["uuid"] == "00000000-0000-0000-0000-000000000007"
    assert out["first_admit_ms"] == 2.0
    assert (out["ttft_ms"], out["ttst_ms"], out["e2e_latency_ms"]) == (10.0, 5.0, 30.0)
    assert out["itl_ms"] == 20.0 / 3
    assert (out["input_length"], out["requested_output_length"], out["output_length"]) == (
        64, 5, 4)
    assert out["reused_input_tokens"] == 16
    assert out["prefill_route_overlap_tokens"] is None
    assert out["decode_route_overlap_tokens"] is None
    assert out["routing_history"] == [{
        "pool": "agg", "outcome": "immediate", "queue_entered_at_ms": None,
        "released_at_ms": None, "queue_wait_ms": 0.0, "logical_worker_id": 0,
        "scheduler_id": 0, "dp_rank": 0, "reported_overlap_tokens": 0,
        "selected_overlap_blocks": None, "best_available_overlap_blocks": None,
        "overlap_regret_blocks": None, "placement_replica_id": None}]
    assert list(out["routing_history"][0]) == EXPECTED_ROUTE_KEYS
    assert out["admission_history"] == [{
        "admission_ordinal": 0, "pool_admission_ordinal": 0, "pool": "agg", "at_ms": 2.0,
        "reused_input_tokens": 16, "is_readmission": False}]
    assert list(out["admission_history"][0]) == EXPECTED_ADMISSION_KEYS
    assert (out["admission_count"], out["readmission_count"]) == (1, 0)
    assert out["pressure_record_ordinals"] == []
    assert out["terminal_status"] == "completed"


def test_per_request_optional_keys_and_order():
    r = rec(1, tokens=[10.0], request_id="req-9", play_id="play-1", metadata={"k": 1},
            session_id="s1", turn_index=2, first_admission_g1_reused_input_tokens=3,
            first_admission_host_reused_input_tokens=5)
    out = per_request_record(r)
    assert list(out)[:6] == ["request_id", "play_id", "session_id", "turn_index", "metadata",
                             "uuid"]
    i = list(out).index("reused_input_tokens")
    assert list(out)[i + 1:i + 3] == ["first_admission_g1_reused_input_tokens",
                                      "first_admission_host_reused_input_tokens"]
    assert [k for k in PER_REQUEST_KEYS if k in out] == list(out)


def test_per_request_rejected_record():
    r = rec(3, status="rejected", admitted=False, arrival=40.0, terminal=45.0, isl=300,
            requested=4)
    out = per_request_record(r)
    assert list(out) == EXPECTED_RECORD_KEYS
    for key in ("first_admit_ms", "first_token_ms", "last_token_ms", "ttft_ms", "ttst_ms",
                "e2e_latency_ms", "itl_ms"):
        assert out[key] is None
    assert out["output_length"] == 0 and out["admission_history"] == []
    assert out["admission_count"] == 0 and out["terminal_status"] == "rejected"


def test_per_request_readmissions():
    admissions = [(0.0, "agg", 0, False), (655.0, "agg", 256, True), (1245.0, "agg", 352, True)]
    r = rec(1, tokens=[10.0, 25.0, 1335.0], reused=352, first_reused=0, admissions=admissions)
    out = per_request_record(r)
    assert [a["admission_ordinal"] for a in out["admission_history"]] == [0, 1, 2]
    assert [a["pool_admission_ordinal"] for a in out["admission_history"]] == [0, 1, 2]
    assert [a["is_readmission"] for a in out["admission_history"]] == [False, True, True]
    assert (out["admission_count"], out["readmission_count"]) == (3, 2)
    assert out["reused_input_tokens"] == 352


def test_per_request_disaggregated_record():
    admissions = [(127.1, "prefill", 32, False), (146.6, "decode", 48, False)]
    r = rec(4, arrival=127.1, tokens=[151.6, 156.6, 161.6], reused=48, first_reused=32,
            admissions=admissions, prefill_worker_idx=0, decode_worker_idx=1,
            routing=[("prefill", 0, 0), ("decode", 1, 0)], prefill_admit_ms=127.1,
            source_held_ms=137.1, destination_reserved_ms=141.6, destination_activated_ms=146.6,
            decode_admit_ms=146.6, source_released_ms=146.6, decode_reused_input_tokens=48)
    out = per_request_record(r)
    assert list(out) == EXPECTED_RECORD_KEYS
    assert out["reused_input_tokens"] == 32  # the prefill side's reuse
    assert out["decode_reused_input_tokens"] == 48
    assert (out["prefill_worker_idx"], out["decode_worker_idx"]) == (0, 1)
    assert out["prefill_route_overlap_tokens"] == 0 and out["decode_route_overlap_tokens"] == 0
    assert [(h["pool"], h["scheduler_id"]) for h in out["routing_history"]] == [
        ("prefill", 0), ("decode", 1)]
    assert [(a["pool"], a["admission_ordinal"], a["pool_admission_ordinal"],
             a["is_readmission"]) for a in out["admission_history"]] == [
        ("prefill", 0, 0, False), ("decode", 1, 0, False)]
    assert (out["admission_count"], out["readmission_count"]) == (2, 0)
    assert out["first_admit_ms"] == 127.1
    # the summary's reuse is the max over both pools
    s = collect([r], gaps=False).finalize(wall_time_ms=1.0).summary
    assert s["prefix_cache_reused_ratio"] == 48 / 100
    assert s["first_admission_prefix_cache_reused_ratio"] == 32 / 100


def test_route_with_scheduler_id_and_dict_routes():
    r = rec(1, tokens=[10.0], decode_worker_idx=3,
            routing=[("agg", 1, 1, 3), {"pool": "agg", "outcome": "queued",
                                         "queue_entered_at_ms": 4.0, "logical_worker_id": 0,
                                         "dp_rank": 0, "scheduler_id": 0}])
    routes = per_request_record(r)["routing_history"]
    assert (routes[0]["logical_worker_id"], routes[0]["scheduler_id"], routes[0]["dp_rank"]) == (
        1, 3, 1)
    assert routes[1]["outcome"] == "queued" and routes[1]["queue_entered_at_ms"] == 4.0
    assert list(routes[1]) == EXPECTED_ROUTE_KEYS


def test_per_request_sort_order():
    def admitted_at(t):
        return [(t, "agg", 0, False)]

    records = [
        rec(5, arrival=1.0, tokens=[2.0], request_id="b"),
        rec(4, arrival=9.0, tokens=[10.0]),
        rec(3, arrival=1.0, tokens=[2.0], request_id="a"),
        rec(2, arrival=3.0, tokens=[4.0], admissions=admitted_at(3.0)),
        rec(1, arrival=3.0, tokens=[4.0], admissions=admitted_at(3.0)),
        rec(7, arrival=3.0, tokens=[5.0], admissions=admitted_at(2.5)),
        rec(8, arrival=3.0, status="rejected", admitted=False),
        rec(6, arrival=0.0, tokens=[4.0], request_id="a"),
    ]
    report = collect(records, per_request=True).finalize(wall_time_ms=1.0)
    order = [(r.get("request_id"), int(uuidlib.UUID(r["uuid"]))) for r in report.per_request]
    # ids absent first; then id, arrival, first admission (never admitted first), uuid
    assert order == [(None, 8), (None, 7), (None, 1), (None, 2), (None, 4), ("a", 6), ("a", 3),
                     ("b", 5)]


def test_per_request_only_for_terminal_records_and_string_uuids():
    records = [rec("6ba7b810-9dad-11d1-80b4-00c04fd430c8", tokens=[1.0]),
               rec("0ba7b810-9dad-11d1-80b4-00c04fd430c8", tokens=[1.0], status="rejected",
                   admitted=False)]
    report = collect(records, per_request=True).finalize(wall_time_ms=1.0)
    assert [r["uuid"][:2] for r in report.per_request] == ["0b", "6b"]


# ------------------------------------------------------------------------------ JSON


def test_to_json_round_trip():
    report = collect([rec(tokens=[10.0, 15.0])], per_request=True).finalize(wall_time_ms=2.0)
    decoded = json.loads(report.to_json())
    assert list(decoded)[:-1] == EXPECTED_KEYS and list(decoded)[-1] == "per_request"
    assert decoded["per_request"][0]["ttst_ms"] == 5.0
    plain = Report(summary={"a": 1.5, "b": None})
    assert plain.to_json() == '{"a":1.5,"b":null}'
    assert msgspec.json.decode(plain.to_json()) == plain.to_dict()


# ------------------------------------------------------------------- reference fixtures (if any)


def _records_from_reference(per_request):
    for r in per_request:
        adm = [(a["at_ms"], a["pool"], a["reused_input_tokens"], a["is_readmission"])
               for a in r["admission_history"]]
        second = (r["first_token_ms"] + r["ttst_ms"]) if r["ttst_ms"] is not None else None
        try:
            uid = int(uuidlib.UUID(r["uuid"]))
        except ValueError:
            uid = r["uuid"]
        yield RequestRecord(
            uuid=uid, request_id=r.get("request_id"), session_id=r["session_id"],
            turn_index=r["turn_index"], play_id=r.get("play_id"), metadata=r.get("metadata"),
            arrival_time_ms=r["arrival_time_ms"], dispatched_at_ms=r["dispatched_at_ms"],
            terminal_time_ms=r["terminal_time_ms"], terminal_status=r["terminal_status"],
            input_length=r["input_length"], requested_output_length=r["requested_output_length"],
            output_length=r["output_length"], first_token_ms=r["first_token_ms"],
            second_token_ms=second, last_token_ms=r["last_token_ms"],
            reused_input_tokens=max([a[2] for a in adm], default=0),
            first_admission_reused_input_tokens=adm[0][2] if adm else None, admissions=adm,
            prefill_worker_idx=r["prefill_worker_idx"], decode_worker_idx=r["decode_worker_idx"],
            routing=[(h["pool"], h["logical_worker_id"], h["dp_rank"], h["scheduler_id"])
                     for h in r["routing_history"]],
            prefill_admit_ms=r["prefill_admit_ms"], source_held_ms=r["source_held_ms"],
            destination_reserved_ms=r["destination_reserved_ms"],
            destination_activated_ms=r["destination_activated_ms"],
            decode_admit_ms=r["decode_admit_ms"], source_released_ms=r["source_released_ms"],
            decode_reused_input_tokens=r["decode_reused_input_tokens"],
            prefill_route_overlap_tokens=r["prefill_route_overlap_tokens"],
            decode_route_overlap_tokens=r["decode_route_overlap_tokens"],
        )


REFERENCE_FILES = sorted(glob.glob(os.path.join(HERE, "fixtures", "reference", "*.json")))


@pytest.mark.parametrize("path", REFERENCE_FILES or [None],
                         ids=[os.path.basename(p) for p in REFERENCE_FILES] or ["none"])
def test_rebuilt_reference_records_reproduce_reference_summary(path):
    """Feeding the reference's own per-request records back reproduces its summary."""
    if path is None:
        pytest.skip("no reference fixtures recorded")
    data = json.load(open(path))
    ref, per_request = data.get("summary"), data.get("per_request")
    if not ref or per_request is None:
        pytest.skip("fixture has no per-request records")
    payload_path = os.path.join(HERE, "..", data["payload"]) if "payload" in data else None
    sla = None
    if payload_path and os.path.exists(payload_path):
        sla = (json.load(open(payload_path)).get("spec") or {}).get("sla") or None
    col = Collector(sla=sla, record_per_request=True)
    itl_known = True
    col.on_arrival(ref["num_requests"])  # includes requests still in flight at a time cap
    for r in _records_from_reference(per_request):
        col.on_terminal(r)
        if r.terminal_status == "completed" and r.admissions and r.output_length > 1:
            if r.output_length == 2:
                col.add_itl_gaps([r.second_token_ms - r.first_token_ms], [1])
            else:
                itl_known = False
    col.set_worker_seconds(
        prefill_worker_seconds=ref["prefill_worker_seconds"],
        decode_worker_seconds=ref["decode_worker_seconds"],
        prefill_gpus_per_worker=ref["prefill_gpus_per_worker"],
        decode_gpus_per_worker=ref["decode_gpus_per_worker"])
    for key in ("kv_eviction_policy", "committed_prefill_tokens"):
        col.add_extra(key, ref[key])
    report = col.finalize(wall_time_ms=ref["wall_time_ms"])
    assert list(report.summary) == [k for k in ref if k != "outer_wall_s"]
    for key, expected in ref.items():
        if key == "outer_wall_s" or (not itl_known and ("itl" in key or "per_user" in key)):
            continue
        got = report.summary[key]
        if isinstance(expected, float):
            # the reference's std runs over the order select_nth_unstable leaves: last bits
            assert got == pytest.approx(expected, rel=1e-12, abs=1e-300), key
        else:
            assert got == expected, key
    assert len(report.per_request) == len(per_request)
    # same records, ordered by arrival then first admission; the reference's remaining ties
    # come out of an unstable sort, so match records by uuid
    order = [(r["arrival_time_ms"], r["first_admit_ms"] is not None, r["first_admit_ms"] or 0.0)
             for r in report.per_request]
    assert order == sorted(order)
    by_uuid = {r["uuid"]: r for r in per_request}
    assert sorted(by_uuid) == sorted(r["uuid"] for r in report.per_request)
    for ours in report.per_request:
        theirs = by_uuid[ours["uuid"]]
        assert list(ours) == list(theirs)
        assert ours["ttst_ms"] == pytest.approx(theirs["ttst_ms"], rel=1e-12) if theirs[
            "ttst_ms"] is not None else ours["ttst_ms"] is None
        for key in ("ttft_ms", "e2e_latency_ms", "itl_ms", "reused_input_tokens",
                    "admission_history", "routing_history", "readmission_count"):
            assert ours[key] == theirs[key], key


@pytest.mark.parametrize("value", [0, 1, 7, 2**64 + 5, 2**128 - 1, 0x0123456789ABCDEF0123456789ABCDEF])
def test_record_uuid_is_the_standard_text_form(value):
    out = per_request_record(rec(uuid=value))
    assert out["uuid"] == str(uuidlib.UUID(int=value))


def test_record_pool_facts_come_from_the_first_admission_and_the_largest_reuse():
    r = rec(uuid=3)
    r.admissions = [(1.0, "prefill", 4, False), (2.0, "decode", 9, False),
                    (3.0, "prefill", 6, True), (4.0, "decode", 2, True)]
    out = per_request_record(r)
    assert (out["prefill_admit_ms"], out["decode_admit_ms"]) == (1.0, 2.0)
    assert (out["reused_input_tokens"], out["decode_reused_input_tokens"]) == (6, 9)
    assert (out["admission_count"], out["readmission_count"]) == (4, 2)
    assert [e["pool_admission_ordinal"] for e in out["admission_history"]] == [0, 0, 1, 1]


def test_the_record_streams_order_is_record_order():
    """The stream keys a settled record as _record_order does, its usual record inline."""
    from aisimulate_core.report import _record_order, _RecordStream

    import random as _random
    rng = _random.Random(5)
    records = []
    for i in range(200):
        admissions = rng.choice([[], [(rng.uniform(0, 9), "agg", 0, False)],
                                 [(None, "agg", 0, False)],
                                 [(1.0, "prefill", 3, False), (2.0, "decode", 1, False)]])
        uuid = rng.choice([i + 1, 2**48 + i, 2**127, True, "u-%d" % i])
        records.append(rec(uuid, arrival=rng.choice([0.0, 1.0, rng.uniform(0, 5)]),
                           admissions=admissions, admitted=bool(admissions),
                           request_id=rng.choice([None, None, "", "r%d" % i])))
    stream = _RecordStream(lambda record: None, running=False)
    for r in records:
        stream.settled(r)
    assert [entry[0] for entry in stream.later] == [_record_order(r) for r in records]
    assert [entry[2] for entry in stream.later] == records


@pytest.mark.parametrize("pool", ["agg", "prefill", "decode"])
def test_a_lone_route_of_keys_gives_the_general_paths_record(pool):
    """One route given as keys (the kv_router's record) is made inline; two routes take the
    general path: the lone route's entry and overlaps are those the general path gives."""
    route = {"pool": pool, "logical_worker_id": 1, "scheduler_id": 1, "dp_rank": 0,
             "reported_overlap_tokens": 32, "selected_overlap_blocks": 2,
             "best_available_overlap_blocks": 3, "overlap_regret_blocks": 1, "unknown": 5}
    other = {"pool": "elsewhere", "reported_overlap_tokens": 7}
    one = per_request_record(rec(3, tokens=[1.0, 2.0], routing=[route]))
    two = per_request_record(rec(3, tokens=[1.0, 2.0], routing=[route, other]))
    assert two["routing_history"][0] == one["routing_history"][0]
    assert "unknown" not in one["routing_history"][0]
    for key in ("prefill_route_overlap_tokens", "decode_route_overlap_tokens"):
        assert one[key] == two[key] == (32 if key.startswith(pool) else None)


@pytest.mark.parametrize("admissions", [
    [(1.0, "prefill", 4, False), (3.0, "decode", 7, False)],          # the usual P/D record
    [(1.0, "decode", 2, False), (3.0, "prefill", 0, False)],
    [(1.0, "prefill", 4, False), (3.0, "prefill", 9, True)],          # a readmission
    [(1.0, "prefill", 4, False, 1, 3), (3.0, "decode", 7, False)],    # a tier split
    [(1.0, "prefill", 4, False), (3.0, "decode", 7, False), (5.0, "decode", 9, True)],
])
def test_two_pool_admission_histories_are_the_walks(admissions):
    """report._admission_history's unrolled case for two admissions into two pools gives
    what the plain walk over the admissions gives (and the facts read off it)."""
    record = rec(1, tokens=[5.0, 6.0], admissions=admissions, prefill_worker_idx=0,
                 routing=[("prefill", 0, 0), ("decode", 0, 0)])
    history, readmissions, pools = _walked_history(admissions)
    out = per_request_record(record)
    assert out["admission_history"] == history
    assert out["admission_count"] == len(history)
    assert out["readmission_count"] == readmissions
    assert out["prefill_admit_ms"] == (pools["prefill"][1] if "prefill" in pools else None)
    assert out["decode_admit_ms"] == (pools["decode"][1] if "decode" in pools else None)
    assert out["decode_reused_input_tokens"] == (pools["decode"][2] if "decode" in pools
                                                 else None)
    assert out["reused_input_tokens"] == pools["prefill"][2]


def _walked_history(admissions):
    """The admission history as the reference defines it, one admission at a time: ordinals,
    pool ordinals, readmissions into the same pool, the tier split when given; per pool its
    [count, first at_ms, largest reuse]."""
    history, pools = [], {}
    for ordinal, (at_ms, pool, reused, *rest) in enumerate(admissions):
        facts = pools.setdefault(pool, [0, at_ms, reused])
        facts[2] = max(facts[2], reused)
        entry = {"admission_ordinal": ordinal, "pool_admission_ordinal": facts[0], "pool": pool,
                 "at_ms": at_ms, "reused_input_tokens": reused}
        if len(rest) > 1:
            if rest[1] is not None:
                entry["g1_reused_input_tokens"] = rest[1]
            if len(rest) > 2 and rest[2] is not None:
                entry["host_reused_input_tokens"] = rest[2]
        entry["is_readmission"] = facts[0] > 0
        facts[0] += 1
        history.append(entry)
    return history, sum(facts[0] - 1 for facts in pools.values()), pools


# ---------------------------------------------------------------------- records made from rows

_times = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, 1.0, 2.5]))
_counts = st.integers(min_value=0, max_value=2**40)
_names = st.one_of(st.none(), st.text(max_size=8))


@st.composite
def _row_tokens(draw):
    """(first, second, last, output_length) as a terminal row gives them."""
    if not draw(st.booleans()):
        return None, None, None, 0
    count = draw(st.integers(min_value=1, max_value=5))
    second = draw(_times) if count > 1 and draw(st.booleans()) else None
    return draw(_times), second, draw(_times), count


@st.composite
def _placement(draw, pool):
    """A placement into ``pool`` as the Python loop routes it (round robin's tuple, or the
    kv_router's keys), with the routing_history entry the C loops' _Records make of it."""
    worker, dp_rank, scheduler = (draw(st.integers(0, 9)) for _ in range(3))
    entry = route_entry(pool, scheduler, worker, dp_rank)
    if draw(st.booleans()):
        return (pool, worker, dp_rank, scheduler), entry
    route = {"pool": pool, "logical_worker_id": worker, "scheduler_id": scheduler,
             "dp_rank": dp_rank}
    if draw(st.booleans()):
        queued, released = draw(_times), draw(_times)
        route.update(outcome="queued", queue_entered_at_ms=queued, released_at_ms=released,
                     queue_wait_ms=released - queued)
    selected, best = draw(st.integers(0, 50)), draw(st.integers(0, 50))
    route.update(reported_overlap_tokens=selected * 16, selected_overlap_blocks=selected,
                 best_available_overlap_blocks=best, overlap_regret_blocks=best - selected)
    entry.update(route)
    return route, entry


def _same_entries(row, general):
    """A row's entry and a RequestRecord's take the same place in a stream and make records of
    equal keys in the same order and equal values (NaN as NaN), the row's routes copies."""
    assert repr(row[0]) == repr(general[0])
    made = _made(row[0], row[2])
    assert repr(list(made.items())) == repr(list(_made(*general[::2]).items()))
    routes = dict.fromkeys(id(route) for route in row[2][1] if type(route) is dict)
    assert not routes.keys() & {id(route) for route in made["routing_history"]}


def _stream_entry(settle, *args):
    """The entry a stream not running keeps of what ``settle`` settles (its method's name)."""
    stream = _RecordStream(lambda record: None, running=False)
    getattr(stream, settle)(*args)
    return stream.later[0]


@settings(max_examples=300, deadline=None)
@given(uuid=st.integers(0, 2**48 - 1), session_id=_names,
       turn_index=st.one_of(st.none(), st.integers(0, 9)), arrival=_times, terminal=_times,
       status=st.sampled_from(["completed", "rejected"]), lengths=st.tuples(_counts, _counts),
       tokens=_row_tokens(), reused=st.tuples(_counts, _counts, _counts), admit_at=_times,
       readmission_flag=st.booleans(), placement=_placement("agg"))
def test_an_aggregated_row_record_is_per_request_record_of_its_request_record(
        uuid, session_id, turn_index, arrival, terminal, status, lengths, tokens, reused,
        admit_at, readmission_flag, placement):
    """aggregated_record (the C loop's usual record) is the record, and has the stream's
    place, of the RequestRecord runtime/records.py make_record makes of the request."""
    (first, second, last, count), (max_reused, first_reused, admit_reused) = tokens, reused
    route, entry = placement
    general = RequestRecord(
        uuid, None, session_id, turn_index, None, None, arrival, None, terminal, status,
        lengths[0], lengths[1], count, first, second, last, max_reused, first_reused,
        [(admit_at, "agg", admit_reused, readmission_flag)], None, route[3] if type(route)
        is tuple else route["scheduler_id"], [route])
    values = (session_id, turn_index, arrival, terminal, status, lengths[0], lengths[1],
              count, first, second, last, max_reused, admit_at, admit_reused,
              general.decode_worker_idx, entry)
    _same_entries(_stream_entry("settled_row", uuid, arrival, admit_at, aggregated_record,
                                values), _stream_entry("settled", general))


@settings(max_examples=300, deadline=None)
@given(uuid=st.integers(0, 2**48 - 1), session_id=_names,
       turn_index=st.one_of(st.none(), st.integers(0, 9)), arrival=_times, terminal=_times,
       status=st.sampled_from(["completed", "rejected", "failed"]),
       lengths=st.tuples(_counts, _counts), tokens=_row_tokens(),
       reused=st.tuples(_counts, _counts, _counts, _counts),
       admitted=st.tuples(_times, _times), flags=st.tuples(st.booleans(), st.booleans()),
       handoff=st.tuples(*[st.one_of(st.none(), _times)] * 4),
       workers=st.tuples(st.integers(0, 9), st.one_of(st.none(), st.integers(0, 9))),
       prefill=_placement("prefill"), decode=_placement("decode"))
def test_a_disaggregated_row_record_is_per_request_record_of_its_request_record(
        uuid, session_id, turn_index, arrival, terminal, status, lengths, tokens, reused,
        admitted, flags, handoff, workers, prefill, decode):
    """disaggregated_record (the C loop's usual record) is the record, and has the stream's
    place, of the RequestRecord records.make_disagg_record makes of the request."""
    (first, second, last, count) = tokens
    max_reused, first_reused, prefill_reused, decode_reused = reused
    (prefill_at, decode_at), (held, reserved, activated, released) = admitted, handoff
    general = RequestRecord(
        uuid, None, session_id, turn_index, None, None, arrival, None, terminal, status,
        lengths[0], lengths[1], count, first, second, last, max_reused, first_reused,
        [(prefill_at, "prefill", prefill_reused, flags[0]),
         (decode_at, "decode", decode_reused, flags[1])], workers[0], workers[1],
        [prefill[0], decode[0]], None, held, reserved, activated, None, released)
    values = (session_id, turn_index, arrival, terminal, status, lengths[0], lengths[1],
              count, first, second, last, workers[0], workers[1], prefill_at, prefill_reused,
              decode_at, decode_reused, held, reserved, activated, released, prefill[1],
              decode[1])
    _same_entries(_stream_entry("settled_row", uuid, arrival, prefill_at,
                                disaggregated_record, values), _stream_entry("settled", general))


def test_a_row_reaches_the_sink_in_the_reports_order_made_when_it_does():
    """settled_row's record is made when it reaches the sink, in the order RequestRecords
    settled with it take (running or not)."""
    made = []

    def make(uuid_text, arrival):
        made.append(uuid_text)
        return aggregated_record(uuid_text, None, None, arrival, arrival + 1.0, "completed", 4,
                                 2, 2, arrival + 0.5, None, arrival + 1.0, 0, arrival, 0, 0,
                                 route_entry("agg", 0, 0, 0))
    for running in (True, False):
        sunk, made[:] = [], []
        stream = _RecordStream(sunk.append, running=running)
        stream.settled_row(1, 0.0, 0.0, make, (0.0,))
        stream.settled(rec(2, arrival=1.0, tokens=[1.5]))
        stream.settled_row(3, 2.0, 2.0, make, (2.0,))
        assert made == (["00000000-0000-0000-0000-000000000001"] if running else [])
        stream.close()
        stream.flush()
        assert [record["uuid"][-1] for record in sunk] == ["1", "2", "3"]
        assert [record["arrival_time_ms"] for record in sunk] == [0.0, 1.0, 2.0]
