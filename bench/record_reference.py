#!/usr/bin/env python3
"""Record the reference simulator's results as test fixtures.

Runs each listed payload through ../shared/tools/peer_run.py (the reference AISimulate engine shipped
in ai-dynamo-runtime 1.6.1) and writes tests/fixtures/reference/<name>.json:

    {"payload": "<payload path, relative to the project root>",
     "summary": {... the reference summary, minus peer_run's outer_wall_s ...},
     "per_request": [...]}            # only for cases recorded with per-request capture

Stdlib only. Run it with the reference venv's python from the project root:

    ../ref-venv/bin/python bench/record_reference.py            # every case
    ../ref-venv/bin/python bench/record_reference.py b1_poisson_fixed sem_one_osl1   # some cases
    ../ref-venv/bin/python bench/record_reference.py --list

Cases run one at a time (the reference is single-threaded; the machine is small).
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_RUN = os.path.join("..", "shared", "tools", "peer_run.py")
OUT_DIR = os.path.join("tests", "fixtures", "reference")
PL = "tests/fixtures/payloads/"

# (name, payload path relative to the project root, capture per-request records?[, "expect_error"])
# An "expect_error" case records {"payload", "error": <the reference's exception message>} instead of
# a summary; it fails if the reference unexpectedly succeeds.
CASES = [
    # a. shared benchmark payloads (not copied into the project)
    ("b1_poisson_fixed", "../shared/bench/b1_poisson_fixed.json", False),
    ("b2_concurrency_polynomial", "../shared/bench/b2_concurrency_polynomial.json", False),
    ("b3_mooncake_conversation_4w", "../shared/bench/b3_mooncake_conversation_4w.json", False),
    ("b4_sessions_cache_pressure", "../shared/bench/b4_sessions_cache_pressure.json", False),
    ("b5_disagg_1p2d", "../shared/bench/b5_disagg_1p2d.json", False),
]
# b. synthetic arrival processes (40 requests, isl 64, osl 4, fixed 10/5 ms)
for _seed in (1, 42, 987654321):
    for _rate in (5, 40, 1000):
        _n = "arr_poisson_s%d_r%d" % (_seed, _rate)
        CASES.append((_n, PL + _n + ".json", True))
CASES += [
    ("arr_constant_interval7p5", PL + "arr_constant_interval7p5.json", True),
    ("arr_constant_rate40", PL + "arr_constant_rate40.json", True),
    # c. SEMANTICS.md "cases checked against the reference" (tiny mooncake traces)
    ("sem_one_isl16_osl4", PL + "sem_one_isl16_osl4.json", True),
    ("sem_three_isl16_osl4", PL + "sem_three_isl16_osl4.json", True),
    ("sem_one_osl1", PL + "sem_one_osl1.json", True),
    ("sem_two_isl1000_budget512", PL + "sem_two_isl1000_budget512.json", True),
    ("sem_poly_isl1000_osl4", PL + "sem_poly_isl1000_osl4.json", True),
    # d. vLLM behaviours
    ("vllm_prefix_reuse", PL + "vllm_prefix_reuse.json", True),
    ("vllm_kv_pressure_lifo", PL + "vllm_kv_pressure_lifo.json", True),
    ("vllm_kv_pressure_fifo", PL + "vllm_kv_pressure_fifo.json", True),
    ("vllm_2workers_dp2", PL + "vllm_2workers_dp2.json", True),
    ("vllm_max_num_seqs4", PL + "vllm_max_num_seqs4.json", True),
    ("vllm_no_prefix_caching", PL + "vllm_no_prefix_caching.json", True),
    ("vllm_no_chunked_prefill", PL + "vllm_no_chunked_prefill.json", True),
    # expected failure: a prompt longer than the budget with chunked prefill off never schedules
    ("vllm_no_chunked_prefill_prompt_gt_budget", PL + "vllm_no_chunked_prefill_prompt_gt_budget.json",
     True, "expect_error"),
    ("vllm_max_model_len", PL + "vllm_max_model_len.json", True),
    ("vllm_speedup", PL + "vllm_speedup.json", True),
    ("vllm_poisson_polynomial", PL + "vllm_poisson_polynomial.json", True),
    ("vllm_sla_ttft_itl", PL + "vllm_sla_ttft_itl.json", True),
    ("vllm_sla_e2e", PL + "vllm_sla_e2e.json", True),
    # g. SGLang behaviours (these payloads set no sglang{...} block: the reference's defaults apply)
    ("sglang_poisson_fixed", PL + "sglang_poisson_fixed.json", True),
    ("sglang_concurrency_polynomial", PL + "sglang_concurrency_polynomial.json", True),
    ("sglang_prefix_pressure", PL + "sglang_prefix_pressure.json", True),
    ("sglang_poisson_pressure_polynomial", PL + "sglang_poisson_pressure_polynomial.json", True),
    ("sglang_block16_prefix", PL + "sglang_block16_prefix.json", True),
    ("sglang_max_num_seqs4", PL + "sglang_max_num_seqs4.json", True),
    ("sglang_max_model_len", PL + "sglang_max_model_len.json", True),
    ("sglang_no_prefix_caching", PL + "sglang_no_prefix_caching.json", True),
    ("sglang_2workers_dp2", PL + "sglang_2workers_dp2.json", True),
    ("sglang_speedup", PL + "sglang_speedup.json", True),
    # e. real mooncake trace, cut by virtual time
    ("mooncake_conversation_60s_2w", PL + "mooncake_conversation_60s_2w.json", True),
    # TensorRT-LLM GUARANTEED_NO_EVICT (issue 4)
    ("trtllm_kv_pressure", PL + "trtllm_kv_pressure.json", True),
    ("trtllm_prefix_reuse", PL + "trtllm_prefix_reuse.json", True),
    ("trtllm_poisson_polynomial", PL + "trtllm_poisson_polynomial.json", True),
    ("trtllm_full_cache_hit", PL + "trtllm_full_cache_hit.json", True),
]
# f. trace formats and drivers (issue 3; tiny hand-written traces in tests/fixtures/traces)
CASES += [(_n, PL + _n + ".json", True) for _n in (
    "trace_mooncake_sessions", "trace_mooncake_sessions_conc2", "trace_mooncake_sessions_speedup",
    "trace_mooncake_delta", "trace_mooncake_delta_conc1", "trace_applied_compute_conc2",
    "trace_dynamo_standard", "synthetic_session_delay_conc2", "synthetic_session_poisson_groups")]
# Agentic replays go to reference/agentic/: their summaries carry trajectory extras that only
# the agentic driver produces, so the report tests that rebuild summaries from records skip
# them. The reference release reads only v2 agentic files: the legacy fixture is checked
# against the same graph written as v2 (trace_agentic_legacy_as_v2).
CASES += [("agentic/" + _n, PL + _n + ".json", True) for _n in (
    "trace_agentic_v2", "trace_agentic_v2_speedup", "trace_agentic_legacy_as_v2",
    "trace_agentic_failure", "trace_dynamo_agentic")]
# h. disaggregated prefill/decode (issue 4 part 3; tiny hand-written traces, two synthetic loads)
CASES += [(_n, PL + _n + ".json", True) for _n in (
    "disagg_lifecycle", "disagg_transfer_full_prompt", "disagg_transfer_destination_missing",
    "disagg_transfer_settings_of_prefill", "disagg_role_timing", "disagg_decode_first_token",
    "disagg_decode_preemption", "disagg_decode_preemption_poly", "disagg_arrival_at_boundary",
    "disagg_osl0", "disagg_decode_capacity_failure", "disagg_trtllm_pressure",
    "disagg_trtllm_destination_missing", "disagg_source_held_blocks_prefill", "disagg_dp_groups",
    "disagg_dp_groups_vllm", "disagg_activation_order", "disagg_poisson_pressure",
    "disagg_concurrency_trtllm")]
# expected failure: a preempted decode request outgrew the decode pool; the reference aborts
CASES.append(("disagg_decode_stall", PL + "disagg_decode_stall.json", True, "expect_error"))
# j. the reproducers of issue 8 (../shared/repro, referenced in place). "expect_hang": the reference
# never answers; the recorder watches its clock through telemetry and records where it stopped.
RP = "../shared/repro/"
CASES += [
    ("repro_hang_sglang_chunked_prefill", RP + "hang-sglang-chunked-prefill-livelock.json", False,
     "expect_hang"),
    ("repro_hang_sglang_clip", RP + "hang-sglang-clip-livelock.json", False, "expect_hang"),
    # two running requests on a clipped reserve; the retracted one holds its recompute (found by
    # the property test)
    ("hang_sglang_clipped_pair", PL + "hang_sglang_clipped_pair.json", False, "expect_hang"),
    ("repro_sglang_max_prefill_stall", RP + "sglang-stall-message-blames-kv-pool.json", False,
     "expect_error"),
    ("repro_prefill_ms_1e308", RP + "prefill-ms-1e308-overflowerror.json", False, "expect_error"),
    ("repro_speedup_ratio_denormal", RP + "speedup-ratio-denormal-overflowerror.json", False,
     "expect_error"),
    # reuse above the prompt: the reference reports it too (readmissions re-hit their own blocks)
    ("repro_reuse_ratio_above_1", RP + "reuse-ratio-above-1.json", True),
    ("repro_reused_input_tokens_above_input_length",
     RP + "reused-input-tokens-above-input-length.json", True),
]

# k. a queue head that can never start (nothing runs, it does not fit the prefill budget): vLLM
# (aggregated and the disaggregated prefill role) parks the worker and aborts only when nothing
# else can happen, so a time limit reached first gives a report; SGLang aborts at once.
CASES += [(_n, PL + _n + ".json", True) for _n in (
    "stall_vllm_parked_cutoff", "stall_disagg_prefill_parked_cutoff")]
CASES += [(_n, PL + _n + ".json", True, "expect_error") for _n in (
    "stall_vllm_parked_drained", "stall_disagg_prefill_parked_drained", "stall_sglang_not_parked")]
# l. a time limit cuts passes in flight: their prompt work is not in committed_prefill_tokens
CASES += [(_n, PL + _n + ".json", True) for _n in (
    "cutoff_prefill_in_flight_vllm", "cutoff_prefill_in_flight_sglang")]
# m. zero-time chunks are progress: a decode-role recompute (free) and zero prefill timing run
# chunk after chunk at one time (found by the property test)
CASES += [(_n, PL + _n + ".json", True) for _n in (
    "disagg_decode_recompute_zero_time", "disagg_decode_recompute_zero_time_1w",
    "disagg_zero_time_prefill_chunks")]
# n. prompts that can never run are rejected without their tokens: over max_model_len (2^24
# tokens, every backend) and over the KV pool (10^7 tokens, vLLM and TensorRT-LLM)
CASES += [(_n, PL + _n + ".json", True) for _n in (
    "reject_vllm_max_model_len_isl16m", "reject_sglang_max_model_len_isl16m",
    "reject_trtllm_max_model_len_isl16m", "reject_vllm_over_capacity_isl1e7",
    "reject_trtllm_over_capacity_isl1e7")]
# o. a disaggregated deployment needs one block_size on both roles (the reference's own error)
CASES += [(_n, PL + _n + ".json", True, "expect_error") for _n in (
    "disagg_block_size_mismatch", "disagg_block_size_mismatch_prefill")]
# p. the weka format (CLUSTER.md 5): the 5.3 example (auto resolves to relative), the same under
# absolute (the reference's error), and a directory corpus (a .json and a two-play .jsonl below
# it) with worker streams, a seam, replay barriers, a disjoint subagent stream, hash-less and
# partly hashed requests and a declared models list
CASES += [("agentic/" + _n, PL + _n + ".json", True) for _n in ("weka_doc_play", "weka_corpus_dir")]
CASES.append(("agentic/weka_doc_play_absolute", PL + "weka_doc_play_absolute.json", True,
              "expect_error"))
# two random plays of the weka differential check: prefill-only requests found whole in the
# cache (they end as they are admitted: a later lifecycle batch of that instant), and a
# blocking subagent whose duration_ms ends before its own requests (joined at once, no error)
# among hash-chain worker streams, nested relative times
CASES += [("agentic/" + _n, PL + _n + ".json", True) for _n in (
    "weka_cached_prefill_only", "weka_short_duration_streams")]
# disaggregated random plays: a prefill worker releasing a request's source blocks after its
# decode ended (the request, and its play, settle then), and prefill-only requests ending as
# they reach their decode worker (a later lifecycle batch of that instant)
CASES += [("agentic/" + _n, PL + _n + ".json", True) for _n in (
    "weka_disagg_late_release", "weka_disagg_prefill_only")]
# the wheel replays weka and agentic Dynamo graphs on a disaggregated 1P+1D deployment too
CASES += [("agentic/" + _n, PL + _n + ".json", True) for _n in (
    "weka_corpus_disagg", "trace_dynamo_agentic_disagg")]

# q. the vLLM / TensorRT-LLM engine features of FEATURES.md (MTP, prefill_schedule_interval,
# state_cache): tests/fixtures/features_vllm/ (generate.py writes them, README.md says what each
# settles), recorded into reference/features_vllm/
_FV = "tests/fixtures/features_vllm/"
CASES += [("features_vllm/" + _n, _FV + _n + ".json", True) for _n in sorted(
    f[:-5] for f in os.listdir(os.path.join(ROOT, _FV)) if f.endswith(".json") and f.count(".") == 1)]

# r. agentic lanes and the agentic outputs (FEATURES.md §3): tests/fixtures/features_agentic/
# (generate.py writes them, README.md says what each settles), into reference/features_agentic/
_FA = "tests/fixtures/features_agentic/"
CASES += [("features_agentic/" + _n, _FA + _n + ".json", True)
          + (("expect_error",) if _n.endswith("_error") else ()) for _n in sorted(
    f[:-5] for f in os.listdir(os.path.join(ROOT, _FA)) if f.endswith(".json"))]

# s. the KV offload tiers (FEATURES.md §5, §6): tests/fixtures/features_offload/ (generate.py
# writes them, README.md says what each settles), recorded into reference/features_offload/
_FO = "tests/fixtures/features_offload/"
CASES += [("features_offload/" + _n, _FO + _n + ".json", True) for _n in sorted(
    f[:-5] for f in os.listdir(os.path.join(ROOT, _FO)) if f.endswith(".json"))]

# t. SGLang P/D, the destination-first handoff (FEATURES.md §8): tests/fixtures/features_sglang/
# (generate.py writes them, README.md says what each settles), into reference/features_sglang/
_FS = "tests/fixtures/features_sglang/"
CASES += [("features_sglang/" + _n, _FS + _n + ".json", True) for _n in sorted(
    f[:-5] for f in os.listdir(os.path.join(ROOT, _FS)) if f.endswith(".json"))]

# u. the G3 storage tier's rules found by bench/fuzz_g3_offload.py (FEATURES.md §6):
# tests/fixtures/features_g3/ (generate.py, README.md), into reference/features_g3/
_FG = "tests/fixtures/features_g3/"
CASES += [("features_g3/" + _n, _FG + _n + ".json", True) for _n in sorted(
    f[:-5] for f in os.listdir(os.path.join(ROOT, _FG)) if f.endswith(".json"))]

HANG_S = 20.0               # how long a reference run may take before it counts as hung
HANG_SAMPLE_MS = 1.0        # telemetry interval while watching it
_HANG_PROBE = """
import json, os, sys, threading, time, runpy
import dynamo._core as core
samples = []
def watch(sample):
    samples.append((sample["sampled_at_ms"], sample["traffic"]["completed_requests"]))
