"""Size bounds (aisimulate_core/spec/bounds.py) and what the reference does around them.

Every case of tests/fixtures/bounds/ (see its README) was run on the reference: where it gave
a report we give the same report, unless the fixture's `ours` names the one error line we
give instead (and its `note` says why). Repro payloads are read in place from ../shared/repro.
"""

import json
import tracemalloc

import pytest

from aisimulate_core import run_replay
from aisimulate_core.errors import AisimError, ConfigError
from aisimulate_core.spec import load_payload
from aisimulate_core.spec.bounds import MAX_BLOCK_SIZE, MAX_RANKS, MAX_REQUESTS, MAX_TOKENS
from reference import ROOT, summary_mismatches

FIXTURES = ROOT / "tests" / "fixtures" / "bounds"
REPRO = ROOT.parent / "shared" / "repro"
CASES = sorted(FIXTURES.glob("*.json"))


def payload_of(fixture):
    if "payload" in fixture:
        path = ROOT / fixture["payload"]
        if not path.exists():
            pytest.skip(f"{fixture['payload']} is not here (../shared is beside the project)")
        return path.read_text()
    return json.dumps(fixture["payload_inline"])


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_size_case_gives_the_recorded_outcome(path, monkeypatch):
    fixture = json.loads(path.read_text())
    if not REPRO.is_dir():
        pytest.skip("../shared/repro is not beside the project")
    payload = payload_of(fixture)
    needs = fixture.get("needs")
    if needs and not (ROOT / needs.split()[0]).exists():
        pytest.skip(f"needs {needs}")
    monkeypatch.chdir(ROOT / fixture["run_from"])
    ours = fixture["ours"]
    if "error" in ours:
        with pytest.raises(AisimError) as info:
            run_replay(payload)
        assert type(info.value).__name__ == ours["type"]
        assert str(info.value) == ours["error"]
    else:
        assert fixture["reference"]["outcome"] == "report"
        report = run_replay(payload)
        assert summary_mismatches(report.summary, fixture["reference"]["summary"]) == []


def test_every_recorded_error_is_one_line():
    for path in CASES:
        ours = json.loads(path.read_text())["ours"]
        assert "\n" not in ours.get("error", ""), path.name


BASE = {
    "spec": {"version": 1, "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
             "engine": {"rank": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 1024,
                                 "timing_model": {"type": "fixed", "prefill_ms": 10.0,
                                                  "decode_ms": 5.0}}}},
    "traffic": {"source_type": "synthetic", "load_type": "concurrency", "concurrency": 1,
                "isl": 64, "osl": 4, "request_count": 1},
}


def problem(edit):
    payload = json.loads(json.dumps(BASE))
    edit(payload)
    with pytest.raises(ConfigError) as info:
        load_payload(payload)
    return str(info.value)


def rank(p):
    return p["spec"]["engine"]["rank"]


