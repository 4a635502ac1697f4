import importlib.metadata
import io
import json
import sys
import types
from pathlib import Path

import pytest

from aisimulate_core import run_replay
from aisimulate_core.cli import ProgressLine, format_summary, main
from aisimulate_core.errors import SimulationError
from aisimulate_core.hookspecs import hookimpl
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


def tiny_payload(request_count=4, **spec):
    """A real payload that runs in milliseconds: one vLLM worker, fixed step times."""
    return {
        "spec": {
            "version": 1,
            "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
            "engine": {"rank": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 1024,
                                "timing_model": {"type": "fixed", "prefill_ms": 1.0, "decode_ms": 1.0}}},
            **spec,
        },
        "traffic": {"source_type": "synthetic", "load_type": "concurrency", "concurrency": 2,
                    "isl": 32, "osl": 3, "request_count": request_count},
    }


def with_timing(payload, provider):
    payload["spec"]["engine"]["rank"]["timing_model"] = {"type": "external", "provider": provider, "config": {}}
    return payload


class ScriptedTiming:
    """A timing provider whose prefill step runs ``ScriptedTiming.on_prefill`` (a test's fault)."""

    NAME = "scripted"
    on_prefill = None

    @classmethod
    def from_config(cls, config, context):
        return cls()

    def prefill_ms(self, batch_size, mean_isl, mean_prefix):
        if ScriptedTiming.on_prefill is not None:
            ScriptedTiming.on_prefill()
        return 1.0

    def decode_ms(self, batch_size, active_kv_tokens, mean_context_length, total_kv_tokens):
        return 1.0


@pytest.fixture
def scripted(monkeypatch):
    """A plugin module 'scripted_timing' providing the timing 'scripted'; returns a setter for
    what its prefill step does."""
    plugin = types.ModuleType("scripted_timing")

    @hookimpl
    def aisimulate_register_timing_providers(register):
        register(ScriptedTiming)

    plugin.aisimulate_register_timing_providers = aisimulate_register_timing_providers
    monkeypatch.setitem(sys.modules, "scripted_timing", plugin)
    monkeypatch.setattr(ScriptedTiming, "on_prefill", None)

    def set_fault(fault):
        monkeypatch.setattr(ScriptedTiming, "on_prefill", staticmethod(fault))

    return set_fault


@pytest.fixture
def payload(tmp_path):
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(tiny_payload()))
    return path


WALL_TIME_KEYS = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")


def without_wall_time(report):
    """The report's figures that depend on the simulation only (not on the machine's speed)."""
    return {k: v for k, v in report.items() if k not in (*WALL_TIME_KEYS, "per_request")}


def run_summary(payload_path):
    """The summary table of the same payload run through the library."""
    return format_summary(run_replay(Path(payload_path).read_text()).summary)


