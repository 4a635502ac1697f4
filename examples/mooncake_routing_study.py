"""Round robin vs ``kv_router`` vs ``least_loaded`` on the Mooncake conversation trace.

Run from the project root: ``.venv/bin/python examples/mooncake_routing_study.py`` (about a
minute). It replays examples/mooncake_kv_router_4w.json (4 vLLM workers, 65,536 blocks of 16
tokens each, polynomial timing, SLA TTFT 2 s / ITL 50 ms) once per placement policy and prints
one markdown table: prefix-cache reuse, TTFT p50/p90, goodput.
"""

from __future__ import annotations

import json
import pathlib

from aisimulate_core import run_replay

HERE = pathlib.Path(__file__).resolve().parent


def main():
    base = json.loads((HERE / "mooncake_kv_router_4w.json").read_text())
    print("| placement | prefix reuse | TTFT p50 ms | TTFT p90 ms | goodput (requests within SLA) |")
    print("|---|---|---|---|---|")
    for policy in ("round_robin", "kv_router", "least_loaded"):
        base["spec"]["adapters"]["placement"] = {"provider": policy}
        s = run_replay(json.dumps(base)).summary
        print(f"| {policy} | {s['prefix_cache_reused_ratio']:.2%} | {s['median_ttft_ms']:.0f} "
              f"| {s['p90_ttft_ms']:.0f} | {s['goodput_request_throughput_rps']:.3f} req/s "
              f"({s['goodput_completed_requests']:,}) |")


if __name__ == "__main__":
    main()
