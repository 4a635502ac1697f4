#!/usr/bin/env python3
"""Seeded random G2 host-offload workloads, ours against the reference (FEATURES.md §5, §10).

Generates small aggregated vLLM payloads with ``native_host_offload`` (1 or 2 workers, G1 pools
from tight to comfortable, host pools from a few blocks to plenty, d2h/h2d bandwidths from 0 to
32 GB/s, 1 MB or odd-sized blocks, prefix sharing through shared hash ids and sessions,
chunked prefills under small budgets, a few max_num_seqs limits), runs each on our simulator
(in process) and on the reference (../shared/tools/peer_run.py, one process per case), compares
the canonical forms (tests/cluster_compare.py) and prints the count of exact matches.

    .venv/bin/python bench/fuzz_g2_offload.py [--cases N] [--seed S] [--keep DIR] [--show K]

Run from the project root. ``--keep DIR`` writes every mismatching payload (and its trace)
there; ``--show K`` prints the first differences of K mismatches. The loop is
bench/fuzz_common.py's ``run_cases``.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_common import run_cases  # noqa: E402


def make_case(rng: random.Random, trace_path: str):
    """One payload (dict) and its mooncake trace rows."""
    n = rng.randint(3, 10)
    groups = [[1000 * g + k for k in range(rng.randint(2, 7))] for g in range(rng.randint(1, 4))]
    rows = []
    seen = set()
    t = 0.0
    for i in range(n):
        t += rng.choice((0.0, 0.0, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0))
        prefix = rng.choice(groups)[:rng.randint(1, 7)] if rng.random() < 0.75 else []
        own = [90000 + 100 * i + k for k in range(rng.randint(0 if prefix else 1, 3))]
        hashes = prefix + own
        length = 16 * len(hashes) - rng.choice((0, 0, 0, 1, 5, 15))
        output = rng.choice((1, 2, 3, 5, 8, 13))
        while (t, length, output) in seen:   # records are matched by this key
            output += 1
        seen.add((t, length, output))
        rows.append({"timestamp": t, "input_length": max(length, 1), "output_length": output,
                     "hash_ids": hashes})
    longest = max(r["input_length"] + r["output_length"] for r in rows)
    blocks = -(-longest // 16)
    g1 = blocks + rng.choice((0, 1, 2, 4, 8, 16, 64))
    host = {"num_host_blocks": rng.choice((2, 4, 6, 8, 12, 16, 32, 128))}
    if rng.random() < 0.85:
        host["d2h_bandwidth_gbps"] = rng.choice((0.0, 0.1, 0.5, 1.0, 2.0, 3.0, 32.0))
    if rng.random() < 0.85:
        host["h2d_bandwidth_gbps"] = rng.choice((0.0, 0.25, 0.5, 1.0, 2.0, 7.0, 32.0))
    rank = {"backend": "vllm", "block_size": 16, "num_gpu_blocks": g1,
            "max_num_seqs": rng.choice((64, 64, 64, 2, 3)),
            "max_num_batched_tokens": rng.choice((8192, 8192, 8192, 64, 48)),
            "timing_model": {"type": "fixed", "prefill_ms": float(rng.choice((10, 4, 7.5))),
                             "decode_ms": float(rng.choice((5, 2, 3.5)))},
            "kv_cache_bytes_per_token": rng.choice((62500, 62500, 100000, 12345)),
            "native_host_offload": host}
    if rng.random() < 0.15:
        rank["preemption_mode"] = "fifo"
    payload = {"spec": {"version": 1,
                        "topology": {"kind": "aggregated",
                                     "workers": {"initial_workers": rng.choice((1, 1, 1, 2))}},
                        "engine": {"dp_size": 1, "tensor_parallel_size": 1, "rank": rank},
                        "adapters": {"placement": {"provider": "round_robin"},
                                     "scaling": {"provider": "none"}},
                        "record_per_request": True},
               "traffic": {"source_type": "trace", "trace_path": trace_path,
                           "trace_format": "mooncake", "trace_block_size": 16}}
    return payload, rows


def main(argv=None):
    return run_cases(make_case, "G2 host-offload workloads", argv, doc=__doc__, seed=5,
                     timeout=10.0)


if __name__ == "__main__":
    sys.exit(main())