def test_plugins_lists_round_robin(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["plugin", "distribution", "hook", "provides"]
    (placement,) = [line for line in lines if line.startswith("placement ")]
    words = placement.split()
    assert words[:7] == [
        "placement", "aisimulate-placement", "0.1.0", "aisimulate_register_placement_policies",
        "placement", "policy:", words[6]]
    assert "round_robin" in [name.rstrip(",") for name in words[6:]]
    builtins = lines.index(next(line for line in lines if line.startswith("builtins ")))
    assert lines[builtins].split()[-6:] == [
        "aisimulate_register_scaling_policies", "scaling", "policy:", "load,", "none,", "schedule"]
    assert lines[builtins + 1].split() == [
        "aisimulate_register_timing_providers", "timing", "provider:", "fixed,", "polynomial"]


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


def test_run_malformed_json(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"spec": ')
    assert main(["run", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("aisimulate: error: $: invalid JSON: ")
    assert len(captured.err.splitlines()) == 1


def test_run_multi_line_error(capsys, tmp_path):
    broken = tiny_payload()
    broken["spec"]["engine"]["rank"]["block_size"] = 0
    broken["spec"]["topology"]["workers"]["initial_workers"] = 0
    path = tmp_path / "p.json"
    path.write_text(json.dumps(broken))
    assert main(["run", str(path)]) == 2
    assert capsys.readouterr().err == (
        "aisimulate: error: $.spec.engine.rank.block_size: must be > 0, got 0\n"
        "aisimulate: error: $.spec.topology.workers.initial_workers: must be > 0, got 0\n"
    )


def test_run_interrupted_leaves_no_temporary_file(capsys, tmp_path, scripted):
    def interrupt():
        raise KeyboardInterrupt

    scripted(interrupt)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(with_timing(tiny_payload(), "scripted")))
    argv = ["run", str(path), "--plugin", "scripted_timing", "--output", str(tmp_path / "r.json"),
            "--per-request", str(tmp_path / "r.jsonl")]
    assert main(argv) == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]


def test_run_prints_the_summary_of_the_run(capsys, payload):
    assert main(["run", str(payload), "--quiet"]) == 0
    assert capsys.readouterr().out == run_summary(payload)


def test_run_uses_the_command_line_plugins(capsys, payload):
    assert main(["run", str(payload), "--plugin", "no:placement"]) == 2
    assert capsys.readouterr().err == (
        "aisimulate: error: unknown placement policy 'round_robin'; installed: (nothing)\n")


def test_run_writes_report_and_per_request_files(capsys, tmp_path, payload):
    report, records = tmp_path / "report.json", tmp_path / "records.jsonl"
    report.write_text("old content that must be replaced")
    assert main(["run", str(payload), "--output", str(report), "--per-request", str(records)]) == 0
    expected = run_replay(payload.read_text())
    written = json.loads(report.read_text())
    assert written["completed_requests"] == 4
    assert without_wall_time(written) == without_wall_time(expected.summary)
    assert [json.loads(line) for line in records.read_text().splitlines()] == expected.per_request
    assert sorted(p.name for p in tmp_path.iterdir()) == ["payload.json", "records.jsonl", "report.json"]


def test_failed_run_keeps_the_previous_files_and_leaves_no_temporary(capsys, tmp_path, scripted):
    def fail():
        raise SimulationError("the step broke")

    scripted(fail)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(with_timing(tiny_payload(), "scripted")))
    (tmp_path / "r.json").write_text("previous")
    argv = ["run", str(path), "--plugin", "scripted_timing", "--output", str(tmp_path / "r.json"),
            "--per-request", str(tmp_path / "r.jsonl")]
    assert main(argv) == 2
    assert capsys.readouterr().err == "aisimulate: error: the step broke\n"
    assert (tmp_path / "r.json").read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "r.json"]


def test_output_directory_must_exist(capsys, tmp_path, payload, scripted):
    ran = []
    scripted(lambda: ran.append(True))
    payload.write_text(json.dumps(with_timing(tiny_payload(), "scripted")))
    target = tmp_path / "nowhere" / "report.json"
    argv = ["run", str(payload), "--plugin", "scripted_timing", "--output", str(target)]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"aisimulate: error: cannot write {target}: directory {target.parent} does not exist\n"
    )
    assert ran == []  # checked before the simulation starts


def test_per_request_needs_records(capsys, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(tiny_payload(record_per_request=False)))
    records = tmp_path / "records.jsonl"
    assert main(["run", str(path), "--per-request", str(records)]) == 2
    assert capsys.readouterr().err == (
        "aisimulate: error: --per-request: the report has no per-request records "
        "($.spec.record_per_request is false)\n"
    )
    assert not records.exists()


def test_run_warns_about_load_failures(capsys, payload, monkeypatch):
    class Broken:
        name, group, dist = "broken", "aisimulate", None

        def load(self):
            raise ImportError("boom")

    real = importlib.metadata.entry_points()
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None: [*real.select(group=group), Broken()])
    assert main(["run", str(payload)]) == 0
    assert capsys.readouterr().err == "aisimulate: warning: plugin 'broken' failed to load: ImportError: boom\n"


