"""Upper bounds on sizes, checked before anything is allocated (README "Limits").

Each bound is either far above any real deployment or exactly where the reference itself
fails (tests/fixtures/bounds/ records what the reference does around each one). A value past
a bound is one problem line `<path>: must be <= BOUND (<why>), got VALUE`.

Limits that cost nothing to honour (`max_model_len`, `max_num_seqs`, `max_num_batched_tokens`,
`concurrency`, `max_in_flight`) keep the reference's u64 range: it accepts 2^40 and so do we.
So does `num_gpu_blocks`: KV pools are lazy (kv/block_pool.py), their memory grows with the
blocks in use, not with the capacity.
"""

import math
from typing import Any

from .converter import U32_MAX, show
from .engine import EngineConfig
from .topology import AggregatedTopology

# Tokens in one block: engines use 1..256; the reference runs 10^8 (it reserves 4 bytes per
# token of a block, lazily) and runs out of memory at 2^31. Nothing of ours grows with it.
MAX_BLOCK_SIZE = 1 << 27
# Ranks (initial_workers x dp_size, summed over pools): the largest clusters have a few
# thousand GPUs per model.
MAX_RANKS = 1 << 16
# Tokens in one request (prompt or output): above every model's context window (10M); the
# reference needs 4 bytes per token and fails at 10^9.
MAX_TOKENS = 1 << 24
# Requests of one synthetic workload; the reference fails at 10^7 (456 bytes a request).
MAX_REQUESTS = 10_000_000
# A step, a delay or a time may be at most 2^64 s (after scaling): the reference's Duration
# range; sums of 10^7 such stay finite.
MAX_STEP_MS = MAX_TIME_MS = 2.0**64 * 1000.0
# Speed-up ratios: 0 means unscaled; below this the durations of any timing model could leave
# the Duration range.
MIN_SPEEDUP_RATIO = 1e-12
# Arrivals: mean gaps of at most 10^15 ms, so 10^7 of them stay inside the Duration range.
MIN_REQUEST_RATE = 1e-12
MAX_ARRIVAL_INTERVAL_MS = 1000.0 / MIN_REQUEST_RATE

# KV transfer: at most 1 GiB per token (models need about 1 MiB) over at least 1 KB/s, so the
# longest transfer, 2^24 tokens, stays inside the Duration range.
MAX_BYTES_PER_TOKEN = 1 << 30
MIN_BANDWIDTH_GB_S = 1e-6


def at_most(c: Any, path: str, value: Any, bound: Any, why: str) -> None:
    if value is not None and value > bound:
        c.add(path, f"must be <= {bound} ({why}), got {show(value)}")


def check_rank_bounds(r: EngineConfig, p: str, c: Any) -> None:
    at_most(c, p + ".block_size", r.block_size, MAX_BLOCK_SIZE, "tokens per KV block")
    for name in ("kv_transfer_bytes_per_token", "kv_cache_bytes_per_token"):
        at_most(c, f"{p}.{name}", getattr(r, name), MAX_BYTES_PER_TOKEN, "bytes per token")
    bandwidth = r.kv_transfer_bandwidth
    if _below(bandwidth, MIN_BANDWIDTH_GB_S):
        c.add(p + ".kv_transfer_bandwidth", f"must be 0 or >= {MIN_BANDWIDTH_GB_S} GB/s "
              f"(transfers would overflow), got {show(bandwidth)}")
    ratio = r.speedup_ratio
    decode_ratio = ratio * r.decode_speedup_ratio
    if _below(ratio, MIN_SPEEDUP_RATIO):
        c.add(p + ".speedup_ratio", f"must be 0 or >= {MIN_SPEEDUP_RATIO} (durations would "
              f"overflow), got {show(ratio)}")
        return
    if _below(decode_ratio, MIN_SPEEDUP_RATIO):
        c.add(p + ".decode_speedup_ratio", f"times speedup_ratio ({show(ratio)}) must be 0 or >= "
              f"{MIN_SPEEDUP_RATIO} (durations would overflow), got {show(r.decode_speedup_ratio)}")
        return
    timing = r.timing_model
    if timing.type == "fixed":
        for name, scale in (("prefill_ms", ratio), ("decode_ms", decode_ratio)):
            value = timing.params[name]
            if math.isfinite(value) and math.isfinite(scale) and scale >= 0:
                if value / (scale or 1.0) > MAX_STEP_MS:
                    c.add(f"{p}.timing_model.{name}", f"divided by the speed-up ratio must be "
                          f"<= {MAX_STEP_MS:.6g} ms (2^64 s), got {show(value)}")


def _below(value: float | None, minimum: float) -> bool:
    """Whether a finite, nonzero value is under `minimum` (0 means "off"; negatives and
    non-finite values are the finite/nonnegative rules' to report)."""
    return value is not None and math.isfinite(value) and 0 < value < minimum


