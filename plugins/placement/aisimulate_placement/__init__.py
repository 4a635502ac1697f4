"""Placement policies for aisimulate, registered through the entry point ``placement``."""

from __future__ import annotations

from aisimulate_core.hookspecs import Register, hookimpl
from aisimulate_placement.round_robin import RoundRobin

__all__ = ["RoundRobin"]


@hookimpl
def aisimulate_register_placement_policies(register: Register) -> None:
    register(RoundRobin)
