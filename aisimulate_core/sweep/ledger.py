"""The results ledger (``ledger.jsonl``, one row per evaluated point, appended as points
finish) and the exports made from it (``results.csv``, ``results.json``).

A row: ``point`` (its index in the grid, last axis fastest), ``payload_hash``, ``overrides``
(``{axis: value}``, a deployment shape by name), ``status`` (``ok`` / ``failed``), ``error``
(one line, failed points), ``wall_time_s``, ``gpus``, ``kv_blocks`` (per role), the derived
``good_fraction``, ``output_throughput_per_gpu``, ``goodput_per_gpu``, and ``summary`` (every
summary key of the report). A rerun reads the ledger and does not evaluate again a point whose
``payload_hash`` it holds; a line cut short by an interrupt is ignored.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from aisimulate_core.cli.outputs import CliError
from aisimulate_core.messages import escape_controls

LEDGER = "ledger.jsonl"
ROW_KEYS = ("point", "payload_hash", "overrides", "status", "error", "wall_time_s", "gpus",
            "kv_blocks", "good_fraction", "output_throughput_per_gpu", "goodput_per_gpu")


def _clean(value: Any) -> Any:
    """JSON-safe: a non-finite float is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(item) for item in value]
    return value


def dumps(value: Any) -> str:
    return json.dumps(_clean(value), ensure_ascii=False, separators=(",", ":"))


class Ledger:
    """``ledger.jsonl`` of an output directory: rows by payload hash, appended as they come."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LEDGER
        self.rows: dict[str, dict] = {}
        self.ignored = 0
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CliError(f"cannot create {escape_controls(str(directory))}: "
                           f"{error.strerror or error}") from None
        if self.path.exists():
            with open(self.path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    try:
                        row = json.loads(line)
                    except ValueError:
                        self.ignored += 1  # a line cut short by an interrupt
                        continue
                    if type(row) is dict and isinstance(row.get("payload_hash"), str):
                        self.rows[row["payload_hash"]] = row
        try:
            self._handle = open(self.path, "a", encoding="utf-8")
            _lock(self._handle, self.path)
            if self._handle.tell() > 0 and not _ends_with_newline(self.path):
                self._handle.write("\n")  # after a line cut short: the next row on its own line
        except OSError as error:
            raise CliError(f"cannot write {escape_controls(str(self.path))}: "
                           f"{error.strerror or error}") from None

    def append(self, row: dict) -> None:
        self.rows[row["payload_hash"]] = row
        try:
            self._handle.write(dumps(row) + "\n")
            self._handle.flush()
        except OSError as error:
            raise CliError(f"cannot write {escape_controls(str(self.path))}: "
                           f"{error.strerror or error}") from None

    def close(self) -> None:
        self._handle.close()


def _lock(handle, path: Path) -> None:
    """One sweep at a time writes a ledger (where the platform has flock)."""
    try:
        import fcntl
    except ImportError:
        return
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise CliError(f"{escape_controls(str(path))}: another sweep is writing this ledger; "
                       "wait for it or give another --out") from None
    except OSError:
        pass  # a file system without locks: go on unlocked


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def summary_keys(rows: Iterable[dict]) -> list[str]:
    """Every summary key of the rows, in the order of first appearance."""
    keys: dict[str, None] = {}
    for row in rows:
        for key in row.get("summary") or {}:
            if key != "per_request":
                keys.setdefault(key, None)
    return list(keys)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return dumps(value)
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    return value


def write_csv(path: Path, rows: Sequence[dict], axes: Sequence[str]) -> None:
    """One row per point: the row keys, each axis's value, then every summary key."""
    keys = summary_keys(rows)
    header = ["point", *axes, *[k for k in ROW_KEYS if k not in ("point", "overrides")], *keys]
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for row in rows:
            overrides = row.get("overrides") or {}
            summary = row.get("summary") or {}
            writer.writerow([_cell(row.get("point")), *(_cell(overrides.get(a)) for a in axes),
                             *(_cell(row.get(k)) for k in ROW_KEYS if k not in ("point", "overrides")),
                             *(_cell(summary.get(k)) for k in keys)])
    os.replace(temp, path)


def write_json(path: Path, value: Any) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(_clean(value), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    os.replace(temp, path)


def comparable(row: dict) -> dict:
    """A row without what measures the host (wall times, processing rates): two executors of
    one sweep give equal comparable rows."""
    from aisimulate_core.sweep.point import HOST_KEYS

    out = {key: item for key, item in row.items() if key != "wall_time_s"}
    if isinstance(out.get("summary"), dict):
        out["summary"] = {k: v for k, v in out["summary"].items() if k not in HOST_KEYS}
    return out
