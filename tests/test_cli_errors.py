"""Bad input from the command line: exit code 2, one path-qualified line, no traceback."""

import json

import pytest

from aisimulate_core.cli import main
from reference import ROOT

BASE = json.loads((ROOT / "tests/fixtures/payloads/arr_constant_rate40.json").read_text())


def write(tmp_path, payload):
    path = tmp_path / "payload.json"
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return str(path)


def edited(edit):
    payload = json.loads(json.dumps(BASE))
    edit(payload)
    return payload


def unknown_field(p):
    p["spec"]["engine"]["rank"]["blok_size"] = 16


def zero_block_size(p):
    p["spec"]["engine"]["rank"]["block_size"] = 0


def zero_workers(p):
    p["spec"]["topology"]["workers"]["initial_workers"] = 0


@pytest.mark.parametrize("payload, line", [
    ('{"spec": {"version": 1,', "aisimulate: error: $: invalid JSON: "),
    (edited(unknown_field),
     "aisimulate: error: $.spec.engine.rank.blok_size: unknown field (did you mean 'block_size'?)"),
    (edited(zero_block_size), "aisimulate: error: $.spec.engine.rank.block_size: must be > 0, got 0"),
    (edited(zero_workers),
     "aisimulate: error: $.spec.topology.workers.initial_workers: must be > 0, got 0"),
])
def test_bad_payload_exits_2_with_one_line(tmp_path, capsys, payload, line):
    code = main(["run", write(tmp_path, payload), "--quiet"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(line)
    assert "Traceback" not in err


def test_good_payload_prints_the_table(tmp_path, capsys):
    code = main(["run", write(tmp_path, BASE), "--quiet", "--output", str(tmp_path / "r.json")])
    out, _ = capsys.readouterr()
    assert code == 0
    assert "TTFT" in out and "E2E" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["completed_requests"] == 40
