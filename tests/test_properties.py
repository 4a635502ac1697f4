"""Property tests: generated payloads and trace rows across engines and topologies.

Whatever goes in, only a report or an ``AisimError`` comes out of ``run_replay`` and
``run_replay_json``; a report is internally consistent (report_invariants.py) and the same payload
gives the same report twice. Every run is bounded in time and memory (``bounded``), so a
livelock or an unbounded allocation fails the test instead of stalling the suite.

Profiles (``AISIMULATE_HYPOTHESIS_PROFILE``):

* ``ci``, the default: derandomized, so the suite is reproducible and a failure names a
  payload that fails again; no shrinking, so a failure costs one run, not minutes of
  replays (each hung run costs ``RUN_SECONDS``);
* ``shrink``: the same examples, shrunk to a minimal failing payload;
* ``explore``: fresh random examples, ten times as many, shrunk: to hunt for new defects.
"""

from __future__ import annotations

import json
import os
import resource
import signal
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from aisimulate_core import AisimError, run_replay, run_replay_json
from report_invariants import check_report, comparable, expected_requests
from strategies import broken_json_texts, cases, mutated, trace_files, trace_lines

_COMMON = dict(database=None, deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("ci", derandomize=True, **_COMMON,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.register_profile("shrink", derandomize=True, **_COMMON)
settings.register_profile("explore", derandomize=False, **_COMMON)
PROFILE = os.environ.get("AISIMULATE_HYPOTHESIS_PROFILE", "ci")
SCALE = 10 if PROFILE == "explore" else 1


def examples(n):
    return settings(settings.get_profile(PROFILE), max_examples=n * SCALE)


# -- one bounded run ----------------------------------------------------------------------------

RUN_SECONDS = 3  # a run here takes milliseconds; three seconds means it is not progressing
EXTRA_ADDRESS_SPACE = 2 << 30  # bytes a run may add before an allocation fails


class RunTimedOut(BaseException):
    """Raised by SIGALRM inside a run; a BaseException so that no `except Exception` in the
    simulator swallows it."""


def _on_alarm(signum, frame):
    raise RunTimedOut


def _address_space():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * resource.getpagesize()


def bounded(call, *args):
    """``call(*args)`` with a wall-clock alarm and a cap on new address space."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _address_space() + EXTRA_ADDRESS_SPACE
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    signal.setitimer(signal.ITIMER_REAL, RUN_SECONDS)
    try:
        return call(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def outcome(call, payload):
    """``("report", value)`` or ``("error", AisimError)`` of ``call(payload)``; anything else
    fails the example."""
    try:
        return "report", bounded(call, payload)
    except RunTimedOut:
        raise AssertionError(f"no result within {RUN_SECONDS} s (livelock?)") from None
    except AisimError as error:
        check_error_message(error, trace_paths_of(payload))
        return "error", error
    except Exception as error:  # noqa: BLE001 - the property under test
        raise AssertionError(
            f"{type(error).__name__} escaped instead of an AisimError: {error}") from error


def trace_paths_of(payload):
    """The trace file names a payload gives (they may hold anything, even when mutated)."""
    if isinstance(payload, (str, bytes)):
        try:
            payload = json.loads(payload)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to read here
            return []
    traffic = payload.get("traffic") if isinstance(payload, dict) else None
    if not isinstance(traffic, dict):
        return []
    paths = traffic.get("trace_paths")
    paths = list(paths) if isinstance(paths, list) else []
    return [p for p in [traffic.get("trace_path"), *paths] if isinstance(p, str) and p]


def check_error_message(error, file_names=()):
    """One problem per line: non-empty lines, and no line or paragraph separator other than
    the newline between problems, so that a user value can neither split nor forge a line.
    A trace error starts with the file name as given (``FILE:LINE: field: rule``); the CLI
    escapes what it holds when it prints the line (aisimulate_core/messages.py)."""
    text = str(error)
    assert text.strip(), f"{type(error).__name__} with an empty message"
    lines = text.split("\n")
    assert all(line.strip() for line in lines), f"blank line in {text!r}"
    for name in sorted(file_names, key=len, reverse=True):
        text = text.replace(name, "FILE")
    assert text.splitlines() == text.split("\n"), f"a line separator inside a problem: {text!r}"
    assert "Traceback" not in text, text


# -- valid payloads -----------------------------------------------------------------------------


def _with_trace(case, directory, name=None):
    """The case's payload reading its rows from a file in ``directory``; ``name``, when
    given, is the path the payload shows (relative to the current directory)."""
    payload, rows = case
    if rows is None:
        return payload, None
    path = directory / "trace.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    payload = json.loads(json.dumps(payload))
    payload["traffic"]["trace_path"] = name or str(path)
    return payload, rows


# -- cases hypothesis found, kept as regression tests ------------------------------------------

# SGLang admitted a request on an output reserve clipped by clip_max_new_tokens; when decode
# then could not get a KV page it repeated a zero-time pass forever (ISSUE8 item 1; the
# reference 1.6.1 hangs too). Shrunk by hypothesis: 1 + 3 tokens on a 3-token pool.
def sglang_clipped(*, kv_tokens, max_num_seqs, chunk, max_prefill, isl, osl, requests):
    """One SGLang rank of page size 1 whose output reserve is clipped to one token, under
    `requests` concurrent requests of `isl` + `osl` tokens."""
    sglang = {"max_prefill_tokens": max_prefill, "chunked_prefill_size": chunk,
              "clip_max_new_tokens": 1, "schedule_conservativeness": 0.0}
    rank = {"backend": "sglang", "block_size": 1, "num_gpu_blocks": kv_tokens,
            "max_num_seqs": max_num_seqs, "max_num_batched_tokens": 8,
            "enable_prefix_caching": False, "timing_model": {"type": "polynomial"},
            "sglang": sglang}
    return {"spec": {"version": 1, "engine": {"rank": rank},
                     "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}}},
            "traffic": {"source_type": "synthetic", "load_type": "concurrency",
                        "concurrency": requests, "isl": isl, "osl": osl,
                        "request_count": requests}}


SGLANG_CLIP_LIVELOCK = sglang_clipped(kv_tokens=3, max_num_seqs=1, chunk=1, max_prefill=16,
                                      isl=1, osl=3, requests=1)


def test_sglang_clipped_reserve_under_kv_pressure_stops_with_the_limit():
    kind, result = outcome(run_replay, SGLANG_CLIP_LIVELOCK)
    assert kind == "error", "the request cannot finish on a 3-token pool"
    assert str(result).startswith("$.spec.engine.rank.num_gpu_blocks: "), result


# The same class with two running requests: SGLang, clip_max_new_tokens 1 and
# schedule_conservativeness 0, two requests of 1 + 24 tokens on a 38-token pool. The reference
# hangs; ours stopped only through the event loop's livelock guard, not through the engine's
# own stop naming the limit and its JSON path (ISSUE8 item 1). Shrunk by hypothesis.
SGLANG_CLIPPED_PAIR = sglang_clipped(kv_tokens=38, max_num_seqs=8, chunk=2, max_prefill=256,
                                     isl=1, osl=24, requests=2)


def test_sglang_clipped_reserve_with_two_running_stops_with_the_limit():
    kind, result = outcome(run_replay, SGLANG_CLIPPED_PAIR)
    assert kind == "error", "the reference hangs: a clear stop is the expected outcome"
    assert "livelock limit" not in str(result), result
    assert str(result).startswith("$.spec.engine.rank.num_gpu_blocks: "), result


# Disaggregated vLLM whose prefill takes no time, with a prompt of four chunks or more
# (25 tokens, max_num_batched_tokens 8): our replay stopped with "requests are stranded
# between the prefill and decode pools"; ai-dynamo-runtime 1.6.1 (peer_run.py, per-request)
# completes it at 0 ms: TTFT 0, terminal 0, duration 0. Found by hypothesis (it was so
# since before issue 8), fixed in 2d08cb1.
ZERO_TIME_PREFILL_ROW = {"hash_ids": [1, 2, 3, 4], "input_length": 25, "output_length": 1,
                         "timestamp": 0}


def zero_time_disaggregated_prefill(trace_path):
    rank = {"backend": "vllm", "block_size": 2, "num_gpu_blocks": 100, "max_num_seqs": 1,
            "max_num_batched_tokens": 8, "enable_prefix_caching": False,
            "timing_model": {"type": "fixed", "prefill_ms": 0.0, "decode_ms": 0.0}}
    return {"spec": {"version": 1, "record_per_request": True, "engine": {"rank": rank},
                     "topology": {"kind": "disaggregated", "prefill": {"initial_workers": 1},
                                  "decode": {"initial_workers": 1}}},
            "traffic": {"source_type": "trace", "trace_format": "mooncake",
                        "trace_path": str(trace_path), "trace_block_size": 16}}


def test_zero_time_disaggregated_prefill_completes_as_the_reference(tmp_path):
    trace = tmp_path / "one.jsonl"
    trace.write_text(json.dumps(ZERO_TIME_PREFILL_ROW) + "\n")
    payload = zero_time_disaggregated_prefill(trace)
    kind, result = outcome(run_replay, payload)
    assert kind == "report", result
    report = result.to_dict()
    check_report(report, payload, [ZERO_TIME_PREFILL_ROW])
    record = report["per_request"][0]
    assert (report["completed_requests"], report["duration_ms"]) == (1, 0.0)
    assert (record["first_token_ms"], record["terminal_time_ms"]) == (0.0, 0.0)


# Disaggregated vLLM under decode KV pressure: three requests of 1 + 30 tokens, two decode
# workers of 24 two-token blocks. ai-dynamo-runtime 1.6.1 preempts in decode and completes all
# three (terminal at 160, 160 and 190 ms, duration 190 ms, the last one admitted three times);
# ours stopped "stranded". With one decode worker ours said a request "can never be scheduled
# on decode worker 0: its 17 tokens need 9 KV blocks of 2 tokens, 12 of 24 are free", where
# the reference completes all three too. Found by hypothesis, fixed in 2d08cb1.
DECODE_PRESSURE = {
    "spec": {"version": 1, "record_per_request": True,
             "topology": {"kind": "disaggregated", "prefill": {"initial_workers": 1},
                          "decode": {"initial_workers": 2}},
             "engine": {"rank": {"backend": "vllm", "block_size": 2, "num_gpu_blocks": 24,
                                 "max_num_seqs": 8, "max_num_batched_tokens": 8,
                                 "enable_prefix_caching": False,
                                 "timing_model": {"type": "fixed", "prefill_ms": 10.0,
                                                  "decode_ms": 5.0}}}},
    "traffic": {"source_type": "synthetic", "load_type": "concurrency", "concurrency": 3,
                "isl": 1, "osl": 30, "request_count": 3},
}


@pytest.mark.parametrize("decode_workers, ends", [
    (2, [160.0, 160.0, 190.0]),
    (1, [160.0, 190.0, 250.0]),  # the reference admits them 2, 3 and 4 times
])
def test_disaggregated_decode_pressure_completes_as_the_reference(decode_workers, ends):
    payload = json.loads(json.dumps(DECODE_PRESSURE))
    payload["spec"]["topology"]["decode"]["initial_workers"] = decode_workers
    kind, result = outcome(run_replay, payload)
    assert kind == "report", result
    report = result.to_dict()
    check_report(report, payload)
    assert (report["completed_requests"], report["duration_ms"]) == (3, ends[-1])
    assert sorted(r["terminal_time_ms"] for r in report["per_request"]) == ends


def test_valid_payloads_give_a_consistent_deterministic_report(tmp_path, monkeypatch):
    # the invariant checker (KV blocks conserved, clock monotonic, one terminal per request)
    # runs on these payloads: any violation is a SimulationError that fails below
    monkeypatch.setenv("AISIMULATE_CHECK", "1")
    seen = Counter()

    @examples(250)
    @given(cases())
    def run(case):
        payload, rows = _with_trace(case, tmp_path)
        kind, first = outcome(run_replay, payload)
        seen[kind] += 1
        if kind == "error":
            seen[type(first).__name__] += 1
            assert_rejection_is_a_rule(first)
            return
        report = first.to_dict()
        check_report(report, payload, rows)
        kind, again = outcome(run_replay_json, json.dumps(payload))
        assert kind == "report", f"the second run failed: {again}"
        assert comparable(json.loads(again)) == comparable(json.loads(first.to_json()))
        seen.update(coverage(payload, report))

    run()
    # honesty: the generator mostly produces runs, on every engine and topology, and the
    # runs reach the paths the invariants are about
    assert seen["report"] >= 0.7 * (seen["report"] + seen["error"]), seen
    for backend in ("vllm", "sglang", "trtllm"):
        assert seen[f"aggregated {backend}"] >= 10, seen
    for backend in ("vllm", "trtllm"):
        assert seen[f"disaggregated {backend}"] >= 3, seen
    for path in ("readmitted", "reused", "not completed", "cut off"):
        assert seen[path] >= 3, seen


def coverage(payload, report):
    """What a run exercised, for the honesty checks above."""
    spec = payload.get("spec", payload)
    records = report["per_request"]
    covered = [f"{spec['topology']['kind']} {spec['engine']['rank']['backend']}"]
    if any(r["readmission_count"] for r in records):
        covered.append("readmitted")
    if any(r["reused_input_tokens"] for r in records):
        covered.append("reused")
    if any(r["terminal_status"] != "completed" for r in records):
        covered.append("not completed")
    if len(records) < report["num_requests"]:
        covered.append("cut off")
    return covered


def assert_rejection_is_a_rule(error):
    """A mostly-valid payload may break a cross-field rule (SGLang disaggregated, a request
    that never fits, a trace length past its hash ids): such an error names the JSON path or
    the trace line. Two SimulationErrors are defects on any input: a violated run-time
    invariant (runtime/checks.py) and the event loop's livelock guard, which means an
    engine path repeated a pass that took no time instead of progressing or stopping."""
    text = str(error)
    assert not text.startswith("invariant"), text
    assert "livelock limit" not in text, text
    assert text.startswith(("$", "/")) or ": " in text, text


# -- bad payloads -------------------------------------------------------------------------------


@st.composite
def bad_payloads(draw, directory):
    # a name of fixed length: mutations draw positions in the payload's text, so a temporary
    # directory's varying name would change the examples from one run to the next
    payload, _ = _with_trace(draw(cases()), directory, "trace.jsonl")
    if draw(st.integers(0, 4)) == 0:
        return draw(broken_json_texts(payload))
    return draw(mutated(payload))


def test_bad_payloads_give_a_report_or_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = Counter()

    @examples(300)
    @given(st.data())
    def run(data):
        bad = data.draw(bad_payloads(tmp_path))
        if isinstance(bad, (str, bytes)):
            kind, result = outcome(run_replay_json, bad)
            if kind == "report":
                json.loads(result)
        else:
            via_json = data.draw(st.booleans())
            kind, result = outcome(run_replay_json if via_json else run_replay,
                                   json.dumps(bad) if via_json else bad)
            if kind == "report":
                report = json.loads(result) if via_json else result.to_dict()
                check_report(report)
        seen[kind] += 1

    run()
    # both paths are exercised: some mutations are harmless, most are rejected
    assert seen["error"] > 0 and seen["report"] > 0, seen


# -- trace rows ---------------------------------------------------------------------------------


@st.composite
def trace_cases(draw):
    """A payload reading a trace, and the trace's rows (mooncake or applied_compute
    agent sessions), some lines broken, as a plain or gzip file (maybe a broken one)."""
    payload, rows = draw(cases().filter(lambda case: case[1] is not None))
    lines = draw(trace_lines(rows))
    suffix, data, readable = draw(trace_files(lines))
    intact = readable and lines == [json.dumps(row) for row in rows]
    return payload, suffix, data, rows if intact else None


def test_trace_rows_give_a_report_or_one_trace_error(tmp_path):
    seen = Counter()

    @examples(200)
    @given(trace_cases())
    def run(case):
        payload, suffix, data, rows = case
        path = tmp_path / ("rows" + suffix)
        path.write_bytes(data)
        payload = json.loads(json.dumps(payload))
        payload["traffic"]["trace_path"] = str(path)
        kind, result = outcome(run_replay, payload)
        seen[kind] += 1
        if kind == "report":
            # rows None: lines were broken, so only the payload-independent counts hold
            check_report(result.to_dict(), payload, rows)
        elif str(result).startswith(str(path)):
            seen["names the file"] += 1
        seen[payload["traffic"]["trace_format"] + " " + kind] += 1

    run()
    assert seen["names the file"] > 0, seen
    for name in ("mooncake", "mooncake-delta", "applied_compute_agentic"):
        assert seen[f"{name} error"] > 0 and seen[f"{name} report"] > 0, seen


def test_expected_requests_counts_turns_rows_and_requests():
    # the helper the invariants rest on, on one payload of each kind
    synthetic = {"spec": {}, "traffic": {"source_type": "synthetic-session", "request_count": 3,
                                         "turns_per_session": 2}}
    assert expected_requests(synthetic, None) == (6, True)
    assert expected_requests({"requests": [{}, {}]}, None) == (2, True)
    trace = {"spec": {}, "traffic": {"source_type": "trace", "trace_format": "mooncake",
                                     "max_sim_time_ms": 5.0}}
    assert expected_requests(trace, [{}, {}, {}]) == (3, False)
    agents = {"spec": {}, "traffic": {"source_type": "trace",
                                      "trace_format": "applied_compute_agentic"}}
    assert expected_requests(agents, [{"num_turns": 2}, {"num_turns": 0}]) == (4, True)


# -- the invariants are not vacuous ---------------------------------------------------------------

PREEMPTING = {  # three requests that outgrow a 10-block pool in decode
    "version": 1, "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
    "engine": {"rank": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 10,
                        "timing_model": {"type": "fixed", "prefill_ms": 10.0,
                                         "decode_ms": 5.0}}},
    "requests": [{"id": f"r{i}", "arrival_time_ms": 0.1 * i, "input_tokens": 40,
                  "input_token_ids": [7] * 40, "output_tokens": 50} for i in range(3)],
}


def _tamper_first_completed(report, **fields):
    record = next(r for r in report["per_request"] if r["terminal_status"] == "completed")
    record.update(fields)


TAMPERINGS = {
    "ttft above e2e": lambda rep: _tamper_first_completed(rep, ttft_ms=1e9),
    "negative latency": lambda rep: _tamper_first_completed(rep, itl_ms=-1.0),
    "reuse above input on first admission": lambda rep: rep["per_request"][0][
        "admission_history"][0].update(reused_input_tokens=10**6),
    "two terminals": lambda rep: rep["per_request"].append(dict(rep["per_request"][0])),
    "lost terminal": lambda rep: rep["per_request"].pop(),
    "count drift": lambda rep: rep.update(completed_requests=rep["completed_requests"] + 1),
    "ratio above 1": lambda rep: rep.update(first_admission_prefix_cache_reused_ratio=1.5),
    "short output": lambda rep: _tamper_first_completed(rep, output_length=1),
}


@pytest.mark.parametrize("tampering", sorted(TAMPERINGS))
def test_report_invariants_reject_a_tampered_report(tampering):
    report = run_replay(PREEMPTING).to_dict()
    check_report(report, PREEMPTING)  # the real report holds
    assert any(r["readmission_count"] for r in report["per_request"]), "no preemption"
    TAMPERINGS[tampering](report)
    with pytest.raises(AssertionError):
        check_report(report, PREEMPTING)
