"""Memory of a run does not grow with its records (issue 8, item 3).

Without per-request records a completed request leaves four 8-byte samples; streamed records
(``run_replay(on_record=...)``) reach the sink in the report's order and are not kept. The
peak RSS figures for 1M and 10M requests come from ``bench/memory.py`` (not run here).
"""

import json
import math
import tracemalloc
from array import array

import pytest

from aisimulate_core import build_simulation, load_payload, run_replay
from aisimulate_core import stats
from aisimulate_core.report import Collector
from aisimulate_core.stats import SortedRuns, exact_stats
from test_report import rec
from test_semantics_cases import bare_spec


def poisson_payload(requests, **spec):
    return {
        "spec": {"version": 1, "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
                 "engine": {"rank": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 4096,
                                     "timing_model": {"type": "fixed", "prefill_ms": 10.0,
                                                      "decode_ms": 5.0}}},
                 "record_per_request": False, **spec},
        "traffic": {"source_type": "synthetic", "load_type": "poisson", "request_rate": 200.0,
                    "isl": 64, "osl": 8, "request_count": requests, "arrival_seed": 42},
    }


def retained_after_run(requests, on_record=None):
    """Bytes the run still holds when it ends (before the report), and the report."""
    sim = build_simulation(load_payload(json.dumps(poisson_payload(requests))))
    if on_record is not None:
        sim.collector.stream_records_to(on_record)
    tracemalloc.start()
    try:
        sim.run()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return held, sim.report()


@pytest.mark.parametrize("stream", [False, True], ids=["summary", "streamed-records"])
def test_a_run_keeps_a_few_bytes_per_request(stream):
    counted = [0]

    def count(record):
        counted[0] += 1

    sink = count if stream else None
    small, _ = retained_after_run(1_000, sink)
    large, report = retained_after_run(8_000, sink)
    assert report.summary["completed_requests"] == 8_000 and report.per_request is None
    assert counted[0] == (9_000 if stream else 0)
    # four latency samples (32 bytes) and the per-pass history; the whole trace and a record
    # object per request came to about 1.3 KB a request
    assert (large - small) / 7_000 < 80


def test_streamed_records_come_during_the_run_in_the_reports_order():
    payload = poisson_payload(3_000)
    payload["traffic"].update(shared_prefix_ratio=0.5, num_prefix_groups=4)
    payload["spec"]["record_per_request"] = True
    in_memory = run_replay(json.dumps(payload))
    sim = build_simulation(load_payload(json.dumps(payload)))
    seen = []
    sim.collector.stream_records_to(lambda record: seen.append((sim.now_ms, record)))
    sim.run()
    report = sim.report()
    assert report.per_request is None
    assert [record for _, record in seen] == in_memory.per_request
    # each record is out once the requests that arrived with or before it are done
    settled_by = [(now - record["terminal_time_ms"]) for now, record in seen[:-50]]
    assert max(settled_by) < 1_000.0 < sim.now_ms / 10


@pytest.mark.parametrize("traffic", [
    dict(load_type="concurrency", concurrency=8, request_count=400),   # many ties in arrival
    dict(load_type="concurrency", concurrency=50, request_count=50),   # all arrive at 0
], ids=["concurrency", "all-at-once"])
def test_streamed_records_equal_the_in_memory_ones(traffic):
    payload = poisson_payload(0)
    payload["traffic"] = {"source_type": "synthetic", "isl": 64, "osl": 8, **traffic}
    payload["spec"]["record_per_request"] = True
    in_memory = run_replay(json.dumps(payload))
    seen = []
    streamed = run_replay(json.dumps(payload), on_record=seen.append)
    assert seen == in_memory.per_request
    assert {k: v for k, v in streamed.summary.items() if k != "wall_time_ms"
            and not k.startswith("processed_")} == {
        k: v for k, v in in_memory.summary.items() if k != "wall_time_ms"
        and not k.startswith("processed_")}


def test_a_cutoff_run_streams_the_records_behind_a_request_still_in_flight(tmp_path):
    # the first request outlives the cutoff: every later one ends and waits behind it
    rows = [{"timestamp": 0, "input_length": 32, "output_length": 500, "hash_ids": [0, 1]}]
    rows += [{"timestamp": t, "input_length": 16, "output_length": 1 + t % 5, "hash_ids": [t + 1]}
             for t in range(1, 40)]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = bare_spec([])
    spec.update(record_per_request=True, max_sim_time_ms=600.0)
    payload = json.dumps({"spec": spec, "traffic": {
        "source_type": "trace", "trace_path": str(trace), "trace_format": "mooncake",
        "trace_block_size": 16}})
    in_memory = run_replay(payload)
    assert in_memory.summary["completed_requests"] == len(rows) - 1
    seen, ended = [], []
    sim = build_simulation(load_payload(payload),
                           on_event=lambda kind, t, r: kind == "completed" and ended.append(r.uuid))
    sim.collector.stream_records_to(seen.append)
    sim.run()
    sim.report()
    assert seen == in_memory.per_request
    assert sorted(ended) != ended     # they did end out of order


def test_records_numbered_out_of_order_are_summed_in_uuid_order():
    one = Collector(record_per_request=False)
    other = Collector(record_per_request=False)
    records = [rec(i, arrival=float(i), tokens=[i + 0.1 * i * i, i + 2.0 + i / 3.0])
               for i in range(1, 60)]
    for r in records:
        one.on_terminal(r)
    for r in reversed(records[5:]):       # 1..5 never end: everything else waits for them
        other.on_terminal(r)
    assert other._order.waiting and not other._totals.ttft
    for r in records[:5]:
        other.on_terminal(r)
    assert not other._order.waiting
    assert one._totals.ttft == other._totals.ttft and len(one._totals.ttft) == 59


def test_sorted_runs_read_like_one_sort(monkeypatch):
    values = array("d", [math.sin(i) * 100.0 + (i % 7) for i in range(1001)])
    whole = exact_stats(values)
    monkeypatch.setattr(stats, "SORT_RUN", 64)
    runs = SortedRuns(values)
    assert len(runs.runs) == 16
    assert list(runs) == sorted(values)
    assert runs.select([0, 500, 1000]) == [sorted(values)[i] for i in (0, 500, 1000)]
    assert exact_stats(values) == whole == exact_stats(list(values))
