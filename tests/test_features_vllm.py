"""The vLLM / TensorRT-LLM engine features of FEATURES.md against the reference: MTP (§1),
``prefill_schedule_interval`` (§2), ``emit_kv_events`` (§4) and ``state_cache`` (§7).

The shared cases of ../shared/bench/features/ are compared in place; our own recorded cases
(tests/fixtures/features_vllm/, recorded by bench/record_reference.py into
tests/fixtures/reference/features_vllm/) settle each rule and worked example. Comparison in the
canonical form of FEATURES.md §10 (tests/cluster_compare.py). Every case runs on the default
backend in process and, all together in one subprocess, with ``AISIMULATE_BACKEND=python``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cluster_compare import compare, record_key
from feature_cases import ROOT, SHARED_CASES, case_output
OWN_PAYLOADS = ROOT / "tests" / "fixtures" / "features_vllm"
OWN_RECORDED = ROOT / "tests" / "fixtures" / "reference" / "features_vllm"

SHARED = ["f1_mtp_vllm_dp2", "f3_psi_vllm_dp2", "f5_kv_events_vllm", "f9_state_cache",
          "f10_state_cache_chunked"]
# recorded by us (tests/fixtures/features_vllm/README.md says what each settles)
OWN = sorted(p.stem for p in OWN_RECORDED.glob("*.json"))


def _case(name):
    """(payload path, the reference's output as peer_run printed it) of a case."""
    return case_output(name, SHARED, OWN_RECORDED)


def problems_of(name):
    """Differences between our run of case ``name`` and the reference's."""
    from aisimulate_core import run_replay

    payload, theirs = _case(name)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        report = run_replay(payload.read_text())
    finally:
        os.chdir(cwd)
    ours = _disambiguate(report.per_request)
    theirs = dict(theirs, per_request=_disambiguate(theirs["per_request"]))
    # the KV router breaks cost ties at random: workers relabeled by first admission
    placement = json.loads(payload.read_text())["spec"].get("adapters", {}).get("placement", {})
    return compare(report.summary, ours, theirs,
                   relabel_workers=placement.get("provider") == "kv_router")


def _disambiguate(records):
    """Records sharing (arrival, input, requested output) (two 16/100 requests at 0 in f3) are
    told apart by their worker: they get a request_id naming both, on each side alike."""
    records = [dict(r) for r in records]
    seen = {}
    for r in records:
        seen.setdefault(record_key(r), []).append(r)
    for key, group in seen.items():
        if len(group) > 1:
            for r in group:
                r["request_id"] = f"{key}@{r.get('decode_worker_idx')}"
    return records


@pytest.mark.parametrize("name", SHARED + OWN)
def test_case_matches_the_reference(name):
    problems = problems_of(name)
    assert problems == [], "\n".join(problems[:20])


def test_cases_match_on_the_python_backend():
    """Every case again with AISIMULATE_BACKEND=python (Python block pool and queues)."""
    names = [n for n in SHARED if (SHARED_CASES / f"{n}.json").exists()] + OWN
    script = ("import json, sys\n"
              "from test_features_vllm import problems_of\n"
              "out = {n: problems_of(n)[:5] for n in sys.argv[1:]}\n"
              "print(json.dumps(out))\n")
    env = dict(os.environ, AISIMULATE_BACKEND="python",
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", script, *names], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert {n: p for n, p in result.items() if p} == {}


def test_kv_events_change_nothing():
    """f5 without its two event fields gives the very same report (FEATURES.md §4)."""
    from aisimulate_core import run_replay

    payload = SHARED_CASES / "f5_kv_events_vllm.json"
    if not payload.exists():
        pytest.skip(f"{payload} is not beside the checkout")
    doc = json.loads(payload.read_text())
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        on = run_replay(json.dumps(doc))
        assert doc["spec"]["engine"]["rank"].pop("emit_kv_events") is True
        assert doc["spec"]["engine"]["rank"].pop("emit_kv_token_ids") is True
        off = run_replay(json.dumps(doc))
    finally:
        os.chdir(cwd)
    assert compare(on.summary, on.per_request,
                   dict(off.summary, per_request=off.per_request)) == []


def test_kv_token_ids_need_kv_events():
    from aisimulate_core import run_replay
    from aisimulate_core.errors import AisimError

    doc = json.loads((SHARED_CASES / "f5_kv_events_vllm.json").read_text()) if (
        SHARED_CASES / "f5_kv_events_vllm.json").exists() else pytest.skip("no f5")
    doc["spec"]["engine"]["rank"]["emit_kv_events"] = False
    with pytest.raises(AisimError) as err:
        run_replay(json.dumps(doc))
    assert "$.spec.engine.rank.emit_kv_token_ids: requires emit_kv_events true, got true" \
        in str(err.value)


# -- MTP ----------------------------------------------------------------------------------------


def _mtp_payload(**rank):
    base = {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 1024,
            "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 5.0},
            "aic_nextn": 2}
    base.update(rank)
    return {"spec": {"version": 1,
                     "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
                     "engine": {"rank": base}, "record_per_request": True,
                     "requests": [{"id": "a", "input_tokens": 16, "output_tokens": 20,
                                   "arrival_time_ms": 0.0}]}}


def test_mtp_runs_on_the_c_rank():
    """The C rank takes MTP (tests/test_vllm_native_mtp.py checks it against the Python twin)."""
    from aisimulate_core.engine.vllm_native import supports
    from aisimulate_core.spec.load import load_payload

    assert supports(load_payload(_mtp_payload()).spec.engine.rank, backend="c") is None


def test_mtp_example_of_the_features_doc():
    """FEATURES.md §1.2: 16/20, aic_nextn 2, default rates, seed 42: bursts 2,2,2,2,3,1,2,2,3,1
    over ten passes at 15..60 (a synthetic request, not a trace row)."""
    from aisimulate_core import run_replay

    record = run_replay(json.dumps(_mtp_payload())).per_request[0]
    assert (record["ttft_ms"], record["ttst_ms"], record["last_token_ms"]) == (15.0, 0.0, 60.0)
    assert record["itl_ms"] == pytest.approx(45 / 19)
    seeded = run_replay(json.dumps(_mtp_payload(aic_mtp_seed=43))).per_request[0]
    assert seeded["last_token_ms"] == 55.0


def test_mtp_accept_rates_are_cut_and_padded():
    from aisimulate_core.engine.mtp import accept_rates

    assert accept_rates(3, "1, 0.5") == [1.0, 0.5, 0.0]
    assert accept_rates(2, "1,0.5,0.25") == [1.0, 0.5]
    assert accept_rates(2, None) == accept_rates(2, "  ") == [0.85, 0.3]


@pytest.mark.parametrize("rank, message", [
    ({"aic_nextn": 6}, "$.spec.engine.rank.aic_nextn: must be <= 5, got 6"),
    ({"aic_nextn": 0}, "$.spec.engine.rank.aic_nextn: must be > 0, got 0"),
    ({"aic_nextn_accept_rates": "0.5,,0.2"},
     "$.spec.engine.rank.aic_nextn_accept_rates: entry 1 must be a number in [0, 1], got \"\""),
    ({"aic_nextn_accept_rates": "1.5"},
     "$.spec.engine.rank.aic_nextn_accept_rates: entry 0 must be a number in [0, 1], got \"1.5\""),
    ({"aic_nextn": None, "aic_nextn_accept_rates": "1"},
     "$.spec.engine.rank.aic_nextn_accept_rates: requires aic_nextn, got \"1\""),
    ({"decode_speedup_ratio": 2.0},
     "$.spec.engine.rank.decode_speedup_ratio: must be 1.0 with aic_nextn, got 2.0"),
])
def test_mtp_fields_are_checked(rank, message):
    from aisimulate_core import run_replay
    from aisimulate_core.errors import AisimError

    with pytest.raises(AisimError) as err:
        run_replay(json.dumps(_mtp_payload(**rank)))
    assert message in str(err.value)


# -- prefill_schedule_interval ------------------------------------------------------------------


def test_prefill_schedule_interval_runs_the_c_rank_with_attention_dp():
    """The C rank takes the gate in a DP group (csrc/vllm_rank.c psi_begin; engine/vllm_psi.py
    is its twin), not with MTP bursts, which stay on the Python rank."""
    import attrs
    from aisimulate_core.engine.vllm_native import supports
    from aisimulate_core.spec.load import load_payload

    rank = load_payload(_mtp_payload(aic_nextn=None, prefill_schedule_interval=4)).spec.engine.rank
    assert supports(rank, dp_size=2, backend="c") is None
    assert supports(rank, dp_size=1, backend="c") is None   # a lone rank never defers
    assert "prefill_schedule_interval" in supports(attrs.evolve(rank, aic_nextn=2), dp_size=2,
                                                   backend="c")


@pytest.mark.parametrize("rank, message", [
    ({"prefill_schedule_interval": 0}, "$.spec.engine.rank.prefill_schedule_interval: must be > 0, got 0"),
    ({"prefill_schedule_interval": 2, "backend": "sglang"},
     "$.spec.engine.rank.prefill_schedule_interval: requires backend 'vllm', got 2"),
])
def test_prefill_schedule_interval_is_checked(rank, message):
    from aisimulate_core import run_replay
    from aisimulate_core.errors import AisimError

    with pytest.raises(AisimError) as err:
        run_replay(json.dumps(_mtp_payload(aic_nextn=None, **rank)))
    assert message in str(err.value)


# -- state_cache --------------------------------------------------------------------------------


def _state_payload(**rank):
    return _mtp_payload(aic_nextn=None, num_gpu_blocks=24, kv_cache_bytes_per_token=1000,
                        state_cache={"bytes_per_request": 32000}, **rank)


def test_state_cache_runs_the_c_rank_or_the_python_rank_on_its_own_pool():
    """The C rank where built (engine/vllm_native.py NativeVllmStateRank), else its twin, the
    Python rank on its own pool; with MTP bursts always the Python rank."""
    import attrs
    from aisimulate_core import native
    from aisimulate_core.engine.vllm_native import NativeVllmStateRank, supports
    from aisimulate_core.engine.vllm_state_cache import StateCacheRank, StatePool
    from aisimulate_core.runtime.build import build_simulation
    from aisimulate_core.spec.load import load_payload

    payload = load_payload(_state_payload())
    assert "MTP" in supports(attrs.evolve(payload.spec.engine.rank, aic_nextn=2), backend="c")
    rank = build_simulation(payload).workers[0].ranks[0]
    if native.BACKEND == "c":
        assert type(rank) is NativeVllmStateRank
        assert rank.state_blocks == 2  # ceil(32000 / (16 x 1000))
    else:
        assert type(rank) is StateCacheRank and isinstance(rank.pool, StatePool)
        assert rank.state.blocks == 2


def test_a_checkpoint_costs_no_blocks_and_is_preserved_before_the_next_write():
    """FEATURES.md §7: a 64-token prompt holds 6 blocks after its prefill (4 KV + 2 working,
    the working copy published as the checkpoint at 64), 7 while decoding (5 KV + 2 working)
    with the preserved checkpoint cached beside them (2 inactive)."""
    from aisimulate_core.runtime.build import build_simulation
    from aisimulate_core.spec.load import load_payload

    doc = _state_payload()
    doc["spec"]["requests"][0].update(input_tokens=64, output_tokens=4)
    sim = build_simulation(load_payload(doc))
    rank = sim.workers[0].ranks[0]
    # one pass an event: the C rank would run the decode-only passes as one (extend)
    rank.extend = lambda horizon_ms, cutoff_ms, max_passes=None: rank.pass_end_ms
    seen = []
    schedule = rank.schedule

    def watch(now_ms):
        end = schedule(now_ms)
        seen.append((rank.pool.active(), rank.pool.inactive()))
        return end

    rank.schedule = watch
    sim.run()
    assert seen[:3] == [(6, 0), (7, 2), (7, 2)]


@pytest.mark.parametrize("rank, message", [
    ({"kv_cache_bytes_per_token": None}, "$.spec.engine.rank.state_cache: requires kv_cache_bytes_per_token"),
    ({"backend": "sglang", "block_size": 16},
     "$.spec.engine.rank.state_cache: requires backend 'vllm', got \"sglang\""),
    ({"num_gpu_blocks": 2}, "$.spec.engine.rank.num_gpu_blocks: must be >= 3 to hold one token block and one state, got 2"),
    ({"state_cache": {"bytes_per_request": 0}}, "$.spec.engine.rank.state_cache.bytes_per_request: must be > 0, got 0"),
    ({"native_host_offload": {"num_host_blocks": 4}},
     "$.spec.engine.rank.state_cache: cannot be combined with native_host_offload"),
])
def test_state_cache_is_checked(rank, message):
    from aisimulate_core import run_replay
    from aisimulate_core.errors import AisimError

    doc = _state_payload()
    doc["spec"]["engine"]["rank"].update(rank)
    if doc["spec"]["engine"]["rank"]["kv_cache_bytes_per_token"] is None:
        del doc["spec"]["engine"]["rank"]["kv_cache_bytes_per_token"]
    with pytest.raises(AisimError) as err:
        run_replay(json.dumps(doc))
    assert message in str(err.value)


def test_mtp_decode_steps_and_accepted_tokens_give_the_reference_telemetry():
    """The reference's telemetry with MTP (mtp_1620_two_workers.telemetry.json, peer_run
    --telemetry --telemetry-interval-ms 20): accept_length_forward_count counts the decode
    forwards of a window (not the pass finishing a prompt) and avg_accept_length the tokens each
    accepted as sampled (before the clip to the tokens left) per forward. The ranks' counters
    ``decode_steps`` and ``decode_tokens`` give both (runtime/traffic.py reports the first)."""
    from aisimulate_core.runtime.build import build_simulation
    from aisimulate_core.spec.load import load_payload

    name = "mtp_1620_two_workers"
    theirs = json.loads((OWN_PAYLOADS / f"{name}.telemetry.json").read_text())
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        sim = build_simulation(load_payload((OWN_PAYLOADS / f"{name}.json").read_text()))
        ranks = [rank for worker in sim.workers for rank in worker.ranks]
        for rank in ranks:   # every pass its own event, as under telemetry (no C decode runs)
            rank.watched = True
        mark = (0, 0)
        for sample in theirs["telemetry"]["samples"][1:]:
            sim.run_until(sample["sampled_at_ms"])
            now = (sum(r.decode_steps for r in ranks), sum(r.decode_tokens for r in ranks))
            steps, tokens = now[0] - mark[0], now[1] - mark[1]
            mark = now
            traffic = sample["traffic"]
            assert steps == traffic["accept_length_forward_count"]
            assert tokens / steps == pytest.approx(traffic["avg_accept_length"])
    finally:
        os.chdir(cwd)


def test_recorded_cases_exercise_what_they_claim():
    """Guards the fixtures: the reference really preempts, reuses and defers in them."""
    def records(name):
        _, theirs = _case(name)
        return sorted(theirs["per_request"], key=lambda r: (r["arrival_time_ms"], r["input_length"]))

    assert [r["readmission_count"] for r in records("mtp_burst_preemption")] == [0, 1]
    assert [r["reused_input_tokens"] for r in records("mtp_prefix_vllm")] == [0, 48, 32, 0, 16]
    assert [r["reused_input_tokens"] for r in records("mtp_prefix_trtllm")] == [0, 64, 64, 16, 32]
    assert [r["last_token_ms"] for r in records("mtp_disagg_1p2d")] in ([490.025, 480.025],
                                                                       [480.025, 490.025])
    assert records("psi_newcomer_at_11")[-1]["first_admit_ms"] == 25.0
    assert records("psi_interval_one")[-1]["first_admit_ms"] == 15.0
    assert [r["reused_input_tokens"] for r in records("state_decode_keeps_checkpoint")] == [0, 64]
    assert [r["reused_input_tokens"] for r in records("state_decode_discards_checkpoint")] == [0, 0]
    assert [r["terminal_status"] for r in records("state_never_fits_8")][0] == "rejected"
    assert sum(r["readmission_count"] for n in OWN if n.startswith(("mtp_random", "state_random"))
               for r in records(n)) > 40


def _scaling_telemetry_problems(tmp_path):
    from cluster_compare import run_case

    theirs = json.loads((OWN_PAYLOADS / "mtp_scaling_telemetry.telemetry.json").read_text())
    summary, records, samples = run_case(ROOT, OWN_PAYLOADS / "mtp_scaling_telemetry.json",
                                         telemetry_interval_ms=40.0, tmp=tmp_path)
    return compare(summary, records, theirs, samples=samples)


def _snapshot_problems():
    """Our scaling snapshots of mtp_scaling_telemetry against the reference's (our documented
    extensions left out, as tests/test_cluster_cases.py does)."""
    from aisimulate_core import run_replay
    from cluster_compare import diff
    from test_cluster_cases import _Recorder

    case = OWN_PAYLOADS / "mtp_scaling_telemetry.json"
    theirs = json.loads((OWN_PAYLOADS / "mtp_scaling_telemetry.telemetry.json").read_text())
    recorder = _Recorder(json.loads(case.read_text()))
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        run_replay(case.read_text(), scaling_policy=recorder)
    finally:
        os.chdir(cwd)
    extensions = {"prefill_scheduler_metrics", "decode_scheduler_metrics",
                  "router_pending_prefill_requests", "router_pending_decode_requests"}
    ours = [{k: v for k, v in snapshot.items() if k not in extensions}
            for snapshot in recorder.snapshots]
    return diff(ours, theirs["scaling_snapshots"], "$.scaling_snapshots")


def test_mtp_under_scheduled_scaling_with_telemetry(tmp_path):
    """s1_schedule_scaling_agg_rr with aic_nextn 2 (mtp_scaling_telemetry.telemetry.json, peer_run
    --per-request --snapshots --telemetry --telemetry-interval-ms 40): records, lifecycle, every
    telemetry value and the snapshots' forward-pass rows match (a decoder outside open stretches
    is a row's decode request; a readmitted request's recompute is a prefill forward), but
    avg_accept_length (next test)."""
    problems = [p for p in _scaling_telemetry_problems(tmp_path) + _snapshot_problems()
                if "avg_accept_length" not in p]
    assert problems == []


def test_mtp_avg_accept_length_in_telemetry(tmp_path):
    """avg_accept_length: the ranks' decode_tokens / decode_steps over the window
    (runtime/traffic.py)."""
    assert _scaling_telemetry_problems(tmp_path) + _snapshot_problems() == []


@pytest.mark.parametrize("name", ["f1_mtp_vllm_dp2", "f9_state_cache", "f10_state_cache_chunked"])
def test_telemetry_of_the_shared_cases(name, tmp_path):
    """Telemetry every 7 ms of shared cases (NAME.telemetry.json: peer_run --per-request
    --telemetry --telemetry-interval-ms 7): the gauges count the working-state blocks, the
    decode forwards count MTP bursts once (avg_accept_length: the expected failure above)."""
    from cluster_compare import run_case

    case = SHARED_CASES / f"{name}.json"
    if not case.exists():
        pytest.skip(f"{case} is not beside the checkout")
    theirs = json.loads((OWN_PAYLOADS / f"{name}.telemetry.json").read_text())
    summary, records, samples = run_case(ROOT, case, telemetry_interval_ms=7.0, tmp=tmp_path)
    problems = compare(summary, records, theirs, samples=samples)
    assert [p for p in problems if "avg_accept_length" not in p] == []


def test_the_unrolled_burst_draws_are_stdrng_accepted_tokens():
    """engine/mtp.py draws bursts without StdRng.accepted_tokens' per-draw calls: the same
    bursts from the same generator, rates of 1 (no draw) and 0 (a draw, rejected) included."""
    from types import SimpleNamespace

    from aisimulate_core.engine.mtp import MtpBursts
    from aisimulate_core.workload.rng import StdRng

    for rates in ("0.85,0.3,0,0,0", "1,0.5,1,0.25", "0", "1,1,1,1,1", "0.999,0.001"):
        engine = SimpleNamespace(aic_nextn=5, aic_nextn_accept_rates=rates, aic_mtp_seed=7)
        bursts = MtpBursts(engine, 3)
        reference = StdRng(10)
        assert [bursts.draw() for _ in range(200)] == [
            reference.accepted_tokens(bursts.rates) for _ in range(200)]
