"""``applied_compute_agentic``: one whole agent session per line (SEMANTICS.md 1.4).

A row with ``num_turns`` = n becomes n + 1 turns. Turn 0 sends ``input_prompt_length`` tokens
and generates ``assistant_response_length[0]``; after turn i the context grows by that
response and ``tool_call_output_length[i]``, and the next turn follows after
``tool_call_latency[i]`` seconds; the last turn generates ``final_assistant_response_length``.
Every turn carries its whole (grown) prompt: its first blocks keep the previous turns' hash
ids and new blocks get fresh ids. Sessions have no start time, so this format is replayed in a
closed loop (``replay_concurrency``).

The reference can share a prefix between sessions of a group; its runtime never enables that,
so neither does this loader.
"""

from __future__ import annotations

import math

import msgspec

from aisimulate_core.workload.formats import TraceFormat
from aisimulate_core.workload.trace import HashInterner, Session, Trace, Turn

from .rows import (NonNegative, Seconds, TokenLength, check_prompt_tokens, decode_rows, fail,
                   model_block_size)

_ARRAYS = ("assistant_response_length", "tool_call_output_length", "tool_call_latency")


class AgentSessionRow(msgspec.Struct, kw_only=True):
    num_turns: NonNegative
    input_prompt_length: TokenLength
    assistant_response_length: list[TokenLength]
    tool_call_output_length: list[TokenLength]
    tool_call_latency: list[Seconds]
    final_assistant_response_length: TokenLength


def _session(where, number, row, block_size, intern, next_id):
    for name in _ARRAYS:
        got = len(getattr(row, name))
        if got != row.num_turns:
            fail(where, name, f"holds {got} entries but num_turns is {row.num_turns}")
    if row.input_prompt_length == 0:
        fail(where, "input_prompt_length", "must be > 0, got 0")
    for i, latency in enumerate(row.tool_call_latency):
        if not (math.isfinite(latency) and latency >= 0.0):
            fail(where, f"tool_call_latency[{i}]", f"must be finite and >= 0, got {latency}")

    raw_ids = []

    def grow(input_length):
        # blocks already named keep their ids; the context only ever grows
        target = -(-input_length // block_size)
        count = target - len(raw_ids)
        if count > 0:
            raw_ids.extend(range(next_id[0], next_id[0] + count))
            next_id[0] += count

    length = row.input_prompt_length
    grow(length)
    turns = []
    delay_ms = 0.0
    for i in range(row.num_turns):
        turns.append(Turn(length, row.assistant_response_length[i], intern(raw_ids), delay_ms,
                          where=where))
        length += row.assistant_response_length[i] + row.tool_call_output_length[i]
        check_prompt_tokens(where, f"tool_call_output_length[{i}]", length,
                            f"the prompt of turn {i + 1}")
        grow(length)
        delay_ms = row.tool_call_latency[i] * 1000.0
    turns.append(Turn(length, row.final_assistant_response_length, intern(raw_ids), delay_ms,
                      where=where))
    return Session(f"applied_compute_agentic_session_{number}", None, turns, where=where)


class AppliedComputeAgentic(TraceFormat):
    NAME = "applied_compute_agentic"

    def load(self, paths, *, trace_block_size):
        path = paths[0]
        block_size = trace_block_size or 512
        intern = HashInterner()
        next_id = [1]
        sessions = [_session(f"{path}:{number}", number, row, block_size, intern, next_id)
                    for number, row in decode_rows(path, AgentSessionRow)]
        if not sessions:
            fail(path, "", "holds no requests")
        return Trace(model_block_size(block_size), sessions)


__all__ = ["AgentSessionRow", "AppliedComputeAgentic"]
