"""The distribution registers its formats through the entry point, like any plugin."""

from aisimulate_core.plugins import make_plugin_manager
from aisimulate_core.registry import collect_registries
from aisimulate_trace_formats import (AgenticMooncake, AppliedComputeAgentic, Dynamo, Mooncake,
                                      MooncakeDelta, Weka)


def test_registered_through_the_entry_point():
    pm = make_plugin_manager(autoload=False, plugins=["trace_formats"])
    formats = collect_registries(pm).trace_formats
    assert formats.names() == ["agentic_mooncake", "applied_compute_agentic", "dynamo", "mooncake",
                               "mooncake-delta", "weka"]
    assert [formats.get(n) for n in formats.names()] == [
        AgenticMooncake, AppliedComputeAgentic, Dynamo, Mooncake, MooncakeDelta, Weka]


def test_autoloaded_and_attributed_to_the_distribution():
    pm = make_plugin_manager()
    provider = {p.name: p for p in collect_registries(pm).trace_formats.providers()}["mooncake"]
    assert provider.plugin == "trace_formats"
    assert provider.distribution.startswith("aisimulate-trace-formats")
