"""Fixed pool vs the ``load`` autoscaler on the Mooncake conversation trace, at one SLA.

Run from the project root: ``.venv/bin/python examples/mooncake_autoscaling_study.py``
(about a minute). It runs examples/mooncake_fixed_pool.json at 5 and 6 workers and
examples/mooncake_load_autoscaler.json on the trace as it is, then the same deployments on a
"peak" variant of it: every request of the middle 20 minutes, one in three of the first and
last 20 (kept in trace order, timestamps untouched), written to a temporary folder. It prints
one markdown table; a deployment meets the SLA when at least 90% of the requests meet both the
TTFT and the ITL targets (goodput / requests).
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile

from aisimulate_core import run_replay

HERE = pathlib.Path(__file__).resolve().parent
TARGET = 0.90


def load(name):
    return json.loads((HERE / name).read_text())


def peak_trace(source, folder):
    """The trace with its first and last 20 minutes thinned to one request in three."""
    out = pathlib.Path(folder) / "mooncake_peak.jsonl"
    with open(source) as rows, open(out, "w") as kept:
        for i, line in enumerate(rows):
            t = json.loads(line)["timestamp"]
            if 1_200_000 <= t < 2_400_000 or i % 3 == 0:
                kept.write(line)
    return str(out)


def row(workload, label, payload):
    s = run_replay(json.dumps(payload)).summary
    attained = s["goodput_completed_requests"] / s["num_requests"]
    ops = [op for op in s.get("lifecycle_operations", []) if op["cause"] == "planner_scale"]
    return (f"| {workload} | {label} | {s['gpu_hours']:.3f} | {attained:.1%} "
            f"{'yes' if attained >= TARGET else 'no'} | {s['goodput_request_throughput_rps']:.3f} "
            f"| {s['p90_ttft_ms']:.0f} | {s['p90_itl_ms']:.1f} | {len(ops)} |")


def fixed(workers, trace=None):
    payload = load("mooncake_fixed_pool.json")
    payload["spec"]["topology"]["workers"]["initial_workers"] = workers
    if trace:
        payload["traffic"]["trace_path"] = trace
    return payload


def autoscaler(trace=None):
    payload = load("mooncake_load_autoscaler.json")
    if trace:
        payload["traffic"]["trace_path"] = trace
    return payload


def main():
    print("| workload | deployment | GPU-hours | SLA attainment (>= 90%) | goodput req/s "
          "| TTFT p90 ms | ITL p90 ms | scale operations |")
    print("|---|---|---|---|---|---|---|---|")
    for workers in (5, 6):
        print(row("Mooncake", f"fixed {workers} workers", fixed(workers)), flush=True)
    print(row("Mooncake", "load autoscaler (4 at start, 2..12)", autoscaler()), flush=True)
    source = load("mooncake_fixed_pool.json")["traffic"]["trace_path"]
    with tempfile.TemporaryDirectory() as folder:
        trace = peak_trace(source, folder)
        for workers in (4, 5):
            print(row("Mooncake peak", f"fixed {workers} workers", fixed(workers, trace)),
                  flush=True)
        print(row("Mooncake peak", "load autoscaler (4 at start, 2..12)", autoscaler(trace)),
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
