"""A provider that raises or answers wrongly stops the run with one line naming the provider
and its distribution; `aisimulate plugins` pairs each hook with the providers it registered;
the built-ins cannot be blocked."""

import json

import pytest

from aisimulate_core import PlacementPolicy, run_replay
from aisimulate_core.cli import main
from aisimulate_core.errors import PluginError, TraceError
from aisimulate_core.hookspecs import hookimpl
from aisimulate_core.plugins import make_plugin_manager
from test_cli import tiny_payload, with_timing
from test_plugins import FakeDistribution, FakeEntryPoint


class Plugin:
    """A plugin object registering the given providers through the matching hooks."""

    def __init__(self, placement=(), timing=(), trace_formats=(), scaling=()):
        self.placement, self.timing, self.trace_formats, self.scaling = (
            placement, timing, trace_formats, scaling)

    @hookimpl
    def aisimulate_register_placement_policies(self, register):
        for cls in self.placement:
            register(cls)

    @hookimpl
    def aisimulate_register_timing_providers(self, register):
        for cls in self.timing:
            register(cls)

    @hookimpl
    def aisimulate_register_trace_formats(self, register):
        for cls in self.trace_formats:
            register(cls)

    @hookimpl
    def aisimulate_register_scaling_policies(self, register):
        for cls in self.scaling:
            register(cls)


def from_distribution(entry_points, plugin, name="boom", dist=("boom-dist", "1.2")):
    """``plugin`` installed as entry point ``name`` of a distribution, beside the real
    placement plugin (round_robin, the payloads' default)."""
    import aisimulate_placement

    entry_points(FakeEntryPoint(name, lambda: plugin, FakeDistribution(*dist)),
                 FakeEntryPoint("placement", lambda: aisimulate_placement,
                                FakeDistribution("aisimulate-placement", "0.1.0")))
    return make_plugin_manager()


@pytest.fixture
def entry_points(monkeypatch):
    import importlib.metadata

    def install(*fakes):
        monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: list(fakes))

    return install


def placement_payload(provider="boom"):
    payload = tiny_payload()
    payload["spec"]["adapters"] = {"placement": {"provider": provider}}
    return payload


def policy(place):
    return type("Boom", (PlacementPolicy,), {"NAME": "boom", "place": lambda self, request: place(request)})


def run_with(pm, payload):
    return run_replay(json.dumps(payload), plugin_manager=pm)


def test_a_placement_policy_that_raises_names_itself_and_its_distribution(entry_points):
    pm = from_distribution(entry_points, Plugin(placement=[policy(lambda r: 1 / 0)]))
    with pytest.raises(PluginError) as error:
        run_with(pm, placement_payload())
    assert str(error.value) == (
        "placement policy 'boom' from boom-dist 1.2: place() raised ZeroDivisionError: division by zero")


@pytest.mark.parametrize("answer, shown", [
    (None, "null"), ((0,), "[0]"), ((0, "0"), '[0, "0"]'), ((0.0, 0), "[0.0, 0]"), ((True, 0), "[true, 0]"),
])
def test_a_malformed_placement_answer_is_one_line(entry_points, answer, shown):
    pm = from_distribution(entry_points, Plugin(placement=[policy(lambda r: answer)]))
    with pytest.raises(PluginError) as error:
        run_with(pm, placement_payload())
    assert str(error.value) == (
        f"placement policy 'boom' from boom-dist 1.2: place() returned {shown}, "
        "expected (worker_id, dp_rank) as two integers, a Placement or QUEUED")


def test_a_worker_outside_the_pool_is_one_line(entry_points):
    pm = from_distribution(entry_points, Plugin(placement=[policy(lambda r: (-1, 0))]))
    with pytest.raises(PluginError) as error:
        run_with(pm, placement_payload())
    assert str(error.value) == (
        "placement policy 'boom' from boom-dist 1.2: place() returned worker -1, which is not "
        "an active worker of the agg pool (active: [0])")


