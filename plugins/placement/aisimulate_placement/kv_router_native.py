"""``kv_router`` in C (csrc/kv_router.c): the same router as ``KvRouter`` (kv_router.py, its twin
and specification), one C call per placement and per notification.

``KvRouter(config, pool)`` builds this class instead of itself when ``native_refusal`` finds
nothing against it: the pool view belongs to a simulation on the C backend (``PoolView.native``;
``AISIMULATE_BACKEND=python`` and hand-made pool views keep the Python router) and the router
does not sample (``router_temperature`` > 0 draws from ``random.Random``, kept in Python).
Overlaps against the engines' own index (``"kv_index"``) are computed in C from the C vLLM ranks'
state; a pool with another rank gives C the overlaps its ranks answer (``cached_prefix``).

The runtime's router (aisimulate_core/runtime/router.py) calls ``place_simulated`` and the
notification methods directly; everything else (tests, embedding programs) sees the placement
contract: ``place(PlacementRequest)``, the ``on_*`` notifications, ``decisions``,
``last_costs``, ``queued_uuids``.
"""

from __future__ import annotations

from array import array
from typing import Any, NamedTuple, Sequence

from aisimulate_core import native
from aisimulate_core.errors import SimulationError
from aisimulate_core.placement import QUEUED, Placement, PlacementPolicy, PoolView, WorkerView

from aisimulate_placement.kv_router_config import KvRouterSettings

QUEUE_POLICIES = {"fcfs": 1, "lcfs": 2, "wspt": 3}
_EMPTY = array("Q")
# the reference's budget for a worker that reports no max_num_batched_tokens (kv_router.py)
DEFAULT_MAX_BATCHED_TOKENS = 10_000_000
NO_ENDPOINTS = "placement policy error: no endpoints available to route work"


def native_refusal(settings: KvRouterSettings, pool: PoolView) -> str | None:
    """Why the C router cannot stand in for ``KvRouter`` on ``pool``, or None when it can."""
    if not getattr(pool, "native", False):
        return "the pool view is not a C-backend simulation's"
    if native.lib is None or native.resolve_backend() != "c":
        return "the Python backend"
    if settings.router_temperature > 0:
        return "router_temperature > 0 samples with random.Random"
    return None


def _c_rank(rank: Any) -> bool:
    """Whether ``rank`` is a C vLLM rank whose index C can read (VllmRank.indexed_prefix)."""
    from aisimulate_core.engine.vllm_native import NativeVllmRank

    return isinstance(rank, NativeVllmRank) and \
        type(rank).indexed_prefix is NativeVllmRank.indexed_prefix


class StateSnapshot(NamedTuple):
    """A scheduler's state in the C router (``NativeKvRouter._state``)."""

    prefill_tokens: int
    fresh_blocks: int
    requests: int
    active_blocks: int
    cached: frozenset


