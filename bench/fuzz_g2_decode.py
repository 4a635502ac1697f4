#!/usr/bin/env python3
"""bench/fuzz_g2_offload.py's G2 workloads with long decodes, ours against the reference.

Half the requests of each case generate 40 to 300 tokens instead of at most 13, so that
runs of decode-only passes form beside stores, loads and preemptions (VllmOffloadRank.extend
runs them as one event while no transfer is in flight, nothing waits and every running
prompt is stored). Same options as bench/fuzz_g2_offload.py:

    .venv/bin/python bench/fuzz_g2_decode.py [--cases N] [--seed S] [--keep DIR] [--show K]
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_common import run_cases  # noqa: E402
from fuzz_g2_offload import make_case as short_case  # noqa: E402


def make_case(rng: random.Random, trace_path: str):
    payload, rows = short_case(rng, trace_path)
    for i, row in enumerate(rows):
        if rng.random() < 0.5:
            # (+ i: records are matched by arrival, input and output length, kept distinct)
            row["output_length"] = rng.choice((40, 64, 100, 300)) + i
    return payload, rows


def main(argv=None):
    return run_cases(make_case, "G2 host-offload workloads with long decodes", argv,
                     doc=__doc__, seed=7, timeout=20.0)


if __name__ == "__main__":
    sys.exit(main())
