"""`make bench`: wall time of each benchmark payload, ours against the reference's.

Each payload runs in a fresh process per side; the time is the in-process replay call (payload
text to report), median of --repeat runs (at least SMALL_REPEAT for a workload under SMALL_S,
ours and the reference's taking turns), so interpreter start-up is left out on both sides. The
reference runs only when its virtual environment exists (../ref-venv, see
../shared/tools/README.md), through peer_run.py with the reading of its result (its summary and
per-request records, made into Python objects only when read) added to its time, as our timed
call makes its report (bench/ref_timed.py). Ratios are our time over the reference's measured in this same run;
absolute times drift on shared machines, ratios much less.

    python bench/run.py [--repeat N] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
REF_PYTHON = ROOT.parent / "ref-venv" / "bin" / "python"
# peer_run under a wrapper that also times the reading of the reference's result (its records
# are made into Python objects only when read, after peer_run's clock stops; see ref_timed.py)
REF_TIMED = ROOT / "bench" / "ref_timed.py"

# One-time costs of a Python process are paid before the clock starts, as the reference's
# compiled core pays its own at load: plugin discovery (entry points, plugin imports, the
# providers their register hooks register: registries_of, kept on the manager) and the
# converter's generated code (one untimed load_payload). The clock then covers the whole call:
# payload text to report, trace parsing included.
OURS = """
import json, sys, time
from aisimulate_core import run_replay
from aisimulate_core.plugins import make_plugin_manager
from aisimulate_core.registry import registries_of
from aisimulate_core.spec import load_payload
text = open(sys.argv[1]).read()
pm = make_plugin_manager()
registries_of(pm)
load_payload(text)
start = time.perf_counter()
report = run_replay(text, plugin_manager=pm)
elapsed = time.perf_counter() - start
s = report.summary
print(json.dumps({"wall_s": elapsed, "completed": s["completed_requests"],
                  "mean_ttft_ms": s["mean_ttft_ms"], "mean_e2e_latency_ms": s["mean_e2e_latency_ms"]}))
