"""CPU time of one vLLM rank, Python (VllmRank) against C (NativeVllmRank), on a b1-like stream.

The same seeded Poisson stream (unique prompts of ``--isl`` tokens, ``--osl`` outputs, fixed
timing 10/5 ms, block size 16, 16384 blocks, as ../shared/bench/b1_poisson_fixed.json) through
the differential test's driver loop (tests/test_vllm_native.py: submit arrivals,
schedule/extend/complete; the requests are made before its clock starts), interleaved A/B runs,
medians of ``time.process_time``.

    python bench/vllm_native_ab.py [--requests N] [--isl 1024] [--osl 512] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_vllm_native import drive  # noqa: E402

from aisimulate_core.engine.vllm import VllmRank  # noqa: E402
from aisimulate_core.engine.vllm_native import NativeVllmRank  # noqa: E402
from aisimulate_core.spec.engine import EngineConfig  # noqa: E402


def b1_stream(n, isl, osl, rate_per_s, seed=42):
    rng = random.Random(seed)
    t = 0.0
    stream = []
    for i in range(n):
        t += rng.expovariate(rate_per_s / 1000.0)
        blocks = -(-isl // 16)   # unique prompts, one id per block of 16 tokens
        stream.append((t, list(range(i * blocks, (i + 1) * blocks)), 16, isl, osl, None))
    return stream


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--isl", type=int, default=1024)
    parser.add_argument("--osl", type=int, default=512)
    parser.add_argument("--rate", type=float, default=40.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    engine = EngineConfig(backend="vllm", block_size=16, num_gpu_blocks=16384,
                          max_num_seqs=256, max_num_batched_tokens=8192)
    stream = b1_stream(args.requests, args.isl, args.osl, args.rate)
    times = {VllmRank: [], NativeVllmRank: []}
    results = {}
    for _ in range(args.repeat):
        for cls in (VllmRank, NativeVllmRank):
            out, cpu_s = drive(cls, engine, None, stream, False, max_passes=10**9, timing="b1")
            times[cls].append(cpu_s)
            results[cls] = out
    same = all(results[VllmRank][k] == results[NativeVllmRank][k] for k in results[VllmRank])
    py, c = statistics.median(times[VllmRank]), statistics.median(times[NativeVllmRank])
    passes = len(results[VllmRank]["pass_ends"])
    events = len(results[VllmRank]["trace"])
    print(f"{args.requests} requests isl {args.isl} osl {args.osl}: {passes} passes in {events} "
          f"driver events; python {py:.3f} s, C {c:.3f} s CPU (medians of {args.repeat}); "
          f"C/python {c / py:.3f}; identical results: {same}")


if __name__ == "__main__":
    main()
