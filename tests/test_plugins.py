import importlib.metadata
import math
import types

import pytest

from aisimulate_core.errors import ConfigError, PluginError, UnknownPluginError
from aisimulate_core.hookspecs import hookimpl
from aisimulate_core.placement import PlacementPolicy, PoolView, WorkerView
from aisimulate_core.plugins import make_plugin_manager
from aisimulate_core.registry import Registry, collect_registries
from aisimulate_core.runtime.scaling import NoScaling


# what the bundled aisimulate-placement distribution registers
PLACEMENT_POLICIES = ["kv_aware", "kv_router", "least_loaded", "round_robin"]


def provider(name, module="my_plugin", qualname="Foo", base=object):
    cls = type(qualname, (base,), {"NAME": name})
    cls.__module__ = module
    return cls


class PlacementPlugin:
    def __init__(self, *classes):
        self.classes = classes

    @hookimpl
    def aisimulate_register_placement_policies(self, register):
        for cls in self.classes:
            register(cls)


class TimingPlugin:
    def __init__(self, *classes):
        self.classes = classes

    @hookimpl
    def aisimulate_register_timing_providers(self, register):
        for cls in self.classes:
            register(cls)


class FakeDistribution:
    def __init__(self, name, version):
        self.metadata = {"Name": name}
        self.version = version


class FakeEntryPoint:
    group = "aisimulate"

    def __init__(self, name, load, dist=None):
        self.name = name
        self.value = f"{name}_module"
        self._load = load
        self.dist = dist

    def load(self):
        return self._load()


def fail(message):
    def load():
        raise ImportError(message)

    return load


@pytest.fixture
def entry_points(monkeypatch):
    """Replace the installed entry points of group 'aisimulate' with the given fakes."""

    def install(*fakes):
        def fake_entry_points(group=None):
            assert group == "aisimulate"
            return list(fakes)

        monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)

    return install


def test_plugin_object_registers_a_timing_provider():
    timing = provider("constant", qualname="Constant")
    pm = make_plugin_manager(autoload=False, plugins=[TimingPlugin(timing)])
    registries = collect_registries(pm)
    assert registries.timing.get("constant") is timing
    assert registries.timing.names() == ["constant", "fixed", "polynomial"]


def test_plugin_object_registers_a_placement_policy():
    policy = provider("least_loaded", base=PlacementPolicy)
    pm = make_plugin_manager(autoload=False, plugins=[PlacementPlugin(policy)])
    assert collect_registries(pm).placement.get("least_loaded") is policy


def test_builtins_register_timing_and_scaling():
    registries = collect_registries(make_plugin_manager(autoload=False))
    assert registries.timing.names() == ["fixed", "polynomial"]
    assert registries.scaling.names() == ["load", "none", "schedule"]
    assert registries.scaling.get("none") is NoScaling
    assert registries.placement.names() == []
    assert registries.trace_formats.names() == []
    assert {p.plugin for p in registries.timing.providers()} == {"builtins"}


def test_installed_distribution_registers_round_robin():
    pm = make_plugin_manager()
    registries = collect_registries(pm)
    assert "round_robin" in registries.placement.names()
    (round_robin,) = [p for p in registries.placement.providers() if p.name == "round_robin"]
    assert round_robin.plugin == "placement"
    assert round_robin.distribution.startswith("aisimulate-placement ")
    assert f"{round_robin.cls.__module__}.{round_robin.cls.__qualname__}" == (
        "aisimulate_placement.round_robin.RoundRobin"
    )


def test_duplicate_name_names_both_providers():
    duplicate = provider("round_robin")
    pm = make_plugin_manager(plugins=[PlacementPlugin(duplicate)])
    with pytest.raises(PluginError) as error:
        collect_registries(pm)
    assert str(error.value) == (
        "duplicate placement policy 'round_robin': provided by "
        "aisimulate_placement.round_robin.RoundRobin and my_plugin.Foo"
    )


def test_duplicate_builtin_timing_provider():
    pm = make_plugin_manager(autoload=False, plugins=[TimingPlugin(provider("fixed"))])
    with pytest.raises(PluginError) as error:
        collect_registries(pm)
    assert str(error.value) == (
        "duplicate timing provider 'fixed': provided by "
        "my_plugin.Foo and aisimulate_core.engine.timing.FixedTiming"
    )


def test_unknown_name_lists_installed():
    registries = collect_registries(make_plugin_manager(autoload=False, plugins=["placement"]))
    with pytest.raises(UnknownPluginError) as error:
        registries.placement.get("kv")
    assert str(error.value) == ("unknown placement policy 'kv'; installed: "
                                + ", ".join(PLACEMENT_POLICIES))


def test_unknown_name_with_nothing_installed():
    with pytest.raises(UnknownPluginError) as error:
        Registry("trace format").get("mooncake")
    assert str(error.value) == "unknown trace format 'mooncake'; installed: (nothing)"


def test_installed_names_are_sorted():
    registry = Registry("scaling policy")
    for name in ("planner", "none", "fixed_step"):
        registry.register(provider(name))
    with pytest.raises(UnknownPluginError) as error:
        registry.get("x")
    assert str(error.value) == "unknown scaling policy 'x'; installed: fixed_step, none, planner"


@pytest.mark.parametrize("name", [None, ""])
def test_provider_without_name(name):
    cls = provider(name)
    if name is None:
        del cls.NAME
    with pytest.raises(PluginError) as error:
        Registry("timing provider").register(cls)
    assert str(error.value) == "timing provider my_plugin.Foo must have a NAME attribute (a non-empty str)"


