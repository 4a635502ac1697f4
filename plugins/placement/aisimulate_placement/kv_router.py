"""``kv_router``: the reference's KV-aware router (ai-dynamo 1.6.1 offline replay, CLUSTER.md §2).

For a request of ``isl`` prompt tokens, each candidate scheduler w (an active worker's DP rank)
costs

    decay_w   = 1 / (1 + d · ((P_w − min_v P_v) / bs) / B)        (1 when d = 0)
    prefill_w = max(0, (P_w + isl) / bs − c · decay_w · ov_w)      (0 without prefill tracking)
    logit_w   = s · prefill_w + (D_w + N_w) + r · A_w

with ov_w the prefix of the prompt's block chain the router's index holds for w, P_w the
uncached prompt tokens of w's requests still in prefill, D_w the distinct full prompt blocks of
w's unfinished requests, N_w the prompt's blocks not among them, A_w w's unfinished requests,
B = ceil(isl / bs), c = ``overlap_score_credit``, s = ``prefill_load_scale`` (or
``overlap_score_weight``), d = ``overlap_score_credit_decay``, r = ``decode_active_request_weight``.

The lowest logit wins. Unlike the reference, which breaks ties at random on every run, ties go
to the lowest (worker_id, dp_rank), so a run is reproducible; ``router_temperature`` > 0 samples
p_w ∝ exp(−(logit_w − min) / (max − min) / T) with ``random.Random(seed)``.

Config fields with no effect offline (accepted and checked, see kv_router_config.py):
``use_kv_events``, ``router_ttl_secs``, ``router_approximate_cache_policy``,
``host_cache_hit_weight``, ``disk_cache_hit_weight``, ``shared_cache_multiplier`` (the offline
index holds GPU-tier blocks only), ``router_track_output_blocks``, ``router_event_threads``,
``enable_session_prefix_index``, ``router_replica_sync``, ``use_remote_indexer``,
``serve_indexer``, ``router_tracking_hash``, ``router_tracking_key_file``,
``router_tracking_key_id``. Accepted at their defaults only (offline effect not established):
``router_prefill_load_model``, ``router_policy_config``, ``shared_cache_type``,
``router_predicted_ttl_secs``, ``router_prefill_policy``, ``router_decode_policy``,
``conditional_disagg_*``.

A request the pending queue holds is placed, when released, with the load at that time but with
the overlaps the index gave when it arrived (as the reference does: it looks the prompt up once).

This class is the specification and the Python twin of the router in C (csrc/kv_router.c,
kv_router_native.py): ``KvRouter(config, pool)`` builds the C one instead on a C-backend
simulation's pool (``PoolView.native``) unless ``router_temperature`` > 0; the Python one runs
under ``AISIMULATE_BACKEND=python``, on hand-made pool views and for subclasses.
"""

from __future__ import annotations

from array import array
import math
import random
from typing import Any, NamedTuple, Sequence

from aisimulate_core.errors import SimulationError
from aisimulate_core.placement import (
    QUEUED,
    Placement,
    PlacementPolicy,
    PlacementRequest,
    PoolView,
    SchedulerView,
    WorkerView,
)
from aisimulate_placement.kv_router_config import settings_for_pool
# DEFAULT_MAX_BATCHED_TOKENS: the reference's budget for a worker that reports no
# max_num_batched_tokens (such a worker is practically never busy), shared with the C router
from aisimulate_placement.kv_router_native import (DEFAULT_MAX_BATCHED_TOKENS, NO_ENDPOINTS,
                                                   NativeKvRouter, native_refusal)
from aisimulate_placement.kv_router_queue import PendingQueue, QueuedRequest
from aisimulate_placement.kv_router_state import LaggedEvents, SchedulerState



class Decision(NamedTuple):
    """One placement, for tests and diagnostics (``KvRouter.decisions``)."""

    uuid: int
    now_ms: float
    worker_id: int
    dp_rank: int
    logit: float
    overlap_blocks: int
    costs: dict  # (worker_id, dp_rank) -> logit of every candidate