def test_a_well_behaved_policy_gives_the_round_robin_result(entry_points):
    pm = from_distribution(entry_points, Plugin(placement=[policy(lambda r: (0, 0))]))
    guarded = run_with(pm, placement_payload())
    reference = run_replay(json.dumps(tiny_payload()))
    assert guarded.per_request == reference.per_request


def test_a_placement_policy_failing_at_construction(entry_points):
    class Picky(PlacementPolicy):
        NAME = "boom"

        def __init__(self, config, pool):
            raise RuntimeError("no pool for me")

    pm = from_distribution(entry_points, Plugin(placement=[Picky]))
    with pytest.raises(PluginError) as error:
        run_with(pm, placement_payload())
    assert str(error.value) == (
        "placement policy 'boom' from boom-dist 1.2: construction raised RuntimeError: no pool for me")


class Timing:
    NAME = "bad_timing"
    prefill = 1.0

    def __init__(self, prefill=1.0):
        self.prefill = prefill

    @classmethod
    def from_config(cls, config, context):
        return cls(**config)

    def prefill_ms(self, batch_size, mean_isl, mean_prefix):
        return self.prefill

    def decode_ms(self, batch_size, active_kv_tokens, mean_context_length, total_kv_tokens):
        return 1.0


def timing_payload(config):
    payload = with_timing(tiny_payload(), "bad_timing")
    payload["spec"]["engine"]["rank"]["timing_model"]["config"] = config
    return payload


def test_a_timing_provider_failing_in_from_config(entry_points):
    pm = from_distribution(entry_points, Plugin(timing=[Timing]))
    with pytest.raises(PluginError) as error:
        run_with(pm, timing_payload({"speed": 2}))
    assert str(error.value) == (
        "timing provider 'bad_timing' from boom-dist 1.2: from_config() raised TypeError: "
        "Timing.__init__() got an unexpected keyword argument 'speed'")


def test_a_timing_provider_returning_a_string(entry_points):
    pm = from_distribution(entry_points, Plugin(timing=[Timing]))
    with pytest.raises(PluginError) as error:
        run_with(pm, timing_payload({"prefill": "fast"}))
    assert str(error.value) == (
        "timing provider 'bad_timing' from boom-dist 1.2: prefill_ms() returned \"fast\", "
        "expected a number of milliseconds")


def test_a_timing_model_without_step_methods(entry_points):
    class NoModel(Timing):
        @classmethod
        def from_config(cls, config, context):
            return object()

    pm = from_distribution(entry_points, Plugin(timing=[NoModel]))
    with pytest.raises(PluginError) as error:
        run_with(pm, timing_payload({}))
    assert str(error.value) == (
        "timing provider 'bad_timing' from boom-dist 1.2: from_config() returned a object, "
        "expected a timing model with prefill_ms() and decode_ms()")


def test_a_capacity_estimate_that_raises(entry_points):
    class Estimating(Timing):
        @staticmethod
        def estimate_num_gpu_blocks(config, context):
            raise LookupError("no table for this GPU")

    payload = timing_payload({})
    del payload["spec"]["engine"]["rank"]["num_gpu_blocks"]
    pm = from_distribution(entry_points, Plugin(timing=[Estimating]))
    with pytest.raises(PluginError) as error:
        run_with(pm, payload)
    assert str(error.value) == (
        "timing provider 'bad_timing' from boom-dist 1.2: estimate_num_gpu_blocks() raised "
        "LookupError: no table for this GPU")


def trace_payload(tmp_path, trace_format="broken"):
    (tmp_path / "t.jsonl").write_text("{}\n")
    payload = tiny_payload()
    payload["traffic"] = {"source_type": "trace", "trace_format": trace_format,
                          "trace_path": str(tmp_path / "t.jsonl")}
    return payload


def test_a_trace_format_that_raises_names_itself(entry_points, tmp_path):
    class Broken:
        NAME = "broken"

        def load(self, paths, *, trace_block_size):
            raise KeyError("hash_ids")

    pm = from_distribution(entry_points, Plugin(trace_formats=[Broken]))
    with pytest.raises(PluginError) as error:
        run_with(pm, trace_payload(tmp_path))
    assert str(error.value) == "trace format 'broken' from boom-dist 1.2: load() raised KeyError: 'hash_ids'"


