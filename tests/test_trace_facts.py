"""validate_trace's facts (turn count, lone turns, earliest start, first unstarted session)
and the lowering's use of them: the same checks, errors and normalized starts as the separate
walks they replace."""

import math
import random
from array import array

import pytest

from aisimulate_core.errors import TraceError
from aisimulate_core.workload.trace import (Session, Trace, Turn, check_timestamped,
                                            fail_unstarted, validate_trace)
from aisimulate_core.workload.transforms import normalize_session_starts


def old_validate(trace):
    """validate_trace as it was (checks only)."""
    block = trace.block_size
    if not isinstance(block, int) or block <= 0:
        raise TraceError(f"trace block size must be a positive integer, got {block!r}")
    if not trace.sessions:
        raise TraceError("the trace holds no requests")
    for session in trace.sessions:
        start = session.start_ms
        if start is not None and not math.isfinite(start):
            raise TraceError(f"{session.where}: timestamp: must be finite, got {start}")
        if not session.turns:
            raise TraceError(f"{session.where}: session {session.session_id!r} has no turns")
        for index, turn in enumerate(session.turns):
            where = turn.where
            if turn.input_length <= 0:
                raise TraceError(f"{where}: input_length: must be > 0, got {turn.input_length}")
            capacity = len(turn.hash_ids) * block
            if turn.input_length > capacity:
                raise TraceError(f"{where}: input_length: {turn.input_length} exceeds the "
                                 f"capacity of hash_ids, {len(turn.hash_ids)} x block size "
                                 f"{block} = {capacity} tokens")
            outputs = turn.output_token_ids
            if outputs is not None and len(outputs) != turn.max_output_tokens:
                raise TraceError(f"{where}: output_token_ids: holds {len(outputs)} ids but "
                                 f"output_length is {turn.max_output_tokens}")
            delay = turn.delay_ms
            if not (math.isfinite(delay) and delay >= 0.0):
                raise TraceError(f"{where}: delay: must be finite and >= 0, got {delay}")
            if index == 0 and delay != 0.0:
                raise TraceError(f"{where}: delay: must be 0 on the first turn of a session, "
                                 f"got {delay}")


def random_trace(rng):
    sessions = []
    for s in range(rng.randint(0, 6)):
        turns = []
        for k in range(rng.choice([0, 1, 1, 1, 2, 3]) if rng.random() < 0.2 else 1):
            ids = array("I", range(rng.randint(0, 3)))
            length = rng.choice([len(ids) * 4, 1, 0, len(ids) * 4 + 1]) if rng.random() < 0.2 \
                else max(1, len(ids) * 4)
            delay = 0.0 if k == 0 else rng.uniform(0, 5)
            if rng.random() < 0.1:
                delay = rng.choice([math.nan, -1.0, 2.0, math.inf, -0.0])
            outputs = None if rng.random() < 0.9 else [1] * rng.choice([2, 3])
            turns.append(Turn(length, 2, ids, delay, output_token_ids=outputs,
                              where=f"t:{s}:{k}"))
        start = rng.choice([None, 0.0, -0.0, 5.0, 3.0, rng.uniform(-9, 9), math.nan]) \
            if rng.random() < 0.5 else rng.uniform(0, 100)
        sessions.append(Session(f"s{s}", start, turns, where=f"t:{s}"))
    return Trace(rng.choice([4, 4, 4, 0]), sessions)


def outcome(check, trace):
    try:
        return ("ok", check(trace))
    except TraceError as error:
        return ("error", str(error))


@pytest.mark.parametrize("seed", range(200))
def test_facts_and_errors_are_those_of_the_separate_walks(seed):
    trace = random_trace(random.Random(seed))
    new = outcome(validate_trace, trace)
    old = outcome(old_validate, trace)
    assert new[0] == old[0] and (new[0] == "ok" or new[1] == old[1])
    if new[0] != "ok":
        return
    facts = new[1]
    assert facts.total_turns == sum(len(s.turns) for s in trace.sessions)
    assert facts.single_turn == all(len(s.turns) == 1 for s in trace.sessions)
    starts = [s.start_ms for s in trace.sessions if s.start_ms is not None]
    assert facts.earliest_start is (min(starts) if starts else None)
    assert outcome(check_timestamped, trace) == outcome(
        lambda t: None if facts.unstarted is None else fail_unstarted(facts.unstarted), trace)
    # normalized with the fact or with its own walk: the same bits
    twin = Trace(trace.block_size, [Session(s.session_id, s.start_ms, s.turns, where=s.where)
                                    for s in trace.sessions])
    normalize_session_starts(trace, facts.earliest_start)
    normalize_session_starts(twin)
    assert [None if s.start_ms is None else s.start_ms.hex() for s in trace.sessions] == \
        [None if s.start_ms is None else s.start_ms.hex() for s in twin.sessions]
