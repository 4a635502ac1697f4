"""A Mooncake file read whole is decoded in one msgspec call (rows.decode_all) only where that
gives what the line-by-line decoder gives: the same trace (line numbers in every ``where``),
and for a file it cannot take (blank lines, two values on a line, a bad row) the streaming
path's result or error, word for word."""

from __future__ import annotations

import pytest

from aisimulate_core.errors import TraceError
from aisimulate_trace_formats import mooncake
from aisimulate_trace_formats.rows import decode_all, small_file

from test_trace_cache import shape

ROW = '{{"session_id": "{s}", "timestamp": {t}, "input_length": 5, "output_length": 2, ' \
      '"hash_ids": [{h}, 9]}}'


def rows(*lines):
    return "\n".join(lines)


def streamed(path, block):
    """The trace as the streaming decoder builds it (no bytes given)."""
    return mooncake._decode_mooncake(path, block, False)


LONE = '{{"timestamp": {t}, "input_length": 5, "output_length": 2, "hash_ids": [{h}, 9]{x}}}'


@pytest.mark.parametrize("text", [
    rows(ROW.format(s="a", t=1, h=7), ROW.format(s="b", t=2, h=8)) + "\n",
    # rows of one turn each (mooncake._lone_turns), with and without priorities and a class
    rows(LONE.format(t=1, h=7, x=""), LONE.format(t=2, h=8, x=""), LONE.format(t=2, h=7, x="")),
    rows(LONE.format(t=1, h=7, x=', "priority": 50'), LONE.format(t=2, h=8, x=""),
         LONE.format(t=3, h=7, x=', "strict_priority": 1, "priority": -3'),
         LONE.format(t=4, h=6, x=', "policy_class": "batch", "priority": 0'),
         LONE.format(t=5, h=6, x=', "strict_priority": 0, "delay": 0')),
    rows(ROW.format(s="a", t=1, h=7), ROW.format(s="a", t=5, h=8)),          # no last newline
    rows(ROW.format(s="a", t=1, h=7), ROW.format(s="b", t=2, h=8)) + "\r\n",
])
def test_one_call_gives_the_streamed_trace(tmp_path, text):
    path = tmp_path / "t.jsonl"
    path.write_bytes(text.encode())
    digest, data = small_file(str(path), 1 << 20)
    assert data == text.encode() and digest[0] == len(data)
    assert decode_all(data, mooncake.MooncakeRow) is not None
    assert shape(mooncake._decode_mooncake(str(path), 4, False, data)) == \
        shape(streamed(str(path), 4))


@pytest.mark.parametrize("text", [
    "\n" + ROW.format(s="a", t=1, h=7) + "\n" + ROW.format(s="b", t=2, h=8),   # a blank first
    ROW.format(s="a", t=1, h=7) + "\n  \n" + ROW.format(s="b", t=2, h=8) + "\n",
    ROW.format(s="a", t=1, h=7) + " " + ROW.format(s="b", t=2, h=8) + "\n\n" +
    ROW.format(s="c", t=3, h=6),                  # two values on line 1, a blank line 2
])
def test_blank_lines_and_shared_lines_take_the_streaming_path(tmp_path, text):
    path = tmp_path / "t.jsonl"
    path.write_bytes(text.encode())
    data = path.read_bytes()
    assert decode_all(data, mooncake.MooncakeRow) is None
    try:
        want = shape(streamed(str(path), 4))
    except TraceError as error:
        with pytest.raises(TraceError) as info:
            mooncake._decode_mooncake(str(path), 4, False, data)
        assert str(info.value) == str(error)
    else:
        assert shape(mooncake._decode_mooncake(str(path), 4, False, data)) == want
        assert [s.where for s in mooncake._decode_mooncake(str(path), 4, False, data).sessions] \
            == [s.where for s in streamed(str(path), 4).sessions]


def test_a_bad_row_is_named_by_its_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(ROW.format(s="a", t=1, h=7) + "\n" + '{"input_length": -1}\n')
    mooncake._LOADED.clear()
    with pytest.raises(TraceError) as info:
        mooncake.load_mooncake(str(path), 4)
    assert str(info.value).startswith(f"{path}:2: input_length: expected `int` >= 0")


def test_rows_of_one_turn_with_priorities_take_the_one_turn_builder(tmp_path):
    """mooncake._lone_turns takes rows with priorities and a policy class (the kv_router's
    queue cases have them) and makes the builder's turns of them."""
    text = rows(LONE.format(t=1, h=7, x=', "priority": 50'),
                LONE.format(t=3, h=8, x=', "strict_priority": 1'),
                LONE.format(t=4, h=6, x=', "policy_class": "batch"'), LONE.format(t=5, h=7, x=""))
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    data = path.read_bytes()
    lone = mooncake._lone_turns(str(path), 4, decode_all(data, mooncake.MooncakeRow))
    assert lone is not None
    assert shape(lone) == shape(streamed(str(path), 4))
    assert [(t.priority, t.strict_priority, t.policy_class)
            for s in lone.sessions for t in s.turns] == \
        [(50, 0, None), (0, 1, None), (0, 0, "batch"), (0, 0, None)]