@pytest.mark.parametrize("edit, line", [
    (lambda p: rank(p).update(block_size=MAX_BLOCK_SIZE + 1),
     f"$.spec.engine.rank.block_size: must be <= {MAX_BLOCK_SIZE} (tokens per KV block), got "
     f"{MAX_BLOCK_SIZE + 1}"),
    (lambda p: (p["spec"]["engine"].update(dp_size=256),
                p["spec"]["topology"]["workers"].update(initial_workers=512)),
     f"$.spec.topology.workers.initial_workers: gives {256 * 512} ranks (initial_workers x "
     f"dp_size over all pools), more than {MAX_RANKS}"),
    (lambda p: p["traffic"].update(osl=MAX_TOKENS + 1),
     f"$.traffic.osl: must be <= {MAX_TOKENS} (tokens per request), got {MAX_TOKENS + 1}"),
    (lambda p: p["traffic"].update(source_type="synthetic-session", turns_per_session=1000,
                                   request_count=MAX_REQUESTS),
     f"$.traffic.turns_per_session: times request_count gives {1000 * MAX_REQUESTS} requests, "
     f"more than {MAX_REQUESTS}"),
    (lambda p: p["traffic"].update(source_type="synthetic-session", turns_per_session=1000,
                                   isl=2**20),
     "$.traffic.turns_per_session: makes the last turn's prompt 1048579996 tokens (turns x isl "
     f"+ (turns - 1) x osl), more than {MAX_TOKENS}"),
    (lambda p: rank(p).update(speedup_ratio=0.5, decode_speedup_ratio=1e-12),
     "$.spec.engine.rank.decode_speedup_ratio: times speedup_ratio (0.5) must be 0 or >= 1e-12 "
     "(durations would overflow), got 1e-12"),
    (lambda p: rank(p)["timing_model"].update(decode_ms=1e11) or rank(p).update(
        speedup_ratio=1e-12),
     "$.spec.engine.rank.timing_model.decode_ms: divided by the speed-up ratio must be "
     "<= 1.84467e+22 ms (2^64 s), got 100000000000.0"),
    (lambda p: rank(p).update(kv_transfer_bandwidth=1e-9),
     "$.spec.engine.rank.kv_transfer_bandwidth: must be 0 or >= 1e-06 GB/s (transfers would "
     "overflow), got 1e-09"),
    (lambda p: rank(p).update(kv_transfer_bytes_per_token=2**40),
     f"$.spec.engine.rank.kv_transfer_bytes_per_token: must be <= {2**30} (bytes per token), got "
     f"{2**40}"),
    (lambda p: p.update(traffic={"source_type": "trace", "trace_path": "t.jsonl",
                                 "arrival_speedup_ratio": 1e-300}),
     "$.traffic.arrival_speedup_ratio: must be >= 1e-12 (arrival times would overflow), got "
     "1e-300"),
    (lambda p: p["traffic"].update(load_type="poisson", concurrency=None, request_rate=1e-13),
     "$.traffic.request_rate: must be >= 1e-12 per second, got 1e-13"),
])
def test_bound_gives_one_path_qualified_line(edit, line):
    assert problem(edit) == line


def test_bounds_are_inclusive():
    payload = json.loads(json.dumps(BASE))
    rank(payload).update(block_size=MAX_BLOCK_SIZE, num_gpu_blocks=2**64 - 1)
    payload["traffic"].update(isl=MAX_TOKENS, osl=MAX_TOKENS, request_count=MAX_REQUESTS)
    load_payload(payload)


def test_block_size_is_not_bounded_by_the_number_of_ranks():
    # the vLLM/TRT-LLM engines key decoders by block offset only where some are (a dict), so
    # a large block size on many ranks costs nothing per offset
    payload = json.loads(json.dumps(BASE))
    payload["spec"]["engine"]["dp_size"] = 4096
    rank(payload).update(block_size=MAX_BLOCK_SIZE)
    load_payload(payload)


def test_a_zero_speedup_ratio_still_means_unscaled():
    payload = json.loads(json.dumps(BASE))
    rank(payload).update(speedup_ratio=0.0)
    load_payload(payload)


def test_a_derived_request_count_is_bounded_too():
    payload = json.loads(json.dumps(BASE))
    payload["traffic"].update(request_count=None, num_request_ratio=1e8, concurrency=1)
    with pytest.raises(ConfigError, match=r"^\$\.traffic\.num_request_ratio: gives 100000000 "
                                          r"requests, more than 10000000, got 100000000\.0$"):
        run_replay(payload)


def test_explicit_requests_are_bounded_like_synthetic_ones():
    from aisimulate_core.spec.bounds import check_request_count
    from aisimulate_core.spec.validate import Checker

    checker = Checker()
    check_request_count(MAX_REQUESTS, "$.requests", checker)
    check_request_count(MAX_REQUESTS + 1, "$.requests", checker)
    assert checker.problems == [("$.requests", f"must hold at most {MAX_REQUESTS} requests, got "
                                               f"{MAX_REQUESTS + 1}")]


def traced_peak(payload):
    tracemalloc.start()
    try:
        run_replay(payload)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("backend", ["vllm", "trtllm"])
def test_a_prompt_that_can_never_fit_is_rejected_before_it_is_hashed(backend):
    # the recorded reference cases are tests/fixtures/reference/reject_*_over_capacity_isl1e7
    payload = json.loads(json.dumps(BASE))
    rank(payload).update(backend=backend, enable_prefix_caching=True)
    payload["traffic"].update(isl=16 * 1024 + 1, request_count=3)  # one block too many
    just_over = traced_peak(payload)
    payload["traffic"]["isl"] = 10**7
    # hashing 10^7 tokens first cost 20 MB here (and ~2 GB before prompts were lazy)
    assert traced_peak(payload) - just_over < 2 << 20