# Times that only wait (startup_delay_ms, handoff_latency_ms) or cut off (max_sim_time_ms) are
# not bounded: the reference accepts 1e308 there. Times that add up (arrivals, think delays)
# are.
def time_at_most(c: Any, path: str, value: float | None) -> None:
    if value is not None and math.isfinite(value) and abs(value) > MAX_TIME_MS:
        c.add(path, f"must be <= {MAX_TIME_MS:.6g} ms (2^64 s), got {show(value)}")


def check_deployment_bounds(spec: Any, role_path: Any, p: str, c: Any) -> None:
    """Ranks over every pool the topology starts with."""
    engine, topology = spec.engine, spec.topology
    if isinstance(topology, AggregatedTopology):
        pools = (("aggregated", topology.workers, p + ".topology.workers"),)
    else:
        pools = (("prefill", topology.prefill, p + ".topology.prefill"),
                 ("decode", topology.decode, p + ".topology.decode"))
    ranks = 0
    each_within = True
    for stage, pool, pool_path in pools:
        role = engine.role(stage)
        group = role_path(engine, stage, p + ".engine")
        if role.dp_size <= U32_MAX:  # else the u32 rule reports it
            at_most(c, group + ".dp_size", role.dp_size, MAX_RANKS, "ranks per worker")
        at_most(c, pool_path + ".initial_workers", pool.initial_workers, MAX_RANKS, "workers")
        each_within = each_within and role.dp_size <= MAX_RANKS and pool.initial_workers <= MAX_RANKS
        ranks += role.dp_size * pool.initial_workers
    if each_within and ranks > MAX_RANKS:  # else the field itself is reported
        c.add(pools[-1][2] + ".initial_workers", f"gives {ranks} ranks (initial_workers x "
              f"dp_size over all pools), more than {MAX_RANKS}")


def check_request_count(count: int, p: str, c: Any) -> None:
    if count > MAX_REQUESTS:
        c.add(p, f"must hold at most {MAX_REQUESTS} requests, got {count}")


def check_request_bounds(r: Any, rp: str, c: Any) -> None:
    time_at_most(c, rp + ".arrival_time_ms", r.arrival_time_ms)
    at_most(c, rp + ".input_tokens", r.input_tokens, MAX_TOKENS, "tokens per request")
    at_most(c, rp + ".output_tokens", r.output_tokens, MAX_TOKENS, "tokens per request")


def check_synthetic_bounds(t: Any, p: str, c: Any) -> None:
    at_most(c, p + ".isl", t.isl, MAX_TOKENS, "tokens per request")
    at_most(c, p + ".osl", t.osl, MAX_TOKENS, "tokens per request")
    at_most(c, p + ".request_count", t.request_count, MAX_REQUESTS, "requests per run")
    turns = t.turns_per_session
    at_most(c, p + ".turns_per_session", turns, MAX_REQUESTS, "requests per run")
    if t.source_type == "synthetic-session" and turns and t.request_count and turns <= MAX_REQUESTS:
        if t.request_count <= MAX_REQUESTS and t.request_count * turns > MAX_REQUESTS:
            c.add(p + ".turns_per_session", f"times request_count gives {t.request_count * turns}"
                  f" requests, more than {MAX_REQUESTS}")
        if t.isl and t.osl is not None and t.isl <= MAX_TOKENS and t.osl <= MAX_TOKENS:
            # each turn's prompt holds every earlier input and output
            last_prompt = turns * t.isl + (turns - 1) * t.osl
            if last_prompt > MAX_TOKENS:
                c.add(p + ".turns_per_session", f"makes the last turn's prompt {last_prompt} "
                      f"tokens (turns x isl + (turns - 1) x osl), more than {MAX_TOKENS}")
    rate = t.request_rate
    if _below(rate, MIN_REQUEST_RATE):
        c.add(p + ".request_rate", f"must be >= {MIN_REQUEST_RATE} per second, got {show(rate)}")
    at_most(c, p + ".arrival_interval_ms", t.arrival_interval_ms, MAX_ARRIVAL_INTERVAL_MS,
            "ms between arrivals")
    time_at_most(c, p + ".inter_turn_delay_ms", t.inter_turn_delay_ms)


def check_trace_bounds(t: Any, p: str, c: Any) -> None:
    ratio = t.arrival_speedup_ratio
    if _below(ratio, MIN_SPEEDUP_RATIO):
        c.add(p + ".arrival_speedup_ratio", f"must be >= {MIN_SPEEDUP_RATIO} (arrival times would "
              f"overflow), got {show(ratio)}")


__all__ = ["MAX_BLOCK_SIZE", "MAX_RANKS", "MAX_REQUESTS", "MAX_STEP_MS", "MAX_TIME_MS",
           "MAX_TOKENS",
           "MIN_REQUEST_RATE", "MIN_SPEEDUP_RATIO", "check_deployment_bounds",
           "check_rank_bounds", "check_request_bounds", "check_request_count", "check_synthetic_bounds",
           "check_trace_bounds"]
