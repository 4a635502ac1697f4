"""Output safety of `aisimulate run`: no output overwrites an input or another output, `-` is
stdout, links and devices are written through, and a failed or interrupted run leaves every
target as it was with no temporary file (../shared/repro/cli-output-safety.sh)."""

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from aisimulate_core import run_replay
from aisimulate_core.cli import main
from aisimulate_core.cli.outputs import RunOutputs, resolve_target
from test_cli import run_summary, scripted, tiny_payload, without_wall_time  # noqa: F401 (fixture)

TRACE_ROW = '{"request_id":"r0","timestamp":0,"input_length":16,"output_length":4,"hash_ids":[1]}\n'


@pytest.fixture
def payload(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(tiny_payload()))
    return path


def names(directory):
    return sorted(p.name for p in Path(directory).iterdir())


def test_the_same_path_for_both_outputs_is_refused(capsys, tmp_path, payload):
    target = tmp_path / "same.json"
    assert main(["run", str(payload), "--output", str(target), "--per-request", str(target)]) == 2
    assert capsys.readouterr().err == (
        f"aisimulate: error: --output and --per-request name the same file {target}: "
        "give each output its own path\n")
    assert names(tmp_path) == ["p.json"]


def test_two_names_of_one_file_are_refused(capsys, tmp_path, payload):
    (tmp_path / "report.json").write_text("previous")
    os.link(tmp_path / "report.json", tmp_path / "alias.json")
    argv = ["run", str(payload), "--output", str(tmp_path / "report.json"),
            "--per-request", str(tmp_path / "alias.json")]
    assert main(argv) == 2
    assert "name the same file" in capsys.readouterr().err
    assert (tmp_path / "report.json").read_text() == "previous"


def test_an_output_over_the_payload_is_refused(capsys, tmp_path, payload):
    before = payload.read_text()
    os.symlink(payload, tmp_path / "link.json")
    for output in (payload, tmp_path / "link.json"):
        assert main(["run", str(payload), "--output", str(output)]) == 2
        assert capsys.readouterr().err == (
            f"aisimulate: error: --output {output}: is the payload; writing it would destroy the input\n")
    assert payload.read_text() == before


def test_an_output_over_a_trace_file_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # trace paths are relative to the working directory
    Path("trace.jsonl").write_text(TRACE_ROW)
    with_trace = tiny_payload()
    with_trace["traffic"] = {"source_type": "trace", "trace_format": "mooncake",
                             "trace_path": "trace.jsonl"}
    Path("p.json").write_text(json.dumps(with_trace))
    assert main(["run", "p.json", "--per-request", "./trace.jsonl"]) == 2
    assert capsys.readouterr().err == (
        "aisimulate: error: --per-request ./trace.jsonl: is the trace file trace.jsonl; "
        "writing it would destroy the input\n")
    assert Path("trace.jsonl").read_text() == TRACE_ROW