class NativeKvRouter(PlacementPolicy):
    """The C router behind the placement contract (the same decisions as ``KvRouter``)."""

    NAME = "kv_router"
    CONFIG_KEYS = None
    NATIVE_ROUTER = True

    def __init__(self, config: dict, pool: PoolView, settings: KvRouterSettings,
                 name: str = "kv_router") -> None:
        PlacementPolicy.__init__(self, config, pool)
        self.NAME = name
        self.settings = settings
        ffi, lib = native.ffi, native.lib
        self._ffi, self._lib = ffi, lib
        uses_index = pool.kind != "decode"
        self._uses_index = uses_index
        self._engine_index = (uses_index and settings.kv_event_lag_ms == 0
                              and pool.engine_index)
        if not uses_index:
            self.OBSERVES = frozenset({"terminal"})
        elif self._engine_index:
            self.OBSERVES = frozenset({"kv_index", "prefill", "terminal"})
        else:
            self.OBSERVES = frozenset({"kv_events", "prefill", "terminal"})
        self._hashes_needed = uses_index or (settings.router_track_active_blocks
                                             and settings.router_assume_kv_reuse)
        threshold = settings.router_queue_threshold
        self.holds_requests = threshold is not None
        config_c = ffi.new("aisim_kvr_config *")
        config_c.block_size = pool.block_size
        config_c.credit = settings.overlap_score_credit
        config_c.scale = settings.prefill_load_scale
        config_c.decay = settings.overlap_score_credit_decay
        config_c.weight = settings.decode_active_request_weight
        config_c.track_prefill = settings.router_track_prefill_tokens
        config_c.track_blocks = settings.router_track_active_blocks
        config_c.reuse = settings.router_assume_kv_reuse
        config_c.uses_index = uses_index
        config_c.engine_index = self._engine_index
        config_c.lag_ms = settings.kv_event_lag_ms
        if threshold is not None:
            budget = pool.max_num_batched_tokens
            config_c.queue_policy = QUEUE_POLICIES[settings.router_queue_policy]
            config_c.queue_limit = threshold * (DEFAULT_MAX_BATCHED_TOKENS if budget is None
                                                else budget)
        self._r = native.open_handle("aisim_kvr", lib.aisim_kvr_new, lib.aisim_kvr_free,
                                     "kv_router", config_c)
        self._view = native.handle_view(self._r, "aisim_kvr_view", lib.aisim_kvr_view_of)
        self._synced = None          # the pool.schedulers tuple C has as its candidates
        self._given = None           # overlaps from Python: a candidate rank has no C index
        self._decisions = None
        self._log_read = 0
        self._sync()

    # ------------------------------------------------------------------ candidates
    def _sync(self) -> None:
        schedulers = self.pool.schedulers
        if schedulers is self._synced:
            return
        ffi, n = self._ffi, len(schedulers)
        worker_ids = ffi.new("int64_t[]", [view.worker_id for view in schedulers])
        dp_ranks = ffi.new("int64_t[]", [view.dp_rank for view in schedulers])
        views = pools = ffi.NULL
        self._given = None
        if self._engine_index:
            ranks = [view._rank for view in schedulers]
            if all(_c_rank(rank) for rank in ranks):
                views = ffi.new("void *[]", [rank._view for rank in ranks])
                pools = ffi.new("aisim_kv_pool *[]", [rank.pool._pool for rank in ranks])
            else:
                self._given = ffi.new("int64_t[]", max(n, 1))
        status = self._lib.aisim_kvr_set_candidates(self._r, worker_ids, dp_ranks, views,
                                                    pools, n)
        if status < 0:
            raise native.status_error(status, "aisim_kvr_set_candidates")
        self._synced = schedulers

    def _overlaps_from_python(self, hashes: Sequence[int]):
        given = self._given
        for i, view in enumerate(self._synced):
            given[i] = view.cached_prefix(hashes)
        return given

    # ------------------------------------------------------------------ placement
    def place(self, request: Any) -> Any:
        hashes = _u64(request.block_hashes) if self._hashes_needed else _EMPTY
        if self._place(request.uuid, request.input_length, hashes, request.now_ms,
                       request.priority, request.strict_priority):
            view = self._view
            return Placement(view.worker_id, view.dp_rank, overlap_blocks=view.overlap,
                             best_overlap_blocks=view.best_overlap)
        return QUEUED

    def place_simulated(self, request: Any, now_ms: float, block_size: int) -> bool:
        """Place a simulated request: True when placed (the choice in ``_view``), False when
        queued. The runtime's router calls it instead of building a PlacementRequest; the
        prompt's block hashes are computed in C from its token runs."""
        if self.pool.schedulers is not self._synced:
            self._sync()
        if not self._hashes_needed:
            return self._place(request.uuid, request.prompt_len, _EMPTY, now_ms,
                               request.priority, request.strict_priority)
        if self._given is not None:   # a rank answers its overlap in Python: hashes there
            hashes = request.prompt.block_hashes(block_size)
            full = request.prompt_len // block_size
            return self._place(request.uuid, request.prompt_len,
                               _u64(hashes if len(hashes) == full else hashes[:full]), now_ms,
                               request.priority, request.strict_priority)
        prompt = request.prompt
        values = prompt.values
        n_runs = len(values)
        from_buffer, null = self._ffi.from_buffer, self._ffi.NULL
        status = self._lib.aisim_kvr_place_runs(
            self._r, request.uuid, request.prompt_len,
            from_buffer("uint32_t[]", values) if n_runs else null,
            from_buffer("uint32_t[]", prompt.lengths) if n_runs else null, n_runs, now_ms,
            request.priority, request.strict_priority)
        if status == 1:
            return True
        return self._answer(status, "aisim_kvr_place_runs")

    def _place(self, uuid, isl, hashes, now_ms, priority, strict_priority) -> bool:
        if self.pool.schedulers is not self._synced:
            self._sync()
        n = len(hashes)
        given = self._given
        if given is not None:
            given = self._overlaps_from_python(hashes) if n else self._ffi.NULL
        else:
            given = self._ffi.NULL
        status = self._lib.aisim_kvr_place(
            self._r, uuid, isl, self._ffi.from_buffer("uint64_t[]", hashes) if n else self._ffi.NULL,
            n, now_ms, priority, strict_priority, given)
        if status == 1:
            return True
        return self._answer(status, "aisim_kvr_place")

    @staticmethod
    def _answer(status: int, operation: str) -> bool:
        if status == 0:
            return False
        if status == 2:
            raise SimulationError(NO_ENDPOINTS)
        raise native.status_error(status, operation)

    # ------------------------------------------------------------------ notifications
    def _released(self, status: int, operation: str) -> None:
        if status <= 0:
            if status < 0:
                raise native.status_error(status, operation)
            return
        view = self._view
        if view.n_released:
            values = self._ffi.unpack(view.released, 5 * view.n_released)
            release = self.pool.release
            for i in range(0, len(values), 5):
                release(values[i], Placement(values[i + 1], values[i + 2],
                                             overlap_blocks=values[i + 3],
                                             best_overlap_blocks=values[i + 4]))

    def kv_event(self, worker_id: int, dp_rank: int, stored: bool, hashes: Sequence[int],
                 now_ms: float) -> None:
        hashes = _u64(hashes)
        n = len(hashes)
        status = self._lib.aisim_kvr_kv_event(
            self._r, worker_id, dp_rank, stored,
            self._ffi.from_buffer("uint64_t[]", hashes) if n else self._ffi.NULL, n, now_ms)
        if status < 0:
            raise native.status_error(status, "aisim_kvr_kv_event")

    def on_kv_stored(self, scheduler, hashes: Sequence[int], now_ms: float) -> None:
        self.kv_event(scheduler.worker_id, scheduler.dp_rank, True, hashes, now_ms)

    def on_kv_removed(self, scheduler, hashes: Sequence[int], now_ms: float) -> None:
        self.kv_event(scheduler.worker_id, scheduler.dp_rank, False, hashes, now_ms)

    def on_prefill_completed(self, uuid: int, now_ms: float) -> None:
        if self.pool.schedulers is not self._synced:
            self._sync()
        self._released(self._lib.aisim_kvr_prefill_done(self._r, uuid, now_ms),
                       "aisim_kvr_prefill_done")

    def on_terminal(self, uuid: int, now_ms: float) -> None:
        if self.pool.schedulers is not self._synced:
            self._sync()
        self._released(self._lib.aisim_kvr_terminal(self._r, uuid, now_ms), "aisim_kvr_terminal")

    def on_worker_ready(self, worker: WorkerView, now_ms: float) -> None:
        self._sync()
        self._released(self._lib.aisim_kvr_drain(self._r, now_ms), "aisim_kvr_drain")

    def on_worker_draining(self, worker: WorkerView, now_ms: float) -> None:
        self._sync()
        self._released(self._lib.aisim_kvr_drain(self._r, now_ms), "aisim_kvr_drain")

    def on_worker_removed(self, worker: WorkerView, now_ms: float) -> None:
        self._sync()
        self._released(self._lib.aisim_kvr_worker_removed(self._r, worker.worker_id,
                                                          worker.dp_size, now_ms),
                       "aisim_kvr_worker_removed")

    # ------------------------------------------------------------------ diagnostics
    def queued_uuids(self) -> list[int]:
        """The requests the queue holds, in release order."""
        n = self._view.queued
        out = self._ffi.new("int64_t[]", max(n, 1))
        got = self._lib.aisim_kvr_queued_uuids(self._r, out, n)
        if got < 0:
            raise native.status_error(got, "aisim_kvr_queued_uuids")
        return list(self._ffi.unpack(out, got))

    def _state(self, key: tuple) -> "StateSnapshot | None":
        """What the router holds of scheduler ``key`` = (worker_id, dp_rank), as the Python
        twin's ``SchedulerState`` fields (a copy; None when it holds nothing of it)."""
        ffi = self._ffi
        counters = ffi.new("int64_t[]", 5)
        status = self._lib.aisim_kvr_state(self._r, key[0], key[1], counters, ffi.NULL, 0)
        if status == native.EBADSEQ:
            return None
        if status < 0:
            raise native.status_error(status, "aisim_kvr_state")
        cached = ffi.new("uint64_t[]", max(counters[4], 1))
        got = self._lib.aisim_kvr_state(self._r, key[0], key[1], counters, cached, counters[4])
        return StateSnapshot(counters[0], counters[1], counters[2], counters[3],
                             frozenset(ffi.unpack(cached, got)))

    @property
    def last_costs(self) -> dict:
        view = self._view
        n = view.n_costs
        if not n:
            return {}
        keys = self._ffi.unpack(view.cost_keys, 2 * n)
        return dict(zip(zip(keys[0::2], keys[1::2]), self._ffi.unpack(view.costs, n)))

    @property
    def decisions(self):
        """Every decision since logging was switched on (``router.decisions = []``)."""
        if self._decisions is not None:
            self._read_log()
        return self._decisions

    @decisions.setter
    def decisions(self, value) -> None:
        self._decisions = value
        self._log_read = 0
        self._lib.aisim_kvr_log_decisions(self._r, value is not None)

    def _read_log(self) -> None:
        from aisimulate_placement.kv_router import Decision

        view, unpack = self._view, self._ffi.unpack
        for k in range(self._log_read, view.n_log):
            uuid, worker_id, dp_rank, overlap, n, first = unpack(view.log_ints + 6 * k, 6)
            now_ms, logit = unpack(view.log_doubles + 2 * k, 2)
            keys = unpack(view.log_keys + 2 * first, 2 * n)
            costs = dict(zip(zip(keys[0::2], keys[1::2]), unpack(view.log_costs + first, n)))
            self._decisions.append(Decision(uuid, now_ms, worker_id, dp_rank, logit, overlap,
                                            costs))
        self._log_read = view.n_log


def _u64(hashes: Sequence[int]) -> array:
    if type(hashes) is array and hashes.typecode == "Q":
        return hashes
    return array("Q", hashes)
