import importlib.metadata
import io
import json
import sys
import types
from pathlib import Path

import pytest

from aisimulate_core.cli import ProgressLine, format_summary, main
from aisimulate_core.errors import ConfigError, SimulationError
from aisimulate_core.hookspecs import hookimpl

try:
    import aisimulate_core.api as real_api
except ImportError:
    real_api = None

needs_api = pytest.mark.skipif(real_api is None, reason="needs aisimulate_core.api")
ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

SUMMARY = {
    "num_requests": 10,
    "completed_requests": 9,
    "duration_ms": 12345.0,
    "request_throughput_rps": 0.729,
    "output_throughput_tok_s": 93.3,
    "prefix_cache_reused_ratio": 0.25,
    "gpu_hours": 0.00686,
    **{
        f"{stat}_{name}_ms": value
        for name, base in [("ttft", 100.0), ("ttst", 10.0), ("itl", 5.0), ("tpot", 5.5), ("e2e_latency", 800.0)]
        for stat, value in [("mean", base), ("median", base * 0.9), ("p90", base * 1.5), ("p99", base * 2)]
    },
}


class FakeReport:
    def __init__(self, summary=SUMMARY, per_request=None, to_json=None):
        self.summary = summary
        self.per_request = per_request
        self._to_json = to_json

    def to_json(self):
        if self._to_json is not None:
            return self._to_json()
        return json.dumps({**self.summary, "per_request": self.per_request})


@pytest.fixture
def fake_api(monkeypatch):
    """Install a stand-in aisimulate_core.api whose run_replay does what the test says."""
    calls = []

    def install(run_replay):
        def recorded(payload_text, plugin_manager, progress):
            calls.append({"payload": payload_text, "pm": plugin_manager, "progress": progress})
            return run_replay(payload_text)

        module = types.ModuleType("aisimulate_core.api")
        module.run_replay = recorded
        monkeypatch.setitem(sys.modules, "aisimulate_core.api", module)
        monkeypatch.setattr("aisimulate_core.api", module, raising=False)
        return calls

    return install


def parse_like_the_api(payload_text):
    try:
        json.loads(payload_text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"$: payload is not valid JSON: {error}") from None
    return FakeReport(per_request=[{"uuid": 1, "ttft_ms": 1.5}, {"uuid": 2, "ttft_ms": 2.5}])


@pytest.fixture
def payload(tmp_path):
    path = tmp_path / "payload.json"
    path.write_text('{"spec": {}}')
    return path


def test_plugins_lists_round_robin(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["plugin", "distribution", "hooks", "providers"]
    (placement,) = [line for line in lines if line.startswith("placement ")]
    assert "aisimulate-placement " in placement
    assert "aisimulate_register_placement_policies" in placement
    assert placement.endswith("placement policy: round_robin")
    assert "timing provider: fixed, polynomial" in out
    assert "scaling policy: none" in out


def test_plugins_with_a_blocked_plugin(capsys):
    assert main(["plugins", "--plugin", "no:placement"]) == 0
    out = capsys.readouterr().out
    assert "round_robin" not in out
    assert [line.split() for line in out.splitlines() if line.startswith("placement")] == [
        ["placement", "(blocked)"]
    ]


def test_plugins_without_autoload(capsys):
    assert main(["plugins", "--disable-plugin-autoload"]) == 0
    assert "round_robin" not in capsys.readouterr().out


def test_plugins_lists_load_failures(capsys, monkeypatch):
    class Broken:
        name, group, dist = "broken", "aisimulate", None

        def load(self):
            raise ImportError("boom")

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [Broken()])
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("\nfailed to load:\n  plugin 'broken' failed to load: ImportError: boom\n")


