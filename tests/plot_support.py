"""Helpers of the plot, compare and record-format tests: reading a PNG's header and running
small payloads for real."""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIXTURES = Path(__file__).parent / "fixtures" / "payloads"
CLUSTER = Path(__file__).resolve().parents[2] / "shared" / "bench" / "cluster"


def png_size(path) -> tuple[int, int]:
    """(width, height) of a PNG file, asserting its signature and IHDR chunk."""
    data = Path(path).read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert len(data) > 5000, f"{path} is only {len(data)} bytes"
    return width, height


def assert_plausible_png(path, min_width=400, min_height=300) -> None:
    width, height = png_size(path)
    assert min_width <= width <= 4000 and min_height <= height <= 4000, (width, height)


def payload(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def loaded_poisson(workers: int, *, requests: int = 120, rate: float = 400.0,
                   ttft_ms: float = 25.0) -> dict:
    """The 40 req/s Poisson fixture made heavier, with a TTFT SLA: one worker misses it, more
    workers meet it for more requests."""
    data = copy.deepcopy(payload("arr_poisson_s1_r40.json"))
    data["spec"]["topology"]["workers"]["initial_workers"] = workers
    data["spec"]["sla"] = {"ttft_ms": ttft_ms}
    data["traffic"].update(request_count=requests, request_rate=rate)
    return data
