"""Canonical comparison of a cluster-layer run with the reference's (CLUSTER.md §7).

Host-speed keys are ignored, per-request uuids dropped, released-uuid lists compared by
length, numbers to 10 significant digits (values within 1e-9 of zero are equal), records
matched by their identity key, and in KV-router cases worker indices relabeled by first
admission per pool (the reference breaks cost ties between idle workers at random).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

IGNORED = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s",
           "outer_wall_s", "per_request", "telemetry", "lifecycle_operations",
           "scaling_snapshots"}
DIGESTS = {"agentic_lifecycle_digest", "graph_digest", "digest"}


def close(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if abs(a) < 1e-9 and abs(b) < 1e-9:
            return True
        if math.isinf(a) or math.isinf(b):
            return a == b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    return a == b


def diff(ours, theirs, path="$", out=None):
    """Every difference between two JSON values, as ``path: ours != theirs`` lines."""
    out = [] if out is None else out
    if isinstance(theirs, dict) and isinstance(ours, dict):
        for key in sorted(set(ours) | set(theirs)):
            where = f"{path}.{key}"
            if key not in ours:
                out.append(f"{where}: missing in ours (reference {theirs[key]!r})")
            elif key not in theirs:
                out.append(f"{where}: extra in ours ({ours[key]!r})")
            elif key in DIGESTS and isinstance(theirs[key], str):
                if not (isinstance(ours[key], str) and len(ours[key]) == len(theirs[key])):
                    out.append(f"{where}: digest shape {ours[key]!r}")
            else:
                diff(ours[key], theirs[key], where, out)
    elif isinstance(theirs, list) and isinstance(ours, list):
        if len(ours) != len(theirs):
            out.append(f"{path}: {len(ours)} items != reference {len(theirs)}")
        for i, (a, b) in enumerate(zip(ours, theirs)):
            diff(a, b, f"{path}[{i}]", out)
    elif not close(ours, theirs):
        out.append(f"{path}: {ours!r} != reference {theirs!r}")
    return out


def record_key(record):
    if record.get("request_id") is not None:
        return (record["request_id"],)
    return (record["arrival_time_ms"], record["input_length"], record["requested_output_length"],
            str(record.get("session_id")), str(record.get("turn_index")))


def relabel(records):
    """Worker indices renumbered per pool by first admission (CLUSTER.md §7.3)."""
    records = [json.loads(json.dumps(r)) for r in records]
    order = sorted(records, key=lambda r: (r.get("first_admit_ms") is None,
                                           r.get("first_admit_ms") or 0.0,
                                           r["arrival_time_ms"], record_key(r)))
    maps = {"prefill": {}, "decode": {}}
    for r in order:
        for route in r.get("routing_history") or []:
            pool = "prefill" if route["pool"] == "prefill" else "decode"
            sid = route["scheduler_id"]
            if sid is not None and sid not in maps[pool]:
                maps[pool][sid] = len(maps[pool])
    for r in records:
        for field, pool in (("prefill_worker_idx", "prefill"), ("decode_worker_idx", "decode")):
            if r.get(field) is not None:
                r[field] = maps[pool].get(r[field], r[field])
        for route in r.get("routing_history") or []:
            pool = "prefill" if route["pool"] == "prefill" else "decode"
            if route["scheduler_id"] is not None:
                route["scheduler_id"] = maps[pool].get(route["scheduler_id"], route["scheduler_id"])
            route["logical_worker_id"] = None
            route["dp_rank"] = None
    return records


def canonical_operations(operations):
    out = []
    for op in operations or []:
        op = dict(op)
        op["topology_released_request_uuids"] = len(op.get("topology_released_request_uuids") or [])
        out.append(op)
    return out


def compare(ours_summary, ours_records, theirs, *, samples=None, relabel_workers=False):
    """Differences between our report (summary dict, record list, optional samples list) and
    the reference's recorded output ``theirs`` (the peer_run line, parsed)."""
    problems = diff({k: v for k, v in ours_summary.items() if k not in IGNORED},
                    {k: v for k, v in theirs.items() if k not in IGNORED}, "$.summary")
    if "lifecycle_operations" in theirs or "lifecycle_operations" in ours_summary:
        diff(canonical_operations(ours_summary.get("lifecycle_operations")),
             canonical_operations(theirs.get("lifecycle_operations")), "$.lifecycle_operations",
             problems)
    if "per_request" in theirs:
        mine, ref = ours_records, theirs["per_request"]
        if relabel_workers:
            mine, ref = relabel(mine), relabel(ref)
        strip = lambda r: {k: v for k, v in r.items() if k != "uuid"}  # noqa: E731
        by_key = {record_key(r): strip(r) for r in mine}
        if len(by_key) != len(mine):
            problems.append("$.per_request: our record keys are not unique")
        for r in ref:
            key = record_key(r)
            if key not in by_key:
                problems.append(f"$.per_request{list(key)}: missing in ours")
                continue
            diff(by_key.pop(key), strip(r), f"$.per_request{list(key)}", problems)
        for key in by_key:
            problems.append(f"$.per_request{list(key)}: extra in ours")
    if "telemetry" in theirs:
        diff(samples, theirs["telemetry"]["samples"], "$.telemetry", problems)
    return problems


def run_case(root, case_path, *, telemetry_interval_ms=None, tmp):
    """Run a case through the CLI as the issue's contract says; (summary, records, samples)."""
    import subprocess
    import sys

    report, records, samples = tmp / "report.json", tmp / "records.jsonl", tmp / "samples.jsonl"
    command = [sys.executable, "-m", "aisimulate_core", "run", str(case_path), "--output",
               str(report), "--per-request", str(records), "--quiet"]
    if telemetry_interval_ms is not None:
        command += ["--telemetry", str(samples), "--telemetry-interval-ms",
                    str(telemetry_interval_ms)]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(report.read_text())
    lines = [json.loads(line) for line in records.read_text().splitlines() if line]
    sampled = None
    if telemetry_interval_ms is not None:
        sampled = [json.loads(line) for line in samples.read_text().splitlines() if line]
    return summary, lines, sampled


def load_expected(path: Path):
    return json.loads(path.read_text())
