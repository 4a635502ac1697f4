"""Hostile values in the engine-feature fields (issue 11): each must give a report or one clear
error line, never a traceback, a crash, a hang or unbounded memory.

Every case is one of ../shared/bench/features/ with one field set to an edge value (zero,
negative, huge, NaN-like, the wrong type). Each runs in its own process under a 2 GiB address
space limit and a 60 s timeout through the CLI (`aisimulate run`), as a user would run it.

    python bench/fuzz_feature_inputs.py [--only SUBSTRING] [--show-ok]

Prints one line per case that misbehaves and a count; exit status 1 when any does.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FEATURES = ROOT.parent / "shared" / "bench" / "features"
CLI = ROOT / ".venv" / "bin" / "aisimulate"
MEMORY_BYTES = 2 << 30
TIMEOUT_S = 60

HUGE_INTS = [0, -1, 2**31, 2**32 + 1, 2**53 + 1, 2**63, 2**64, 10**30]
BAD_FLOATS = [0.0, -1.0, 1e-320, 1e308, 1e309, "nan", "inf"]
WRONG_TYPES = ["1", True, [1], {"a": 1}, None]

# (feature case, path of the field inside the payload, values)
RANK = ("spec", "engine", "rank")
CASES = [
    ("f1_mtp_vllm_dp2", RANK + ("aic_nextn",), HUGE_INTS + [6, 2.5] + WRONG_TYPES),
    ("f1_mtp_vllm_dp2", RANK + ("aic_nextn_accept_rates",),
     ["", " ", "1.5", "-0.1", "nan", "inf", "0.5,,0.2", "x", ",".join(["0.5"] * 100000), 5,
      None]),
    ("f1_mtp_vllm_dp2", RANK + ("aic_mtp_seed",), HUGE_INTS + [1.5, "7", None]),
    ("f2_mtp_sglang_2w", RANK + ("aic_nextn",), [0, -1, 6, 2**63, "2"]),
    ("f3_psi_vllm_dp2", RANK + ("prefill_schedule_interval",), HUGE_INTS + [2.5] + WRONG_TYPES),
    ("f3_psi_vllm_dp2", ("spec", "engine", "dp_size"), [1, 2**16, 2**20]),
    ("f6_g2_fence_pending", RANK + ("native_host_offload", "num_host_blocks"),
     HUGE_INTS + WRONG_TYPES),
    ("f6_g2_fence_pending", RANK + ("native_host_offload", "d2h_bandwidth_gbps"), BAD_FLOATS),
    ("f6_g2_fence_pending", RANK + ("native_host_offload", "h2d_bandwidth_gbps"), BAD_FLOATS),
    ("f6_g2_fence_pending", RANK + ("kv_cache_bytes_per_token",), HUGE_INTS + [None, 1.5]),
    ("f6_g2_fence_pending", RANK + ("native_host_offload",), [{}, [], "x", {"num_host_blocks": 4, "extra": 1}]),
    ("f8_g3_worker_local", RANK + ("g3_offload", "num_g3_blocks"), HUGE_INTS + WRONG_TYPES),
    ("f8_g3_worker_local", RANK + ("g3_offload", "scope"), ["x", "", 1, None]),
    ("f8_g3_worker_local", RANK + ("g3_offload", "latency_to_first_byte_ms"), BAD_FLOATS),
    ("f8_g3_worker_local", RANK + ("g3_offload", "read_bandwidth_gbps"), BAD_FLOATS),
    ("f8_g3_worker_local", RANK + ("g3_offload", "write_bandwidth_gbps"), BAD_FLOATS),
    ("f9_state_cache", RANK + ("state_cache", "bytes_per_request"), HUGE_INTS + WRONG_TYPES),
    ("f9_state_cache", RANK + ("kv_cache_bytes_per_token",), [0, -1, 1, 2**63, None]),
    ("f4_lanes_agentic", ("traffic", "agentic_lanes"), HUGE_INTS + [1.5] + WRONG_TYPES),
    ("f4_lanes_agentic", ("traffic", "execution_model"), ["", " ", 5, None, "x" * 100000]),
    ("f11_sglang_pd_1p1d", ("spec", "engine", "decode", "rank", "kv_transfer_bandwidth"),
     BAD_FLOATS),
    ("f11_sglang_pd_1p1d", ("spec", "engine", "decode", "rank", "kv_transfer_bytes_per_token"),
     HUGE_INTS),
    ("f11_sglang_pd_1p1d", ("spec", "engine", "decode", "rank", "kv_transfer_timing_mode"),
     ["x", "", 1, None]),
    ("f12_sglang_pd_2p2d_pressure", ("spec", "engine", "decode", "rank", "num_gpu_blocks"),
     [0, 1, 2**40]),
    ("f12_sglang_pd_2p2d_pressure", ("spec", "topology", "decode", "initial_workers"),
     [0, 2**20]),
]


def json_value(value):
    """The JSON text of a case's value: "nan"/"inf" as bare tokens (what a hand-edited file
    may hold; Python's json reads them), everything else as JSON."""
    if value in ("nan", "inf"):
        return {"nan": "NaN", "inf": "Infinity"}[value]
    return json.dumps(value)


def mutated(payload, path, value):
    """The payload text with ``path`` set to ``value`` (its parents made when missing)."""
    marker = "__FUZZ_VALUE__"
    doc = copy.deepcopy(payload)
    node = doc
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(node, dict) else node
    node[path[-1]] = marker
    return json.dumps(doc).replace(f'"{marker}"', json_value(value))


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def run_case(text):
    """(outcome, detail): ok-report, ok-error, or a failure kind."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, dir="/tmp") as f:
        f.write(text)
        name = f.name
    try:
        proc = subprocess.run([str(CLI), "run", name, "--output", os.devnull], cwd=ROOT,
                              capture_output=True, text=True, timeout=TIMEOUT_S,
                              preexec_fn=limit_memory)
    except subprocess.TimeoutExpired:
        return "hang", f"no answer in {TIMEOUT_S} s"
    finally:
        os.unlink(name)
    err = proc.stderr.strip()
    if proc.returncode == 0:
        return "ok-report", ""
    if "Traceback" in err or proc.returncode < 0 or proc.returncode not in (1, 2):
        return "crash", f"rc {proc.returncode}: {err.splitlines()[-1] if err else ''}"
    lines = [line for line in err.splitlines() if line.strip()]
    if not lines:
        return "silent", f"rc {proc.returncode} with nothing on stderr"
    if "MemoryError" in err:
        return "memory", lines[-1]
    return "ok-error", lines[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="run the cases whose field contains this")
    parser.add_argument("--show-ok", action="store_true", help="print every case's outcome")
    args = parser.parse_args(argv)
    if not FEATURES.is_dir():
        print(f"{FEATURES} is not here (../shared beside the project)")
        return 1
    bad = total = 0
    for case, path, values in CASES:
        field = ".".join(path)
        if args.only and args.only not in field and args.only not in case:
            continue
        payload = json.loads((FEATURES / f"{case}.json").read_text())
        for value in values:
            total += 1
            outcome, detail = run_case(mutated(payload, path, value))
            shown = json_value(value)
            shown = shown if len(shown) < 40 else shown[:37] + "..."
            if not outcome.startswith("ok"):
                bad += 1
                print(f"{outcome:9s} {case} {field}={shown}: {detail}")
            elif args.show_ok:
                print(f"{outcome:9s} {case} {field}={shown}: {detail[:160]}")
    print(f"{total - bad} of {total} cases gave a report or one clear error")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
