"""Scaling policies built into the core: ``none`` keeps the initial workers for the whole run."""

from __future__ import annotations

import math
from typing import ClassVar

from aisimulate_core.registry import check_provider_config

CONFIG_PATH = "$.spec.adapters.scaling.config"


class NoScaling:
    """Never scales: its first tick is at infinity, so the runtime never asks it again."""

    NAME: ClassVar[str] = "none"

    def __init__(self, config: dict) -> None:
        self.config = check_provider_config(config, (), CONFIG_PATH)

    def initial_tick_ms(self) -> float:
        return math.inf
