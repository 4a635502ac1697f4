"""The ``kv_router`` config: the reference's ``KvRouterConfig`` fields, checked and resolved.

``spec.adapters.placement.config`` takes every ``KvRouterConfig`` field of the reference (ai-dynamo
1.6.1) with its default, plus ``kv_event_lag_ms`` (a separate keyword in the reference) and
``seed`` (ours: the generator of the sampled mode, ``router_temperature`` > 0). Each field is in
one of three groups:

* it changes offline results and is implemented (``COST_FIELDS``);
* it only matters to a live deployment (event transport, indexer threads and replicas, tracking
  hashes, TTL indexers, host/disk/shared-cache tiers the offline index never holds): accepted,
  checked like the reference checks it, no effect (``LIVE_ONLY_FIELDS``);
* its offline effect is not established (CLUSTER.md §9.5): accepted at its default only, any
  other value is ``'<value>' is not supported yet`` (``UNSETTLED_FIELDS``).

Every problem of a config is reported at once, one line each, sorted by path.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import attrs

from aisimulate_core.placement import CONFIG_PATH
from aisimulate_core.spec.converter import key_path, raise_problems, show, unknown_field_message

QUEUE_POLICIES = ("fcfs", "lcfs", "wspt")

# A check returns None when the value is good, else the rule it breaks.
Check = Callable[[Any], "str | None"]


def _number(value: Any) -> bool:
    return type(value) in (int, float)


def _non_negative(value: Any) -> str | None:
    if not _number(value):
        return "expected a number"
    if not (math.isfinite(value) and value >= 0):
        return "must be a finite number >= 0"
    return None


def _unit_interval(value: Any) -> str | None:
    if not _number(value):
        return "expected a number"
    if not (math.isfinite(value) and 0 <= value <= 1):
        return "must be a number between 0 and 1"
    return None


def _boolean(value: Any) -> str | None:
    return None if type(value) is bool else "expected a boolean"


def _string(value: Any) -> str | None:
    return None if type(value) is str else "expected a string"


def _integer(minimum: int) -> Check:
    def check(value: Any) -> str | None:
        if type(value) is not int:
            return "expected an integer"
        return None if value >= minimum else f"must be an integer >= {minimum}"
    return check


def _one_of(*names: str) -> Check:
    def check(value: Any) -> str | None:
        if value in names and type(value) is str:
            return None
        return "must be one of " + ", ".join(f"'{name}'" for name in names)
    return check


def _nullable(check: Check) -> Check:
    return lambda value: None if value is None else check(value)


def _object(value: Any) -> str | None:
    return None if isinstance(value, (dict, str)) else "expected an object or a YAML string"


# field: (default, check)
COST_FIELDS: dict[str, tuple[Any, Check]] = {
    "overlap_score_credit": (1.0, _non_negative),
    "prefill_load_scale": (1.0, _non_negative),
    "overlap_score_weight": (None, _nullable(_non_negative)),
    "overlap_score_credit_decay": (0.0, _non_negative),
    "decode_active_request_weight": (0.0, _non_negative),
    "router_temperature": (0.0, _non_negative),
    "router_track_active_blocks": (True, _boolean),
    "router_assume_kv_reuse": (True, _boolean),
    "router_track_prefill_tokens": (True, _boolean),
    "router_queue_threshold": (None, _nullable(_non_negative)),
    "router_queue_policy": ("fcfs", _one_of(*QUEUE_POLICIES)),
    "kv_event_lag_ms": (0.0, _nullable(_non_negative)),
    "seed": (0, _integer(0)),
}
LIVE_ONLY_FIELDS: dict[str, tuple[Any, Check]] = {
    "use_kv_events": (True, _boolean),
    "router_ttl_secs": (120.0, _non_negative),
    "router_approximate_cache_policy": ("ttl", _one_of("ttl", "lru")),
    "host_cache_hit_weight": (0.75, _unit_interval),
    "disk_cache_hit_weight": (0.25, _unit_interval),
    "shared_cache_multiplier": (None, _nullable(_unit_interval)),
    "router_track_output_blocks": (False, _boolean),
    "router_event_threads": (4, _integer(1)),
    "enable_session_prefix_index": (False, _boolean),
    "router_replica_sync": (False, _boolean),
    "use_remote_indexer": (False, _boolean),
    "serve_indexer": (False, _boolean),
    "router_tracking_hash": ("public-xxh3-v1", _one_of("public-xxh3-v1", "keyed-xxh3-v1")),
    "router_tracking_key_file": (None, _nullable(_string)),
    "router_tracking_key_id": (None, _nullable(_string)),
}
UNSETTLED_FIELDS: dict[str, tuple[Any, Check]] = {
    "router_prefill_load_model": ("none", _one_of("none", "ais", "aic")),
    "router_policy_config": (None, _nullable(_object)),
    "shared_cache_type": ("none", _one_of("none", "hicache")),
    "router_predicted_ttl_secs": (None, _nullable(_non_negative)),
    "router_prefill_policy": (None, _nullable(_string)),
    "router_decode_policy": (None, _nullable(_string)),
    "conditional_disagg_enabled": (False, _boolean),
    "conditional_disagg_policy": ("isl_bounding",
                                  _one_of("isl_bounding", "prefill_load", "isl_or_load")),
    "conditional_disagg_eff_isl_threshold": (2048, _integer(0)),
    "conditional_disagg_eff_isl_ratio_threshold": (0.7, _unit_interval),
    "conditional_disagg_prefill_busy_threshold": (None, _nullable(_non_negative)),
    "conditional_disagg_decode_busy_threshold": (None, _nullable(_non_negative)),
}
FIELDS = {**COST_FIELDS, **LIVE_ONLY_FIELDS, **UNSETTLED_FIELDS}
COST_DEFAULTS = {key: default for key, (default, _) in COST_FIELDS.items()}


@attrs.frozen
class KvRouterSettings:
    """The values the router computes with, after the alias and the pool overrides (the
    defaults are those of ``COST_FIELDS``)."""

    overlap_score_credit: float
    prefill_load_scale: float
    overlap_score_credit_decay: float
    decode_active_request_weight: float
    router_temperature: float
    router_track_active_blocks: bool
    router_assume_kv_reuse: bool
    router_track_prefill_tokens: bool
    router_queue_threshold: float | None
    router_queue_policy: str
    kv_event_lag_ms: float
    seed: int

    def for_pool(self, kind: str) -> "KvRouterSettings":
        """The reference's per-pool overrides of a disaggregated run (CLUSTER.md §2.9)."""
        overrides = POOL_OVERRIDES.get(kind)
        return self if overrides is None else attrs.evolve(self, **overrides)


