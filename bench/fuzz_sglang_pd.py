#!/usr/bin/env python3
"""Seeded random SGLang P/D workloads, ours against the reference (FEATURES.md §8, §10).

Generates small disaggregated SGLang payloads (1-2 prefill and 1-2 decode workers, page 1, 4
or 16, prefix sharing through shared hash ids, transfer bandwidths and both timing modes,
decode pools from comfortable to tight, chunked prefills, a few max_num_seqs limits), runs
each on our simulator (in process) and on the reference (../shared/tools/peer_run.py, one
process per case, with a timeout: the reference livelocks on some tight decode pools, §8.5),
compares the canonical forms (tests/cluster_compare.py) and prints the count of exact matches.

    .venv/bin/python bench/fuzz_sglang_pd.py [--cases N] [--seed S] [--keep DIR] [--show K]

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
    ps = rng.choice((1, 1, 4, 16, 16))
    n = rng.randint(3, 12)
    groups = [[1000 * g + k for k in range(rng.randint(1, 6))] for g in range(rng.randint(1, 4))]
    rows = []
    seen = set()
    t = 0.0
    for i in range(n):
        t += rng.choice((0.0, 0.0, 0.5, 1.0, 2.5, 5.0, 7.0, 12.0, 20.0, 40.0))
        prefix = rng.choice(groups)[:rng.randint(0, 6)] if rng.random() < 0.7 else []
        own = [90000 + 100 * i + k for k in range(rng.randint(0 if prefix else 1, 3))]
        hashes = prefix + own
        length = 16 * len(hashes) - rng.choice((0, 0, 0, 1, 5, 15))
        if length < 1:
            length = 1
        output = rng.choice((1, 2, 3, 5, 8, 13, 20, 30))
        while (t, length, output) in seen:   # records are matched by this key
            output += 1
        seen.add((t, length, output))
        rows.append({"timestamp": t, "input_length": length, "output_length": output,
                     "hash_ids": hashes})
    longest = max(r["input_length"] + r["output_length"] for r in rows)
    pages = lambda tokens: -(-tokens // ps)  # noqa: E731
    tight = rng.random() < 0.35
    decode_blocks = (pages(longest) + rng.randint(2, 6)) * (1 if tight else rng.randint(2, 6)) \
        if rng.random() < 0.8 else 16384 // ps
    prefill_blocks = 16384 // ps if rng.random() < 0.8 else pages(max(
        r["input_length"] for r in rows)) * rng.randint(2, 4)
    if rng.random() < 0.7:
        timing = {"type": "fixed", "prefill_ms": float(rng.choice((10, 4, 7.5))),
                  "decode_ms": float(rng.choice((5, 2, 3.5)))}
    else:
        timing = {"type": "polynomial"}

    def rank(blocks):
        r = {"backend": "sglang", "block_size": ps, "num_gpu_blocks": blocks,
             "max_num_seqs": rng.choice((64, 64, 64, 2, 3)),
             "timing_model": timing}
        if rng.random() < 0.3:
            r["enable_prefix_caching"] = False if rng.random() < 0.3 else True
        sg = {}
        if rng.random() < 0.3:
            sg["chunked_prefill_size"] = rng.choice((32, 48, 64))
        if rng.random() < 0.2:
            sg["schedule_policy"] = "lpm"
        if sg:
            r["sglang"] = sg
        return r

    prefill = rank(prefill_blocks)
    decode = rank(decode_blocks)
    if rng.random() < 0.15:
        # outputs cut at the limit, and now and then a prompt the decode side refuses
        decode["max_model_len"] = max(r["input_length"] for r in rows) + rng.choice((-8, 1, 6))
    if rng.random() < 0.15:
        prefill["max_model_len"] = max(r["input_length"] for r in rows) - rng.choice((0, 8))
    if rng.random() < 0.15:
        decode["prefill_decode_interval"] = rng.choice((1, 2))
    if rng.random() < 0.8:
        bw = rng.choice((0.5, 1.0, 2.0, 4.0))
        bpt = rng.choice((50000, 100000, 200000))
        mode = rng.choice(("full_prompt", "destination_missing"))
        for r in (prefill, decode):
            r["kv_transfer_bandwidth"] = bw
            r["kv_transfer_bytes_per_token"] = bpt
            r["kv_transfer_timing_mode"] = mode
    topology = {"kind": "disaggregated",
                "prefill": {"initial_workers": rng.choice((1, 1, 2))},
                "decode": {"initial_workers": rng.choice((1, 1, 2))}}
    # attention DP on either pool now and then (FEATURES.md §12.6)
    prefill_dp = 2 if rng.random() < 0.15 else 1
    decode_dp = 2 if rng.random() < 0.15 else 1
    engine = {"dp_size": 1, "tensor_parallel_size": 1, "rank": decode,
              "prefill": {"dp_size": prefill_dp, "tensor_parallel_size": 1, "rank": prefill},
              "decode": {"dp_size": decode_dp, "tensor_parallel_size": 1, "rank": decode}}
    # (drawn last: the cases drawn before MTP was added stay as they were)
    if rng.random() < 0.3:
        # MTP bursts on the decode side (FEATURES.md §1.4); prefill copies never draw
        nextn = rng.choice((1, 2, 3))
        for r in (prefill, decode):
            r["aic_nextn"] = nextn
            if rng.random() < 0.5:
                r["aic_nextn_accept_rates"] = rng.choice(("1,1,1", "0.5,0.5,0.5", "0.9,0.2"))
            if rng.random() < 0.3:
                r["aic_mtp_seed"] = rng.randint(0, 1000)
    payload = {"spec": {"version": 1, "topology": topology, "engine": engine,
                        "adapters": {"placement": {"provider": "round_robin"},
                                     "scaling": {"provider": "none"}},
                        "record_per_request": True},
               "traffic": {"source_type": "trace", "trace_path": trace_path,
                           "trace_format": "mooncake", "trace_block_size": 16}}
    return payload, rows


def main(argv=None):
    return run_cases(make_case, "SGLang P/D workloads", argv, doc=__doc__, seed=11, timeout=5.0,
                     skip_timeouts=True)   # the reference livelocks on some (FEATURES.md §8.5)


if __name__ == "__main__":
    sys.exit(main())
