"""SGLang rank (SEMANTICS 2.5, 2.6): one test per rule, with figures recorded from the
reference (aisimulate-core 0.13.0 in ai-dynamo-runtime 1.6.1), and the fixture parity.

The rule cases are tiny explicit request lists: a prompt is a list of 16-token blocks, each
block one repeated token id (``block ids`` equal across requests share those tokens), fixed
timing 10 ms prefill / 5 ms decode, page size 1, 4096 tokens of KV unless the case says.
Each expected record is (arrival, input length, output length, first token, last token,
tokens, [(admission time, reused tokens), ...]).
"""

from __future__ import annotations

import json

import pytest

from aisimulate_core import run_replay
from reference import FIXTURES, record_mismatches, run_fixture, summary_mismatches

BLOCK = 16


def _requests(rows):
    out = []
    for rid, arrival, isl, osl, blocks in rows:
        tokens = []
        for block in blocks:
            tokens += [block] * min(BLOCK, isl - len(tokens))
        out.append({"id": rid, "arrival_time_ms": arrival, "input_tokens": isl,
                    "input_token_ids": tokens, "output_tokens": osl})
    return out


def _run(rank, rows, dp_size=1):
    engine = {"backend": "sglang", "num_gpu_blocks": 4096,
              "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 5.0}}
    engine.update(rank)
    payload = {"version": 1, "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
               "engine": {"dp_size": dp_size, "rank": engine}, "record_per_request": True,
               "requests": _requests(rows)}
    report = json.loads(run_replay(json.dumps(payload)).to_json())
    return sorted((r["arrival_time_ms"], r["input_length"], r["requested_output_length"],
                   r["first_token_ms"], r["last_token_ms"], r["output_length"],
                   [(a["at_ms"], a["reused_input_tokens"]) for a in r["admission_history"]])
                  for r in report["per_request"])


def _blocks(first, n):
    return list(range(first, first + n))


def test_prefill_first_pauses_running_decoders():
    # b's prefill (15-25) is a pass of its own: a gets no token in it, then both decode
    got = _run({}, [("a", 0, 32, 6, _blocks(100, 2)), ("b", 12, 64, 2, _blocks(200, 4))])
    assert got == [(0.0, 32, 6, 10.0, 45.0, 6, [(0.0, 0)]),
                   (12.0, 64, 2, 25.0, 30.0, 2, [(15.0, 0)])]


def test_new_token_ratio_reservation_limits_admission():
    # 300 tokens of KV: each request is charged 16 prompt + 2 reserved outputs, so 16 fit
    # (16 * 18 = 288 < 300) and the rest wait for them to finish
    rows = [(f"r{i}", 0, 16, 2, [1000 + i]) for i in range(30)]
    got = _run({"num_gpu_blocks": 300}, rows)
    assert sum(1 for r in got if r[3] == 10.0) == 16
    assert sum(1 for r in got if r[3] == 25.0 and r[6] == [(15.0, 0)]) == 14


def test_chunked_prefill_splits_by_remaining_chunk_room():
    # a is cut at 64 (the chunk budget); at 10 its last 36 tokens leave 28 of chunk room, so
    # b is cut to 28 and c waits; at 20 b's rest and c complete together
    got = _run({"sglang": {"chunked_prefill_size": 64, "max_prefill_tokens": 96}},
               [("a", 0, 100, 3, _blocks(100, 7)), ("b", 0, 40, 3, _blocks(200, 3)),
                ("c", 0, 30, 3, _blocks(300, 2))])
    assert got == [(0.0, 30, 3, 30.0, 40.0, 3, [(20.0, 0)]),
                   (0.0, 40, 3, 30.0, 40.0, 3, [(10.0, 0)]),
                   (0.0, 100, 3, 20.0, 40.0, 3, [(0.0, 0)])]


def test_max_prefill_tokens_limits_a_prefill_batch():
    got = _run({"sglang": {"max_prefill_tokens": 64}},
               [("a", 0, 40, 3, _blocks(100, 3)), ("b", 0, 40, 3, _blocks(200, 3))])
    assert [(r[3], r[6]) for r in got] == [(10.0, [(0.0, 0)]), (20.0, [(10.0, 0)])]


def test_clip_max_new_tokens_caps_the_output_reserve():
    # 300 tokens of KV, 30 requests of 16 + 10: the default reserve admits 11 at once
    # (11 * 26 = 286); clipped to 2 outputs, 16 start (16 * 18 = 288) and some are retracted
    rows = [(f"r{i}", 0, 16, 10, [1000 + i]) for i in range(30)]
    default = _run({"num_gpu_blocks": 300}, rows)
    clipped = _run({"num_gpu_blocks": 300, "sglang": {"clip_max_new_tokens": 2}}, rows)
    assert sum(1 for r in default if r[6][0][0] == 0.0) == 11
    assert sum(1 for r in clipped if r[6][0][0] == 0.0) == 16
    assert sum(len(r[6]) - 1 for r in clipped) == 8


def test_attention_dp_splits_the_chunk_budget():
    # dp 2: each rank prefills 64 / 2 = 32 tokens a pass, so 100-token prompts take 4 passes
    rows = [(k, 0, 100, 3, _blocks(100 * (i + 1), 7)) for i, k in enumerate("abcd")]
    got = _run({"sglang": {"chunked_prefill_size": 64}}, rows, dp_size=2)
    assert [(r[3], r[4], r[6]) for r in got] == [(40.0, 80.0, [(0.0, 0)])] * 2 + \
        [(70.0, 80.0, [(30.0, 0)])] * 2


def test_retraction_takes_fewest_outputs_first_in_running_order():
    # 120 tokens of KV, optimistic admission (conservativeness 0.3): when b and c both have
    # 29 outputs the pool is full; b (earlier in running order) is retracted, requeued at
    # the back, and readmitted after c finishes, re-using its own cached prompt + outputs
    got = _run({"num_gpu_blocks": 120, "sglang": {"schedule_conservativeness": 0.3}},
               [("a", 0, 10, 80, [1]), ("b", 20, 10, 40, [2]), ("c", 30, 10, 30, [3])])
    assert got == [(0.0, 10, 80, 10.0, 435.0, 80, [(0.0, 0)]),
                   (20.0, 10, 40, 30.0, 245.0, 40, [(20.0, 0), (185.0, 38)]),
                   (30.0, 10, 30, 40.0, 185.0, 30, [(30.0, 0)])]


def test_retracted_request_loses_evicted_outputs():
    # b is retracted for a; a's growth evicts b's cached outputs, so the readmission re-uses
    # only b's 10-token prompt
    got = _run({"num_gpu_blocks": 100, "sglang": {"schedule_conservativeness": 0.3}},
               [("a", 0, 10, 80, [1]), ("b", 20, 10, 40, [2])])
    assert got == [(0.0, 10, 80, 10.0, 415.0, 80, [(0.0, 0)]),
                   (20.0, 10, 40, 30.0, 425.0, 40, [(20.0, 0), (415.0, 10)])]


def test_radix_reuse_is_capped_one_token_short_of_the_prompt():
    same = _blocks(100, 8)
    got = _run({}, [("a", 0, 128, 2, same), ("b", 50, 128, 2, same),
                    ("c", 100, 160, 2, same + [900, 901])])
    assert [r[6] for r in got] == [[(0.0, 0)], [(50.0, 127)], [(100.0, 128)]]


def test_page_size_16_reuses_whole_pages_only():
    got = _run({"block_size": 16, "num_gpu_blocks": 64},
               [("a", 0, 40, 5, [1, 2, 3]), ("b", 30, 40, 5, [1, 2, 4])])
    assert got == [(0.0, 40, 5, 10.0, 30.0, 5, [(0.0, 0)]),
                   (30.0, 40, 5, 40.0, 60.0, 5, [(30.0, 32)])]


LPM_ROWS = [("a", 0, 64, 3, _blocks(1000, 4)), ("b", 1, 64, 3, _blocks(2000, 4)),
            ("c", 2, 64, 3, [1000, 1001, 7, 8]), ("d", 3, 64, 3, [2000, 2001, 2002, 9])]


def test_fifo_admits_in_arrival_order():
    got = _run({"max_num_seqs": 1}, LPM_ROWS)
    assert [r[6][0][0] for r in got] == [0.0, 20.0, 40.0, 60.0]


def test_lpm_admits_longest_cached_prefix_first():
    # with a resident, c (32 cached tokens) jumps b and d; then b, whose prompt d re-uses
    got = _run({"max_num_seqs": 1, "sglang": {"schedule_policy": "lpm"}}, LPM_ROWS)
    assert got == [(0.0, 64, 3, 10.0, 20.0, 3, [(0.0, 0)]),
                   (1.0, 64, 3, 50.0, 60.0, 3, [(40.0, 0)]),
                   (2.0, 64, 3, 30.0, 40.0, 3, [(20.0, 32)]),
                   (3.0, 64, 3, 70.0, 80.0, 3, [(60.0, 48)])]


def test_prefill_decode_interval_defers_prefill_rounds():
    # after a's prefill two rounds must decode before b and c may prefill (at 20, not 15)
    got = _run({"prefill_decode_interval": 2},
               [("a", 0, 32, 6, _blocks(100, 2)), ("b", 12, 32, 3, _blocks(200, 2)),
                ("c", 13, 32, 3, _blocks(300, 2))])
    assert got == [(0.0, 32, 6, 10.0, 45.0, 6, [(0.0, 0)]),
                   (12.0, 32, 3, 30.0, 40.0, 3, [(20.0, 0)]),
                   (13.0, 32, 3, 30.0, 40.0, 3, [(20.0, 0)])]


def test_prefill_decode_interval_is_group_wide_under_attention_dp():
    # a prefills on rank 0; b, on rank 1, is held for the same two rounds (prefill at 20)
    rows = [("a", 0, 32, 6, _blocks(100, 2)), ("b", 12, 32, 3, _blocks(200, 2))]
    free = _run({}, rows, dp_size=2)
    held = _run({"prefill_decode_interval": 2}, rows, dp_size=2)
    assert free[1][:5] == (12.0, 32, 3, 25.0, 35.0)
    assert held == [(0.0, 32, 6, 10.0, 40.0, 6, [(0.0, 0)]),
                    (12.0, 32, 3, 30.0, 40.0, 3, [(20.0, 0)])]


def test_prompt_that_can_never_fit_is_an_error():
    from aisimulate_core.errors import SimulationError
    with pytest.raises(SimulationError, match="can never be scheduled"):
        _run({"num_gpu_blocks": 100}, [("a", 0, 95, 10, _blocks(1, 6))])


def test_host_loop_is_not_supported_yet():
    from aisimulate_core.errors import ConfigError
    with pytest.raises(ConfigError, match="sglang.host_loop: true is not supported yet"):
        _run({"sglang": {"host_loop": True}}, [("a", 0, 16, 2, [1])])


def test_new_token_ratio_schedule():
    from aisimulate_core.engine.sglang_budget import RatioSchedule
    ratio = RatioSchedule(1.0)
    assert (ratio.init, ratio.min) == (0.7, 0.7 * 0.14)
    for _ in range(600):
        ratio.decay()
    assert abs(ratio.value - ratio.min) < 1e-12
    ratio.decay()
    assert ratio.value == ratio.min
    ratio.reset()
    assert ratio.value == 0.7


SGLANG_FIXTURES = sorted(p.stem for p in FIXTURES.glob("sglang_*.json"))


@pytest.mark.parametrize("name", SGLANG_FIXTURES)
def test_reference_fixture(name):
    report, fixture = run_fixture(name)
    ours = json.loads(report.to_json())
    records = ours.pop("per_request", None)
    assert summary_mismatches(ours, fixture["summary"]) == []
    if "per_request" in fixture:
        assert record_mismatches(records or [], fixture["per_request"]) == []
