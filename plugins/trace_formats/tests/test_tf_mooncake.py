"""mooncake / mooncake-delta: how rows become sessions, and every row rule with its message."""

import pytest

from aisimulate_trace_formats import Mooncake, MooncakeDelta
from tf_helpers import ROOT, error_of, load, load_text, turns

U64_MAX = 2**64 - 1


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_sessions_turns_delays_and_interned_hash_ids():
    trace = load(Mooncake, "mooncake_sessions.jsonl")
    assert trace.block_size == 16 and not trace.accumulate_deltas
    by_id = {s.session_id: s for s in trace.sessions}
    # sessions in first-seen order; a row without session_id is its own (named by its line)
    assert list(by_id) == ["chat-a", "chat-b", "request_3", "request_8"]
    assert [s.start_ms for s in trace.sessions] == [1000.0, 1004.0, 1010.0, 1003.0]
    # raw ids interned in first-seen order over the file: 7 8 9 100 101 10 11 12 13 2**64-1
    assert turns(by_id["chat-a"]) == [
        (40, 6, [0, 1, 2], 0.0),
        (70, 4, [0, 1, 2, 5, 6], 12.5),     # explicit delay_ms
        (20, 2, [0, 8], 0.0),               # neither delay nor timestamp: 0
    ]
    assert turns(by_id["chat-b"]) == [
        (32, 3, [0, 1], 0.0),               # created_time is the timestamp
        (48, 5, [0, 1, 7], 46.0),           # delay from timestamps 1050 - 1004
    ]
    assert turns(by_id["request_3"]) == [(32, 2, [3, 4], 0.0)]   # input_length = 2 ids x 16
    assert turns(by_id["request_8"]) == [(16, 1, [9], 0.0)]      # input_tokens alias
    last = by_id["chat-a"].turns[2]
    assert (last.priority, last.strict_priority, last.policy_class) == (-1, 0, "batch")
    assert last.where == "tests/fixtures/traces/mooncake_sessions.jsonl:7"
    assert by_id["request_8"].where == "tests/fixtures/traces/mooncake_sessions.jsonl:8"


def test_delta_reads_the_same_rows_and_accumulates():
    trace = load(MooncakeDelta, "mooncake_delta.jsonl")
    assert trace.accumulate_deltas
    a, b = trace.sessions
    assert turns(a) == [(40, 8, [0, 1, 2], 0.0), (20, 6, [4, 5], 10.0), (16, 3, [6], 0.0)]
    assert list(a.turns[2].output_token_ids) == [11, 12, 13]
    assert turns(b) == [(20, 4, [0, 3], 0.0), (30, 2, [7, 8], 3.0)]


def test_ids_above_32_bits_stay_distinct(tmp_path, monkeypatch):
    trace = load_text(tmp_path, monkeypatch, Mooncake,
                      '{"timestamp": 0, "output_length": 1, "hash_ids": [4294967296, 0, '
                      f'{U64_MAX}, 4294967296]}}\n')
    assert turns(trace.sessions[0]) == [(16, 1, [0, 1, 2, 0], 0.0)]


def test_default_block_size_is_512(tmp_path, monkeypatch):
    trace = load_text(tmp_path, monkeypatch, Mooncake,
                      '{"timestamp": 0, "output_length": 1, "hash_ids": [1, 2]}\n',
                      trace_block_size=None)
    assert trace.block_size == 512 and trace.sessions[0].turns[0].input_length == 1024


ROW = '"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": [1]'

