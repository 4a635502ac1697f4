"""What a run pays once (issue 10, item 5): the provider registries are collected once per
plugin manager, the trace formats build their row decoders when the plugin loads, the first
run imports nothing more, and a run holds the collector's young-generation threshold high
while it allocates, giving the caller's thresholds back."""

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aisimulate_core import AisimError, PluginError, hookimpl, make_plugin_manager, run_replay
from aisimulate_core.registry import registries_of
from aisimulate_core.runtime.simulation import RUN_GC_THRESHOLD
from test_semantics_cases import bare_spec, req

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"   # the shared bench cases, beside the checkout


class CountingPlugin:
    """Registers one timing provider and counts the calls of its register hook."""

    def __init__(self, name):
        self.calls = 0
        self.timing = type(name.title(), (), {"NAME": name, "from_config": classmethod(
            lambda cls, config, context: None)})

    @hookimpl
    def aisimulate_register_timing_providers(self, register):
        self.calls += 1
        register(self.timing)


def test_registries_are_collected_once_per_plugin_manager():
    plugin = CountingPlugin("counted")
    pm = make_plugin_manager(autoload=False, plugins=[plugin])
    first = registries_of(pm)
    assert registries_of(pm) is first
    assert plugin.calls == 1
    assert first.timing.get("counted") is plugin.timing


def test_registries_are_collected_again_when_the_plugins_change():
    plugin = CountingPlugin("counted")
    pm = make_plugin_manager(autoload=False, plugins=[plugin])
    before = registries_of(pm)
    other = CountingPlugin("other")
    pm.register(other)
    after = registries_of(pm)
    assert after is not before
    assert after.timing.names() == ["counted", "fixed", "other", "polynomial"]
    pm.unregister(other)
    assert registries_of(pm).timing.names() == ["counted", "fixed", "polynomial"]
    assert plugin.calls == 3


def test_runs_sharing_a_manager_call_the_register_hooks_once():
    plugin = CountingPlugin("counted")
    pm = make_plugin_manager(plugins=[plugin])   # the installed round robin places them
    text = json.dumps(bare_spec([req(0, 32, 4)]))
    reports = [run_replay(text, plugin_manager=pm).per_request for _ in range(3)]
    assert plugin.calls == 1
    assert reports[0] == reports[1] == reports[2]


def test_a_failed_collection_is_not_kept():
    class Duplicate(CountingPlugin):
        pass

    pm = make_plugin_manager(autoload=False, plugins=[CountingPlugin("twice"),
                                                      Duplicate("twice")])
    for _ in range(2):  # the error each time, not a half-filled registry the second time
        with pytest.raises(PluginError, match="duplicate timing provider 'twice'"):
            registries_of(pm)


