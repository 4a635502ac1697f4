"""The SGLang engine features of FEATURES.md against the reference: the disaggregated
destination-first handoff (§8) and MTP bursts on SGLang decode passes (§1.4).

The shared cases of ../shared/bench/features/ are compared in place; our own recorded cases
(tests/fixtures/features_sglang/, recorded by bench/record_reference.py into
tests/fixtures/reference/features_sglang/) settle each rule and open question (README.md there).
Comparison in the canonical form of FEATURES.md §10 (tests/cluster_compare.py). Every case runs
on the default backend in process and, all together in one subprocess, with
``AISIMULATE_BACKEND=python``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cluster_compare import compare
from feature_cases import SHARED_CASES, case_output, python_backend_problems, run_payload

ROOT = Path(__file__).resolve().parents[1]
OWN_RECORDED = ROOT / "tests" / "fixtures" / "reference" / "features_sglang"

SHARED = ["f2_mtp_sglang_2w", "f11_sglang_pd_1p1d", "f12_sglang_pd_2p2d_pressure"]
# recorded by us (tests/fixtures/features_sglang/README.md says what each settles)
OWN = sorted(p.stem for p in OWN_RECORDED.glob("*.json"))


def _case(name):
    return case_output(name, SHARED, OWN_RECORDED)


def problems_of(name):
    """Differences between our run of case ``name`` and the reference's."""
    payload, theirs = _case(name)
    report = run_payload(payload.read_text())
    return compare(report.summary, report.per_request, theirs)


@pytest.mark.parametrize("name", SHARED + OWN)
def test_case_matches_the_reference(name):
    problems = problems_of(name)
    assert problems == [], "\n".join(problems[:20])


def test_cases_match_on_the_python_backend():
    """Every case again with AISIMULATE_BACKEND=python (Python radix and block pools)."""
    names = [n for n in SHARED if (SHARED_CASES / f"{n}.json").exists()] + OWN
    assert python_backend_problems("test_features_sglang", names) == {}


# -- the destination-first handoff ----------------------------------------------------------------


def _records(name):
    payload, _ = _case(name)
    report = run_payload(payload.read_text())
    return {(r["arrival_time_ms"], r["input_length"]): r for r in report.per_request}


def test_the_worked_example_of_the_features_doc():
    """FEATURES.md §8.2/8.3 on f11: reserved at arrival on an idle decoder, then one reservation
    per decode pass end or activation; routing lists the decode placement first;
    destination_missing moves only the tokens the decode side lacks."""
    records = _records("f11_sglang_pd_1p1d")
    first = records[(0.0, 64)]
    assert (first["destination_reserved_ms"], first["prefill_admit_ms"], first["source_held_ms"],
            first["destination_activated_ms"], first["first_token_ms"]) == (
        0.0, 0.0, 10.0, pytest.approx(16.4), pytest.approx(21.4))
    assert [h["pool"] for h in first["routing_history"]] == ["decode", "prefill"]
    assert [records[(t, isl)]["destination_reserved_ms"] for t, isl in
            ((18.0, 32), (18.5, 32), (19.0, 80))] == pytest.approx([21.4, 26.4, 31.4])
    # the idle decoder at 300 reserves at once; the identical 64-token prompt moves nothing
    last = records[(300.0, 64)]
    assert last["destination_reserved_ms"] == 300.0
    assert last["destination_activated_ms"] == last["source_held_ms"]


def test_a_refused_destination_fails_at_arrival():
    """A prompt not shorter than the decode max_model_len fails when it arrives, before any
    prefill, and its record names no worker (as the reference's)."""
    record = _records("pd_decode_refuses_max_model_len")[(19.0, 80)]
    assert record["terminal_status"] == "failed"
    assert record["terminal_time_ms"] == 19.0
    assert (record["prefill_worker_idx"], record["decode_worker_idx"]) == (None, None)
    assert [h["pool"] for h in record["routing_history"]] == ["decode"]


