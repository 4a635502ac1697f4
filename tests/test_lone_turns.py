"""A Mooncake file of lone requests loads as columns (workload/lone_turns.py): they read as the
sessions the row-by-row builder makes, the lowering's facts and transforms on the columns are
the ones it takes of those sessions, the C loops' arrays are the ones they would get, and a
run gives the report it gives from the builder's sessions without making one session."""

from __future__ import annotations

import json
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisimulate_core import run_replay
from aisimulate_core.errors import TraceError
from aisimulate_core.runtime import plain_native
from aisimulate_core.workload.lone_turns import LoneTurns
from aisimulate_core.workload.sessions import trace_start_order
from aisimulate_core.workload.trace import Trace, validate_trace
from aisimulate_core.workload.transforms import normalize_session_starts, speed_up_timing
from aisimulate_trace_formats import mooncake
from aisimulate_trace_formats.rows import decode_all

from test_trace_cache import shape

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT.parent / "shared" / "bench" / "cluster"   # (payloads' paths are from ROOT)
BLOCK = 4

_times = st.one_of(st.none(), st.sampled_from([0.0, -0.0, 3.0, 7.5]),
                   st.floats(-1e6, 1e6, allow_nan=False))
_rows = st.lists(st.fixed_dictionaries(
    {"timestamp": _times, "output_length": st.integers(0, 9),
     "hash_ids": st.lists(st.integers(0, 12), min_size=1, max_size=4)},
    optional={"delay": st.sampled_from([0.0, 0.5, -1.0]),
              "priority": st.integers(-3, 3), "strict_priority": st.integers(0, 2),
              "policy_class": st.sampled_from(["batch", "online"])}), min_size=1, max_size=12)


def _with_lengths(rows, data):
    """Each row's input length within its hash ids' capacity (0 sometimes: a row the core
    rejects)."""
    for row in rows:
        row["input_length"] = data.draw(st.integers(0, len(row["hash_ids"]) * BLOCK))
        if row["timestamp"] is None:
            del row["timestamp"]
    return rows


def _both(tmp_path, rows):
    """The columns ``_lone_turns`` makes of the rows and the builder's trace of them."""
    path = tmp_path / "t.jsonl"
    data = "".join(json.dumps(row) + "\n" for row in rows).encode()
    path.write_bytes(data)
    lone = mooncake._lone_turns(str(path), BLOCK, decode_all(data, mooncake.MooncakeRow))
    built = mooncake._decode_mooncake(str(path), BLOCK, False, None)   # row by row
    return lone, built


def _facts_or_error(trace):
    try:
        return validate_trace(trace)
    except TraceError as error:
        return str(error)


@settings(max_examples=150, derandomize=True, database=None, deadline=None)
@given(rows=_rows, data=st.data())
def test_columns_read_validate_and_transform_as_the_builders_sessions(tmp_path_factory, rows,
                                                                      data):
    lone, built = _both(tmp_path_factory.mktemp("lone"), _with_lengths(rows, data))
    assert type(lone.sessions) is LoneTurns
    assert shape(lone) == shape(built)
    want = _facts_or_error(built)
    facts = lone.sessions.facts(lone.block_size)
    if isinstance(want, str):
        assert facts is None    # the lowering then validates the sessions: the same error
        assert _facts_or_error(lone) == want
        return
    assert facts is not None
    assert facts[:3] == want[:3]
    assert (facts.unstarted is None) == (want.unstarted is None)
    if want.unstarted is not None:
        assert facts.unstarted.where == want.unstarted.where
    for trace in (lone, built):
        speed_up_timing(normalize_session_starts(trace, want.earliest_start), 2.5)
    assert shape(lone) == shape(built)
    assert list(lone.sessions.start_order()) == list(trace_start_order(built.sessions))