def test_a_first_run_imports_nothing_and_builds_no_row_decoder():
    # a fresh interpreter, as the benchmark harness: the plugin manager and one payload load
    # before the run; the run itself must not import a module or build a msgspec decoder
    script = """
import json, sys, msgspec
from aisimulate_core import run_replay
from aisimulate_core.plugins import make_plugin_manager
from aisimulate_core.spec import load_payload
text = open(sys.argv[1]).read()
pm = make_plugin_manager()
load_payload(text)
built = []
real = msgspec.json.Decoder
def counting(*args, **kwargs):
    built.append(args)
    return real(*args, **kwargs)
msgspec.json.Decoder = counting
before = set(sys.modules)
run_replay(text, plugin_manager=pm)
print(json.dumps({"imported": sorted(set(sys.modules) - before), "decoders": len(built)}))
"""
    case = SHARED / "bench" / "cluster" / "s1_schedule_scaling_agg_rr.json"
    if not case.exists():
        pytest.skip("the shared bench cases are not beside this checkout")
    # on the C backend (the default): the Python twins of the KV pool are imported on first
    # use, which AISIMULATE_BACKEND=python runs pay once
    env = {**os.environ, "AISIMULATE_BACKEND": "c"}
    done = subprocess.run([sys.executable, "-c", script, str(case)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"imported": [], "decoders": 0}


def test_the_gc_threshold_is_raised_during_a_run_and_restored():
    seen = []

    def on_event(kind, now_ms, request):
        seen.append(gc.get_threshold())

    before = gc.get_threshold()
    run_replay(json.dumps(bare_spec([req(0, 32, 4), req(1, 16, 2, 1.0)])), on_event=on_event)
    assert gc.get_threshold() == before
    assert seen and {threshold for threshold in seen} == {(RUN_GC_THRESHOLD, *before[1:])}


@pytest.mark.parametrize("thresholds", [(0, 10, 10), (500_000, 10, 10)])
def test_a_callers_own_choice_of_threshold_is_kept(thresholds):
    seen = []
    before = gc.get_threshold()
    gc.set_threshold(*thresholds)
    try:
        report = run_replay(json.dumps(bare_spec([req(0, 32, 4)])),
                            on_event=lambda *args: seen.append(gc.get_threshold()))
        assert gc.get_threshold() == thresholds
    finally:
        gc.set_threshold(*before)
    assert set(seen) == {thresholds}
    assert report.summary["completed_requests"] == 1


def test_the_threshold_is_restored_when_a_run_fails():
    before = gc.get_threshold()
    with pytest.raises(AisimError, match=r"\.engine\.rank\.block_size: must be > 0"):
        run_replay(json.dumps(bare_spec([req(0, 32, 4)], block_size=0)))
    assert gc.get_threshold() == before


@pytest.mark.parametrize("name", ["aisimulate-core", "aisimulate-placement",
                                  "aisimulate-trace-formats", "pluggy", "attrs"])
def test_a_distribution_is_described_from_its_metadata_headers(name):
    # the cheap read of the header block says what the parsed metadata says
    import importlib.metadata

    from aisimulate_core.plugins import _describe

    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{name} is not installed")
    assert _describe(dist) == f"{dist.metadata['Name']} {dist.version}"


def test_a_role_is_made_once_per_engine_config_and_is_no_field_of_the_json():
    from aisimulate_core.spec import load_payload
    from aisimulate_core.spec.load import spec_to_dict

    spec = bare_spec([req(0, 32, 4)])
    spec["topology"] = {"kind": "disaggregated", "prefill": {"initial_workers": 1},
                        "decode": {"initial_workers": 1}}
    payload = load_payload(json.dumps(spec))
    engine = payload.spec.engine
    prefill = engine.role("prefill")
    assert engine.role("prefill") is prefill and prefill.rank.worker_type == "prefill"
    assert engine.role("decode").rank.worker_type == "decode"
    # the memo is not part of the payload: not written out, not read back, not compared
    shown = spec_to_dict(payload)
    assert "_roles" not in json.dumps(shown)
    assert load_payload(json.dumps(shown)) == payload


def test_the_role_memo_is_not_a_field_a_payload_may_give():
    from aisimulate_core.spec import load_payload

    spec = bare_spec([req(0, 32, 4)])
    spec["engine"]["_roles"] = {}
    with pytest.raises(AisimError) as info:
        load_payload(json.dumps(spec))
    assert str(info.value) == "$.engine._roles: unknown field"


@pytest.mark.parametrize("depth, too_deep", [(64, False), (65, True)])
def test_the_depth_rule_holds_with_and_without_the_bracket_count(depth, too_deep):
    # 64 nested arrays: no more opening brackets than the limit (the counted shortcut);
    # 65: the full check, inside a string too (brackets in strings never count as depth)
    from aisimulate_core.spec.load import _text_too_deep

    nested = "[" * depth + "]" * depth
    assert _text_too_deep(nested.encode()) is too_deep
    padded = '{"a": "' + "[" * 70 + '", "b": ' + nested + "}"
    assert _text_too_deep(padded.encode()) is (depth + 1 > 64)
