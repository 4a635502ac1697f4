"""The ``load`` scaling policy: a reactive autoscaler driven by queue depth, KV usage and queued
prefill tokens per worker.

Our own design, modelled on the load ("easy") mode of Dynamo's Planner: scale a pool up by a
step when any engine-level signal is above its high watermark, down by a step when every signal
has stayed below its low watermark for a while, and never so far down that the survivors would
be above a high watermark at once. It is not the Planner (CLUSTER.md §3.9: that cannot run here)
and its results are not compared with it.

Every ``interval_ms`` the policy reads one observation per pool from the snapshot (CLUSTER.md
§3.8; aggregated deployments have one pool, the decode one), over its **active** workers (the
ones that take new work):

* ``queue``: requests waiting per active worker = (Σ ``waiting_requests`` of the active workers'
  ``<pool>_scheduler_metrics`` rows + ``router_pending_<pool>_requests``) / active workers.
  Without scheduler rows it falls back to the latest FPM rows' ``num_queued_prefill`` +
  ``num_queued_decode``;
* ``kv``: mean ``active_cache_usage`` of those rows (absent without scheduler rows);
* ``prefill_tokens``: prompt tokens queued per active worker = Σ ``sum_queued_prefill_tokens``
  of each active rank's latest FPM row (a rank keeps its latest row until it sends another) /
  active workers.

A decision uses the mean of the last ``window_ticks`` observations, and only a full window:
the window restarts whenever the pool's set of active workers changes, so a decision never mixes
observations of two pool sizes (which also makes each change wait ``window_ticks`` ticks before
the next). A key missing from the snapshot makes that signal absent; a pool with no signal at
all is left alone.

* **Scale up** when any signal's mean is above its high watermark, unless workers of that pool
  are still starting (the capacity asked for is on its way): by as many workers as would bring
  the worst signal back to its high watermark if the load spread evenly (``ceil(active × mean /
  high) − active``), at least 1 and at most ``scale_up_step``.
* **Scale down** by ``scale_down_step`` once every present signal's mean has been below its low
  watermark for ``scale_down_ticks`` consecutive full-window ticks; never below the workers
  still needed to keep each signal under its high watermark once the load is spread over fewer
  workers (``floor(mean × active / high) + 1``), nor below ``min_workers``. Removing a starting
  worker cancels its startup (the runtime removes the highest ids first).
* ``min_workers`` / ``max_workers`` bound every target (a pool outside them is brought back at
  the first tick). ``gpu_budget`` caps the GPUs of all pools' targets plus their draining workers
  (they still hold their GPUs): growth stops where the budget would be exceeded, the pool under
  the most pressure growing first (a worker drained at this tick still counts until it is
  removed); the budget never drains a worker, and wins over ``min_workers``.

Configuration (``spec.adapters.scaling.config``; every per-pool knob is a number for all pools
or ``{"prefill": x, "decode": y}``, aggregated deployments using ``decode``):

====================================  ========  ==============================================
knob                                  default   meaning
====================================  ========  ==============================================
``interval_ms``                       1000      time between ticks; the first is at interval_ms
``window_ticks``                      3         observations averaged per decision
``scale_down_ticks``                  5         consecutive low ticks before a step down
``scale_up_step``                     1         most workers added per scale-up
``scale_down_step``                   1         workers removed per scale-down
``max_queue_per_worker`` (pool)       2.0       queue high watermark; null: signal off
``min_queue_per_worker`` (pool)       half max  queue low watermark
``max_kv_usage`` (pool)               0.8       KV high watermark (active cache usage, 0..1]
``min_kv_usage`` (pool)               half max  KV low watermark
``max_prefill_tokens_per_worker``     null      queued prompt tokens high watermark (off)
``min_prefill_tokens_per_worker``     half max  queued prompt tokens low watermark
``min_workers`` (pool)                1         fewest non-draining workers
``max_workers`` (pool)                null      most non-draining workers (null: no limit)
``gpus_per_worker`` (pool)            1         GPUs of one worker, unless the snapshot's
                                                ``<pool>_gpus_per_worker`` says
``gpu_budget``                        null      GPUs all pools may hold (null: no budget)
====================================  ========  ==============================================
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from typing import ClassVar

from aisimulate_core.errors import ConfigError

CONFIG_PATH = "$.spec.adapters.scaling.config"
POOLS = ("prefill", "decode")            # the snapshot's prefixes, in tick order

# signal name -> (high watermark knob, low watermark knob, default high)
SIGNALS = {
    "queue": ("max_queue_per_worker", "min_queue_per_worker", 2.0),
    "kv": ("max_kv_usage", "min_kv_usage", 0.8),
    "prefill_tokens": ("max_prefill_tokens_per_worker", "min_prefill_tokens_per_worker", None),
}
_GLOBAL_INTS = {"window_ticks": 3, "scale_down_ticks": 5, "scale_up_step": 1,
                "scale_down_step": 1}
_POOL_COUNTS = {"min_workers": 1, "max_workers": None, "gpus_per_worker": 1}
KNOBS = frozenset(("interval_ms", "gpu_budget", *_GLOBAL_INTS, *_POOL_COUNTS,
                   *(knob for high, low, _ in SIGNALS.values() for knob in (high, low))))


class LoadScaling:
    """Scales each pool on its queue depth, KV usage and queued prefill tokens per worker."""

    NAME: ClassVar[str] = "load"

    def __init__(self, config: dict) -> None:
        settings = _Settings(config)
        self.interval_ms = settings.interval_ms
        self.window_ticks = settings.ints["window_ticks"]
        self.scale_down_ticks = settings.ints["scale_down_ticks"]
        self.scale_up_step = settings.ints["scale_up_step"]
        self.scale_down_step = settings.ints["scale_down_step"]
        self.gpu_budget = settings.gpu_budget
        self.pools = {name: _PoolState(name, settings, self.window_ticks) for name in POOLS}

    def initial_tick_ms(self) -> float:
        return self.interval_ms

    def on_tick(self, snapshot: dict) -> dict:
        now = float(snapshot.get("now_ms", 0.0))
        wanted = {}
        for name, pool in self.pools.items():
            pool.observe(snapshot)
            if pool.present:
                wanted[name] = self._decide(pool)
        self._fit_budget(wanted)
        answer = {"target_prefill": None, "target_decode": None,
                  "next_tick_ms": now + self.interval_ms}
        for name, target in wanted.items():
            if target != self.pools[name].non_draining:
                answer[f"target_{name}"] = target
        return answer

    # ------------------------------------------------------------------ one pool
    def _decide(self, pool):
        current = pool.non_draining
        pool.pressure = 0.0
        bounded = min(max(current, pool.min_workers), pool.max_workers)
        if bounded != current:
            return bounded
        means = pool.means()
        if means is None:              # the window is not full yet
            return current
        pool.pressure = max((means[s] / pool.high[s] for s in means), default=0.0)
        if pool.pressure > 1.0:
            pool.low_ticks = 0
            if pool.starting:
                return current
            # as many workers as bring the worst signal back to its high watermark if the load
            # spread evenly, within the step
            step = math.ceil(pool.active * pool.pressure) - pool.active
            return min(current + min(max(step, 1), self.scale_up_step), pool.max_workers)
        if means and all(means[s] < pool.low[s] for s in means):
            pool.low_ticks += 1
        else:
            pool.low_ticks = 0
        if pool.low_ticks < self.scale_down_ticks:
            return current
        pool.low_ticks = 0
        needed = max(math.floor(means[s] * pool.active / pool.high[s]) + 1 for s in means)
        return max(current - self.scale_down_step, needed, pool.min_workers)

    # ------------------------------------------------------------------ the GPU budget
    def _fit_budget(self, wanted):
        """Cut scale-ups that would take the pools past ``gpu_budget``: the pool under the most
        pressure first, prefill before decode on a tie. Scale-downs are never changed."""
        if self.gpu_budget is None:
            return
        pools = self.pools
        # what the pools hold now: a worker this tick drains still holds its GPUs
        held = sum((pools[n].non_draining + pools[n].draining) * pools[n].gpus for n in wanted)
        growing = sorted((n for n in wanted if wanted[n] > pools[n].non_draining),
                         key=lambda n: -pools[n].pressure)
        for name in growing:
            pool = pools[name]
            room = max(0, (self.gpu_budget - held) // pool.gpus)
            added = min(wanted[name] - pool.non_draining, room)
            wanted[name] = pool.non_draining + added
            held += added * pool.gpus


class _PoolState:
    """What the policy knows about one pool: its bounds, its last counts, its window."""

    def __init__(self, name, settings, window_ticks):
        self.name = name
        self.high = {s: v for s, v in settings.high[name].items() if v is not None}
        self.low = settings.low[name]
        self.min_workers = settings.counts["min_workers"][name]
        limit = settings.counts["max_workers"][name]
        self.max_workers = math.inf if limit is None else limit
        self.config_gpus = settings.counts["gpus_per_worker"][name]
        self.gpus = self.config_gpus
        self.window = deque(maxlen=window_ticks)
        self.present = False
        self.active_ids = ()
        self.active = self.starting = self.draining = self.non_draining = 0
        self.low_ticks = 0
        self.pressure = 0.0
        self.latest_fpm = {}           # (worker_id, dp_rank) -> that rank's latest FPM row

    def observe(self, snapshot):
        p = self.name
        active_ids = tuple(snapshot.get(f"active_{p}_ids") or ())
        self.active = len(active_ids)
        self.starting = int(snapshot.get(f"starting_{p}_count") or 0)
        self.draining = int(snapshot.get(f"draining_{p}_count") or 0)
        self.non_draining = self.active + self.starting
        # A pool exists once it has had a worker (aggregated deployments never have prefill).
        self.present = self.present or self.non_draining + self.draining > 0
        gpus = snapshot.get(f"{p}_gpus_per_worker")
        self.gpus = gpus if _is_count(gpus) and gpus > 0 else self.config_gpus
        if active_ids != self.active_ids:
            self.active_ids = active_ids
            self.window.clear()
            self.low_ticks = 0
        self._remember_fpm(snapshot.get(f"{p}_fpm_snapshots"), set(active_ids))
        self.window.append(self._signals(snapshot, set(active_ids)))

    def _remember_fpm(self, rows, active):
        latest = self.latest_fpm
        for row in rows or ():
            latest[(row.get("worker_id"), row.get("dp_rank", 0))] = row
        for key in [k for k in latest if k[0] not in active]:
            del latest[key]

    def _signals(self, snapshot, active):
        """This tick's value of each enabled signal the snapshot can give (absent: left out)."""
        p = self.name
        workers = max(self.active, 1)
        rows = snapshot.get(f"{p}_scheduler_metrics")
        fpm_known = f"{p}_fpm_snapshots" in snapshot
        values = {}
        if rows is not None:
            rows = [r for r in rows if r.get("worker_id") in active]
            waiting = sum(r.get("waiting_requests", 0) for r in rows)
            if rows:
                values["kv"] = sum(r.get("active_cache_usage", 0.0) for r in rows) / len(rows)
        elif fpm_known:
            waiting = sum(r.get("num_queued_prefill", 0) + r.get("num_queued_decode", 0)
                          for r in self.latest_fpm.values())
        else:
            waiting = None
        if waiting is not None:
            values["queue"] = (waiting + (snapshot.get(f"router_pending_{p}_requests") or 0)) \
                / workers
        if fpm_known:
            values["prefill_tokens"] = sum(r.get("sum_queued_prefill_tokens", 0)
                                           for r in self.latest_fpm.values()) / workers
        return {s: v for s, v in values.items() if s in self.high}

    def means(self):
        """Each signal's mean over a full window (a signal absent from any tick is left out);
        None while the window is not full."""
        if len(self.window) < self.window.maxlen:
            return None
        names = set.intersection(*(set(obs) for obs in self.window))
        return {s: sum(obs[s] for obs in self.window) / len(self.window) for s in sorted(names)}