@settings(max_examples=100, derandomize=True, database=None, deadline=None)
@given(rows=_rows, data=st.data(), timed=st.booleans())
def test_the_loops_arrays_of_the_columns_are_those_of_the_sessions(tmp_path_factory, rows,
                                                                  data, timed):
    rows = _with_lengths(rows, data)
    for row in rows:
        row["input_length"] = max(row["input_length"], 1)
        row.setdefault("timestamp", 1.0)
    lone, built = _both(tmp_path_factory.mktemp("arrays"), rows)
    driver = _Driver(BLOCK, None if timed else 2)
    driver.sessions = built.sessions
    want, want_longest = plain_native._trace_arrays(driver)
    driver.sessions = lone.sessions
    got, longest = plain_native._trace_arrays(driver)
    assert longest == want_longest and got.keys() == want.keys()
    for name in got.keys() - {"ids", "ids_off"}:
        assert list(got[name]) == list(want[name]), name
    # the loop reads a turn's first ceil(input / block) ids from its offset on
    for k, length in enumerate(got["turn_input"]):
        n = -(-length // BLOCK)
        assert list(got["ids"][got["ids_off"][k]:][:n]) == \
            list(want["ids"][want["ids_off"][k]:][:n])
    assert all(session is None for session in lone.sessions._made)


class _Driver:
    def __init__(self, block_size, max_sessions):
        self.block_size, self.max_sessions = block_size, max_sessions


def _payload(name, **traffic):
    payload = json.loads((CLUSTER / f"{name}.json").read_text())
    payload["traffic"].update(traffic)
    return json.dumps(payload)


def _report(text):
    report = run_replay(text)
    return report.summary | {"wall_time_ms": None, "processed_tokens_per_s": None,
                             "processed_output_tokens_per_s": None}, report.per_request


@pytest.mark.skipif(not CLUSTER.exists(), reason="needs ../shared beside the checkout")
@pytest.mark.parametrize("backend", ["c", "python"])
@pytest.mark.parametrize("name, traffic", [
    ("s1_schedule_scaling_agg_rr", {}),
    ("k5_kv_router_queue_scaling", {}),                       # priorities, the C kv_router
    ("k4_kv_router_disagg_2p1d", {}),                         # the disaggregated C loop
    ("s1_schedule_scaling_agg_rr", {"arrival_speedup_ratio": 2.0}),
    ("s1_schedule_scaling_agg_rr", {"replay_concurrency": 3}),   # closed: records name sessions
])
def test_a_run_of_the_columns_is_the_run_of_the_builders_sessions(monkeypatch, backend, name,
                                                                 traffic):
    monkeypatch.setenv("AISIMULATE_BACKEND", backend)
    monkeypatch.chdir(ROOT)
    text = _payload(name, **traffic)
    made = []
    real = mooncake._lone_turns

    def watched(*args):
        trace = real(*args)
        made.append(trace.sessions)
        return trace

    mooncake._LOADED.clear()
    monkeypatch.setattr(mooncake, "_lone_turns", watched)
    got = _report(text)
    assert made and type(made[0]) is LoneTurns
    if backend == "c" and "replay_concurrency" not in traffic:
        # the C loop read the columns: no session was made of them
        assert all(session is None for session in made[0]._made)
    mooncake._LOADED.clear()
    monkeypatch.setattr(mooncake, "_lone_turns", lambda *args: None)   # the builder's list
    assert got == _report(text)
    mooncake._LOADED.clear()


def test_a_transformed_copy_leaves_the_original_alone():
    sessions = LoneTurns("t", array("q", [5, 3]), array("q", [1, 2]), array("d", [0.0, 0.0]),
                         [4.0, None], array("q", [0, 2, 3]), array("I", [0, 1, 0]))
    copy = sessions.copy()
    copy.shifted(1.0)
    copy.scaled(2.0)
    assert [s.start_ms for s in copy] == [1.5, None]
    assert [s.start_ms for s in sessions] == [4.0, None]
    assert [list(s.turns[0].hash_ids) for s in sessions] == [[0, 1], [0]]
    assert sessions[-1].session_id == "request_2" and sessions[-1].where == "t:2"
    assert [s.session_id for s in sessions[:1]] == ["request_1"]
    with pytest.raises(IndexError):
        sessions[2]
    assert Trace(4, sessions).total_turns == 2
    assert sessions.facts(4)[:3] == (2, True, 4.0) and sessions.facts(4).unstarted is sessions[1]
