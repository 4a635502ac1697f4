"""A run that keeps no per-request record may hand the collector ``SummaryRecord``s
(records.make_summary_record): every summary figure, and what a traffic window reads, are those
of full ``RequestRecord``s (records.make_record) of the same terminal requests."""

from __future__ import annotations

import json

import msgspec
import pytest

from aisimulate_core.report import Collector
from aisimulate_core.runtime.build import build_simulation
from aisimulate_core.runtime.records import (make_disagg_record, make_disagg_summary_record,
                                             make_record, make_summary_record)
from aisimulate_core.spec import load_payload
from reference import ROOT

TERMINAL = ("completed", "rejected", "canceled", "failed")
WINDOW_FIELDS = ("input_length", "output_length", "first_token_ms", "last_token_ms",
                 "arrival_time_ms")


def synthetic(**traffic):
    return {
        "spec": {"version": 1, "topology": {"kind": "aggregated", "workers": {"initial_workers": 2}},
                 "engine": {"rank": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 96,
                                     "max_num_seqs": 8,
                                     "timing_model": {"type": "fixed", "prefill_ms": 10.0,
                                                      "decode_ms": 5.0}}},
                 "sla": {"ttft_ms": 60.0, "itl_ms": 6.0},
                 "record_per_request": False},
        "traffic": {"source_type": "synthetic", "isl": 200, "osl": 12, **traffic},
    }


PAYLOADS = [
    synthetic(load_type="poisson", request_rate=300.0, request_count=400, arrival_seed=9,
              shared_prefix_ratio=0.5, num_prefix_groups=3),
    synthetic(load_type="concurrency", concurrency=12, request_count=150),
    "tests/fixtures/payloads/trace_mooncake_sessions_conc2.json",
    "tests/fixtures/payloads/vllm_kv_pressure_lifo.json",
    "tests/fixtures/payloads/reject_vllm_max_model_len_isl16m.json",
    "tests/fixtures/payloads/sglang_prefix_pressure.json",
    "tests/fixtures/payloads/cutoff_prefill_in_flight_vllm.json",
]


def summary(collector, arrivals):
    collector.on_arrival(arrivals)
    return msgspec.json.encode(collector.finalize(wall_time_ms=1.0).summary)


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p if isinstance(p, str) else
                         f"synthetic_{p['traffic']['load_type']}")
def test_summary_records_give_the_summary_of_full_records(payload, monkeypatch):
    monkeypatch.chdir(ROOT)
    text = (ROOT / payload).read_text() if isinstance(payload, str) else json.dumps(payload)
    loaded = load_payload(text)
    sla = loaded.spec.sla if loaded.spec.sla.is_set else None
    full = Collector(sla=sla, record_per_request=False)
    light = Collector(sla=sla, record_per_request=False)
    assert not full.keeps_records
    seen = []

    def both(kind, t, request):
        if kind in TERMINAL:
            record, facts = make_record(request, kind), make_summary_record(request, kind)
            full.on_terminal(record)
            light.on_terminal(facts)
            assert [getattr(facts, f) for f in WINDOW_FIELDS] == \
                [getattr(record, f) for f in WINDOW_FIELDS]
            seen.append(kind)

    sim = build_simulation(loaded, on_event=both)
    sim.run()
    assert seen
    assert summary(light, len(seen)) == summary(full, len(seen))


DISAGG_PAYLOADS = [
    "tests/fixtures/payloads/disagg_poisson_pressure.json",
    "tests/fixtures/payloads/disagg_decode_capacity_failure.json",
    "tests/fixtures/payloads/disagg_decode_preemption.json",
    "tests/fixtures/features_sglang/pd_cancel_at_decode_pass_end.json",
    "tests/fixtures/features_sglang/pd_decode_refuses_pool.json",
    "tests/fixtures/features_sglang/pd_failures_decode_dp2.json",
    "tests/fixtures/features_sglang/pd_decode_retract_readmit.json",
]


@pytest.mark.parametrize("payload", DISAGG_PAYLOADS)
def test_disaggregated_summary_records_give_the_summary_of_full_records(payload, monkeypatch):
    """The same for records.make_disagg_summary_record against make_disagg_record (both pools'
    admissions and reuse, the decode copy's tokens), vLLM and SGLang P/D, failures included."""
    monkeypatch.chdir(ROOT)
    loaded = load_payload((ROOT / payload).read_text())
    sla = loaded.spec.sla if loaded.spec.sla.is_set else None
    full = Collector(sla=sla, record_per_request=False)
    light = Collector(sla=sla, record_per_request=False)
    seen = []

    def both(kind, t, request):
        if kind in TERMINAL:
            handoff = request.handoff
            if handoff.prefill is None:     # refused by the decode rank: no pool's copy
                full.on_terminal(handoff.record)
                light.on_terminal(handoff.record)
            else:
                record = make_disagg_record(handoff, kind)
                facts = make_disagg_summary_record(handoff, kind)
                full.on_terminal(record)
                light.on_terminal(facts)
                assert [getattr(facts, f) for f in WINDOW_FIELDS] == \
                    [getattr(record, f) for f in WINDOW_FIELDS]
                assert bool(facts.admissions) == bool(record.admissions)
            seen.append(kind)

    sim = build_simulation(loaded, on_event=both)
    sim.run()
    assert seen
    assert summary(light, len(seen)) == summary(full, len(seen))


def test_a_collector_that_streams_or_keeps_records_wants_full_ones():
    assert Collector(record_per_request=True).keeps_records
    streaming = Collector(record_per_request=False)
    streaming.stream_records_to(lambda record: None)
    assert streaming.keeps_records
