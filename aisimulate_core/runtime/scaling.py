"""Scaling policies built into the core.

The contract (the reference's, CLUSTER.md §3.1): ``initial_tick_ms()`` gives the first tick
(``math.inf``: never); at each tick the runtime calls ``on_tick(snapshot)``, which returns
``{"target_prefill", "target_decode", "next_tick_ms"}``: each target the wanted number of
non-draining workers (active + starting) of that pool or None to leave it alone, and the next
tick's absolute time or None to stop. Aggregated topologies use ``target_decode``.

* ``none`` keeps the initial workers for the whole run;
* ``schedule`` replays a fixed list of ticks (``{"ticks": [{"at_ms", "decode_target",
  "prefill_target"}]}``), the format of the reference's cases.
"""

from __future__ import annotations

import math
import numbers
from typing import ClassVar

from aisimulate_core.errors import ConfigError
from aisimulate_core.registry import check_provider_config

CONFIG_PATH = "$.spec.adapters.scaling.config"


class NoScaling:
    """Never scales: its first tick is at infinity, so the runtime never asks it again."""

    NAME: ClassVar[str] = "none"
    reads_pass_metrics: ClassVar[bool] = False

    def __init__(self, config: dict) -> None:
        self.config = check_provider_config(config, (), CONFIG_PATH)

    def initial_tick_ms(self) -> float:
        return math.inf


class ScheduledScaling:
    """Targets at fixed times. Tick times must be strictly increasing; a missing target is
    None (that pool is left alone). Tick i answers tick i's targets and tick i+1's time."""

    NAME: ClassVar[str] = "schedule"
    # its answers depend on the tick count only: no forward-pass metrics, no snapshot beyond
    # ``tick_ordinal`` and ``now_ms``
    reads_pass_metrics: ClassVar[bool] = False
    reads_snapshot: ClassVar[bool] = False
    TICK_KEYS = ("at_ms", "decode_target", "prefill_target")

    def __init__(self, config: dict) -> None:
        config = check_provider_config(config, ("ticks",), CONFIG_PATH)
        ticks = config.get("ticks", [])
        path = CONFIG_PATH + ".ticks"
        if not isinstance(ticks, list):
            raise ConfigError(f"{path}: must be a list of ticks, got {type(ticks).__name__}")
        problems = []
        self.ticks = []
        previous = -math.inf
        for i, tick in enumerate(ticks):
            where = f"{path}[{i}]"
            if not isinstance(tick, dict):
                problems.append(f"{where}: must be an object, got {type(tick).__name__}")
                continue
            problems += [f"{where}.{key}: unknown field" for key in sorted(map(str, tick))
                         if key not in self.TICK_KEYS]
            at = tick.get("at_ms")
            if not _is_real(at) or not math.isfinite(at) or at < 0:
                problems.append(f"{where}.at_ms: must be a finite number >= 0, got {at!r}")
                continue
            if at <= previous:
                problems.append(f"{where}.at_ms: tick times must be strictly increasing, got "
                                f"{at!r} after {previous!r}")
            previous = at
            targets = []
            for key in ("prefill_target", "decode_target"):
                value = tick.get(key)
                if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                          or value < 0):
                    problems.append(f"{where}.{key}: must be an integer >= 0 or null, got {value!r}")
                targets.append(value)
            self.ticks.append((float(at), targets[0], targets[1]))
        if problems:
            raise ConfigError("\n".join(problems))
        self._next = 0

    def initial_tick_ms(self) -> float:
        return self.ticks[0][0] if self.ticks else math.inf

    def on_tick(self, snapshot: dict) -> dict:
        i = self._next
        self._next += 1
        if i >= len(self.ticks):
            return {"target_prefill": None, "target_decode": None, "next_tick_ms": None}
        _, prefill, decode = self.ticks[i]
        following = self.ticks[i + 1][0] if i + 1 < len(self.ticks) else None
        return {"target_prefill": prefill, "target_decode": decode, "next_tick_ms": following}


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
