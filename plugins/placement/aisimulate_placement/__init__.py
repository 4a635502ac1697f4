"""Placement policies for aisimulate, registered through the entry point ``placement``."""

from __future__ import annotations

from aisimulate_core.hookspecs import Register, hookimpl
from aisimulate_placement.kv_router import KvAware, KvRouter
from aisimulate_placement.least_loaded import LeastLoaded
from aisimulate_placement.round_robin import RoundRobin

__all__ = ["KvAware", "KvRouter", "LeastLoaded", "RoundRobin"]


@hookimpl
def aisimulate_register_placement_policies(register: Register) -> None:
    register(RoundRobin)
    register(KvRouter)
    register(KvAware)   # the reference runner's alias of kv_router
    register(LeastLoaded)
