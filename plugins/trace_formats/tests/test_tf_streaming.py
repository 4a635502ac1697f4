"""Trace files are read as a stream with bounded memory; every bad input is one TraceError
naming the file (and line): nesting depth, endless lines, gzip bombs, token lengths, OS errors."""

import gzip
import json

import pytest

from aisimulate_core.errors import TraceError
from aisimulate_core.spec.bounds import MAX_TOKENS
from aisimulate_trace_formats import (AgenticMooncake, AppliedComputeAgentic, Dynamo, Mooncake,
                                      MooncakeDelta, rows)
from tf_helpers import error_of, load_text, turns

FORMATS = [Mooncake, MooncakeDelta, AgenticMooncake, AppliedComputeAgentic, Dynamo]
DEEP = "[" * 5000 + "]" * 5000
ROW = '"input_length": 4, "output_length": 2, "hash_ids": [7]'


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.NAME)
def test_deep_nesting_is_a_trace_error_in_every_format(tmp_path, monkeypatch, fmt):
    message = error_of(tmp_path, monkeypatch, fmt, '{"x": ' + DEEP + "}\n")
    assert message == "t.jsonl:1: invalid JSON: nested too deeply"


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.NAME)
def test_a_directory_is_one_line_naming_it(tmp_path, monkeypatch, fmt):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "traces").mkdir()
    with pytest.raises(TraceError) as info:
        fmt().load(("traces",), trace_block_size=4)
    assert str(info.value) == "traces: cannot read the trace file: Is a directory"


def test_an_endless_line_fails_after_the_line_cap_without_reading_on():
    with pytest.raises(TraceError) as info:
        Mooncake().load(("/dev/zero",), trace_block_size=4)
    assert str(info.value) == ("/dev/zero:1: line is longer than 67108864 bytes (64 MiB), the "
                               "most one trace row may hold")


def test_a_gzip_file_may_inflate_to_the_cap_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.jsonl.gz").write_bytes(gzip.compress(b"\n" * (3 << 20)))
    monkeypatch.setattr(rows, "MAX_INFLATED_BYTES", 2 << 20)  # the real cap is 4 GiB
    with pytest.raises(TraceError) as info:
        Dynamo().load(("t.jsonl.gz",), trace_block_size=None)
    assert str(info.value) == ("t.jsonl.gz: inflates to more than 2097152 bytes (4 GiB), the "
                               "most a gzip trace may hold")


def test_line_numbers_survive_chunk_boundaries_and_blank_runs(tmp_path, monkeypatch):
    long_row = '{"note": "' + "x" * (3 * rows.CHUNK_BYTES) + '", ' + ROW + "}"
    text = ("\n" * (2 * rows.CHUNK_BYTES + 5) + long_row + "\r\n" + "   \n" + "{" + ROW + "}"
            + "\n\n" + '{"input_length": -1}')  # last line without a newline
    message = error_of(tmp_path, monkeypatch, Mooncake, text)
    blank = 2 * rows.CHUNK_BYTES + 5
    assert message == f"t.jsonl:{blank + 5}: input_length: expected `int` >= 0, got -1"
    trace = load_text(tmp_path, monkeypatch, Mooncake, text.rsplit("\n", 1)[0])
    assert [s.where for s in trace.sessions] == [f"t.jsonl:{blank + 1}", f"t.jsonl:{blank + 3}"]


def test_token_lengths_are_bounded_at_load_with_the_value(tmp_path, monkeypatch):
    big = MAX_TOKENS + 1
    assert error_of(tmp_path, monkeypatch, Mooncake, '{"output_length": %d, "hash_ids": [1]}' % 2**64) == (
        f"t.jsonl:1: output_length: expected `int` <= {MAX_TOKENS}, got {2**64}")
    assert error_of(tmp_path, monkeypatch, AppliedComputeAgentic, json.dumps(
        {"num_turns": 0, "input_prompt_length": big, "assistant_response_length": [],
         "tool_call_output_length": [], "tool_call_latency": [],
         "final_assistant_response_length": 1}), trace_block_size=16) == (
        f"t.jsonl:1: input_prompt_length: expected `int` <= {MAX_TOKENS}, got {big}")


def test_a_delta_session_may_not_grow_past_the_token_bound(tmp_path, monkeypatch):
    half = MAX_TOKENS // 2
    row = {"session_id": "s", "input_length": half, "output_length": 8, "hash_ids": [1]}
    text = "\n".join(json.dumps(dict(row, delay=1.0 if i else None)) for i in range(2))
    message = error_of(tmp_path, monkeypatch, MooncakeDelta, text, trace_block_size=MAX_TOKENS)
    assert message == (f"t.jsonl:2: input_length: makes the prompt of session 's' (its earlier "
                       f"inputs and outputs plus this input) {2 * half + 8} tokens, more than "
                       f"{MAX_TOKENS}")


def test_an_agent_context_may_not_grow_past_the_token_bound(tmp_path, monkeypatch):
    row = {"num_turns": 1, "input_prompt_length": 16, "assistant_response_length": [MAX_TOKENS],
           "tool_call_output_length": [0], "tool_call_latency": [0.0],
           "final_assistant_response_length": 1}
    message = error_of(tmp_path, monkeypatch, AppliedComputeAgentic, json.dumps(row),
                       trace_block_size=16)
    assert message == (f"t.jsonl:1: tool_call_output_length[0]: makes the prompt of turn 1 "
                       f"{MAX_TOKENS + 16} tokens, more than {MAX_TOKENS}")


def test_a_default_input_length_past_the_bound_names_its_cause(tmp_path, monkeypatch):
    message = error_of(tmp_path, monkeypatch, Mooncake, '{"output_length": 2, "hash_ids": [1]}',
                       trace_block_size=2**32)
    assert message == (f"t.jsonl:1: input_length: makes the default (the capacity of hash_ids, "
                       f"1 x trace_block_size 4294967296) 4294967296 tokens, more than "
                       f"{MAX_TOKENS}")


@pytest.mark.parametrize("block", [2**32, 2**63, 2**64 - 1])
def test_any_u64_block_size_loads_as_the_same_prompt(tmp_path, monkeypatch, block):
    """The reference accepts any u64 trace_block_size (tests/fixtures/bounds)."""
    trace = load_text(tmp_path, monkeypatch, Mooncake, "{" + ROW + "}", trace_block_size=block)
    assert trace.block_size == MAX_TOKENS
    assert turns(trace.sessions[0]) == [(4, 2, [0], 0.0)]


def test_times_stay_inside_the_duration_range(tmp_path, monkeypatch):
    """Times add up (a session's delays, dependency delays): each is at most 2^64 s, so every
    sum stays finite; the reference refuses such delays too (tests/fixtures/bounds)."""
    row = '{"session_id": "s", "delay": 1e308, ' + ROW + "}"
    assert error_of(tmp_path, monkeypatch, Mooncake, "{" + ROW + ', "session_id": "s"}\n' + row) == (
        "t.jsonl:2: delay: expected `float` <= 1.8446744073709552e+22, got 1e+308")
    latency = {"num_turns": 1, "input_prompt_length": 16, "assistant_response_length": [1],
               "tool_call_output_length": [1], "tool_call_latency": [1e300],
               "final_assistant_response_length": 1}
    assert error_of(tmp_path, monkeypatch, AppliedComputeAgentic, json.dumps(latency),
                    trace_block_size=16) == (
        "t.jsonl:1: tool_call_latency[0]: expected `float` <= 1.8446744073709552e+19, got 1e+300")