def test_an_unreadable_trace_is_the_inputs_fault(entry_points, tmp_path):
    class Naive:
        NAME = "broken"

        def load(self, paths, *, trace_block_size):
            return open(paths[0] + ".missing").read()

    pm = from_distribution(entry_points, Plugin(trace_formats=[Naive]))
    with pytest.raises(TraceError) as error:
        run_with(pm, trace_payload(tmp_path))
    assert str(error.value) == f"{tmp_path / 't.jsonl.missing'}: cannot read the trace file: No such file or directory"


def test_a_scaling_policy_failing_at_construction(entry_points):
    class Scaling:
        NAME = "elastic"

        def __init__(self, config):
            raise ValueError("needs a target")

    payload = tiny_payload()
    payload["spec"]["adapters"] = {"scaling": {"provider": "elastic"}}
    pm = from_distribution(entry_points, Plugin(scaling=[Scaling]))
    with pytest.raises(PluginError) as error:
        run_with(pm, payload)
    assert str(error.value) == (
        "scaling policy 'elastic' from boom-dist 1.2: construction raised ValueError: needs a target")


def test_a_plugin_object_is_named_by_its_plugin(monkeypatch):
    import sys
    import types

    module = types.ModuleType("boom_plugin")
    module.aisimulate_register_placement_policies = Plugin(
        placement=[policy(lambda r: 1 / 0)]).aisimulate_register_placement_policies
    monkeypatch.setitem(sys.modules, "boom_plugin", module)
    pm = make_plugin_manager(autoload=False, plugins=["boom_plugin"])
    with pytest.raises(PluginError) as error:
        run_with(pm, placement_payload())
    assert str(error.value).startswith("placement policy 'boom' of plugin 'boom_plugin': place() raised")


def test_builtins_cannot_be_blocked():
    for blocked in ({"blocked": ["builtins"]}, {"plugins": ["no:builtins"]}):
        with pytest.raises(PluginError) as error:
            make_plugin_manager(autoload=False, **blocked)
        assert str(error.value) == (
            "plugin 'builtins' cannot be blocked: it provides the core's own timing providers "
            "and scaling policy")


class Options:
    @hookimpl
    def aisimulate_add_cli_options(self, parser):
        parser.add_argument("--boom-level")


def test_plugins_pairs_each_hook_with_its_own_providers(capsys, entry_points):
    first = Plugin(placement=[policy(lambda r: (0, 0))],
                   timing=[type("T", (Timing,), {"NAME": "first_timing"})])
    second = Plugin(trace_formats=[type("F", (), {"NAME": "second_format"})],
                    scaling=[type("S", (), {"NAME": "second_scaling"})])
    entry_points(FakeEntryPoint("first", lambda: first, FakeDistribution("first-dist", "1.0")),
                 FakeEntryPoint("second", lambda: second, FakeDistribution("second-dist", "2.0")),
                 FakeEntryPoint("third", Options, FakeDistribution("third-dist", "3.0")))
    assert main(["plugins"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows == [
        ["plugin", "distribution", "hook", "provides"],
        ["first", "first-dist", "1.0", "aisimulate_register_placement_policies", "placement", "policy:", "boom"],
        ["aisimulate_register_scaling_policies", "(none)"],
        ["aisimulate_register_timing_providers", "timing", "provider:", "first_timing"],
        ["aisimulate_register_trace_formats", "(none)"],
        ["second", "second-dist", "2.0", "aisimulate_register_placement_policies", "(none)"],
        ["aisimulate_register_scaling_policies", "scaling", "policy:", "second_scaling"],
        ["aisimulate_register_timing_providers", "(none)"],
        ["aisimulate_register_trace_formats", "trace", "format:", "second_format"],
        ["third", "third-dist", "3.0", "aisimulate_add_cli_options"],
        ["builtins", "aisimulate-core", "0.1.0", "aisimulate_register_scaling_policies", "scaling", "policy:", "load,", "none,", "schedule"],
        ["aisimulate_register_timing_providers", "timing", "provider:", "fixed,", "polynomial"],
    ]
