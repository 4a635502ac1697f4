#!/usr/bin/env python3
"""Shrink a workload on which ours differs from the reference: drop trace rows one at a time,
keeping each drop after which the two still differ, until no single row can go.

    .venv/bin/python bench/shrink_case.py PAYLOAD.json OUT_PREFIX

PAYLOAD.json is a trace payload (a fuzzer's ``--keep`` case); OUT_PREFIX.json and
OUT_PREFIX.jsonl receive the smallest payload and trace found, which still differ. Each trial
runs the reference (../ref-venv, peer_run.py) and ours in this process, compared as the
fuzzers compare them (bench/fuzz_common.py). A workload that stops differing once any row is
dropped is left whole.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_common import compare, run_ours, run_reference  # noqa: E402


def problems(payload, rows, out: Path, timeout_s):
    """The differences on ``rows`` (written to ``out``), or None when either side failed."""
    trace = out.with_suffix(".jsonl")
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    payload["traffic"]["trace_path"] = str(trace.resolve())
    path = out.with_suffix(".json")
    path.write_text(json.dumps(payload, indent=1))
    status, theirs = run_reference(path, timeout_s)
    mine_status, mine = run_ours(payload, max(60.0, 20 * timeout_s))
    if status != "ok" or mine_status != "ok":
        return None
    return compare(mine[0], mine[1], theirs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("payload", type=Path)
    ap.add_argument("out", type=Path, help="output prefix (OUT.json, OUT.jsonl)")
    ap.add_argument("--timeout", type=float, default=10.0)
    args = ap.parse_args(argv)
    payload = json.loads(args.payload.read_text())
    trace = Path(payload["traffic"]["trace_path"])
    if not trace.is_absolute():
        trace = args.payload.parent / trace
    rows = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    found = problems(payload, rows, args.out, args.timeout)
    if not found:
        print("the payload does not differ (or a side failed): nothing to shrink")
        return 1
    dropped = True
    while dropped:
        dropped = False
        for i in range(len(rows)):
            trial = rows[:i] + rows[i + 1:]
            if trial and problems(payload, trial, args.out, args.timeout):
                rows, dropped = trial, True
                print(f"{len(rows)} rows still differ", flush=True)
                break
    found = problems(payload, rows, args.out, args.timeout)
    print(f"{len(rows)} rows, {len(found)} differences: {args.out}.json")
    for line in found[:8]:
        print("   ", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