def test_blocked_entry_point_is_not_loaded(entry_points):
    entry_points(FakeEntryPoint("broken", fail("must not be imported")))
    for pm in (make_plugin_manager(blocked=["broken"]), make_plugin_manager(plugins=["no:broken"])):
        assert pm.load_failures == []
        assert pm.is_blocked("broken")


def test_blocking_the_installed_placement_plugin():
    registries = collect_registries(make_plugin_manager(plugins=["no:placement"]))
    assert registries.placement.names() == []


def test_broken_entry_point_is_reported_and_the_rest_load(entry_points):
    good = types.SimpleNamespace(
        aisimulate_register_placement_policies=hookimpl(
            lambda register: register(provider("good_policy"))
        )
    )
    entry_points(
        FakeEntryPoint("broken", fail("no module named nowhere"), FakeDistribution("broken-dist", "1.2")),
        FakeEntryPoint("good", lambda: good, FakeDistribution("good-dist", "0.3")),
    )
    pm = make_plugin_manager()
    (failure,) = pm.load_failures
    assert failure.name == "broken"
    assert failure.distribution == "broken-dist 1.2"
    assert isinstance(failure.error, ImportError)
    assert failure.message() == (
        "plugin 'broken' from broken-dist 1.2 failed to load: ImportError: no module named nowhere"
    )
    assert pm.distribution_of("good") == "good-dist 0.3"
    assert collect_registries(pm).placement.names() == ["good_policy"]


def test_plugin_with_unknown_hook_is_a_load_failure(entry_points):
    misspelt = types.SimpleNamespace(aisimulate_register_placement_policy=hookimpl(lambda register: None))
    entry_points(FakeEntryPoint("misspelt", lambda: misspelt))
    pm = make_plugin_manager()
    assert [f.message() for f in pm.load_failures] == [
        "plugin 'misspelt' failed to load: "
        "plugin 'misspelt' implements unknown hook(s): aisimulate_register_placement_policy"
    ]
    assert not pm.has_plugin("misspelt")


def test_autoload_false_ignores_entry_points(entry_points):
    entry_points(FakeEntryPoint("broken", fail("must not be imported")))
    pm = make_plugin_manager(autoload=False)
    assert pm.load_failures == []
    assert [name for name, _ in pm.list_name_plugin()] == ["builtins"]


def test_explicit_name_loads_an_entry_point_without_autoload():
    pm = make_plugin_manager(autoload=False, plugins=["placement"])
    assert collect_registries(pm).placement.names() == PLACEMENT_POLICIES
    assert pm.distribution_of("placement").startswith("aisimulate-placement ")


def test_explicit_module_already_loaded_by_its_entry_point_is_not_registered_twice():
    pm = make_plugin_manager(plugins=["aisimulate_placement"])
    assert collect_registries(pm).placement.names() == PLACEMENT_POLICIES


def test_explicit_module_that_cannot_be_imported():
    with pytest.raises(PluginError) as error:
        make_plugin_manager(autoload=False, plugins=["no_such_plugin_module"])
    assert str(error.value) == (
        "cannot load plugin 'no_such_plugin_module': "
        "ModuleNotFoundError: No module named 'no_such_plugin_module'"
    )


def test_register_hook_that_raises_names_the_plugin():
    class Failing:
        @hookimpl
        def aisimulate_register_trace_formats(self, register):
            raise RuntimeError("boom")

    pm = make_plugin_manager(autoload=False, plugins=[Failing()])
    pm_name = pm.get_name(next(p for p in pm.get_plugins() if isinstance(p, Failing)))
    with pytest.raises(PluginError) as error:
        collect_registries(pm)
    assert str(error.value) == (
        f"plugin '{pm_name}' failed in aisimulate_register_trace_formats: RuntimeError: boom"
    )


def test_each_register_hook_is_called_once():
    calls = []

    class Counting:
        @hookimpl
        def aisimulate_register_timing_providers(self, register):
            calls.append("timing")

        @hookimpl
        def aisimulate_register_trace_formats(self, register):
            calls.append("trace")

        @hookimpl
        def aisimulate_register_placement_policies(self, register):
            calls.append("placement")

        @hookimpl
        def aisimulate_register_scaling_policies(self, register):
            calls.append("scaling")

    collect_registries(make_plugin_manager(autoload=False, plugins=[Counting()]))
    assert calls == ["timing", "trace", "placement", "scaling"]


def test_managers_share_no_state():
    first = make_plugin_manager(autoload=False, plugins=[TimingPlugin(provider("a"))])
    second = make_plugin_manager(autoload=False)
    assert "a" in collect_registries(first).timing
    assert "a" not in collect_registries(second).timing


def test_no_scaling():
    scaling = NoScaling({})
    assert scaling.initial_tick_ms() == math.inf
    with pytest.raises(ConfigError) as error:
        NoScaling({"target": 2})
    assert str(error.value) == "$.spec.adapters.scaling.config.target: unknown field"


def test_placement_policy_rejects_unknown_config_keys():
    class Policy(PlacementPolicy):
        NAME = "p"
        CONFIG_KEYS = frozenset({"alpha"})

    pool = PoolView("agg", [WorkerView(0, 1)])
    assert Policy({"alpha": 1}, pool).config == {"alpha": 1}
    assert Policy({}, pool).pool.workers == (WorkerView(0, 1),)
    with pytest.raises(ConfigError) as error:
        Policy({"beta": 1, "alpha": 2, "gamma": 3}, pool)
    assert str(error.value) == (
        "$.spec.adapters.placement.config.beta: unknown field\n"
        "$.spec.adapters.placement.config.gamma: unknown field"
    )