"""


# Workloads too long to repeat: one run per side, whatever --repeat says.
LARGE_PREFIX = "large_"
# The Mooncake conversation trace replicated 10x for 16 workers (issue 10): copy k shifts every
# hash id by k * (largest id + 1), so copies share no prefix, and the clock is stretched 2.5x so
# that each of the 16 workers sees b3's per-worker load (120,310 requests).
REPLICAS = 10
STRETCH = 2.5
MOONCAKE = SHARED / "data" / "mooncake" / "conversation_trace.jsonl"
GENERATED = ROOT / "build" / "bench" / "mooncake_conversation_x10.jsonl"


def generate_replicated_trace():
    """Write GENERATED from the shared trace (not kept in the project: derived at bench time)."""
    if GENERATED.exists() and GENERATED.stat().st_mtime >= MOONCAKE.stat().st_mtime:
        return
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines() if line.strip()]
    shift = 1 + max(h for row in rows for h in row["hash_ids"])
    replicated = []
    for k in range(REPLICAS):
        for row in rows:
            replicated.append({"timestamp": int(row["timestamp"] * STRETCH),
                               "input_length": row["input_length"],
                               "output_length": row["output_length"],
                               "hash_ids": [h + k * shift for h in row["hash_ids"]]})
    replicated.sort(key=lambda row: row["timestamp"])   # stable: copies in order at one time
    GENERATED.parent.mkdir(parents=True, exist_ok=True)
    partial = GENERATED.with_suffix(".tmp")
    partial.write_text("".join(json.dumps(row) + "\n" for row in replicated))
    partial.replace(GENERATED)


# The first 8,000 rows of the Mooncake conversation trace as 2,000 agentic plays of four
# requests (each after the previous one's completion + 500 ms), for agentic_lanes (issue 11).
AGENTIC_PLAYS = ROOT / "build" / "bench" / "mooncake_agentic_plays.jsonl"
PLAY_REQUESTS = 4
PLAY_ROWS = 8000


def generate_agentic_plays():
    """Write AGENTIC_PLAYS (an agentic_mooncake v2 trace) from the shared Mooncake trace."""
    if AGENTIC_PLAYS.exists() and AGENTIC_PLAYS.stat().st_mtime >= MOONCAKE.stat().st_mtime:
        return
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines() if line.strip()]
    out = [json.dumps({"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 512,
                       "hash_id_scope": "local",
                       "source": {"format": "aisimulate-bench", "digest": "mooncake-plays"}})]
    for i, row in enumerate(rows[:PLAY_ROWS]):
        play, k = divmod(i, PLAY_REQUESTS)
        node = {"request_id": f"p{play}r{k}", "play_id": f"p{play}", "session_id": f"p{play}",
                "model": "m", "not_before_ms": 0.0, "input_length": row["input_length"],
                "output_length": row["output_length"], "hash_ids": row["hash_ids"],
                "source_play_ordinal": play}
        if k:
            node["dependencies"] = [{"request_id": f"p{play}r{k - 1}", "trigger": "completion",
                                     "delay_ms": 500.0, "relation": "sequence"}]
        out.append(json.dumps(node))
    AGENTIC_PLAYS.parent.mkdir(parents=True, exist_ok=True)
    partial = AGENTIC_PLAYS.with_suffix(".tmp")
    partial.write_text("\n".join(out) + "\n")
    partial.replace(AGENTIC_PLAYS)


def workloads():
    """(name, payload path, runs on the reference?) for every benchmark payload."""
    found = []
    for path in sorted((SHARED / "bench").glob("*.json")):
        found.append((path.stem, path, True))
    for path in sorted((SHARED / "bench" / "cluster").glob("*.json")):
        if not path.name.endswith(".expected.json"):
            found.append((path.stem, path, True))
    for path in sorted((ROOT / "bench").glob("*.json")):
        if path.stem.startswith("sweep_"):
            continue   # sweep files (bench/sweep_bench.py runs sweep_32), not payloads
        found.append((path.stem, path, not path.stem.startswith("aic_")))
    return found


def run_ours(path):
    # compiled modules are cached as on any installation (this machine sets
    # PYTHONDONTWRITEBYTECODE, which would charge every run its imports' compilation)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, "-c", OURS, str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return None, (proc.stderr.strip().splitlines() or ["failed"])[-1]
    return json.loads(proc.stdout), None


def keeps_records(path):
    """Whether the payload asks for per-request records (``spec.record_per_request``)."""
    payload = json.loads(Path(path).read_text())
    return bool(payload.get("spec", payload).get("record_per_request"))


def run_reference(path):
    env = dict(os.environ, DYN_LOG="error", RUST_LOG="error")
    # both sides do the payload's work: where it asks for per-request records, the reference
    # is asked for them too (peer_run leaves them out unless told)
    records = ["--per-request"] if keeps_records(path) else []
    proc = subprocess.run([str(REF_PYTHON), str(REF_TIMED), str(path), *records], cwd=ROOT,
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, (proc.stderr.strip().splitlines() or ["failed"])[-1]
    summary = json.loads(proc.stdout)
    return {"wall_s": summary["outer_wall_s"],
            "call_s": summary["outer_wall_s"] - summary["result_read_s"],
            "completed": summary["completed_requests"],
            "mean_ttft_ms": summary["mean_ttft_ms"],
            "mean_e2e_latency_ms": summary["mean_e2e_latency_ms"]}, None


# A run this short is dominated by fixed costs and by the machine's noise: it is repeated
# SMALL_REPEAT times (at least), ours and the reference's alternating, so that both sides see
# the same drift. (With 9 runs a side the ms cluster cases' ratios still moved by +-20% from
# one bench to the next on these machines; 15 narrow that at about 0.5 s a run.)
SMALL_S = 0.05
SMALL_REPEAT = 15


def interleaved_runs(runners, path, repeat):
    """Each runner's median result over ``repeat`` runs (SMALL_REPEAT for a short workload),
    the runners taking turns; returns (results, errors), one of each per runner."""
    samples = [[] for _ in runners]
    errors = [None for _ in runners]
    turn = 0
    while turn < repeat:
        for k, runner in enumerate(runners):
            if errors[k] is None:
                result, errors[k] = runner(path)
                if errors[k] is None:
                    samples[k].append(result)
        if turn == 0 and samples[0] and samples[0][0]["wall_s"] < SMALL_S:
            repeat = max(repeat, SMALL_REPEAT)
        turn += 1
    results = []
    for k, runs in enumerate(samples):
        if errors[k] is not None or not runs:
            results.append(None)
            continue
        best = dict(runs[0])
        for key in ("wall_s", "call_s"):
            if key in best:
                best[key] = statistics.median(r[key] for r in runs)
        results.append(best)
    return results, errors


def same_result(ours, ref, random_ties=False):
    if ours["completed"] != ref["completed"]:
        return "differs"
    for key in ("mean_ttft_ms", "mean_e2e_latency_ms"):
        if abs(ours[key] - ref[key]) > 1e-6 * max(1.0, abs(ref[key])):
            if random_ties:
                # the reference's KV router breaks cost ties at random (CLUSTER.md §2.4): on a
                # payload with ties between different workers its every run differs
                ttft = ours["mean_ttft_ms"] / ref["mean_ttft_ms"] - 1.0
                return f"same completed, mean TTFT {ttft:+.1%} (reference ties are random)"
            return "differs"
    return "same"


def kv_routed(path):
    payload = json.loads(Path(path).read_text())
    placement = (payload.get("spec", payload).get("adapters") or {}).get("placement") or {}
    return placement.get("provider") in ("kv_router", "kv_aware")


def _seconds(value):
    """A time in a 9-wide column: three decimals below a tenth of a second, four below a
    hundredth (the ms cluster cases)."""
    if value < 0.01:
        return f"{value:9.4f}"
    return f"{value:9.3f}" if value < 0.1 else f"{value:9.2f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=int(os.environ.get("BENCH_REPEAT", 3)))
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args(argv)
    have_reference = REF_PYTHON.exists()
    if not have_reference:
        print(f"reference not installed ({REF_PYTHON}); showing our times only. "
              "Install it as ../shared/tools/README.md says to get ratios.\n")
    rows = []
    # "call only": the ratio against the reference's replay call alone (peer_run's own clock,
    # without reading its result), for comparison with earlier tables
    header = (f"{'workload':34s} {'ours (s)':>9s} {'ref (s)':>9s} {'ratio':>7s} "
              f"{'call only':>9s}  result")
    print(header)
    print("-" * len(header))
    for name, path, on_reference in workloads():
        if args.only and name not in args.only:
            continue
        repeat = 1 if name.startswith(LARGE_PREFIX) else args.repeat
        if name == "large_mooncake_x10_16w":
            generate_replicated_trace()
        if name == "feature_lanes_agentic":
            generate_agentic_plays()
        runners = [run_ours]
        ref = None
        note = ""
        if have_reference and on_reference:
            runners.append(run_reference)
        elif have_reference:
            note = "no reference run (needs the reference's AIC support)"
        results, errors = interleaved_runs(runners, path, repeat)
        if errors[0]:
            print(f"{name:34s} {'-':>9s} {'-':>9s} {'-':>7s} {'-':>9s}  ours failed: {errors[0]}")
            continue
        ours = results[0]
        if len(runners) > 1:
            if errors[1]:
                note = f"reference failed: {errors[1]}"
            else:
                ref = results[1]
        if ref:
            ratio = ours["wall_s"] / ref["wall_s"]
            result = same_result(ours, ref, kv_routed(path))
            note = note or (f"{result} completed/mean TTFT/mean E2E" if result in ("same", "differs")
                            else result)
            call_only = ours["wall_s"] / ref["call_s"]
            print(f"{name:34s} {_seconds(ours['wall_s'])} {_seconds(ref['wall_s'])} {ratio:7.2f} "
                  f"{call_only:9.2f}  {note}")
        else:
            print(f"{name:34s} {_seconds(ours['wall_s'])} {'-':>9s} {'-':>7s} {'-':>9s}  {note}")
        rows.append(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