class KvRouter(PlacementPolicy):
    """The reference's KV router; one instance per pool, with the pool's overrides."""

    NAME = "kv_router"
    CONFIG_KEYS = None
    OBSERVES = frozenset({"kv_events", "prefill", "terminal"})

    def __new__(cls, config: dict, pool: PoolView) -> Any:
        # the router in C (kv_router_native.py) when it decides exactly as this class would;
        # a subclass (which may change how it decides) stays in Python
        if cls is KvRouter or cls is KvAware:
            settings = settings_for_pool(config, pool.kind)
            if native_refusal(settings, pool) is None:
                return NativeKvRouter(config, pool, settings, cls.NAME)
        return object.__new__(cls)

    def __init__(self, config: dict, pool: PoolView) -> None:
        super().__init__(config, pool)
        self.settings = settings = settings_for_pool(config, pool.kind)
        # the decode pool neither credits overlap nor tracks prefill: it needs no index and no
        # prefill notifications, and reports overlap 0 as the reference does
        self._uses_index = pool.kind != "decode"
        # without event lag the index is what the engines hold as of their latest pass end:
        # the runtime answers that from the engine (SchedulerView.cached_prefix), sparing the
        # per-block events; with lag the router keeps its own index of delayed events
        self._engine_index = (self._uses_index and settings.kv_event_lag_ms == 0
                              and pool.engine_index)
        if not self._uses_index:
            self.OBSERVES = frozenset({"terminal"})
        elif self._engine_index:
            self.OBSERVES = frozenset({"kv_index", "prefill", "terminal"})
        self._states: dict[tuple, SchedulerState] = {}
        self._placed: dict[int, list] = {}   # uuid -> [state, prefill share, held blocks]
        self._queue = (PendingQueue(settings.router_queue_policy)
                       if settings.router_queue_threshold is not None else None)
        self._lagged = LaggedEvents(settings.kv_event_lag_ms) if settings.kv_event_lag_ms > 0 else None
        self._rng = random.Random(settings.seed)
        self._hashes_needed = self._uses_index or (settings.router_track_active_blocks
                                                   and settings.router_assume_kv_reuse)
        self.last_costs: dict = {}    # (worker_id, dp_rank) -> logit, of the latest decision
        self.decisions: list[Decision] | None = None   # set to [] to log every decision

    @property
    def holds_requests(self) -> bool:
        """With a pending queue the router keeps requests no candidate can take, an empty
        pool's included; without one the runtime holds a disaggregated pool's requests."""
        return self._queue is not None

    # ------------------------------------------------------------------ placement
    def place(self, request: PlacementRequest) -> Any:
        now = request.now_ms
        if self._lagged:
            self._apply_due_events(now)
        candidates = self.pool.schedulers
        hashes: Sequence[int] = _u64_array(request.block_hashes) if self._hashes_needed else ()
        overlaps = self._overlaps(candidates, hashes) if self._uses_index else {}
        isl = request.input_length
        queue = self._queue
        if queue is not None:
            if queue or self._all_busy(candidates):
                best = max(overlaps.values(), default=0)
                queue.push(QueuedRequest(
                    request.uuid, isl, hashes, overlaps, now, request.priority,
                    request.strict_priority, isl - min(isl, best * self.pool.block_size)))
                return QUEUED
        elif not candidates:
            raise SimulationError(NO_ENDPOINTS)
        return self._admit(request.uuid, isl, hashes, overlaps, now)

    def _overlaps(self, candidates: Sequence[SchedulerView], hashes: Sequence[int]) -> dict:
        overlaps = {}
        if not hashes:
            return overlaps
        if self._engine_index:
            for view in candidates:
                matched = view.cached_prefix(hashes)
                if matched:
                    overlaps[(view.worker_id, view.dp_rank)] = matched
            return overlaps
        states = self._states
        for view in candidates:
            key = (view.worker_id, view.dp_rank)
            state = states.get(key)
            if state is not None and state.cached:
                matched = state.overlap(hashes)
                if matched:
                    overlaps[key] = matched
        return overlaps

    def _admit(self, uuid: int, isl: int, hashes: Sequence[int], overlaps: dict,
               now: float) -> Placement:
        """Choose among the candidates now, book the request on the winner."""
        candidates = self.pool.schedulers
        keys = [(view.worker_id, view.dp_rank) for view in candidates]
        states = [self._state(key) for key in keys]
        ovs = [overlaps.get(key, 0) for key in keys]
        logits = self._costs(isl, hashes, states, ovs)
        chosen = self._select(logits)
        state, overlap = states[chosen], ovs[chosen]
        self._book(uuid, isl, hashes, state, overlap)
        worker_id, dp_rank = keys[chosen]
        self.last_costs = costs = dict(zip(keys, logits))
        if self.decisions is not None:
            self.decisions.append(Decision(uuid, now, worker_id, dp_rank, logits[chosen],
                                           overlap, costs))
        return Placement(worker_id, dp_rank, overlap_blocks=overlap,
                         best_overlap_blocks=max(ovs))

    def _costs(self, isl: int, hashes: Sequence[int], states: list, ovs: list) -> list:
        settings = self.settings
        bs = self.pool.block_size
        credit = settings.overlap_score_credit
        scale = settings.prefill_load_scale
        weight = settings.decode_active_request_weight
        track_prefill = settings.router_track_prefill_tokens
        track_blocks = settings.router_track_active_blocks
        reuse = settings.router_assume_kv_reuse
        decay_rate = settings.overlap_score_credit_decay if track_prefill else 0.0
        request_blocks = -(-isl // bs)
        if decay_rate > 0 and request_blocks:
            least = min(state.prefill_tokens for state in states)
        else:
            decay_rate = 0.0
        full_blocks = isl // bs
        logits = []
        for state, overlap in zip(states, ovs):
            if track_prefill:
                decay = 1.0
                if decay_rate:
                    excess = (state.prefill_tokens - least) / bs
                    decay = 1.0 / (1.0 + decay_rate * (excess / request_blocks))
                prefill = max(0.0, (state.prefill_tokens + isl) / bs - credit * decay * overlap)
            else:
                prefill = 0.0
            if not track_blocks:
                blocks = 0
            elif reuse:
                blocks = len(state.active) + state.new_blocks(hashes)
            else:
                blocks = state.fresh_blocks + full_blocks
            logits.append(scale * prefill + blocks + weight * state.requests)
        return logits

    def _select(self, logits: list) -> int:
        temperature = self.settings.router_temperature
        if temperature == 0:
            return logits.index(min(logits))   # the first minimum: the lowest scheduler
        low, high = min(logits), max(logits)
        if high == low:
            weights = [1.0] * len(logits)
        else:
            span = (high - low) * temperature
            weights = [math.exp(-(logit - low) / span) for logit in logits]
        draw = self._rng.random() * sum(weights)
        total = 0.0
        for index, weight in enumerate(weights):
            total += weight
            if draw < total:
                return index
        return len(weights) - 1

    def _book(self, uuid: int, isl: int, hashes: Sequence[int], state: SchedulerState,
              overlap: int) -> None:
        settings = self.settings
        share = 0
        if settings.router_track_prefill_tokens:
            share = isl - min(isl, overlap * self.pool.block_size)
            state.prefill_tokens += share
        held: Any = None
        if settings.router_track_active_blocks:
            if settings.router_assume_kv_reuse:
                state.add_active(hashes)
                held = hashes
            else:
                held = isl // self.pool.block_size
                state.fresh_blocks += held
        state.requests += 1
        self._placed[uuid] = [state, share, held]

    # ------------------------------------------------------------------ the pending queue
    def _all_busy(self, candidates: Sequence[SchedulerView]) -> bool:
        """Whether every candidate has more prefill pending than the threshold allows (also
        when there is no candidate)."""
        budget = self.pool.max_num_batched_tokens
        limit = self.settings.router_queue_threshold * (
            DEFAULT_MAX_BATCHED_TOKENS if budget is None else budget)
        states = self._states
        for view in candidates:
            state = states.get((view.worker_id, view.dp_rank))
            if state is None or state.prefill_tokens <= limit:
                return False
        return True

    def _drain(self, now: float) -> None:
        queue = self._queue
        if not queue:
            return
        while queue and not self._all_busy(self.pool.schedulers):
            held = queue.pop()
            placement = self._admit(held.uuid, held.input_length, held.block_hashes,
                                    held.overlaps, now)
            self.pool.release(held.uuid, placement)

    def queued_uuids(self) -> list[int]:
        """The requests the queue holds, in release order."""
        return self._queue.uuids() if self._queue is not None else []

    # ------------------------------------------------------------------ notifications
    def _state(self, key: tuple) -> SchedulerState:
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = SchedulerState()
        return state

    def _apply_due_events(self, now: float) -> None:
        for key, stored, hashes in self._lagged.due(now):
            self._apply(key, stored, hashes)

    def _apply(self, key: tuple, stored: bool, hashes: Sequence[int]) -> None:
        cached = self._state(key).cached
        if stored:
            cached.insert_all(hashes)
        else:
            cached.remove_all(hashes)

    def on_kv_stored(self, scheduler: SchedulerView, hashes: Sequence[int], now_ms: float) -> None:
        self._kv_event(scheduler, True, hashes, now_ms)

    def on_kv_removed(self, scheduler: SchedulerView, hashes: Sequence[int], now_ms: float) -> None:
        self._kv_event(scheduler, False, hashes, now_ms)

    def _kv_event(self, scheduler: SchedulerView, stored: bool, hashes: Sequence[int],
                  now_ms: float) -> None:
        if not self._uses_index:
            return
        key = (scheduler.worker_id, scheduler.dp_rank)
        if self._lagged is not None:
            self._lagged.add(key, stored, hashes, now_ms)
        else:
            self._apply(key, stored, hashes)

    def on_prefill_completed(self, uuid: int, now_ms: float) -> None:
        placed = self._placed.get(uuid)
        if placed is not None and placed[1]:
            placed[0].prefill_tokens -= placed[1]
            placed[1] = 0
        self._drain(now_ms)

    def on_terminal(self, uuid: int, now_ms: float) -> None:
        placed = self._placed.pop(uuid, None)
        if placed is None:
            if self._queue is not None:
                self._queue.withdraw(uuid)   # cut off while queued: it will never be placed
        else:
            state, share, held = placed
            state.prefill_tokens -= share
            if type(held) is int:
                state.fresh_blocks -= held
            elif held is not None:
                state.drop_active(held)
            state.requests -= 1
        self._drain(now_ms)

    def on_worker_ready(self, worker: WorkerView, now_ms: float) -> None:
        self._drain(now_ms)

    def on_worker_draining(self, worker: WorkerView, now_ms: float) -> None:
        self._drain(now_ms)

    def on_worker_removed(self, worker: WorkerView, now_ms: float) -> None:
        keys = {(worker.worker_id, rank) for rank in range(worker.dp_size)}
        for key in keys:
            self._states.pop(key, None)
        if self._lagged is not None:
            self._lagged.forget(keys)
        self._drain(now_ms)


class KvAware(KvRouter):
    """``kv_aware``: the name the reference runner also accepts for ``kv_router``."""

    NAME = "kv_aware"


def _u64_array(hashes: Sequence[int]) -> array:
    """The request's hashes as the engines keep them (``array('Q')``, shared, never written):
    the engine index matches them without a conversion per scheduler."""
    if type(hashes) is array and hashes.typecode == "Q":
        return hashes
    try:
        return array("Q", hashes)
    except (OverflowError, TypeError):   # not u64 values (a hand-made request): kept as given
        return tuple(hashes)
