"""The loop the seeded differential fuzzers share (bench/fuzz_g2_offload.py, bench/fuzz_sglang_pd.py).

``run_cases(make_case, label)`` parses ``[--cases N] [--seed S] [--timeout T] [--keep DIR]
[--show K]``, builds case ``i`` with ``make_case(random.Random(seed * 1_000_003 + i),
trace_path)`` (a payload dict and its mooncake rows), runs it on the reference
(../shared/tools/peer_run.py, one process per case, with a timeout) and on our simulator (in
process), compares the canonical forms (tests/cluster_compare.py), prints the first differences
of ``--show`` mismatches and the count of exact matches, and returns the exit status (0: all
match). ``--keep DIR`` writes every mismatching payload and its trace there. With
``skip_timeouts`` a case the reference does not finish in time is left out of the count (the
SGLang P/D livelock, FEATURES.md §8.5); otherwise it is a mismatch unless ours fails too.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

from cluster_compare import compare  # noqa: E402

REF_PYTHON = ROOT.parent / "ref-venv" / "bin" / "python"
PEER_RUN = ROOT.parent / "shared" / "tools" / "peer_run.py"


def run_reference(payload_path: Path, timeout_s: float):
    """("ok", the reference's report), ("timeout", None) or ("error", its last stderr line)."""
    env = dict(os.environ, DYN_LOG="error")
    try:
        done = subprocess.run([str(REF_PYTHON), str(PEER_RUN), str(payload_path), "--per-request"],
                              cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return "timeout", None
    if done.returncode != 0:
        return "error", (done.stderr.strip().splitlines() or [""])[-1]
    return "ok", json.loads(done.stdout.strip().splitlines()[-1])


class _OursTimedOut(Exception):
    pass


def _alarm(signum, frame):
    raise _OursTimedOut


def run_ours(payload: dict, timeout_s: float = 60.0):
    """("ok", (summary, per-request records)) or ("error", the exception in one line); a run
    that does not finish in ``timeout_s`` is an error, so one hang cannot stall the fuzzer."""
    from aisimulate_core import run_replay

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        report = run_replay(json.dumps(payload))
    except _OursTimedOut:
        return "error", f"did not finish within {timeout_s:g} s"
    except Exception as exc:   # any failure of ours is a mismatch
        return "error", f"{type(exc).__name__}: {exc}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    out = json.loads(report.to_json())
    return "ok", (out, out.pop("per_request", None) or [])


def _keep(keep: Path, i: int, payload, trace: Path):
    keep.mkdir(parents=True, exist_ok=True)
    kept_trace = keep / f"case{i}.jsonl"
    kept_trace.write_text(trace.read_text())
    payload["traffic"]["trace_path"] = str(kept_trace)
    (keep / f"case{i}.json").write_text(json.dumps(payload, indent=1))


def run_cases(make_case, label, argv=None, *, doc=None, seed=5, timeout=10.0,
              skip_timeouts=False):
    """Run the seeded cases of ``make_case`` against the reference; ``label`` names them in
    the last line ("G2 host-offload workloads")."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0] or None)
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=seed)
    ap.add_argument("--timeout", type=float, default=timeout)
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--show", type=int, default=3)
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    matches = skipped = 0
    mismatched = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i in range(args.cases):
            rng = random.Random(args.seed * 1_000_003 + i)
            trace = tmp / f"case{i}.jsonl"
            payload, rows = make_case(rng, str(trace))
            trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
            path = tmp / f"case{i}.json"
            path.write_text(json.dumps(payload, indent=1))
            status, theirs = run_reference(path, args.timeout)
            if status == "timeout" and skip_timeouts:
                skipped += 1
                continue
            mine_status, mine = run_ours(payload, max(60.0, 20 * args.timeout))
            if status != "ok":
                problems = [] if mine_status == "error" else [f"reference {status}: {theirs}"]
            elif mine_status == "error":
                problems = [f"ours failed: {mine}"]
            else:
                problems = compare(mine[0], mine[1], theirs)
            if problems:
                mismatched.append((i, problems))
                if args.keep is not None:
                    _keep(args.keep, i, payload, trace)
            else:
                matches += 1
    compared = args.cases - skipped
    for i, problems in mismatched[:args.show]:
        print(f"case {i}: {len(problems)} differences")
        for line in problems[:8]:
            print("   ", line)
    line = f"{matches} of {compared} {label} match the reference exactly"
    if skip_timeouts:
        line += f" ({skipped} skipped: the reference did not finish within {args.timeout:g} s)"
    print(line)
    return 0 if matches == compared else 1
