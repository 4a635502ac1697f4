#!/usr/bin/env python3
"""Seeded random agentic workloads against the reference: our report and the wheel's, per
request in canonical form (tests/cluster_compare.py) and both agentic digests byte for byte.

Three generators: agentic Mooncake v2 graphs (every edge kind, several roots, rejections,
prefill-only and cached nodes; vLLM, SGLang, TensorRT-LLM on one or two workers), agentic
Dynamo traces (sessions, child sessions with and without tool metadata, blocking and
background; aggregated, 1P+1D, 1P+2D) and weka corpora (streams, blocking and background
subagents, hash-less requests; aggregated and disaggregated); each with ``agentic_lanes`` None
or 1..8. The graph and Dynamo generators are tests/fixtures/features_agentic/generate.py's (its
``random_*`` cases are seeds of this run). Needs the reference venv (../ref-venv, see
../shared/tools/README.md); run from the project root:

    .venv/bin/python bench/agentic_differential.py [--kind graph|dynamo|weka] [--seeds N] [--first S]

Prints each differing seed (its payload is kept in /tmp) and the count of exact matches.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from cluster_compare import compare  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "features_agentic_generate", ROOT / "tests" / "fixtures" / "features_agentic" / "generate.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def _rank(rng, backends):
    rank = {"max_model_len": rng.choice([200, 260, 1000]), "max_num_seqs": rng.choice([2, 4, 64]),
            "num_gpu_blocks": rng.choice([1024, 40])}
    if rng.random() < 0.3:
        rank["backend"] = rng.choice(backends)
    return rank


def graph_case(rng, path):
    rows = gen.random_graph(rng)
    with open(path, "w") as f:
        for line in [gen.HEADER, *rows]:
            f.write(json.dumps(line) + "\n")
    return gen.payload(str(path), lanes=rng.choice([None, 1, 2, 3, 8]),
                       rank=_rank(rng, ["sglang", "trtllm"]), workers=rng.choice([1, 2]))


def dynamo_case(rng, path):
    records = gen.random_dynamo_records(rng)
    with open(path, "w") as f:
        for line in records:
            f.write(json.dumps(line) + "\n")
    return _deployment(rng, gen.payload(str(path), lanes=rng.choice([None, 1, 2, 3]),
                                        trace_format="dynamo", rank=_rank(rng, ["trtllm"])))


def weka_play(rng, play_id):
    def request(t):
        isl = rng.choice([16, 32, 48, 64, 100, 250])
        first = rng.randint(0, 3) * 5
        out = {"type": rng.choice(["n", "s"]), "t": round(t, 3), "model": "m", "in": isl,
               "out": rng.choice([0, 1, 2, 4, 8]), "api_time": rng.choice([0.005, 0.02, 0.05])}
        if rng.random() < 0.9:
            out["hash_ids"] = list(range(first, first + -(-isl // 16)))
        return out

    entries, t = [], 0.0
    for i in range(rng.randint(1, 5)):
        if i and rng.random() < 0.3:
            sub = {"type": "subagent", "t": round(t, 3), "agent_id": f"ag{i}",
                   "subagent_type": "general",
                   "status": rng.choice(["completed", "async_launched"]), "requests": []}
            if rng.random() < 0.5:
                sub["duration_ms"] = rng.choice([10, 50, 200])
            inner = 0.0
            for _ in range(rng.randint(1, 3)):
                sub["requests"].append(request(inner))
                inner += rng.choice([0.01, 0.03, 0.1])
            entries.append(sub)
        else:
            entries.append(request(t))
        t += rng.choice([0.01, 0.05, 0.1, 0.3])
    return {"id": play_id, "models": ["m"], "block_size": 16, "hash_id_scope": "local",
            "requests": entries}


def weka_case(rng, path):
    with open(path, "w") as f:
        for _ in range(rng.randint(1, 4)):
            f.write(json.dumps(weka_play(rng, f"play{rng.randint(0, 99)}")) + "\n")
    return _deployment(rng, gen.payload(str(path), lanes=rng.choice([None, 1, 2, 3]),
                                        trace_format="weka", rank=_rank(rng, ["trtllm"])))


def _deployment(rng, body):
    """Aggregated on one or two workers, or 1P + 1 or 2 D."""
    if rng.random() < 0.3:
        rank = dict(body["spec"]["engine"]["rank"], kv_transfer_bandwidth=64.0,
                    kv_bytes_per_token=100000)
        body["spec"]["topology"] = {"kind": "disaggregated", "prefill": {"initial_workers": 1},
                                    "decode": {"initial_workers": rng.choice([1, 2])}}
        body["spec"]["engine"] = {"rank": rank, "prefill": {"rank": dict(rank)},
                                  "decode": {"rank": dict(rank)}}
    else:
        body["spec"]["topology"]["workers"]["initial_workers"] = rng.choice([1, 2])
    return body


KINDS = {"graph": graph_case, "dynamo": dynamo_case, "weka": weka_case}


def reference(body, tmp):
    path = tmp / "payload.json"
    path.write_text(json.dumps(body))
    done = subprocess.run([str(ROOT.parent / "ref-venv" / "bin" / "python"),
                           str(ROOT.parent / "shared" / "tools" / "peer_run.py"), str(path),
                           "--per-request"], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, DYN_LOG="error"))
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def ours(body):
    from aisimulate_core import run_replay
    from aisimulate_core.errors import AisimError

    try:
        return run_replay(json.dumps(body))
    except AisimError as exc:
        return exc


def differences(body, tmp):
    theirs = reference(body, tmp)
    report = ours(body)
    if "error" in theirs or isinstance(report, Exception):
        if ("error" in theirs) == isinstance(report, Exception):
            return None                     # both refuse it: not a parity sample
        return [f"one side failed: ours {report!r}, reference {theirs.get('error')}"]
    found = compare(report.summary, report.per_request, theirs)
    for key in ("agentic_lifecycle_digest",):
        if report.summary[key] != theirs[key]:
            found.append(f"$.{key} differs")
    if report.summary["agentic_graph"]["graph_digest"] != theirs["agentic_graph"]["graph_digest"]:
        found.append("$.agentic_graph.graph_digest differs")
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(KINDS), default=None)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--first", type=int, default=0)
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    keep = Path(tempfile.mkdtemp(prefix="agentic-differential-"))
    for kind in [args.kind] if args.kind else sorted(KINDS):
        exact = compared = 0
        for seed in range(args.first, args.first + args.seeds):
            rng = random.Random(seed)
            body = KINDS[kind](rng, keep / f"{kind}_{seed}.jsonl")
            found = differences(body, keep)
            if found is None:
                continue
            compared += 1
            if found:
                (keep / f"{kind}_{seed}.json").write_text(json.dumps(body, indent=1))
                print(f"{kind} seed {seed}: {len(found)} differences, first {found[0]}")
            else:
                exact += 1
        print(f"{kind}: {exact} of {compared} exact (seeds {args.first}..{args.first + args.seeds - 1}; "
              f"differing payloads in {keep})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