def test_dash_writes_the_report_to_stdout_without_the_table(capsys, payload):
    assert main(["run", str(payload), "--output", "-"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)
    assert report["completed_requests"] == 4
    assert len(report["per_request"]) == 4


def test_dash_writes_the_records_to_stdout(capsys, tmp_path, payload):
    report = tmp_path / "r.json"
    assert main(["run", str(payload), "--output", str(report), "--per-request", "-"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert records == run_replay(payload.read_text()).per_request
    assert json.loads(report.read_text())["completed_requests"] == 4


def test_dash_for_both_outputs_is_refused(capsys, payload):
    assert main(["run", str(payload), "--output", "-", "--per-request", "-"]) == 2
    assert capsys.readouterr().err == (
        "aisimulate: error: --output and --per-request cannot both be '-' (standard output)\n")


def test_a_symlink_output_is_written_through(capsys, tmp_path, payload):
    (tmp_path / "target.json").write_text("{}")
    os.symlink("target.json", tmp_path / "link.json")
    assert main(["run", str(payload), "--output", str(tmp_path / "link.json")]) == 0
    assert (tmp_path / "link.json").is_symlink()
    assert json.loads((tmp_path / "target.json").read_text())["completed_requests"] == 4
    assert names(tmp_path) == ["link.json", "p.json", "target.json"]


def test_a_replaced_file_keeps_its_permissions(capsys, tmp_path, payload):
    report = tmp_path / "r.json"
    report.write_text("{}")
    report.chmod(0o640)
    assert main(["run", str(payload), "--output", str(report)]) == 0
    assert stat.S_IMODE(report.stat().st_mode) == 0o640


def test_a_character_device_is_written_in_place(capsys, payload):
    assert main(["run", str(payload), "--output", os.devnull, "--per-request", os.devnull]) == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert capsys.readouterr().out == run_summary(payload)


def test_a_directory_output_is_refused(capsys, tmp_path, payload):
    assert main(["run", str(payload), "--output", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"aisimulate: error: cannot write {tmp_path}: is a directory\n"


def test_an_output_name_cannot_forge_a_line(capsys, tmp_path, payload):
    forged = str(tmp_path / "nowhere\naisimulate: error: forged" / "r.json")
    assert main(["run", str(payload), "--output", forged]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("\\naisimulate: error: forged does not exist")


def report_and_records(tmp_path):
    return (resolve_target("--output", str(tmp_path / "r.json")),
            resolve_target("--per-request", str(tmp_path / "r.jsonl")))


def test_an_interruption_during_the_run_changes_nothing(tmp_path):
    (tmp_path / "r.json").write_text("old report")
    (tmp_path / "r.jsonl").write_text("old records")
    with pytest.raises(KeyboardInterrupt):
        with RunOutputs(*report_and_records(tmp_path)) as outputs:
            outputs.record_writer({"uuid": 1})  # records stream in as requests end
            raise KeyboardInterrupt
    assert (tmp_path / "r.json").read_text() == "old report"
    assert (tmp_path / "r.jsonl").read_text() == "old records"
    assert names(tmp_path) == ["r.json", "r.jsonl"]


def test_records_that_cannot_be_committed_keep_the_previous_report(tmp_path):
    (tmp_path / "r.json").write_text("old report")
    with pytest.raises(Exception) as error:
        with RunOutputs(*report_and_records(tmp_path)) as outputs:
            outputs.record_writer({"uuid": 1})
            (tmp_path / "r.jsonl").mkdir()  # a directory took the records' name: no rename
            outputs.finish('{"new": "report"}')
    assert str(error.value) == f"cannot write {tmp_path / 'r.jsonl'}: Is a directory"
    assert (tmp_path / "r.json").read_text() == "old report"
    assert names(tmp_path) == ["r.json", "r.jsonl"]


def test_the_report_is_committed_after_its_records(tmp_path):
    (tmp_path / "r.jsonl").write_text("old records")
    with pytest.raises(Exception) as error:
        with RunOutputs(*report_and_records(tmp_path)) as outputs:
            outputs.record_writer({"uuid": 1})
            (tmp_path / "r.json").mkdir()  # the report cannot be renamed into place
            outputs.finish('{"new": "report"}')
    assert str(error.value) == f"cannot write {tmp_path / 'r.json'}: Is a directory"
    # never a report without its records: these records are new, and no report was written
    assert (tmp_path / "r.jsonl").read_text() == '{"uuid":1}\n'
    assert names(tmp_path) == ["r.json", "r.jsonl"]
    assert names(tmp_path / "r.json") == []


def run_cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "aisimulate_core", *args], text=True,
                          capture_output=True, **kwargs)


def test_a_full_stdout_is_one_error_line(tmp_path, payload):
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "aisimulate_core", "run", str(payload), "--quiet"],
                                stdout=full, stderr=subprocess.PIPE, text=True)
    assert result.returncode == 2
    assert result.stderr == "aisimulate: error: cannot write to standard output: No space left on device\n"


def test_a_full_stdout_after_the_records_is_one_error_line(tmp_path, payload):
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "aisimulate_core", "run", str(payload), "--per-request", "-"],
            stdout=full, stderr=subprocess.PIPE, text=True)
    assert result.returncode == 2
    assert result.stderr == "aisimulate: error: cannot write to standard output: No space left on device\n"