def test_the_roles_run_in_c_where_the_c_rank_takes_them(monkeypatch):
    """The roles are C ranks (engine/sglang_native_roles.py) where ``sglang_native.supports``
    takes the configuration, and their Python twins (engine/sglang_roles.py) otherwise and
    with AISIMULATE_BACKEND=python."""
    from aisimulate_core import native
    from aisimulate_core.engine.sglang_native_roles import (NativeSglangDecodeRank,
                                                           NativeSglangPrefillRank)
    from aisimulate_core.engine.sglang_roles import SglangDecodeRank, SglangPrefillRank
    from aisimulate_core.runtime.build import build_simulation
    from aisimulate_core.spec.load import load_payload

    def role_classes(text):
        cwd = os.getcwd()
        os.chdir(ROOT)
        try:
            sim = build_simulation(load_payload(text))
        finally:
            os.chdir(cwd)
        return ({type(r) for w in sim.prefill_workers for r in w.ranks},
                {type(r) for w in sim.decode_workers for r in w.ranks})

    payload, _ = _case("f12_sglang_pd_2p2d_pressure")
    if native.BACKEND == "c":
        doc = json.loads(payload.read_text())
        doc["spec"]["engine"]["prefill"]["dp_size"] = 1
        doc["spec"]["engine"]["decode"]["dp_size"] = 1
        assert role_classes(json.dumps(doc)) == ({NativeSglangPrefillRank},
                                                 {NativeSglangDecodeRank})
        doc["spec"]["engine"]["decode"]["dp_size"] = 2   # attention DP keeps the Python rank
        assert role_classes(json.dumps(doc)) == ({NativeSglangPrefillRank}, {SglangDecodeRank})
    monkeypatch.setattr(native, "BACKEND", "python")   # (AISIMULATE_BACKEND=python, read at import)
    assert role_classes(payload.read_text()) == ({SglangPrefillRank}, {SglangDecodeRank})


def test_the_recorded_cases_exercise_what_they_claim():
    """Retractions readmitted on a decode rank with reuse, attention DP on each pool, failures
    and rejections, and sources held together on two ranks."""
    def fixture(name):
        return json.loads((OWN_RECORDED / f"{name}.json").read_text())

    readmits = [a for r in fixture("pd_decode_retract_readmit")["per_request"]
                for a in r["admission_history"] if a["pool"] == "decode" and a["is_readmission"]]
    assert any(a["reused_input_tokens"] > 0 for a in readmits)
    for name, role in (("pd_decode_dp2", "decode"), ("pd_prefill_dp2_retract", "prefill")):
        payload = json.loads((ROOT / fixture(name)["payload"]).read_text())
        assert payload["spec"]["engine"][role]["dp_size"] == 2
    statuses = {r["terminal_status"] for r in fixture("pd_prefill_rejects")["per_request"]}
    assert statuses == {"completed", "rejected"}
    held = fixture("pd_held_order_across_ranks")["per_request"]
    assert len({r["source_held_ms"] for r in held if r["arrival_time_ms"] > 0}) == 1


# -- MTP ------------------------------------------------------------------------------------------


def test_mtp_examples_of_the_features_doc():
    """FEATURES.md §1.4: 16/20 with the default rates: first token 10 (the prefill forward, no
    draw), TTST 5, last token 55 (nine decode bursts 2,2,2,2,3,1,2,2,3); "1,1": last at 45."""
    record = _records("mtp_1620_default")[(0.0, 16)]
    assert (record["first_token_ms"], record["ttst_ms"], record["last_token_ms"]) == (
        10.0, 5.0, 55.0)
    assert record["itl_ms"] == pytest.approx(45 / 19)
    assert _records("mtp_1620_all_accept")[(0.0, 16)]["last_token_ms"] == 45.0


def test_mtp_declines_the_c_rank():
    """The C SGLang rank declines aic_nextn: the Python rank bursts."""
    from aisimulate_core.engine.sglang_native import supports
    from aisimulate_core.spec.load import load_payload

    payload, _ = _case("mtp_1620_default")
    doc = json.loads(payload.read_text())
    rank = load_payload(doc, check_support=False).spec.engine.rank
    assert "aic_nextn" in supports(rank, backend="c")
    doc["spec"]["engine"]["rank"].pop("aic_nextn")
    assert supports(load_payload(doc, check_support=False).spec.engine.rank, backend="c") is None


def test_mtp_bursts_under_retraction_are_recorded():
    """The burst page check retracts (FEATURES.md §12.1): both recorded cases readmit."""
    for name in ("mtp_retract_burst_pages", "mtp_retract_sampled"):
        fixture = json.loads((OWN_RECORDED / f"{name}.json").read_text())
        assert sum(r["readmission_count"] for r in fixture["per_request"]) > 0


# -- telemetry ------------------------------------------------------------------------------------

TELEMETRY = ROOT / "tests" / "fixtures" / "reference" / "features_sglang_telemetry"


@pytest.mark.parametrize("name, interval", [("f11_sglang_pd_1p1d", 7.0),
                                            ("f12_sglang_pd_2p2d_pressure", 10.0)])
def test_telemetry_of_the_roles_matches_the_reference(name, interval):
    """Telemetry samples (peer_run --telemetry, recorded beside the fixtures): a decode rank's
    waiting gauge counts its pending, reserved and prebuilt destinations, its active blocks the
    reserved pages; a prefill rank's the held sources until their release."""
    from aisimulate_core import run_replay

    payload, _ = _case(name)
    theirs = json.loads((TELEMETRY / f"{name}.tel{interval:g}.json").read_text())
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        report = run_replay(payload.read_text(), telemetry_interval_ms=interval)
    finally:
        os.chdir(cwd)
    assert compare(report.summary, report.per_request, theirs,
                   samples=report.telemetry["samples"]) == []