# the reference's per-pool overrides of a disaggregated run (CLUSTER.md §2.9)
POOL_OVERRIDES = {
    "prefill": {"router_track_active_blocks": False},
    "decode": {"overlap_score_credit": 0.0, "router_assume_kv_reuse": False,
               "router_track_prefill_tokens": False},
}


# settings of configs seen before, by their exact items (a run builds one router per pool, a
# sweep the same config many times; only valid configs are kept)
_SEEN: dict = {}
_SCALARS = (bool, int, float, str, type(None))


def settings_for_pool(config: Any, kind: str) -> KvRouterSettings:
    """``parse_kv_router_config(config).for_pool(kind)``, remembered for a config of scalars."""
    key = None
    if type(config) is dict and all(type(value) in _SCALARS for value in config.values()):
        key = (kind,) + tuple((name, type(value), repr(value)) for name, value in config.items())
        settings = _SEEN.get(key)
        if settings is not None:
            return settings
    settings = _settings(config, POOL_OVERRIDES.get(kind, {}))
    if key is not None:
        if len(_SEEN) >= 256:
            _SEEN.clear()
        _SEEN[key] = settings
    return settings


def parse_kv_router_config(config: Any) -> KvRouterSettings:
    """The settings of ``config`` (None is ``{}``); one ConfigError listing every problem."""
    return _settings(config, {})


def _settings(config: Any, overrides: dict) -> KvRouterSettings:
    """``parse_kv_router_config(config)`` with ``overrides`` (fields of KvRouterSettings) laid
    over it: one construction instead of a parse and an ``attrs.evolve``."""
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise_problems([(CONFIG_PATH, f"must be an object, got {show(config)}")])
    # only the fields given are checked: every default passes its check, and an unsettled
    # field is refused only away from its default (plugins/placement/tests/
    # test_kv_router_config.py)
    problems: list[tuple[str, str]] = []
    for key, value in config.items():
        field = FIELDS.get(key)
        if field is None:
            problems.append((CONFIG_PATH + key_path(key), unknown_field_message(str(key), FIELDS)))
            continue
        default, check = field
        rule = check(value)
        if rule is not None:
            problems.append((CONFIG_PATH + "." + key, f"{rule}, got {show(value)}"))
        elif key in UNSETTLED_FIELDS and value != default:
            problems.append((CONFIG_PATH + "." + key, _not_supported(value)))
    raise_problems(problems)

    values = dict(COST_DEFAULTS)
    values.update((key, value) for key, value in config.items() if key in COST_FIELDS)
    weight = values.pop("overlap_score_weight")
    if weight is not None:
        # the deprecated alias replaces the scale; at 0 it also zeroes the credit (reference)
        values["prefill_load_scale"] = weight
        if weight == 0:
            values["overlap_score_credit"] = 0.0
    if values["kv_event_lag_ms"] is None:
        values["kv_event_lag_ms"] = 0.0
    values.update(overrides)
    return KvRouterSettings(**values)


def _not_supported(value: Any) -> str:
    if isinstance(value, str):
        return f"'{value}' is not supported yet"
    if value is None or isinstance(value, (bool, int, float)):
        return f"{show(value)} is not supported yet"
    return "not supported yet"
