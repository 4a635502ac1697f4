"""kv_router config: every KvRouterConfig field with the reference's default, the alias, the
pool overrides, and one line per problem (all at once, sorted by path)."""

import pytest

from aisimulate_core.errors import ConfigError
from aisimulate_placement.kv_router_config import (
    FIELDS,
    LIVE_ONLY_FIELDS,
    UNSETTLED_FIELDS,
    parse_kv_router_config,
)
from test_kv_router_harness import Cluster

PATH = "$.spec.adapters.placement.config"

# The reference's KvRouterConfig signature (ai-dynamo-runtime 1.6.1) and its defaults.
REFERENCE_DEFAULTS = {
    "overlap_score_weight": None, "host_cache_hit_weight": 0.75, "disk_cache_hit_weight": 0.25,
    "router_temperature": 0.0, "use_kv_events": True, "router_replica_sync": False,
    "router_track_active_blocks": True, "router_track_output_blocks": False,
    "router_assume_kv_reuse": True, "router_track_prefill_tokens": True,
    "router_prefill_load_model": "none", "router_ttl_secs": 120.0,
    "router_approximate_cache_policy": "ttl", "router_queue_threshold": None,
    "router_event_threads": 4, "router_queue_policy": "fcfs", "use_remote_indexer": False,
    "serve_indexer": False, "enable_session_prefix_index": False,
    "shared_cache_multiplier": None, "shared_cache_type": "none",
    "router_predicted_ttl_secs": None, "conditional_disagg_enabled": False,
    "conditional_disagg_policy": "isl_bounding", "conditional_disagg_eff_isl_threshold": 2048,
    "conditional_disagg_eff_isl_ratio_threshold": 0.7,
    "conditional_disagg_prefill_busy_threshold": None,
    "conditional_disagg_decode_busy_threshold": None, "overlap_score_credit": 1.0,
    "overlap_score_credit_decay": 0.0, "prefill_load_scale": 1.0,
    "decode_active_request_weight": 0.0, "router_policy_config": None,
    "router_prefill_policy": None, "router_decode_policy": None,
    "router_tracking_hash": "public-xxh3-v1", "router_tracking_key_file": None,
    "router_tracking_key_id": None,
}


def error_lines(config):
    with pytest.raises(ConfigError) as error:
        parse_kv_router_config(config)
    return str(error.value).splitlines()


def test_every_reference_field_with_its_default():
    ours = {key: default for key, (default, _) in FIELDS.items()}
    assert {key: ours[key] for key in REFERENCE_DEFAULTS} == REFERENCE_DEFAULTS
    assert set(ours) - set(REFERENCE_DEFAULTS) == {"kv_event_lag_ms", "seed"}
    # the defaults given explicitly are accepted
    assert parse_kv_router_config(dict(REFERENCE_DEFAULTS)) == parse_kv_router_config({})
    assert parse_kv_router_config(None) == parse_kv_router_config({})


def test_live_only_fields_are_accepted_at_any_valid_value():
    config = {"use_kv_events": False, "router_ttl_secs": 3.0, "host_cache_hit_weight": 0.1,
              "disk_cache_hit_weight": 1, "shared_cache_multiplier": 0.5,
              "router_track_output_blocks": True, "router_event_threads": 16,
              "enable_session_prefix_index": True, "router_replica_sync": True,
              "use_remote_indexer": True, "serve_indexer": True,
              "router_tracking_hash": "keyed-xxh3-v1", "router_tracking_key_file": "k.bin",
              "router_tracking_key_id": "2026-01", "router_approximate_cache_policy": "lru"}
    assert set(config) == set(LIVE_ONLY_FIELDS)
    assert parse_kv_router_config(config) == parse_kv_router_config({})


def test_unsettled_fields_only_at_their_defaults():
    lines = error_lines({"router_prefill_load_model": "ais", "router_policy_config": {"a": 1},
                         "shared_cache_type": "hicache", "conditional_disagg_enabled": True,
                         "router_prefill_policy": "x"})
    assert lines == [
        f"{PATH}.conditional_disagg_enabled: true is not supported yet",
        f"{PATH}.router_policy_config: not supported yet",
        f"{PATH}.router_prefill_load_model: 'ais' is not supported yet",
        f"{PATH}.router_prefill_policy: 'x' is not supported yet",
        f"{PATH}.shared_cache_type: 'hicache' is not supported yet",
    ]
    assert "router_policy_config" in UNSETTLED_FIELDS


