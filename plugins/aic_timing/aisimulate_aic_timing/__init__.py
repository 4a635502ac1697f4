"""Timing provider ``aic`` for aisimulate, registered through the entry point ``aic_timing``.

aiconfigurator-core itself is imported only when a payload selects the provider.
"""

from __future__ import annotations

from aisimulate_core.hookspecs import Register, hookimpl
from aisimulate_aic_timing.provider import AicTiming, AicTimingModel

__all__ = ["AicTiming", "AicTimingModel"]


@hookimpl
def aisimulate_register_timing_providers(register: Register) -> None:
    register(AicTiming)