RULES = [
    ("", "t.jsonl: holds no requests"),
    ("\n  \n", "t.jsonl: holds no requests"),
    ("{" + ROW, "t.jsonl:1: invalid JSON: input data was truncated"),
    ("[1, 2]", "t.jsonl:1: expected `object`, got `array`"),
    ('{"timestamp": 0, "input_length": 4, "output_length": 2}',
     "t.jsonl:1: hash_ids: is required"),
    ('{"timestamp": 0, "input_length": 4, "hash_ids": [1]}',
     "t.jsonl:1: output_length: is required"),
    ('{"timestamp": "5", "input_length": 4, "output_length": 2, "hash_ids": [1]}',
     "t.jsonl:1: timestamp: expected `float`, got `str`"),
    ('{"timestamp": 0, "input_length": 4.0, "output_length": 2, "hash_ids": [1]}',
     "t.jsonl:1: input_length: expected `int`, got `float`"),
    ('{"timestamp": 0, "input_length": 4, "output_length": -2, "hash_ids": [1]}',
     "t.jsonl:1: output_length: expected `int` >= 0, got -2"),
    ('{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": [1, -1]}',
     "t.jsonl:1: hash_ids[1]: expected `int` >= 0, got -1"),
    ('{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": [18446744073709551616]}',
     "t.jsonl:1: hash_ids: ids must fit in 64 bits, got 18446744073709551616"),
    ('{"session_id": 7, ' + ROW + "}", "t.jsonl:1: session_id: expected `str`, got `int`"),
    ("{" + ROW + ', "priority": 3000000000}',
     "t.jsonl:1: priority: expected `int` <= 2147483647, got 3000000000"),
    ("{" + ROW + ', "output_token_ids": [1, 4294967296]}',
     "t.jsonl:1: output_token_ids[1]: expected `int` <= 4294967295, got 4294967296"),
    ("{" + ROW + ', "input_tokens": 4}', "t.jsonl:1: input_tokens: cannot be combined with input_length"),
    ("{" + ROW + ', "output_tokens": 2}',
     "t.jsonl:1: output_tokens: cannot be combined with output_length"),
    ("{" + ROW + ', "created_time": 2}', "t.jsonl:1: created_time: cannot be combined with timestamp"),
    ("{" + ROW + ', "delay": 1, "delay_ms": 1}', "t.jsonl:1: delay_ms: cannot be combined with delay"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [1]}',
     "t.jsonl:1: input_length: 5 exceeds the capacity of hash_ids, 1 x trace_block_size 4 = 4 tokens"),
    ('{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": []}',
     "t.jsonl:1: input_length: 4 exceeds the capacity of hash_ids, 0 x trace_block_size 4 = 0 tokens"),
    # rules of the session model, checked by the core with the row's location
    ('{"timestamp": 0, "input_length": 0, "output_length": 2, "hash_ids": [1]}',
     "t.jsonl:1: input_length: must be > 0, got 0"),
    ('{"timestamp": 0, "output_length": 2, "hash_ids": []}', "t.jsonl:1: input_length: must be > 0, got 0"),
    ("{" + ROW + ', "output_token_ids": [1]}', "t.jsonl:1: output_token_ids: holds 1 ids but output_length is 2"),
    ("{" + ROW + ', "delay": 3}', "t.jsonl:1: delay: must be 0 on the first turn of a session, got 3.0"),
    ('{"session_id": "a", ' + ROW + '}\n{"session_id": "a", "delay": -1, "input_length": 4, '
     '"output_length": 2, "hash_ids": [1]}', "t.jsonl:2: delay: must be finite and >= 0, got -1.0"),
    ('{"session_id": "a", "input_length": 4, "output_length": 2, "hash_ids": [1]}\n\n'
     '{"session_id": "a", "timestamp": 5, "input_length": 4, "output_length": 2, "hash_ids": [1]}',
     "t.jsonl:3: timestamp: cannot give a think delay: no earlier row of session 'a' has a "
     "timestamp (set delay instead)"),
    ('{"session_id": "a", "timestamp": 9, "input_length": 4, "output_length": 2, "hash_ids": [1]}\n'
     '{"session_id": "a", "timestamp": 5, "input_length": 4, "output_length": 2, "hash_ids": [1]}',
     "t.jsonl:2: timestamp: 5.0 is earlier than the previous row of session 'a' (9.0)"),
    ("{" + ROW + '} {"a": 1}', "t.jsonl:1: invalid JSON: trailing characters (byte 74)"),
]


