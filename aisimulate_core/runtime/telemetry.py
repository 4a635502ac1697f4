"""Telemetry samples: the cluster's state and traffic at regular virtual times (CLUSTER.md §4).

With interval I and run end E (the last completion, or where a time cutoff stopped the run):
a ``baseline`` sample (ordinal 0) at 0, ``periodic`` samples at k·I for k = 1, 2, ... while
k·I <= E, each covering (previous, k·I], and a ``final`` one at E covering the rest unless E is
itself a periodic time. A sample at T sees everything settled at T (pass completions, ready
workers, arrivals placed at T) but no pass starting at T. Nothing here runs unless samples are
asked for; each sample goes to ``on_sample`` as it is taken.
"""

from __future__ import annotations

import math

from ..errors import ConfigError, SimulationError
from .traffic import TrafficWindow

# A tiny interval on a long run would sample without end (the reference hangs on
# --telemetry-interval-ms 1e-300): intervals are at least a microsecond, and a run takes at
# most this many samples (1 ms samples over a quarter of an hour)
MIN_INTERVAL_MS = 0.001
MAX_SAMPLES = 1_000_000


class Telemetry:
    def __init__(self, sim, interval_ms, on_sample):
        if not (isinstance(interval_ms, (int, float)) and not isinstance(interval_ms, bool)
                and math.isfinite(interval_ms) and interval_ms >= MIN_INTERVAL_MS):
            raise ConfigError(f"telemetry interval must be a finite number of ms >= "
                             f"{MIN_INTERVAL_MS:g}, got {interval_ms!r}")
        self.sim = sim
        self.interval_ms = float(interval_ms)
        self.on_sample = on_sample
        self.window = TrafficWindow()
        self._ordinal = 0
        self._k = 0                  # periodic samples taken
        self._baseline = False
        self._last_ms = None         # time of the last sample
        self._counted = {}           # pool -> its counters as of the last sample

    def next_time(self):
        if not self._baseline:
            return 0.0
        return (self._k + 1) * self.interval_ms

    def due_before(self, t):
        """The clock moves to ``t``: the samples strictly before it, of the state as it is (the
        baseline at 0 waits for the arrivals at 0 when the clock stops there)."""
        if not self._baseline:
            if t <= 0.0:
                return
            self._take_baseline()
        while (self._k + 1) * self.interval_ms < t:
            self._periodic()

    def periodic_due(self, t):
        """Whether a periodic sample falls at or before ``t``."""
        return self._baseline and (self._k + 1) * self.interval_ms <= t

    def due(self, t):
        if not self._baseline:
            self._take_baseline()
        while (self._k + 1) * self.interval_ms <= t:
            self._periodic()

    def _take_baseline(self):
        self._baseline = True
        self._take("baseline", 0.0, window=False)

    def _periodic(self):
        self._k += 1
        if self._k > MAX_SAMPLES:
            raise SimulationError(
                f"telemetry: sampling every {self.interval_ms:g} ms takes more than "
                f"{MAX_SAMPLES:,} samples; use a larger --telemetry-interval-ms")
        self._take("periodic", self._k * self.interval_ms)

    def finish(self, end_ms):
        """The run ended at ``end_ms``: the final sample, unless a periodic one was just there."""
        if not self._baseline:
            self.due(0.0)
        self.due(end_ms)
        if self._last_ms != end_ms:
            self._take("final", end_ms)

    # ------------------------------------------------------------------ one sample
    def _take(self, kind, at, window=True):
        sim = self.sim
        start = self._last_ms if self._last_ms is not None else 0.0
        sample = {"sample_ordinal": self._ordinal, "kind": kind, "interval_start_ms": start,
                  "sampled_at_ms": at}
        steps = sim.decode_steps()
        if window:
            sample["traffic"] = self.window.take_sample_traffic(at, steps)
        else:  # the baseline reports no traffic; arrivals at 0 go to the first periodic sample
            sample["traffic"] = TrafficWindow(at).take_sample_traffic(at, 0)
        pools = sim.pool_states()
        for prefix in ("prefill", "decode"):
            sample[f"{prefix}_scheduler_metrics"] = scheduler_rows(pools.get(prefix))
        for prefix in ("prefill", "decode"):
            sample[f"{prefix}_interval_metrics"] = self._interval(prefix, pools.get(prefix))
        for prefix in ("prefill", "decode"):
            state = pools.get(prefix)
            sample[f"router_pending_{prefix}_requests"] = (
                state.router.pending_count() if state is not None else 0)
        for which in ("active", "starting", "draining"):
            for prefix in ("prefill", "decode"):
                state = pools.get(prefix)
                sample[f"{which}_{prefix}_ids"] = state.ids(which) if state is not None else []
        self._ordinal += 1
        self._last_ms = at
        self.on_sample(sample)

    def _interval(self, prefix, state):
        """New preemptions and (SGLang) prefix-cache hits over the interval, from the ranks'
        cumulative counters (removed workers' included)."""
        totals = state.counters() if state is not None else (0, 0, 0)
        last = self._counted.get(prefix, (0, 0, 0))
        self._counted[prefix] = totals
        hit, total, preempted = (now - then for now, then in zip(totals, last))
        return {"cache_hit_tokens": hit, "cache_total_tokens": total, "preemptions": preempted}


def scheduler_rows(state):
    """One row per rank of every live worker (starting and draining included), by worker id
    then rank: the engine's gauges as of its latest pass completion or submission."""
    if state is None:
        return []
    rows = []
    for worker in state.live_workers():
        for rank in worker.ranks:
            active, inactive, running, waiting = rank.telemetry_gauges()
            total = rank.num_blocks
            rows.append({
                "worker_id": worker.worker_id, "dp_rank": rank.dp_rank, "active_blocks": active,
                "inactive_blocks": inactive, "total_blocks": total,
                "active_cache_usage": active / total if total else 0.0,
                "physical_cache_usage": (active + inactive) / total if total else 0.0,
                "running_requests": running, "waiting_requests": waiting,
            })
    return rows