class OptionsPlugin:
    """Adds --router-temperature to `run` and keeps the value it was given."""

    def __init__(self):
        self.seen = []

    @hookimpl
    def aisimulate_add_cli_options(self, parser):
        parser.add_argument("--router-temperature", type=float, default=1.0)

    @hookimpl
    def aisimulate_configure(self, options, plugin_manager):
        self.seen.append((options.command, getattr(options, "router_temperature", None),
                          plugin_manager.get_plugin("options_plugin") is self))


def test_plugins_can_add_run_options_and_read_them(capsys, payload, monkeypatch):
    plugin = OptionsPlugin()
    monkeypatch.setitem(sys.modules, "options_plugin", plugin)
    argv = ["run", str(payload), "--plugin", "options_plugin", "--router-temperature", "0.5"]
    assert main(argv) == 0
    assert plugin.seen == [("run", 0.5, True)]
    assert main(["run", str(payload), "--router-temperature", "0.5"]) == 2  # not loaded: unknown option


def test_configure_is_called_once_for_every_command(capsys, monkeypatch):
    plugin = OptionsPlugin()
    monkeypatch.setitem(sys.modules, "options_plugin", plugin)
    assert main(["plugins", "--plugin", "options_plugin"]) == 0
    assert plugin.seen == [("plugins", None, True)]  # `run` options exist only for `run`


def test_a_failing_configure_hook_names_its_plugin(capsys, payload, monkeypatch):
    class Failing:
        @hookimpl
        def aisimulate_configure(self, options, plugin_manager):
            raise KeyError("router")

    monkeypatch.setitem(sys.modules, "failing_plugin", Failing())
    assert main(["run", str(payload), "--plugin", "failing_plugin"]) == 2
    assert capsys.readouterr().err == (
        "aisimulate: error: plugin 'failing_plugin' failed in aisimulate_configure: KeyError: 'router'\n")


def test_builtins_cannot_be_blocked(capsys, payload):
    assert main(["run", str(payload), "--plugin", "no:builtins"]) == 2
    assert capsys.readouterr().err == (
        "aisimulate: error: plugin 'builtins' cannot be blocked: it provides the core's own "
        "timing providers and scaling policy\n")


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


def test_summary_table_says_what_scaling_did():
    # the s1 case's operations: 2 workers, 4 at 60 (two starting), 3 at 80 (one cancelled), ...
    case = Path(__file__).resolve().parents[2] / "shared" / "bench" / "cluster" / \
        "s1_schedule_scaling_agg_rr.expected.json"
    if not case.exists():
        pytest.skip("../shared is not beside the checkout")
    operations = json.loads(case.read_text())["lifecycle_operations"]
    table = format_summary({"lifecycle_operations": operations})
    assert table.endswith("scaling             8 operations; agg 2 → 2 active (min 1, max 3)\n")
    assert format_summary({"lifecycle_operations": []}).endswith("scaling             no change\n")
    assert "scaling" not in format_summary({})


def test_progress_line():
    stream = io.StringIO()
    progress = ProgressLine(stream)
    progress(1500.0, 3, 10)
    progress(1600.0, 4, 10)  # within the refresh interval: not shown
    progress.close()
    assert stream.getvalue() == "\r\x1b[Kaisimulate: simulated 1.5 s, 3/10 requests done\r\x1b[K"


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.json")), ids=lambda path: path.name)
def test_run_example_end_to_end(capsys, tmp_path, example, monkeypatch):
    monkeypatch.chdir(ROOT)  # payloads name their trace files relative to the project root
    report = tmp_path / "report.json"
    assert main(["run", str(example), "--quiet", "--output", str(report)]) == 0
    assert "TTFT (ms)" in capsys.readouterr().out
    assert json.loads(report.read_text())["completed_requests"] > 0


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
