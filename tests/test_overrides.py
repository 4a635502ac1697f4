"""``--set PATH=VALUE``: parsing, application, validation naming the override, real runs."""

import json

import pytest

from aisimulate_core.cli import main
from aisimulate_core.errors import ConfigError
from aisimulate_core.overrides import (OverrideError, apply_overrides, load_with_overrides,
                                       parse_override, parse_overrides, parse_path, parse_value)
from reference import ROOT

BASE_PATH = ROOT / "tests/fixtures/payloads/arr_constant_rate40.json"
BASE = json.loads(BASE_PATH.read_text())


@pytest.mark.parametrize("path, keys", [
    ("spec.topology.workers.initial_workers", ("spec", "topology", "workers", "initial_workers")),
    ("$.spec.requests[0].output_tokens", ("spec", "requests", 0, "output_tokens")),
    ('spec.adapters.placement.config["odd key"]', ("spec", "adapters", "placement", "config", "odd key")),
    ("traffic", ("traffic",)),
    ("a[2][10]", ("a", 2, 10)),
])
def test_paths(path, keys):
    assert parse_path(path) == keys


@pytest.mark.parametrize("path", ["", ".spec", "spec..x", "spec.[0]x", "spec[x]", "spec x", "a.1"])
def test_bad_paths(path):
    with pytest.raises(ValueError):
        parse_path(path)


@pytest.mark.parametrize("text, value", [
    ("4", 4), ("2.5", 2.5), ("true", True), ("null", None), ('"4"', "4"), ("[1, 2]", [1, 2]),
    ('{"type": "fixed", "prefill_ms": 1}', {"type": "fixed", "prefill_ms": 1}),
    # not JSON and not starting like JSON: a string, as a user typing a name expects
    ("sglang", "sglang"), ("../trace.jsonl", "../trace.jsonl"), ("kv_router", "kv_router"),
    ("True", "True"), ('""', ""),
])
def test_values(text, value):
    assert parse_value(text) == value


@pytest.mark.parametrize("text", ["1e", "[1,", '{"a"', "-x", '"open', "", "  "])
def test_bad_values(text):
    with pytest.raises(ValueError):
        parse_value(text)


def test_every_bad_override_is_one_line_naming_it():
    with pytest.raises(OverrideError) as caught:
        parse_overrides(["spec.x=1e", "no_equals", "spec..y=2", "spec.ok=3"])
    assert str(caught.value).split("\n") == [
        "--set spec.x=1e: not valid JSON: Extra data",
        "--set no_equals: expected PATH=VALUE",
        "--set spec..y=2: cannot read the path at '..y' (write keys as a.b, indices as [0], "
        'other keys as ["key"])',
    ]


def test_the_first_equals_ends_the_path():
    override = parse_override('spec.engine.rank.timing_model={"type":"fixed","prefill_ms":1}')
    assert override.keys == ("spec", "engine", "rank", "timing_model")
    assert override.value == {"type": "fixed", "prefill_ms": 1}


def test_apply_creates_objects_and_copies():
    document = {"spec": {"sla": None, "requests": [{"x": 1}]}}
    result = apply_overrides(document, parse_overrides(
        ["spec.sla.ttft_ms=2000", "spec.new.deep=1", "spec.requests[0].x=2"]))
    assert result == {"spec": {"sla": {"ttft_ms": 2000}, "new": {"deep": 1},
                               "requests": [{"x": 2}]}}
    assert document == {"spec": {"sla": None, "requests": [{"x": 1}]}}  # untouched


@pytest.mark.parametrize("text, message", [
    ("traffic.isl.x=3", "--set traffic.isl.x=3: $.traffic.isl is a number, not an object"),
    ("spec.requests[3]=1", "--set spec.requests[3]=1: $.spec.requests has 0 items, no index 3"),
    ("spec.topology[0]=1", "--set spec.topology[0]=1: $.spec.topology is an object, not a list"),
])
def test_apply_errors_name_the_override(text, message):
    with pytest.raises(OverrideError) as caught:
        apply_overrides(BASE, parse_overrides([text]))
    assert str(caught.value) == message


def test_validation_names_the_override():
    with pytest.raises(ConfigError) as caught:
        load_with_overrides(BASE_PATH.read_text(), parse_overrides([
            "spec.engine.rank.num_gpu_blocks=-3", "traffic.bogus=1",
            "spec.engine.rank.block_size=16"]))
    assert str(caught.value).split("\n") == [
        "--set spec.engine.rank.num_gpu_blocks=-3: $.spec.engine.rank.num_gpu_blocks: "
        "must be >= 0, got -3",
        "--set traffic.bogus=1: $.traffic.bogus: unknown field",
    ]


def test_an_override_replacing_an_object_owns_its_inner_problems():
    with pytest.raises(Exception) as caught:
        load_with_overrides(BASE, parse_overrides(
            ['spec.engine.rank.timing_model={"type":"fixed","prefill_ms":-1,"decode_ms":1}']))
    assert str(caught.value) == (
        '--set spec.engine.rank.timing_model={"type":"fixed","prefill_ms":-1,"decode_ms":1}: '
        "$.spec.engine.rank.timing_model.prefill_ms: must be finite and >= 0, got -1.0")


def test_run_with_set_equals_the_edited_payload(tmp_path, capsys):
    edited = json.loads(json.dumps(BASE))
    edited["spec"]["topology"]["workers"]["initial_workers"] = 3
    edited["spec"].setdefault("sla", {})["ttft_ms"] = 20
    edited_path = tmp_path / "edited.json"
    edited_path.write_text(json.dumps(edited))
    assert main(["run", str(edited_path), "--quiet", "--output", str(tmp_path / "a.json")]) == 0
    assert main(["run", str(BASE_PATH), "--quiet", "--output", str(tmp_path / "b.json"),
                 "--set", "spec.topology.workers.initial_workers=3",
                 "--set", "spec.sla.ttft_ms=20"]) == 0
    capsys.readouterr()
    a = json.loads((tmp_path / "a.json").read_text())
    b = json.loads((tmp_path / "b.json").read_text())
    for host_key in ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"):
        a.pop(host_key), b.pop(host_key)
    assert a == b
    assert "goodput_completed_requests" in b


def test_run_with_a_bad_set_exits_2_with_one_line(capsys):
    code = main(["run", str(BASE_PATH), "--quiet", "--set", "spec.engine.rank.backend=foo"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "aisimulate: error: --set spec.engine.rank.backend=foo: $.spec.engine.rank.backend: "
        "must be one of 'vllm', 'sglang', 'trtllm', got \"foo\""]
