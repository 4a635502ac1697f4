"""applied_compute_agentic: one agent session per line, expanded into growing full prompts."""

import json

import pytest

from aisimulate_trace_formats import AppliedComputeAgentic
from tf_helpers import ROOT, error_of, load, turns


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_sessions_grow_their_prompt_and_keep_earlier_block_ids():
    trace = load(AppliedComputeAgentic, "applied_compute.jsonl")
    assert not trace.accumulate_deltas
    # named by line (the blank line 2 counts); no start times: closed-loop replay only
    assert [(s.session_id, s.start_ms) for s in trace.sessions] == [
        ("applied_compute_agentic_session_1", None),
        ("applied_compute_agentic_session_3", None),
        ("applied_compute_agentic_session_4", None)]
    first, second, third = trace.sessions
    # 40 tokens; + response 5 + tool output 10 = 55 after 10 ms; + 3 + 0 = 58 after 2.5 ms
    assert turns(first) == [(40, 5, [0, 1, 2], 0.0), (55, 3, [0, 1, 2, 3], 10.0),
                            (58, 4, [0, 1, 2, 3], 2.5)]
    assert turns(second) == [(20, 2, [4, 5], 0.0)]          # num_turns 0: only the final turn
    assert turns(third) == [(16, 16, [6], 0.0), (48, 1, [6, 7, 8], 0.0)]


ROW = {"num_turns": 1, "input_prompt_length": 16, "assistant_response_length": [1],
       "tool_call_output_length": [1], "tool_call_latency": [0.5], "final_assistant_response_length": 1}

RULES = [
    ("", "t.jsonl: holds no requests"),
    (dict(ROW, assistant_response_length=[1, 2]),
     "t.jsonl:1: assistant_response_length: holds 2 entries but num_turns is 1"),
    (dict(ROW, tool_call_output_length=[]),
     "t.jsonl:1: tool_call_output_length: holds 0 entries but num_turns is 1"),
    (dict(ROW, tool_call_latency=[0, 1]), "t.jsonl:1: tool_call_latency: holds 2 entries but num_turns is 1"),
    (dict(ROW, input_prompt_length=0), "t.jsonl:1: input_prompt_length: must be > 0, got 0"),
    (dict(ROW, tool_call_latency=[-0.5]),
     "t.jsonl:1: tool_call_latency[0]: must be finite and >= 0, got -0.5"),
    ({k: v for k, v in ROW.items() if k != "final_assistant_response_length"},
     "t.jsonl:1: final_assistant_response_length: is required"),
    (dict(ROW, num_turns=-1), "t.jsonl:1: num_turns: expected `int` >= 0, got -1"),
    (dict(ROW, tool_call_latency=["1"]), "t.jsonl:1: tool_call_latency[0]: expected `float`, got `str`"),
]


@pytest.mark.parametrize("row, message", RULES, ids=[m for _, m in RULES])
def test_rules(tmp_path, monkeypatch, row, message):
    text = json.dumps(row) + "\n" if row else ""
    assert error_of(tmp_path, monkeypatch, AppliedComputeAgentic, text, trace_block_size=16) == message
