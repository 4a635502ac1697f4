"""plain_native._trace_arrays gathers the trace's columns in C loops; these are the arrays (or
the refusal) of the per-turn walk it replaced, on random traces with partial last blocks, ids
beyond the prompt, sessions without a start and the turns the C loop declines."""

from __future__ import annotations

import random
from array import array
from types import SimpleNamespace

import pytest

from aisimulate_core.runtime import plain_native
from aisimulate_core.workload.trace import Session, Turn


def walked(driver):
    """The per-turn walk (the specification): the arrays, or None where the loop declines."""
    block = driver.block_size
    timed = driver.max_sessions is None
    turn_base, inputs, outputs = array("q", [0]), array("q"), array("q")
    delays, ids_off, ids, starts = array("d"), array("q"), array("I"), array("d")
    longest = 0
    for session in driver.sessions:
        if type(session) is not Session:
            return None
        start = session.start_ms
        if timed:
            if start is None:
                start = 0.0
            elif type(start) is not float:
                return None
            starts.append(start)
        for turn in session.turns:
            length, out = turn.input_length, turn.max_output_tokens
            if turn.output_token_ids is not None or type(length) is not int \
                    or type(out) is not int or not 1 <= length < 1 << 50 \
                    or not 0 <= out < 1 << 50:
                return None
            inputs.append(length)
            outputs.append(out)
            delays.append(turn.delay_ms)
            ids_off.append(len(ids))
            ids.extend(turn.hash_ids[:-(-length // block)])
            longest = max(longest, length)
        turn_base.append(len(inputs))
    arrays = dict(turn_base=turn_base, turn_input=inputs, turn_output=outputs,
                  turn_delay=delays, ids_off=ids_off, ids=ids)
    if timed:
        arrays["start_ms"] = starts
        arrays["start_order"] = array("q", sorted(range(len(starts)), key=starts.__getitem__))
    return arrays, longest


def _turn(rng, block, odd):
    length = rng.randint(1, 40)
    ids = [rng.randrange(50) for _ in range(-(-length // block) + rng.randint(0, 2))]
    turn = Turn(length, rng.randint(0, 9), array("I", ids) if rng.random() < 0.5 else ids,
                rng.choice([0.0, 1.5, 3.0]))
    if odd == "authored":
        turn.output_token_ids = [1] * turn.max_output_tokens
    elif odd == "float length":
        turn.input_length = float(length)
    elif odd == "bool output":
        turn.max_output_tokens = True
    return turn


@pytest.mark.parametrize("seed", range(200))
def test_the_columns_are_the_per_turn_walks(seed):
    rng = random.Random(seed)
    block = rng.choice([1, 4, 16])
    odd = rng.choice([None] * 6 + ["authored", "float length", "bool output", "int start",
                                   "not a session"])
    sessions = []
    for index in range(rng.randint(1, 6)):
        turns = [_turn(rng, block, odd if index == 1 and k == 0 else None)
                 for k in range(rng.randint(1, 3))]
        start = rng.choice([None, 0.0, 2.5, 7.0, 2.5])
        if odd == "int start" and index == 1:
            start = 3
        sessions.append(Session(f"s{index}", start, turns))
    if odd == "not a session" and len(sessions) > 1:
        sessions[1] = SimpleNamespace(start_ms=0.0, turns=sessions[1].turns)
    driver = SimpleNamespace(sessions=sessions, block_size=block,
                             max_sessions=rng.choice([None, 2]))
    want = walked(driver)
    got = plain_native._trace_arrays(driver)
    if want is None:
        assert isinstance(got, str)
    else:
        assert got == want
