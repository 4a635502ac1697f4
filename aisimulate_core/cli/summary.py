"""What ``aisimulate run`` shows a person: the summary table and the progress line."""

from __future__ import annotations

import time
from typing import Any, TextIO

PROG = "aisimulate"
LATENCY_ROWS = (("TTFT", "ttft"), ("TTST", "ttst"), ("ITL", "itl"), ("TPOT", "tpot"), ("E2E latency", "e2e_latency"))
LATENCY_COLUMNS = (("avg", "mean"), ("p50", "median"), ("p90", "p90"), ("p99", "p99"))
PROGRESS_INTERVAL_S = 0.1


class ProgressLine:
    """One status line on a terminal, rewritten in place as the simulation advances."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._last_s = float("-inf")
        self._shown = False

    def __call__(self, sim_time_ms: float, completed: int, total: int | None) -> None:
        now_s = time.monotonic()
        if now_s - self._last_s < PROGRESS_INTERVAL_S:
            return
        self._last_s = now_s
        of_total = f"/{total}" if total is not None else ""
        self._stream.write(
            f"\r\x1b[K{PROG}: simulated {sim_time_ms / 1000:,.1f} s, {completed}{of_total} requests done"
        )
        self._stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False


def format_summary(summary: dict[str, Any]) -> str:
    """The report summary as a readable table (latencies in ms, then counts and rates)."""
    rows = [["", *(label for label, _ in LATENCY_COLUMNS)]]
    for label, name in LATENCY_ROWS:
        rows.append(
            [f"{label} (ms)", *(_number(summary.get(f"{stat}_{name}_ms"), 2) for _, stat in LATENCY_COLUMNS)]
        )
    lines = align(rows, right_from=1)
    lines.append("")
    facts = [
        ("requests completed", f"{_number(summary.get('completed_requests'), 0)} / {_number(summary.get('num_requests'), 0)}"),
        ("duration", f"{_number(_scaled(summary.get('duration_ms'), 1e-3), 3)} s"),
        (
            "throughput",
            f"{_number(summary.get('request_throughput_rps'), 3)} req/s, "
            f"{_number(summary.get('output_throughput_tok_s'), 1)} output tok/s",
        ),
        ("prefix cache reuse", f"{_number(_scaled(summary.get('prefix_cache_reused_ratio'), 100), 2)} %"),
        ("GPU-hours", _number(summary.get("gpu_hours"), 4)),
    ]
    if "goodput_request_throughput_rps" in summary:
        facts.append(
            (
                "goodput",
                f"{_number(summary.get('goodput_request_throughput_rps'), 3)} req/s, "
                f"{_number(summary.get('goodput_output_throughput_tok_s'), 1)} output tok/s "
                f"({_number(summary.get('goodput_completed_requests'), 0)} requests within SLA)",
            )
        )
    scaling = _scaling_fact(summary.get("lifecycle_operations"))
    if scaling is not None:
        facts.append(("scaling", scaling))
    lines.extend(align([list(fact) for fact in facts]))
    return "\n".join(lines) + "\n"


def _scaling_fact(operations: Any) -> str | None:
    """What scaling did, in a line: operations, and each pool's active workers at the start,
    fewest, most and at the end."""
    if not isinstance(operations, list):
        return None
    if not operations:
        return "no change"
    pools: dict[str, list[int]] = {}
    for op in operations:
        after = set(op.get("state_after_batch", {}).get("active", []))
        counts = pools.setdefault(op.get("pool"), [])
        if not counts:  # the workers active before the pool's first operation
            transitions = op.get("transitions", [])
            became = {t.get("worker_id") for t in transitions if t.get("state") == "active"}
            left = {t.get("worker_id") for t in transitions if t.get("prior_state") == "active"}
            counts.append(len((after - became) | left))
        counts.append(len(after))
    shown = ", ".join(f"{pool} {counts[0]} → {counts[-1]} active (min {min(counts)}, max "
                      f"{max(counts)})" for pool, counts in pools.items())
    return f"{len(operations)} operations; {shown}"


def _scaled(value: Any, factor: float) -> Any:
    return value * factor if isinstance(value, (int, float)) else value


def _number(value: Any, decimals: int) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    return f"{value:,.{decimals}f}"


def align(rows: list[list[str]], right_from: int | None = None) -> list[str]:
    """Rows of cells as text columns (left-aligned, or right-aligned from column ``right_from``)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if right_from is not None and i >= right_from else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths))
        ]
        lines.append("  ".join(cells).rstrip())
    return lines