def test_plugins_from_environment(capsys, monkeypatch, tmp_path):
    (tmp_path / "env_placement_plugin.py").write_text(
        "from aisimulate_core.hookspecs import hookimpl\n"
        "class Sticky:\n"
        "    NAME = 'sticky'\n"
        "@hookimpl\n"
        "def aisimulate_register_placement_policies(register):\n"
        "    register(Sticky)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("AISIMULATE_PLUGINS", " env_placement_plugin , ")
    assert main(["plugins", "--disable-plugin-autoload"]) == 0
    assert "placement policy: sticky" in capsys.readouterr().out


def test_unknown_plugin_module_is_an_error(capsys):
    assert main(["plugins", "--plugin", "no_such_plugin_module"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        "aisimulate: error: cannot load plugin 'no_such_plugin_module': "
        "ModuleNotFoundError: No module named 'no_such_plugin_module'\n"
    )


def test_run_missing_payload(capsys, tmp_path):
    missing = tmp_path / "missing.json"
    assert main(["run", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"aisimulate: error: cannot read payload {missing}: no such file\n"


def test_run_directory_as_payload(capsys, tmp_path):
    assert main(["run", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"aisimulate: error: cannot read payload {tmp_path}: is a directory\n"


def test_run_malformed_json(capsys, tmp_path, fake_api):
    if real_api is None:
        fake_api(parse_like_the_api)
    bad = tmp_path / "bad.json"
    bad.write_text('{"spec": ')
    assert main(["run", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("aisimulate: error: ")
    assert "Traceback" not in captured.err


def test_run_multi_line_error(capsys, payload, fake_api):
    def reject(payload_text):
        raise ConfigError("$.spec.version: required\n$.spec.topology: required")

    fake_api(reject)
    assert main(["run", str(payload)]) == 2
    assert capsys.readouterr().err == (
        "aisimulate: error: $.spec.version: required\naisimulate: error: $.spec.topology: required\n"
    )


def test_run_interrupted(capsys, payload, fake_api):
    def interrupt(payload_text):
        raise KeyboardInterrupt

    fake_api(interrupt)
    assert main(["run", str(payload)]) == 130


def test_run_prints_summary_and_passes_the_plugin_manager(capsys, payload, fake_api):
    calls = fake_api(parse_like_the_api)
    assert main(["run", str(payload), "--plugin", "no:placement"]) == 0
    (call,) = calls
    assert call["payload"] == '{"spec": {}}'
    assert call["pm"].is_blocked("placement")
    assert call["progress"] is None  # stderr is not a terminal under capsys
    assert capsys.readouterr().out == format_summary(SUMMARY)


def test_run_writes_report_and_per_request_files(capsys, tmp_path, payload, fake_api):
    fake_api(parse_like_the_api)
    report, records = tmp_path / "report.json", tmp_path / "records.jsonl"
    report.write_text("old content that must be replaced")
    assert main(["run", str(payload), "--output", str(report), "--per-request", str(records)]) == 0
    assert json.loads(report.read_text())["completed_requests"] == 9
    assert [json.loads(line) for line in records.read_text().splitlines()] == [
        {"uuid": 1, "ttft_ms": 1.5},
        {"uuid": 2, "ttft_ms": 2.5},
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["payload.json", "records.jsonl", "report.json"]


def test_failed_write_leaves_no_file(capsys, tmp_path, payload, fake_api):
    def broken_json():
        raise SimulationError("report broke")

    fake_api(lambda text: FakeReport(to_json=broken_json))
    report = tmp_path / "report.json"
    assert main(["run", str(payload), "--output", str(report)]) == 2
    assert capsys.readouterr().err == "aisimulate: error: report broke\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["payload.json"]


def test_failed_write_keeps_the_previous_file(capsys, tmp_path, payload, fake_api):
    def broken_json():
        raise SimulationError("report broke")

    fake_api(lambda text: FakeReport(to_json=broken_json))
    report = tmp_path / "report.json"
    report.write_text("previous")
    assert main(["run", str(payload), "--output", str(report)]) == 2
    assert report.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["payload.json", "report.json"]


def test_output_directory_must_exist(capsys, tmp_path, payload, fake_api):
    calls = fake_api(parse_like_the_api)
    target = tmp_path / "nowhere" / "report.json"
    assert main(["run", str(payload), "--output", str(target)]) == 2
    assert capsys.readouterr().err == (
        f"aisimulate: error: cannot write {target}: directory {target.parent} does not exist\n"
    )
    assert calls == []


def test_per_request_needs_records(capsys, tmp_path, payload, fake_api):
    fake_api(lambda text: FakeReport(per_request=None))
    records = tmp_path / "records.jsonl"
    assert main(["run", str(payload), "--per-request", str(records)]) == 2
    assert capsys.readouterr().err == (
        "aisimulate: error: --per-request: the report has no per-request records "
        "($.spec.record_per_request is false)\n"
    )
    assert not records.exists()


def test_run_warns_about_load_failures(capsys, payload, fake_api, monkeypatch):
    class Broken:
        name, group, dist = "broken", "aisimulate", None

        def load(self):
            raise ImportError("boom")

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [Broken()])
    fake_api(parse_like_the_api)
    assert main(["run", str(payload)]) == 0
    assert capsys.readouterr().err == "aisimulate: warning: plugin 'broken' failed to load: ImportError: boom\n"


def test_plugins_can_add_run_options(capsys, payload, fake_api, monkeypatch):
    @hookimpl
    def aisimulate_add_cli_options(parser):
        parser.add_argument("--router-temperature", type=float)

    plugin = types.ModuleType("options_plugin")
    plugin.aisimulate_add_cli_options = aisimulate_add_cli_options
    monkeypatch.setitem(sys.modules, "options_plugin", plugin)
    fake_api(parse_like_the_api)
    argv = ["run", str(payload), "--plugin", "options_plugin", "--router-temperature", "0.5"]
    assert main(argv) == 0
    assert main(["run", str(payload), "--router-temperature", "0.5"]) == 2


def test_help_exits_zero(capsys):
    assert main(["--help"]) == 0
    assert "run" in capsys.readouterr().out


def test_summary_table():
    assert format_summary(SUMMARY) == (
        "                     avg     p50       p90       p99\n"
        "TTFT (ms)         100.00   90.00    150.00    200.00\n"
        "TTST (ms)          10.00    9.00     15.00     20.00\n"
        "ITL (ms)            5.00    4.50      7.50     10.00\n"
        "TPOT (ms)           5.50    4.95      8.25     11.00\n"
        "E2E latency (ms)  800.00  720.00  1,200.00  1,600.00\n"
        "\n"
        "requests completed  9 / 10\n"
        "duration            12.345 s\n"
        "throughput          0.729 req/s, 93.3 output tok/s\n"
        "prefix cache reuse  25.00 %\n"
        "GPU-hours           0.0069\n"
    )


def test_summary_table_with_goodput_and_missing_keys():
    table = format_summary(
        {"goodput_request_throughput_rps": 1.5, "goodput_output_throughput_tok_s": 20.0, "goodput_completed_requests": 3}
    )
    assert "TTFT (ms)           -    -    -    -" in table
    assert table.endswith("goodput             1.500 req/s, 20.0 output tok/s (3 requests within SLA)\n")


def test_progress_line():
    stream = io.StringIO()
    progress = ProgressLine(stream)
    progress(1500.0, 3, 10)
    progress(1600.0, 4, 10)  # within the refresh interval: not shown
    progress.close()
    assert stream.getvalue() == "\r\x1b[Kaisimulate: simulated 1.5 s, 3/10 requests done\r\x1b[K"


@needs_api
@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.json")), ids=lambda path: path.name)
def test_run_example_end_to_end(capsys, tmp_path, example, monkeypatch):
    monkeypatch.chdir(ROOT)  # payloads name their trace files relative to the project root
    report = tmp_path / "report.json"
    assert main(["run", str(example), "--quiet", "--output", str(report)]) == 0
    assert "TTFT (ms)" in capsys.readouterr().out
    assert json.loads(report.read_text())["completed_requests"] > 0


@needs_api
def test_run_malformed_json_with_the_real_api(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    assert main(["run", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert all(line.startswith("aisimulate: error: ") for line in captured.err.splitlines())


def test_plugin_options_before_the_command(capsys):
    assert main(["--plugin", "no:placement", "plugins"]) == 0
    assert "round_robin" not in capsys.readouterr().out
