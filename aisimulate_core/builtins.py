"""The core's own providers, registered as a plugin named "builtins" like any other."""

from __future__ import annotations

from aisimulate_core.hookspecs import Register, hookimpl
# Imported with the plugin (small modules, no engine): a run's first registry collection,
# inside its timed span, then imports nothing.
from aisimulate_core.runtime.load_scaling import LoadScaling
from aisimulate_core.runtime.scaling import NoScaling, ScheduledScaling


@hookimpl
def aisimulate_register_timing_providers(register: Register) -> None:
    # Imported here so that loading the plugin manager does not import the engine.
    from aisimulate_core.engine.timing import FixedTiming, PolynomialTiming

    register(FixedTiming)
    register(PolynomialTiming)


@hookimpl
def aisimulate_register_scaling_policies(register: Register) -> None:
    register(NoScaling)
    register(ScheduledScaling)
    register(LoadScaling)