def test_sigterm_removes_the_temporary_files(tmp_path):
    long_run = tiny_payload(request_count=200_000)
    (tmp_path / "long.json").write_text(json.dumps(long_run))
    (tmp_path / "r.json").write_text("previous")
    proc = subprocess.Popen(
        [sys.executable, "-m", "aisimulate_core", "run", "long.json", "--quiet",
         "--output", "r.json", "--per-request", "pr.jsonl"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # the temporary files are created before the simulation starts
    while proc.poll() is None and not any(name.endswith(".tmp") for name in os.listdir(tmp_path)):
        pass
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate()
    assert (proc.returncode, err) == (143, "")
    assert names(tmp_path) == ["long.json", "r.json"]
    assert (tmp_path / "r.json").read_text() == "previous"


def test_streamed_records_equal_the_report_records(tmp_path, payload):
    result = run_cli("run", str(payload), "--quiet", "--output", str(tmp_path / "r.json"),
                     "--per-request", str(tmp_path / "r.jsonl"))
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(records) == report["completed_requests"] == 4
    assert without_wall_time(report)["completed_requests"] == 4


def test_a_reader_that_stops_early_ends_the_run_quietly(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps(tiny_payload(request_count=2000)))
    proc = subprocess.Popen([sys.executable, "-m", "aisimulate_core", "run", "p.json", "--per-request", "-"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read()
    assert (proc.wait(), err) == (141, "")  # as a process ended by SIGPIPE, without a traceback
    assert names(tmp_path) == ["p.json"]


def test_dev_stdout_into_a_file_writes_that_file_in_place(tmp_path, payload):
    out = tmp_path / "out.json"
    with open(out, "w") as stdout:
        inode = os.fstat(stdout.fileno()).st_ino
        result = subprocess.run([sys.executable, "-m", "aisimulate_core", "run", str(payload),
                                 "--quiet", "--output", "/dev/stdout"],
                                stdout=stdout, stderr=subprocess.PIPE, text=True)
    assert (result.returncode, result.stderr) == (0, "")
    assert out.stat().st_ino == inode  # written through the descriptor, not replaced
    assert json.loads(out.read_text())["completed_requests"] == 4  # the report alone, no table


def test_records_reach_the_file_during_the_run(tmp_path, scripted):
    from test_cli import with_timing

    sizes = []

    def size_of_the_temporary_file():
        (temp,) = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        sizes.append(temp.stat().st_size)

    scripted(size_of_the_temporary_file)
    # one request after the other, each with its own prompt length: every prefill is a new
    # step time to ask the provider for (the step timer remembers the ones it has seen)
    (tmp_path / "t.jsonl").write_text("".join(
        json.dumps({"timestamp": 100 * i, "input_length": 17 + i, "output_length": 2,
                    "hash_ids": [4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3]}) + "\n" for i in range(30)))
    payload = with_timing(tiny_payload(), "scripted")
    payload["traffic"] = {"source_type": "trace", "trace_format": "mooncake",
                          "trace_path": str(tmp_path / "t.jsonl"), "trace_block_size": 16}
    (tmp_path / "p.json").write_text(json.dumps(payload))
    argv = ["run", str(tmp_path / "p.json"), "--quiet", "--plugin", "scripted_timing",
            "--per-request", str(tmp_path / "r.jsonl")]
    assert main(argv) == 0
    # each prefill step looked at the temporary file: it grew with the records of the requests
    # done before (in steps of the write buffer), they were not kept to the end of the run
    assert sizes[0] == 0 and sizes == sorted(sizes)
    assert sizes[-1] >= 8192
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 30


@pytest.mark.parametrize("option", ["--output", "--per-request"])
def test_a_full_device_as_output_is_one_error_line(capsys, payload, option):
    assert main(["run", str(payload), "--quiet", option, "/dev/full"]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (
        "", "aisimulate: error: cannot write /dev/full: No space left on device\n")
