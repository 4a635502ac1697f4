"""A Mooncake file loaded again in the same process is rebuilt from the rows kept at its first
load (plugins/trace_formats mooncake._LOADED), only while its bytes are the same, and the
rebuilt trace shares nothing a run may change."""

from __future__ import annotations

import os

import pytest

from aisimulate_core.errors import TraceError
from aisimulate_core.workload.transforms import normalize_session_starts, speed_up_timing
from aisimulate_trace_formats import mooncake

ROWS = ('{"session_id": "a", "timestamp": 10, "input_length": 5, "output_length": 2, '
        '"hash_ids": [7, 9]}\n'
        '{"session_id": "a", "timestamp": 30, "input_length": 3, "output_length": 1, '
        '"hash_ids": [7], "output_token_ids": [4]}\n'
        '{"timestamp": 20, "input_length": 4, "output_length": 3, "hash_ids": [9, 11], '
        '"priority": 2}\n')


def shape(trace):
    return (trace.block_size, trace.accumulate_deltas,
            [(s.session_id, s.start_ms, s.where,
              [(t.input_length, t.max_output_tokens, list(t.hash_ids), t.delay_ms,
                None if t.output_token_ids is None else list(t.output_token_ids), t.priority,
                t.strict_priority, t.policy_class, t.where)
               for t in s.turns]) for s in trace.sessions])


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text(ROWS)
    mooncake._LOADED.clear()
    yield str(path)
    mooncake._LOADED.clear()


def test_a_second_load_is_the_first_rebuilt(trace_file):
    first = mooncake.load_mooncake(trace_file, 4)
    want = shape(first)
    assert (trace_file, 4, False) in mooncake._LOADED
    second = mooncake.load_mooncake(trace_file, 4)
    assert shape(second) == want
    assert second.sessions[0] is not first.sessions[0]
    assert second.sessions[0].turns[0].hash_ids is not first.sessions[0].turns[0].hash_ids
    # other options are other traces
    assert shape(mooncake.load_mooncake(trace_file, 8))[0] == 8
    assert shape(mooncake.load_mooncake(trace_file, 4, accumulate_deltas=True))[1] is True


def test_what_a_run_changes_is_not_kept(trace_file):
    first = mooncake.load_mooncake(trace_file, 4)
    want = shape(first)
    speed_up_timing(normalize_session_starts(first), 4.0)
    first.sessions[0].turns[0].hash_ids[0] = 99
    first.sessions[0].turns[1].output_token_ids.append(5)
    assert shape(mooncake.load_mooncake(trace_file, 4)) == want


def test_a_file_rewritten_with_the_same_size_and_time_is_read_again(trace_file):
    mooncake.load_mooncake(trace_file, 4)
    stat = os.stat(trace_file)
    with open(trace_file, "w") as f:
        f.write(ROWS.replace('"output_length": 3', '"output_length": 8'))
    os.utime(trace_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(trace_file).st_size == stat.st_size
    assert mooncake.load_mooncake(trace_file, 4).sessions[1].turns[0].max_output_tokens == 8


def test_a_bad_file_fails_at_every_load(trace_file):
    with open(trace_file, "a") as f:
        f.write('{"input_length": 4, "hash_ids": [1]}\n')
    for _ in range(2):
        with pytest.raises(TraceError, match=r"trace.jsonl:4: output_length: is required"):
            mooncake.load_mooncake(trace_file, 4)
    assert not mooncake._LOADED


def test_large_files_are_not_kept(trace_file, monkeypatch):
    monkeypatch.setattr(mooncake, "CACHED_FILE_BYTES", len(ROWS) - 1)
    assert shape(mooncake.load_mooncake(trace_file, 4))[2][0][0] == "a"
    assert not mooncake._LOADED


def test_only_a_few_files_are_kept(tmp_path):
    mooncake._LOADED.clear()
    paths = []
    for i in range(mooncake._KEEP_FILES + 2):
        path = tmp_path / f"t{i}.jsonl"
        path.write_text(ROWS)
        paths.append(str(path))
        mooncake.load_mooncake(str(path), 4)
    assert [key[0] for key in mooncake._LOADED] == paths[-mooncake._KEEP_FILES:]
    mooncake._LOADED.clear()


def test_a_pipe_is_read_once_and_not_kept(trace_file):
    # a trace given as <(zcat trace.gz): reading it to know it would leave nothing to decode
    expected = shape(mooncake.load_mooncake(trace_file, 4))
    mooncake._LOADED.clear()
    read, write = os.pipe()
    os.write(write, ROWS.encode())
    os.close(write)
    try:
        assert shape(mooncake.load_mooncake(f"/dev/fd/{read}", 4))[2] == \
            [(s[0], s[1], s[2].replace(trace_file, f"/dev/fd/{read}"),
              [t[:8] + (t[8].replace(trace_file, f"/dev/fd/{read}"),) for t in s[3]])
             for s in expected[2]]
    finally:
        os.close(read)
    assert not mooncake._LOADED


def test_gzip_files_are_not_kept(tmp_path):
    # their size says nothing of the memory their rows take
    import gzip
    path = tmp_path / "trace.jsonl.gz"
    path.write_bytes(gzip.compress(ROWS.encode()))
    mooncake._LOADED.clear()
    assert shape(mooncake.load_mooncake(str(path), 4))[2][0][0] == "a"
    assert not mooncake._LOADED