@pytest.mark.parametrize("text, message", RULES, ids=[m for _, m in RULES])
def test_row_rules(tmp_path, monkeypatch, text, message):
    assert error_of(tmp_path, monkeypatch, Mooncake, text + "\n") == message


def test_unknown_fields_are_ignored(tmp_path, monkeypatch):
    trace = load_text(tmp_path, monkeypatch, Mooncake, "{" + ROW + ', "note": {"x": [1]}}\n')
    assert turns(trace.sessions[0]) == [(4, 2, [0], 0.0)]


def test_missing_file_and_gzip(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(Exception) as info:
        Mooncake().load(("absent.jsonl",), trace_block_size=4)
    assert str(info.value) == "absent.jsonl: cannot read the trace file: No such file or directory"
    with pytest.raises(Exception) as info:
        Mooncake().load(("bad.jsonl.gz",), trace_block_size=4)
    assert str(info.value) == "bad.jsonl.gz: not a valid gzip file: Not a gzipped file (b'no')"


def test_loads_the_conversation_trace():
    """The shared 12,031-row Mooncake trace loads whole, one session per row (how fast it
    loads is the benchmark's business: b3 and the Mooncake cases in `make bench`)."""
    trace = Mooncake().load(("../shared/data/mooncake/conversation_trace.jsonl",),
                            trace_block_size=512)
    assert trace.total_turns == 12031 and len(trace.sessions) == 12031


def _dump(trace):
    return (trace.block_size, trace.accumulate_deltas, [
        (s.session_id, s.start_ms, s.where, [
            (t.input_length, t.max_output_tokens, t.hash_ids.typecode, list(t.hash_ids),
             t.delay_ms, t.output_token_ids, t.priority, t.strict_priority, t.policy_class,
             t.where) for t in s.turns]) for s in trace.sessions])


@pytest.mark.parametrize("seed", range(40))
def test_lone_turn_files_give_the_builders_trace(tmp_path, monkeypatch, seed):
    """A file of lone turns (no session id, nothing optional) takes _lone_turns, which interns
    the whole file at once; it gives what the row-by-row builder gives, and a row it does not
    take (an alias, a session id, an id past 64 bits, a length past the ids) sends the whole
    file to the builder."""
    import json
    import random

    from aisimulate_trace_formats import mooncake
    from aisimulate_trace_formats.rows import small_file

    rng = random.Random(seed)
    rows = []
    for _ in range(rng.randint(1, 40)):
        ids = [rng.choice([rng.randint(0, 30), rng.randint(0, 2**64 - 1)])
               for _ in range(rng.randint(1, 6))]
        row = {"input_length": rng.randint(1, 16 * len(ids)), "output_length": rng.randint(0, 9),
               "hash_ids": ids}
        if rng.random() < 0.8:
            row["timestamp"] = rng.choice([0.0, -0.0, rng.uniform(0, 1e4)])
        if rng.random() < 0.1:
            row["delay"] = 0.0
        if rng.random() < 0.03:
            row[rng.choice(["session_id", "input_tokens", "delay_ms", "priority"])] = \
                rng.choice(["s", 3, 0])
        rows.append(row)
    if rng.random() < 0.1:
        rows[-1]["hash_ids"] = [2**64]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    _, data = small_file(str(path), 1 << 20)

    def decoded(lone_turns):
        monkeypatch.setattr(mooncake, "_lone_turns", lone_turns)
        try:
            return ("trace", _dump(mooncake._decode_mooncake(str(path), 16, False, data)))
        except Exception as error:   # the same error either way
            return (type(error).__name__, str(error))

    fast = decoded(mooncake._lone_turns)
    assert fast == decoded(lambda *args: None)