class _Settings:
    """The checked configuration; every problem is one ``$.path: rule, got VALUE`` line, all
    reported together."""

    def __init__(self, config):
        problems = []
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise ConfigError(f"{CONFIG_PATH}: must be an object, got {type(config).__name__}")
        problems += [f"{CONFIG_PATH}.{key}: unknown field" for key in sorted(map(str, config))
                     if key not in KNOBS]
        self.problems = problems
        interval = config.get("interval_ms", 1000.0)
        if not _is_real(interval) or not math.isfinite(interval) or interval <= 0:
            problems.append(f"{CONFIG_PATH}.interval_ms: must be a finite number > 0, got "
                            f"{interval!r}")
        self.interval_ms = float(interval) if _is_real(interval) else 1000.0
        self.ints = {key: self._count(config, key, default, minimum=1)
                     for key, default in _GLOBAL_INTS.items()}
        budget = config.get("gpu_budget")
        self.gpu_budget = None if budget is None else self._count(config, "gpu_budget", None, 1)
        lows, where = self._per_pool(config, "min_workers", 1, self._count_rule(0))
        highs, _ = self._per_pool(config, "max_workers", None, self._count_rule(1, True))
        gpus, _ = self._per_pool(config, "gpus_per_worker", 1, self._count_rule(1))
        self.counts = {"min_workers": lows, "max_workers": highs, "gpus_per_worker": gpus}
        for pool in POOLS:
            if highs[pool] is not None and lows[pool] > highs[pool]:
                problems.append(f"{where[pool]}: must not exceed max_workers ({highs[pool]}), "
                                f"got {lows[pool]!r}")
        self.high = {pool: {} for pool in POOLS}
        self.low = {pool: {} for pool in POOLS}
        for signal, (high_key, low_key, default) in SIGNALS.items():
            self._watermarks(config, signal, high_key, low_key, default)
        if not any(self.high[pool][s] is not None for pool in POOLS for s in SIGNALS):
            problems.append(f"{CONFIG_PATH}: needs at least one signal on (max_queue_per_worker, "
                            f"max_kv_usage or max_prefill_tokens_per_worker), got none")
        if problems:     # a knob given once for both pools reports its problem once
            raise ConfigError("\n".join(dict.fromkeys(problems)))

    # -- rules
    def _count(self, config, key, default, minimum):
        value = config.get(key, default)
        if value is None or not _is_count(value) or value < minimum:
            self.problems.append(f"{CONFIG_PATH}.{key}: must be an integer >= {minimum}, got "
                                 f"{value!r}")
            return default
        return value

    @staticmethod
    def _count_rule(minimum, nullable=False):
        rule = f"must be an integer >= {minimum}" + (" or null" if nullable else "")
        return rule, lambda v: (v is None and nullable) or (_is_count(v) and v >= minimum)

    def _per_pool(self, config, key, default, rule):
        """``{"prefill": v, "decode": v}`` from a knob given as one value or per pool, and the
        path each value came from."""
        text, ok = rule
        value = config.get(key, default)
        if isinstance(value, dict):
            path = f"{CONFIG_PATH}.{key}"
            self.problems += [f"{path}.{pool}: unknown pool (prefill or decode)"
                              for pool in sorted(map(str, value)) if pool not in POOLS]
            given = {pool: value.get(pool, default) for pool in POOLS}
            where = {pool: f"{path}.{pool}" for pool in POOLS}
        else:
            given = {pool: value for pool in POOLS}
            where = {pool: f"{CONFIG_PATH}.{key}" for pool in POOLS}
        for pool in POOLS:
            if not ok(given[pool]):
                self.problems.append(f"{where[pool]}: {text}, got {given[pool]!r}")
                given[pool] = default
        return given, where

    def _watermarks(self, config, signal, high_key, low_key, default):
        capped = signal == "kv"          # a cache usage is a fraction
        high_rule = ("must be a number in (0, 1] or null" if capped else
                     "must be a number > 0 or null",
                     lambda v: v is None or (_is_real(v) and 0 < v and (v <= 1 or not capped)
                                             and math.isfinite(v)))
        highs, _ = self._per_pool(config, high_key, default, high_rule)
        low_rule = ("must be a number >= 0 or null",
                    lambda v: v is None or (_is_real(v) and 0 <= v and math.isfinite(v)))
        lows, where = self._per_pool(config, low_key, None, low_rule)
        for pool in POOLS:
            high, low = highs[pool], lows[pool]
            self.high[pool][signal] = high
            if high is None:
                if low is not None:
                    self.problems.append(f"{where[pool]}: needs {high_key} set, got {low!r}")
                continue
            if low is None:
                low = high / 2.0
            elif low >= high:
                self.problems.append(f"{where[pool]}: must be below {high_key} ({high!r}), "
                                     f"got {low!r}")
            self.low[pool][signal] = low


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
