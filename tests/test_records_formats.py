"""`aisimulate run --per-request` as CSV or Parquet (by extension): the same records as the JSON
lines, read back by `read_records`; Parquet in row groups; a missing pyarrow is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aisimulate_core import run_replay
from aisimulate_core.cli import main
from aisimulate_core.cli.outputs import OutputFile, resolve_target
from aisimulate_core.cli.record_formats import (CsvRecordWriter, ParquetRecordWriter,
                                                decode_cell, encode_cell, read_records,
                                                record_format)
from aisimulate_core.report import PER_REQUEST_KEYS
from tests.plot_support import CLUSTER, FIXTURES

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    FIXTURES / "mooncake_conversation_60s_2w.json",       # two workers, prefix reuse
    FIXTURES / "disagg_lifecycle.json",                   # P/D: handoff times, both workers
    FIXTURES / "reject_vllm_max_model_len_isl16m.json",   # rejected: null token times
    CLUSTER / "w1_weka_two_plays.json",                   # agentic objects, request/play ids
    CLUSTER / "s1_schedule_scaling_agg_rr.json",          # scaling: routing history
]


def run_formats(payload: Path, tmp_path: Path, formats=("jsonl", "csv", "parquet")) -> dict:
    out = {}
    for fmt in formats:
        path = tmp_path / f"records.{fmt}"
        assert main(["run", str(payload), "--per-request", str(path), "--quiet"]) == 0
        out[fmt] = path
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_csv_and_parquet_read_back_to_the_jsonl_records(case, tmp_path, monkeypatch, capsys):
    pytest.importorskip("pyarrow")
    monkeypatch.chdir(ROOT)  # the cluster cases name their traces from the checkout's parent
    paths = run_formats(case, tmp_path)
    lines = [json.loads(line) for line in paths["jsonl"].read_text().splitlines()]
    assert lines and list(read_records(paths["jsonl"])) == lines
    for fmt in ("csv", "parquet"):
        back = list(read_records(paths[fmt]))
        assert back == lines, fmt
        # and with the same keys in the same order (optional keys left out again when unset)
        assert [list(r) for r in back] == [list(r) for r in lines], fmt
    header = paths["csv"].read_text().splitlines()[0]
    assert header == ",".join(PER_REQUEST_KEYS)


def test_csv_cells_are_plain_text_where_they_can_be(tmp_path):
    path = tmp_path / "r.csv"
    assert main(["run", str(FIXTURES / "disagg_lifecycle.json"), "--per-request", str(path),
                 "--quiet"]) == 0
    import csv

    rows = list(csv.DictReader(path.open()))
    first = rows[0]
    assert first["uuid"] == "00000000-0000-0000-0000-000000000001"
    assert first["terminal_status"] == "completed"
    assert first["request_id"] == "" and first["session_id"] == ""      # None: empty cells
    assert first["ttft_ms"] == "20.2" and first["input_length"] == "64"
    assert json.loads(first["routing_history"])[0]["pool"] == "prefill"


@pytest.mark.parametrize("value", ["", "42", "true", "null", '"quoted"', " 7", "a,b\nc",
                                   "[1]", "plain", "é ü", 7, 2.5, -0.0, True, None,
                                   [1, {"a": None}], {"k": "v"}])
def test_the_cell_encoding_round_trips_every_value(value):
    back = decode_cell(encode_cell(value))
    assert back == value and type(back) is type(value)


def test_tricky_ids_round_trip_through_csv_and_parquet(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    monkeypatch.chdir(ROOT)
    records = run_replay(json.loads((CLUSTER / "w1_weka_two_plays.json").read_text())).per_request
    tricky = ["42", "", "true", '"q"', "x,y\nz", 17]
    for record, value in zip(records, tricky):
        record["request_id"] = value
        record["session_id"] = value
    for name, writer in (("t.csv", CsvRecordWriter), ("t.parquet", ParquetRecordWriter)):
        out = OutputFile(resolve_target("--per-request", str(tmp_path / name)))
        write = writer(out)
        for record in records:
            write(record)
        write.close()
        out.finish_writing()
        out.commit()
        assert list(read_records(tmp_path / name)) == records, name


def test_parquet_goes_out_in_row_groups_as_records_come(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    payload = json.loads((FIXTURES / "mooncake_conversation_60s_2w.json").read_text())
    out = OutputFile(resolve_target("--per-request", str(tmp_path / "r.parquet")))
    writer = ParquetRecordWriter(out, row_group_rows=16)
    written_before_end = []

    def sink(record):
        writer(record)
        written_before_end.append(out.handle.buffer.tell())

    run_replay(payload, on_record=sink)
    writer.close()
    out.finish_writing()
    out.commit()
    records = run_replay(payload).per_request
    count = len(records)
    assert writer.count == count == 151
    metadata = pq.ParquetFile(tmp_path / "r.parquet").metadata
    assert metadata.num_row_groups == -(-count // 16) and metadata.num_rows == count
    # the file grew while the run went on: rows do not wait for its end in memory
    assert 0 < written_before_end[40] < written_before_end[-1]
    assert list(read_records(tmp_path / "r.parquet")) == records


def test_an_unreadable_records_file_is_one_line(tmp_path):
    from aisimulate_core.cli.outputs import CliError

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\nnot json\n')
    with pytest.raises(CliError, match=r"bad.jsonl:2: not valid JSON"):
        list(read_records(bad))
    with pytest.raises(CliError, match="no such file"):
        list(read_records(tmp_path / "none.csv"))
    (tmp_path / "bad.parquet").write_text("nope")
    pytest.importorskip("pyarrow")
    with pytest.raises(CliError, match="not a readable Parquet file"):
        list(read_records(tmp_path / "bad.parquet"))


def test_the_extension_chooses_the_format():
    assert [record_format(name) for name in ("a.jsonl", "a.CSV", "b.parquet", "-", "/dev/null",
                                             "a.json")] == ["jsonl", "csv", "parquet", "jsonl",
                                                            "jsonl", "jsonl"]


def test_parquet_without_pyarrow_is_one_line_before_the_run(tmp_path):
    # a fresh interpreter in which `import pyarrow` fails, as where it is not installed
    script = ("import sys; sys.modules['pyarrow'] = None\n"
              "from aisimulate_core.cli import main\n"
              f"sys.exit(main(['run', {str(FIXTURES / 'sem_one_osl1.json')!r}, '--per-request', "
              f"{str(tmp_path / 'r.parquet')!r}]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr == ("aisimulate: error: --per-request: Parquet needs pyarrow, which is "
                           "not installed: pip install 'aisimulate-core[parquet]' "
                           "(or pip install pyarrow)\n")
    assert done.stdout == "" and list(tmp_path.iterdir()) == []


def test_reading_some_keys_only(tmp_path):
    pytest.importorskip("pyarrow")
    paths = run_formats(FIXTURES / "disagg_lifecycle.json", tmp_path)
    keys = ("uuid", "ttft_ms", "routing_history", "request_id")
    full = list(read_records(paths["jsonl"]))
    for path in paths.values():
        assert list(read_records(path, keys=keys)) == [
            {k: r[k] for k in keys if k in r} for r in full], path


def test_a_non_finite_number_is_an_empty_cell_as_the_json_lines_null():
    import msgspec

    for value in (float("nan"), float("inf"), -float("inf")):
        assert msgspec.json.encode(value) == b"null"
        assert encode_cell(value) is None and decode_cell("") is None
