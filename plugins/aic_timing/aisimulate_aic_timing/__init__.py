"""Timing provider ``aic`` for aisimulate, registered through the entry point ``aic_timing``.

Registering costs nothing: the provider module (and aiconfigurator-core behind it) is imported
only when a payload selects the provider, so every ``aisimulate`` start-up that does not use it
skips that import.
"""

from __future__ import annotations

from aisimulate_core.hookspecs import Register, hookimpl

__all__ = ["AicTiming", "AicTimingModel"]


class AicTiming:
    """The provider ``aic`` (aisimulate_aic_timing.provider.AicTiming, imported on first use)."""

    NAME = "aic"

    @classmethod
    def from_config(cls, config, context):
        from aisimulate_aic_timing.provider import AicTiming as provider
        return provider.from_config(config, context)

    @classmethod
    def estimate_num_gpu_blocks(cls, config, context):
        from aisimulate_aic_timing.provider import AicTiming as provider
        return provider.estimate_num_gpu_blocks(config, context)


def __getattr__(name):
    if name == "AicTimingModel":
        from aisimulate_aic_timing.provider import AicTimingModel
        return AicTimingModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def aisimulate_register_timing_providers(register: Register) -> None:
    register(AicTiming)
