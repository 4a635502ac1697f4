"""One problem, one line: values quoted in messages cannot split or forge an error line
(../shared/repro/error-message-line-injection-u2028.json), and the CLI's exit-code conventions
for unexpected errors."""

import json
import subprocess
import sys

import pytest

from aisimulate_core.cli import main, print_error
from aisimulate_core.errors import ConfigError, UnknownPluginError
from aisimulate_core.messages import escape_controls, problem_lines
from aisimulate_core.registry import Registry
from aisimulate_core.spec.converter import show
from test_cli import tiny_payload

SEPARATORS = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("separator", SEPARATORS, ids=lambda s: f"U+{ord(s):04X}")
def test_no_line_separator_survives_escaping(separator):
    text = escape_controls(f"a{separator}$.spec.fake: forged")
    assert text.splitlines() == [text]
    escape = {"\n": "\\n", "\r": "\\r"}.get(separator) or f"\\u{ord(separator):04x}"
    assert text == f"a{escape}$.spec.fake: forged"


def test_escaping_keeps_printable_text():
    assert escape_controls("Qwen/Qwen3 ü 中文 'x' \\") == "Qwen/Qwen3 ü 中文 'x' \\"
    assert escape_controls("tab\there\x00\x7f\u202e") == "tab\\there\\u0000\\u007f\\u202e"


def test_show_escapes_separators_as_json_would():
    assert show("a\u2028b\x85c") == '"a\\u2028b\\u0085c"'
    assert json.loads(show("a\u2028b\x85c")) == "a\u2028b\x85c"  # still the value, as JSON


def test_problem_lines_split_only_on_newlines():
    assert problem_lines("$.a: bad\n$.b: bad, got \"x\u2028y\"") == [
        "$.a: bad", '$.b: bad, got "x\\u2028y"']


def test_print_error_is_one_line_per_problem(capsys):
    print_error("$.a: rule\r, got 1\n$.b: rule\u2029")
    assert capsys.readouterr().err == "aisimulate: error: $.a: rule\\r, got 1\naisimulate: error: $.b: rule\\u2029\n"


def test_the_u2028_reproducer_is_one_line(tmp_path, capsys):
    payload = tiny_payload()
    payload["traffic"] = "a\u2028$.spec.fake: injected problem line"
    path = tmp_path / "p.json"
    path.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == ('aisimulate: error: $.traffic: expected an object, got '
                   '"a\\u2028$.spec.fake: injected problem line"\n')
    assert len(err.splitlines()) == 1


def test_an_unknown_provider_name_is_quoted_safely():
    with pytest.raises(UnknownPluginError) as error:
        Registry("placement policy").get("rr\u2028$.spec: forged")
    assert str(error.value).splitlines() == [
        "unknown placement policy 'rr\\u2028$.spec: forged'; installed: (nothing)"]


def failing_command(error):
    def run_command(options, pm):
        raise error
    return run_command


def test_an_internal_error_is_one_line_and_exit_70(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("aisimulate_core.cli.run.run_command", failing_command(ZeroDivisionError("bug\nhere")))
    assert main(["run", str(tmp_path / "p.json")]) == 70
    assert capsys.readouterr().err == (
        "aisimulate: internal error: ZeroDivisionError: bug\\nhere (rerun with --debug for the traceback)\n")


def test_debug_shows_the_traceback(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("aisimulate_core.cli.run.run_command", failing_command(ZeroDivisionError("bug")))
    assert main(["run", str(tmp_path / "p.json"), "--debug"]) == 70
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n")
    assert err.endswith("ZeroDivisionError: bug\n")


def test_debug_shows_where_a_user_error_was_raised(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("aisimulate_core.cli.run.run_command", failing_command(ConfigError("$.x: rule")))
    assert main(["--debug", "run", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n")
    assert err.endswith("aisimulate_core.errors.ConfigError: $.x: rule\naisimulate: error: $.x: rule\n")


def test_version_and_python_m(tmp_path):
    from aisimulate_core import __version__

    result = subprocess.run([sys.executable, "-m", "aisimulate_core", "--version"],
                            capture_output=True, text=True)
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"aisimulate-core {__version__}"
    assert "plugin placement: aisimulate-placement 0.1.0" in lines


def test_version_lists_only_loaded_plugins(capsys):
    assert main(["--version", "--plugin", "no:placement", "--plugin", "no:aic_timing"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("plugin ")] == [
        "plugin trace_formats: aisimulate-trace-formats 0.1.0"]


def test_a_plugin_failure_with_a_multi_line_reason_is_one_line(capsys, monkeypatch):
    import types

    from aisimulate_core.hookspecs import hookimpl

    @hookimpl
    def aisimulate_add_cli_options(parser):
        raise RuntimeError("first\nsecond")

    plugin = types.ModuleType("two_line_plugin")
    plugin.aisimulate_add_cli_options = aisimulate_add_cli_options
    monkeypatch.setitem(sys.modules, "two_line_plugin", plugin)
    assert main(["plugins", "--plugin", "two_line_plugin"]) == 2
    assert capsys.readouterr().err == (
        "aisimulate: error: plugin 'two_line_plugin' failed in aisimulate_add_cli_options: "
        "RuntimeError: first\\nsecond\n")