def bind(fn):
    def run(*args, **kwargs):
        kwargs.update(capture_telemetry=True, telemetry_sample_interval_ms=%r,
                      telemetry_callback=watch)
        return fn(*args, **kwargs)
    return run
core.run_mocker_trace_replay = bind(core.run_mocker_trace_replay)
core.run_mocker_synthetic_trace_replay = bind(core.run_mocker_synthetic_trace_replay)
def give_up():
    time.sleep(%r)
    last = samples[-1][0] if samples else None
    print(json.dumps({"last_sample_ms": last, "completed": sum(c for _, c in samples)}))
    sys.stdout.flush()
    os._exit(3)
threading.Thread(target=give_up, daemon=True).start()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
""" % (HANG_SAMPLE_MS, HANG_S)


def _record_key(r):
    # The reference sorts records by authored request_id, then arrival, then uuid; uuids are random
    # v4 (not canonical) in this binding, so ties come out in a different order on every run.  Sort
    # on content instead so fixtures are stable; the uuid is only the last resort.
    def num(x):
        return float("inf") if x is None else x
    return (r.get("request_id") or "", num(r.get("arrival_time_ms")), num(r.get("first_admit_ms")),
            str(r.get("session_id") or ""), num(r.get("turn_index")), num(r.get("decode_worker_idx")),
            num(r.get("first_token_ms")), num(r.get("terminal_time_ms")), r.get("input_length") or 0,
            r.get("uuid") or "")


def _peer_command(payload):
    """peer_run.py's command line (it forwards every field these cases use, ``execution_model``
    of agentic traces included)."""
    return [sys.executable, PEER_RUN, payload]


def record_hang(name, payload):
    """A case the reference never finishes: record where its clock stopped (the last telemetry
    sample before it hung) and how many requests completed before."""
    env = dict(os.environ, DYN_LOG="error", RUST_LOG="error")
    proc = subprocess.run([sys.executable, "-c", _HANG_PROBE, PEER_RUN, payload], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if proc.returncode != 3:
        sys.stderr.write("%s: expected the reference to hang, but it exited %d\n%s\n" % (
            name, proc.returncode, proc.stderr))
        return False
    seen = json.loads([ln for ln in proc.stdout.splitlines() if ln.strip()][-1])
    hang = {"after_s": HANG_S, "sample_interval_ms": HANG_SAMPLE_MS,
            "last_sample_ms": seen["last_sample_ms"], "completed_before": seen["completed"]}
    with open(os.path.join(ROOT, OUT_DIR, name + ".json"), "w") as f:
        json.dump({"payload": payload, "hang": hang}, f, indent=1)
        f.write("\n")
    print("%-40s hangs: clock stopped after %s ms, %s completed" % (
        name, hang["last_sample_ms"], hang["completed_before"]))
    return True


def record(name, payload, per_request, expect_error=False):
    cmd = _peer_command(payload) + (["--per-request"] if per_request else [])
    env = dict(os.environ, DYN_LOG="error", RUST_LOG="error")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    wall = time.perf_counter() - t0
    path = os.path.join(ROOT, OUT_DIR, name + ".json")
    if expect_error:
        if proc.returncode == 0:
            sys.stderr.write("%s: expected the reference to fail, but it succeeded\n" % name)
            return False
        err = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1]
        with open(path, "w") as f:
            json.dump({"payload": payload, "error": err}, f, indent=1)
            f.write("\n")
        print("%-40s %6.1fs  expected error: %s" % (name, wall, err))
        return True
    if proc.returncode != 0:
        sys.stderr.write("%s: peer_run failed (rc %d)\n%s\n" % (name, proc.returncode, proc.stderr))
        return False
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    summary = json.loads(lines[-1])
    summary.pop("outer_wall_s", None)
    recs = summary.pop("per_request", None)
    out = {"payload": payload, "summary": summary}
    if per_request:
        out["per_request"] = sorted(recs, key=_record_key)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("%-40s %6.1fs  completed %s/%s  duration_ms %s" % (
        name, wall, summary.get("completed_requests"), summary.get("num_requests"),
        summary.get("duration_ms")))
    return True


def main(argv):
    if "--list" in argv:
        for case in CASES:
            print("%-40s %s%s%s" % (case[0], case[1], "  (per-request)" if case[2] else "",
                                    "  (%s)" % case[3].replace("_", " ") if len(case) > 3 else ""))
        return 0
    wanted = [a for a in argv if not a.startswith("-")]
    known = {c[0] for c in CASES}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        sys.stderr.write("unknown case(s): %s\n" % ", ".join(unknown))
        return 2
    os.makedirs(os.path.join(ROOT, OUT_DIR), exist_ok=True)
    os.makedirs(os.path.join(ROOT, OUT_DIR, "features_vllm"), exist_ok=True)
    os.makedirs(os.path.join(ROOT, OUT_DIR, "features_agentic"), exist_ok=True)
    os.makedirs(os.path.join(ROOT, OUT_DIR, "features_offload"), exist_ok=True)
    ok = True
    for case in CASES:
        if wanted and case[0] not in wanted:
            continue
        mode = case[3] if len(case) > 3 else None
        if mode == "expect_hang":
            ok = record_hang(case[0], case[1]) and ok
        else:
            ok = record(case[0], case[1], case[2], mode == "expect_error") and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
