#!/usr/bin/env python3
"""Peak memory of long synthetic runs (issue 8, item 3): not part of the test suite.

Each case runs in a child process (under ``/usr/bin/time -v`` when it exists, else measured
with ``resource.getrusage`` of the child) and prints its peak RSS:

    .venv/bin/python bench/memory.py                     # 1M and 10M requests
    .venv/bin/python bench/memory.py 200000 1000000      # other sizes
    .venv/bin/python bench/memory.py --records 1000000   # per-request records streamed too
    .venv/bin/python bench/memory.py --kept 1000000      # records kept on the report
    .venv/bin/python bench/memory.py --reference --kept 1000000   # the same on the reference

The payload is Poisson 200 rps, isl 64, osl 8, fixed timing (10 ms prefill, 5 ms decode), one
vLLM worker, ``record_per_request: false``: a few requests are in flight at a time, so the
peak should be set by that and by the run's length (per-pass history, one 8-byte sample per
metric and completed request), not by the request count. Targets: 1M under 300 MB; 10M
completes. 10M takes several minutes of one core.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, sys, time
from aisimulate_core import run_replay
payload = json.load(open(sys.argv[1]))
records = [0]
def count(record):
    records[0] += 1
on_record = count if sys.argv[2] == "records" else None
started = time.perf_counter()
report = run_replay(payload, on_record=on_record)
s = report.summary
if report.per_request is not None:
    records[0] = len(report.per_request)
print(json.dumps({"completed": s["completed_requests"], "num_requests": s["num_requests"],
                  "mean_ttft_ms": s["mean_ttft_ms"], "records": records[0],
                  "run_s": time.perf_counter() - started}))
"""

# The reference through its own Python API (as ../shared/tools/peer_run.py maps a payload), in
# its own virtual environment; records are kept in its report, as ours with --kept.
REF_PYTHON = os.path.join(os.path.dirname(ROOT), "ref-venv", "bin", "python")
PEER_RUN = os.path.join(os.path.dirname(ROOT), "shared", "tools", "peer_run.py")


def payload(requests, kept=False):
    return {
        "spec": {
            "version": 1,
            "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
            "engine": {"rank": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 16384,
                                "max_num_seqs": 256, "max_num_batched_tokens": 8192,
                                "timing_model": {"type": "fixed", "prefill_ms": 10.0,
                                                 "decode_ms": 5.0}}},
            "record_per_request": kept,
        },
        "traffic": {"source_type": "synthetic", "load_type": "poisson", "request_rate": 200.0,
                    "isl": 64, "osl": 8, "request_count": requests, "arrival_seed": 42},
    }


def run_case(requests, mode, python, reference=False):
    """mode: "summary" (records off), "records" (streamed) or "kept" (on the report)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(payload(requests, kept=mode == "kept"), f)
        path = f.name
    try:
        if reference:
            command = [REF_PYTHON, PEER_RUN, path] + (["--per-request"] if mode != "summary"
                                                      else [])
        else:
            command = [python, "-c", CHILD, path, mode]
        timed = os.path.exists("/usr/bin/time")
        if timed:
            command = ["/usr/bin/time", "-v"] + command
        started = time.perf_counter()
        env = dict(os.environ, DYN_LOG="error")
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            sys.exit(f"{requests} requests: the run failed:\n{proc.stderr}")
        if timed:
            line = next(ln for ln in proc.stderr.splitlines() if "Maximum resident" in ln)
            peak_kb = int(line.split(":")[1])
        else:
            peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KB on Linux
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        if reference:
            result = {"completed": result["completed_requests"],
                      "records": len(result.get("per_request") or [])}
    finally:
        os.unlink(path)
    return peak_kb, wall, result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requests", nargs="*", type=int, default=[1_000_000, 10_000_000])
    parser.add_argument("--records", action="store_true",
                        help="stream every per-request record to a counting sink (on_record)")
    parser.add_argument("--kept", action="store_true",
                        help="keep every per-request record on the report (record_per_request)")
    parser.add_argument("--reference", action="store_true",
                        help="measure the reference instead (../ref-venv, peer_run.py)")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    mode = "kept" if args.kept else "records" if args.records else "summary"
    print(f"{'requests':>12} {'peak RSS MB':>12} {'bytes/request':>14} {'wall s':>9} "
          f"{'completed':>12} {'records':>10}")
    for requests in args.requests:
        peak_kb, wall, result = run_case(requests, mode, args.python, args.reference)
        print(f"{requests:>12,} {peak_kb / 1024:>12.1f} {peak_kb * 1024 / requests:>14.1f} "
              f"{wall:>9.1f} {result['completed']:>12,} {result['records']:>10,}", flush=True)


if __name__ == "__main__":
    main()