def test_all_problems_at_once_sorted():
    lines = error_lines({"router_temperature": -1, "overlap_score_credit": "1",
                         "router_queue_policy": "sjf", "zeta": 1, "overlap_score_credt": 1.0,
                         "router_event_threads": 0, "seed": 1.5, "kv_event_lag_ms": float("nan"),
                         "host_cache_hit_weight": 2, "router_assume_kv_reuse": 1,
                         "router_queue_threshold": -0.5})
    assert lines == [
        f"{PATH}.host_cache_hit_weight: must be a number between 0 and 1, got 2",
        f"{PATH}.kv_event_lag_ms: must be a finite number >= 0, got NaN",
        f"{PATH}.overlap_score_credit: expected a number, got \"1\"",
        f"{PATH}.overlap_score_credt: unknown field (did you mean 'overlap_score_credit'?)",
        f"{PATH}.router_assume_kv_reuse: expected a boolean, got 1",
        f"{PATH}.router_event_threads: must be an integer >= 1, got 0",
        f"{PATH}.router_queue_policy: must be one of 'fcfs', 'lcfs', 'wspt', got \"sjf\"",
        f"{PATH}.router_queue_threshold: must be a finite number >= 0, got -0.5",
        f"{PATH}.router_temperature: must be a finite number >= 0, got -1",
        f"{PATH}.seed: expected an integer, got 1.5",
        f"{PATH}.zeta: unknown field",
    ]


def test_config_must_be_an_object():
    assert error_lines([1]) == [f"{PATH}: must be an object, got [1]"]


def test_the_policy_checks_its_config():
    with pytest.raises(ConfigError) as error:
        Cluster({"router_queue_policy": "LCFS"})
    assert str(error.value) == f"{PATH}.router_queue_policy: must be one of 'fcfs', 'lcfs', 'wspt', got \"LCFS\""


def test_overlap_score_weight_replaces_the_scale():
    settings = parse_kv_router_config({"overlap_score_weight": 3, "prefill_load_scale": 0.5})
    assert (settings.prefill_load_scale, settings.overlap_score_credit) == (3, 1.0)
    settings = parse_kv_router_config({"overlap_score_weight": 0, "overlap_score_credit": 0.7})
    assert (settings.prefill_load_scale, settings.overlap_score_credit) == (0, 0.0)


def test_pool_overrides():
    base = parse_kv_router_config({"overlap_score_credit": 0.5})
    assert base.for_pool("agg") == base
    prefill = base.for_pool("prefill")
    assert not prefill.router_track_active_blocks and prefill.overlap_score_credit == 0.5
    decode = base.for_pool("decode")
    assert (decode.overlap_score_credit, decode.router_assume_kv_reuse,
            decode.router_track_prefill_tokens, decode.router_track_active_blocks) == (0.0, False, False, True)


def test_lag_null_is_no_lag():
    assert parse_kv_router_config({"kv_event_lag_ms": None}).kv_event_lag_ms == 0.0


def test_defaults_pass_their_checks_so_only_given_fields_are_checked():
    """parse_kv_router_config checks only the fields a config gives: a default must pass."""
    assert all(check(default) is None for default, check in FIELDS.values())


@pytest.mark.parametrize("config", [{}, {"overlap_score_credit": 0.5},
                                    {"overlap_score_weight": 0, "router_queue_policy": "wspt",
                                     "kv_event_lag_ms": None, "router_ttl_secs": 3.0}])
@pytest.mark.parametrize("kind", ["agg", "prefill", "decode"])
def test_a_pools_settings_are_the_parsed_ones_with_its_overrides(config, kind):
    from aisimulate_placement import kv_router_config
    kv_router_config._SEEN.clear()
    assert kv_router_config.settings_for_pool(config, kind) == \
        parse_kv_router_config(config).for_pool(kind)
