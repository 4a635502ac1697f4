"""Decode-only runs of the G2 offload rank (engine/vllm_offload.py ``VllmOffloadRank.extend``).

The rank runs the passes that follow a decode-only pass as one event while no transfer is in
flight, no request waits and every running prompt is stored. The recorded reference cases
(test_features_offload.py) check the result against the reference; these check that the runs
do form, that they give the same report and records as forming every pass on its own, and that
each condition keeps a pass on its own."""

from __future__ import annotations

import pytest

from aisimulate_core.engine import vllm, vllm_offload
from feature_cases import ROOT, run_payload

CASE = ROOT / "tests" / "fixtures" / "features_offload" / "g2_decode_fuzz_seed7_case59.json"


def _one_pass(self, horizon_ms, cutoff_ms, max_passes=0):
    return self.pass_end_ms


def _run(monkeypatch, *, extend=True):
    runs = []
    complete = vllm.VllmRank._complete_extension

    def counted(self):
        runs.append(len(self._macro_ends) - 1)
        complete(self)

    with monkeypatch.context() as m:
        m.setattr(vllm.VllmRank, "_complete_extension", counted)
        if not extend:
            m.setattr(vllm_offload.VllmOffloadRank, "extend", _one_pass)
        report = run_payload(CASE.read_text())
    summary = {k: v for k, v in report.summary.items()
               if k != "wall_time_ms" and not k.startswith("processed_")}
    return summary, report.per_request, runs


def test_decode_runs_form_and_change_nothing(monkeypatch):
    summary, records, runs = _run(monkeypatch)
    assert len(runs) >= 3 and sum(runs) > 100     # (5 runs, 297 passes saved here)
    one_summary, one_records, one_runs = _run(monkeypatch, extend=False)
    assert one_runs == []
    assert summary == one_summary
    assert records == one_records


def _rank(*, jobs=(), waiting=(), idle=False, running=(), cursor=None):
    """An offload rank holding only the state ``extend`` reads (no engine behind it)."""
    rank = object.__new__(vllm_offload.VllmOffloadRank)
    rank._jobs = list(jobs)
    rank.waiting = list(waiting)
    rank._idle_wait = idle
    rank.running = list(running)
    rank._cursor = cursor or {}
    rank.block_size = 16
    rank.pass_end_ms = 5.0
    return rank


class _Req:
    def __init__(self, uuid, prompt_len):
        self.uuid = uuid
        self.prompt_len = prompt_len


@pytest.mark.parametrize("state", [
    {"jobs": [(9.0, 1, 0, ())]},                                   # a transfer in flight
    {"waiting": [_Req("w", 16)]},                                  # a request waiting
    {"idle": True},                                                # an idle wait on a transfer
    {"running": [_Req("a", 40)], "cursor": {"a": 1}},              # a prompt not all stored
])
def test_each_condition_keeps_the_pass_alone(monkeypatch, state):
    called = []
    monkeypatch.setattr(vllm.VllmRank, "extend",
                        lambda self, *a, **k: called.append(a) or 99.0)
    assert _rank(**state).extend(50.0, 60.0) == 5.0
    assert called == []
    # the same rank with its prompts stored (2 complete blocks of 40 tokens) extends
    assert _rank(running=[_Req("a", 40)], cursor={"a": 2}).extend(50.0, 60.0) == 99.0
    assert called == [(50.0, 60.0, vllm.MAX_PASSES)]
