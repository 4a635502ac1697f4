"""An SGLang rank counts the inter-token gaps of a finished request's last decode run per rank
(``RunningBatch.count_span``, folded at the report by ``fold_spans``) instead of walking its
stretches: the differential test runs the seeded random workloads of test_sglang_extension
(retraction, chunked prefill, deferred rounds, closed loops, time limits) both ways and asserts
the same gaps with the same multiplicities on every rank, and the same report."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from aisimulate_core import build_simulation
from aisimulate_core.engine import sglang_native
from aisimulate_core.engine.rank_base import RankBase
from aisimulate_core.engine.sglang import SglangRank
from aisimulate_core.engine.sglang_running import RunningBatch
from aisimulate_core.spec import load_payload
from test_sglang_extension import SEEDS, WALL_CLOCK_KEYS, _payload


def _gaps_and_report(payload):
    sim = build_simulation(load_payload(json.dumps(payload)))
    try:
        sim.run()
    except Exception as exc:   # the same error both ways counts as the same outcome
        return ("error", type(exc).__name__, str(exc))
    gaps = []
    for worker in sim.workers:
        for rank in worker.ranks:
            values, counts = rank.itl_gaps()
            merged = Counter()
            for value, count in zip(values, counts):
                merged[value] += count
            gaps.append(sorted(merged.items()))
    report = json.loads(sim.report().to_json())
    for key in WALL_CLOCK_KEYS:
        report.pop(key)
    return gaps, report


def test_runs_counted_per_rank_give_the_gaps_of_their_stretches(monkeypatch):
    # the Python rank's counting is compared: the runtime builds it, not the C one
    python_rank = pytest.MonkeyPatch()
    python_rank.setattr(sglang_native, "rank_class", lambda engine, **_: SglangRank)
    try:
        _compare_counted_and_walked(monkeypatch)
    finally:
        python_rank.undo()


def _compare_counted_and_walked(monkeypatch):
    counted = 0
    for seed in SEEDS:
        payload = _payload(seed)
        monkeypatch.setattr(SglangRank, "_record_itl", RankBase._record_itl)
        walked = _gaps_and_report(payload)
        monkeypatch.undo()
        spans = []
        count_span = RunningBatch.count_span

        def spy(batch, first, last):
            spans.append((first, last))
            return count_span(batch, first, last)

        monkeypatch.setattr(RunningBatch, "count_span", spy)
        folded = _gaps_and_report(payload)
        monkeypatch.undo()
        assert folded == walked, f"seed {seed}"
        counted += sum(last > first for first, last in spans)
    assert counted > 500     # the per-rank path ran, on runs of more than one token
