"""The session driver on hand-built traces: readiness, ordering, closed loop, delta prompts."""

import math

from aisimulate_core.workload.delta import PLANNED_OUTPUT_BASE
from aisimulate_core.workload.sessions import SessionDriver
from aisimulate_core.workload.trace import Session, Trace, Turn


def session(sid, start, *turns):
    return Session(sid, start, [Turn(*t) for t in turns])


def trace(*sessions, block_size=4, accumulate_deltas=False):
    return Trace(block_size, list(sessions), accumulate_deltas=accumulate_deltas)


def ids(requests):
    return [(r.session_id, r.turn_index) for r in requests]


def finish(driver, request, now_ms, status="completed", generated=None):
    request.generated = request.max_output if generated is None else generated
    driver.on_terminal(request, now_ms, status)


def test_by_timestamps_sessions_start_at_their_first_arrival():
    driver = SessionDriver(trace(session("a", 5.0, (4, 2, [0])), session("b", None, (4, 2, [1])),
                                 session("c", 5.0, (4, 2, [2]))))
    assert driver.total == 3
    assert driver.next_ready_ms() == 0.0          # no start: ready at 0
    assert ids(driver.pop_ready(0.0, 10)) == [("b", 0)]
    assert driver.next_ready_ms() == 5.0
    assert list(driver.pop_ready(4.9, 10)) == []
    assert ids(driver.pop_ready(5.0, 1)) == [("a", 0)]  # the limit holds the rest back
    assert ids(driver.pop_ready(5.0, 10)) == [("c", 0)]
    assert math.isinf(driver.next_ready_ms())


def test_later_turns_follow_completion_plus_think_delay():
    driver = SessionDriver(trace(session("a", 0.0, (4, 2, [0]), (4, 1, [1], 7.5))))
    (first,) = driver.pop_ready(0.0, 10)
    assert math.isinf(driver.next_ready_ms())     # nothing until the turn completes
    finish(driver, first, 20.0)
    assert driver.next_ready_ms() == 27.5
    (second,) = driver.pop_ready(27.5, 10)
    assert (second.turn_index, second.max_output, second.prompt_len) == (1, 1, 4)


def test_same_instant_turns_leave_in_session_order():
    driver = SessionDriver(trace(session("a", 0.0, (4, 2, [0]), (4, 2, [1])),
                                 session("b", 0.0, (4, 2, [2]), (4, 2, [3]))))
    a0, b0 = driver.pop_ready(0.0, 10)
    finish(driver, b0, 10.0)                      # b completes first ...
    finish(driver, a0, 10.0)
    assert ids(driver.pop_ready(10.0, 10)) == [("a", 1), ("b", 1)]   # ... a still goes first


def test_rejected_turn_lets_the_session_go_on_failed_one_ends_it():
    driver = SessionDriver(trace(session("a", 0.0, (4, 2, [0]), (4, 2, [1])),
                                 session("b", 0.0, (4, 2, [2]), (4, 2, [3]))))
    a0, b0 = driver.pop_ready(0.0, 10)
    finish(driver, a0, 3.0, "rejected", generated=0)
    finish(driver, b0, 3.0, "failed", generated=0)
    assert ids(driver.pop_ready(3.0, 10)) == [("a", 1)]
    assert math.isinf(driver.next_ready_ms())


def test_closed_loop_holds_a_slot_per_session_through_think_time():
    driver = SessionDriver(trace(session("a", 50.0, (4, 2, [0]), (4, 2, [1], 5.0)),
                                 session("b", 40.0, (4, 2, [2])),
                                 session("c", 0.0, (4, 2, [3]))), max_sessions=2)
    # the first two sessions in trace order start at 0 whatever their timestamps
    a0, b0 = driver.pop_ready(0.0, 10)
    assert ids([a0, b0]) == [("a", 0), ("b", 0)]
    finish(driver, a0, 10.0)                      # a thinks for 5 ms, keeping its slot
    assert driver.next_ready_ms() == 15.0
    finish(driver, b0, 12.0)                      # b is done: c starts now
    assert ids(driver.pop_ready(12.0, 10)) == [("c", 0)]
    assert ids(driver.pop_ready(15.0, 10)) == [("a", 1)]


def test_closed_loop_cancelled_session_frees_its_slot():
    driver = SessionDriver(trace(session("a", 0.0, (4, 2, [0]), (4, 2, [1])),
                                 session("b", 0.0, (4, 2, [2]))), max_sessions=1)
    (a0,) = driver.pop_ready(0.0, 10)
    finish(driver, a0, 4.0, "canceled", generated=0)
    assert ids(driver.pop_ready(4.0, 10)) == [("b", 0)]


def test_session_metadata_can_be_left_out():
    driver = SessionDriver(trace(session("a", 0.0, (4, 2, [0]))), session_metadata=False)
    (request,) = driver.pop_ready(0.0, 1)
    assert (request.session_id, request.turn_index) == (None, None)


def test_full_prompts_are_hash_id_runs():
    driver = SessionDriver(trace(session("a", 0.0, (10, 2, [7, 8, 9])), block_size=4))
    (request,) = driver.pop_ready(0.0, 1)
    prompt = request.prompt
    assert (list(prompt.values), list(prompt.lengths), prompt.length) == ([7, 8, 9], [4, 4, 2], 10)
    assert request.output_token_ids is None       # outputs only need to be unique


def test_delta_prompts_accumulate_inputs_and_emitted_outputs():
    driver = SessionDriver(trace(session("a", 0.0, (6, 3, [1, 2]), (4, 2, [3], 1.0), (2, 2, [4])),
                                 session("b", 0.0, (4, 2, [5])),
                                 block_size=4, accumulate_deltas=True))
    a0, b0 = driver.pop_ready(0.0, 10)
    # outputs are planned at setup in session/turn order, unique across the run
    base = PLANNED_OUTPUT_BASE
    assert list(a0.output_token_ids) == [base, base + 1, base + 2]
    assert list(b0.output_token_ids) == [base + 7, base + 8]
    assert (list(a0.prompt.values), list(a0.prompt.lengths)) == ([1, 2], [4, 2])
    finish(driver, a0, 10.0, generated=2)        # e.g. cut by max_model_len: 2 of 3 tokens
    (a1,) = driver.pop_ready(11.0, 10)
    assert list(a1.output_token_ids) == [base + 3, base + 4]
    assert list(a1.prompt.values) == [1, 2, base, base + 1, 3]
    assert list(a1.prompt.lengths) == [4, 2, 1, 1, 4]
    assert a1.prompt_len == 12
    finish(driver, a1, 20.0, "rejected", generated=0)   # a rejected turn adds no outputs
    (a2,) = driver.pop_ready(20.0, 10)
    assert list(a2.prompt.values) == [1, 2, base, base + 1, 3, 4]
    assert a2.prompt_len == 14


def test_delta_authored_outputs_are_the_plan():
    authored = Turn(4, 2, [1], output_token_ids=[42, 43])
    driver = SessionDriver(Trace(4, [Session("a", 0.0, [authored, Turn(4, 1, [2])])],
                                 accumulate_deltas=True))
    (first,) = driver.pop_ready(0.0, 1)
    assert list(first.output_token_ids) == [42, 43]
    finish(driver, first, 5.0)
    (second,) = driver.pop_ready(5.0, 1)
    assert list(second.prompt.values) == [1, 42, 43, 2]
