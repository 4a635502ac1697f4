"""The contract between the runtime and placement policies: which scheduler serves a request.

A pool (the aggregated pool, or the prefill or the decode pool of a disaggregated run) is a set
of workers; each worker has ``dp_size`` attention-DP ranks, and each (worker, rank) pair is one
*scheduler*, seen by a policy as a live, read-only :class:`SchedulerView`. A policy is built once
per pool as ``PolicyClass(config, pool)`` and answers ``place(request)`` for every request that
arrives at its pool with one of:

* ``(worker_id, dp_rank)``, two integers;
* a :class:`Placement` (the same, plus what the policy saw of the KV cache, for the records);
* :data:`QUEUED`: the policy keeps the request and places it later by calling
  ``pool.release(uuid, answer)`` from one of its notifications.

Notifications tell the policy what happened in its pool. A policy names the ones it wants in
``OBSERVES``; the runtime does the work behind a notification (collecting KV events, for one)
only for policies that ask, so round robin costs nothing beyond its ``place`` call:

=====================  ==============================================================
``"kv_events"``        ``on_kv_stored`` / ``on_kv_removed``: full blocks an engine computed
                       (at the end of the pass that computed them) or evicted
``"kv_index"``         ``SchedulerView.cached_prefix(hashes)`` answers from the engine what
                       an index fed by those events (without lag) would hold, at no cost
                       per block
``"prefill"``          ``on_prefill_completed``: the pass that computed a request's last
                       prompt token ended
``"terminal"``         ``on_terminal``: a placed request completed, was rejected or cut off
=====================  ==============================================================

Worker lifecycle notifications (``on_worker_ready``, ``on_worker_draining``,
``on_worker_removed``) are always delivered. Same-time order: the notifications of a pass end
come before arrivals at that time are placed (CLUSTER.md §2.5, §2.6).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Literal, Sequence

import attrs

from aisimulate_core.registry import check_provider_config

PoolKind = Literal["agg", "prefill", "decode"]
POOL_KINDS: tuple[str, ...] = ("agg", "prefill", "decode")
CONFIG_PATH = "$.spec.adapters.placement.config"
OBSERVABLE = frozenset({"kv_events", "kv_index", "prefill", "terminal"})


class _Queued:
    __slots__ = ()

    def __repr__(self) -> str:
        return "QUEUED"


QUEUED: Any = _Queued()
"""The answer of ``place`` that keeps a request in the policy's own queue."""


@attrs.frozen
class WorkerView:
    """One worker of a pool as placement sees it."""

    worker_id: int
    dp_size: int = attrs.field(validator=attrs.validators.ge(1))


@attrs.frozen(slots=True)
class Placement:
    """A placement with the policy's view of the KV cache, reported in the request's
    ``routing_history``: ``overlap_blocks`` is the prefix (in full engine blocks) the policy
    believes the chosen scheduler holds, ``best_overlap_blocks`` the most any candidate held."""

    worker_id: int
    dp_rank: int
    overlap_blocks: int | None = None
    best_overlap_blocks: int | None = None


class SchedulerView:
    """One scheduler (worker x DP rank) as a policy sees it, live: every read is the rank's
    state now, as of its latest pass completion or submission. Read-only; reading costs one
    field access or one call into the engine, not reading costs nothing."""

    __slots__ = ("_rank", "worker_id", "dp_rank", "scheduler_id")

    def __init__(self, rank: Any, worker_id: int, dp_rank: int, scheduler_id: int) -> None:
        self._rank = rank
        self.worker_id = worker_id
        self.dp_rank = dp_rank
        self.scheduler_id = scheduler_id   # worker_id x dp_size + dp_rank, the records' index

    @property
    def running_requests(self) -> int:
        return len(self._rank.running)

    @property
    def waiting_requests(self) -> int:
        return len(self._rank.waiting)

    @property
    def total_blocks(self) -> int:
        return self._rank.num_blocks

    @property
    def active_blocks(self) -> int:
        """KV blocks referenced by the requests on the rank (partial blocks included)."""
        return self._rank.kv_gauges()[0]

    @property
    def inactive_blocks(self) -> int:
        """Cached blocks no request references (reusable, evictable)."""
        return self._rank.kv_gauges()[1]

    @property
    def active_prefill_tokens(self) -> int:
        """Prompt tokens not yet computed of the requests waiting or running on the rank."""
        return self._rank.pending_prefill_tokens()

    def cached_prefix(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` (full-block sequence hashes) this scheduler's
        engine reported stored and not removed: the longest prefix an index fed by its KV
        events would match, as of the engine's latest pass end (blocks a pass in flight
        computes are not in yet, blocks it evicted still are). Needs ``"kv_index"`` in the
        policy's ``OBSERVES``."""
        return self._rank.indexed_prefix(hashes)

    def __repr__(self) -> str:
        return f"SchedulerView(worker {self.worker_id}, dp rank {self.dp_rank})"


class PoolView:
    """A pool as its policy sees it: its kind, the engine facts that matter for routing, the
    live schedulers of its active workers, and ``release`` for queued requests.

    ``engine_index`` says whether the engines answer ``SchedulerView.cached_prefix`` (a policy
    that wants it lists ``"kv_index"`` in ``OBSERVES``; otherwise it keeps an index of the
    ``"kv_events"``). ``native`` says whether the pool belongs to a simulation on the C backend,
    where a built-in policy may run in C (``kv_router``); a view made by hand keeps the Python
    policy.
    ``workers`` and ``schedulers`` list the active workers (ready, not draining) in ascending
    ``worker_id`` and, per worker, ascending rank; they change only between notifications.
    """

    def __init__(self, kind: PoolKind, workers: Sequence[WorkerView] = (), *,
                 block_size: int = 16, max_num_batched_tokens: int | None = None,
                 schedulers: Sequence[SchedulerView] = (),
                 release: Callable[[int, Any], None] | None = None,
                 engine_index: bool = False, native: bool = False) -> None:
        if kind not in POOL_KINDS:
            raise ValueError(f"pool kind must be one of {POOL_KINDS}, got {kind!r}")
        self.kind = kind
        self.workers = tuple(workers)
        self.block_size = block_size
        self.max_num_batched_tokens = max_num_batched_tokens
        self.schedulers = tuple(schedulers)
        self._release = release
        # whether the pool's engines answer SchedulerView.cached_prefix ("kv_index")
        self.engine_index = engine_index
        self.native = native

    def release(self, uuid: int, answer: Any) -> None:
        """Place the queued request ``uuid`` now with ``answer`` (``(worker_id, dp_rank)`` or a
        ``Placement``). Call it from a notification or from ``place``; the request reaches its
        engine after the current notification, in release order."""
        if self._release is None:
            raise RuntimeError("this pool view is not attached to a simulation")
        self._release(uuid, answer)

    def scheduler(self, worker_id: int, dp_rank: int) -> SchedulerView | None:
        for view in self.schedulers:
            if view.worker_id == worker_id and view.dp_rank == dp_rank:
                return view
        return None


class PlacementRequest:
    """What a policy knows about a request when placing it.

    ``dp_rank`` is the rank the request asks for, or None: in the aggregated and decode pools the
    request's ``dp_rank``, in the prefill pool its ``prefill_dp_rank`` falling back to ``dp_rank``.
    ``block_hashes`` are the sequence hashes of the prompt's full blocks at the engine's block
    size, the identities the engines' KV events carry (computed on first read).
    """

    __slots__ = ("uuid", "now_ms", "dp_rank", "input_length", "session_id", "request_id",
                 "priority", "strict_priority", "_hashes", "_hasher")

    def __init__(self, uuid: int, dp_rank: int | None, input_length: int,
                 session_id: str | None, *, now_ms: float = 0.0, request_id: str | None = None,
                 priority: int = 0, strict_priority: int = 0,
                 block_hashes: Sequence[int] | Callable[[], Sequence[int]] = ()) -> None:
        self.uuid = uuid
        self.now_ms = now_ms
        self.dp_rank = dp_rank
        self.input_length = input_length
        self.session_id = session_id
        self.request_id = request_id
        self.priority = priority
        self.strict_priority = strict_priority
        if callable(block_hashes):
            self._hashes, self._hasher = None, block_hashes
        else:
            self._hashes, self._hasher = block_hashes, None

    @property
    def block_hashes(self) -> Sequence[int]:
        if self._hashes is None:
            self._hashes = self._hasher()
        return self._hashes

    def __repr__(self) -> str:
        return (f"PlacementRequest(uuid={self.uuid}, now_ms={self.now_ms}, "
                f"input_length={self.input_length})")


class PlacementPolicy:
    """Base of placement policies; subclasses set ``NAME`` and implement ``place``.

    ``CONFIG_KEYS`` lists the keys the policy accepts in ``spec.adapters.placement.config``; any
    other key is a ConfigError naming ``$.spec.adapters.placement.config.<key>``. A policy that
    checks its own config sets ``CONFIG_KEYS = None``.
    ``OBSERVES`` names the notifications it wants (module docstring). The ``on_*`` methods
    default to doing nothing; ``self.pool`` is the live :class:`PoolView`.
    """

    NAME: ClassVar[str]
    CONFIG_KEYS: ClassVar[frozenset[str] | None] = frozenset()
    OBSERVES: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, config: dict, pool: PoolView) -> None:
        if self.CONFIG_KEYS is None:
            self.config = config
        else:
            self.config = check_provider_config(config, self.CONFIG_KEYS, CONFIG_PATH)
        self.pool = pool

    def place(self, request: PlacementRequest) -> Any:
        """The scheduler for ``request``: ``(worker_id, dp_rank)``, a ``Placement`` or
        ``QUEUED``.

        Called once per request as it arrives at the pool. A ``dp_rank`` the pool cannot serve
        is a ConfigError ("request <uuid>: dp_rank 3 out of range for dp_size 2"). The runtime
        calls the policy through ``aisimulate_core.guards.GuardedPlacement``: an exception
        other than an ``AisimError``, an answer of another shape, or a worker that is not an
        active worker of the pool stops the run with one PluginError line naming the policy
        and its distribution.
        """
        raise NotImplementedError(f"{type(self).__name__}.place")

    def on_kv_stored(self, scheduler: SchedulerView, hashes: Sequence[int], now_ms: float) -> None:
        """Full blocks ``hashes`` (sequence hashes, in chain order) were computed on
        ``scheduler`` by the pass ending now (``"kv_events"``)."""

    def on_kv_removed(self, scheduler: SchedulerView, hashes: Sequence[int], now_ms: float) -> None:
        """Cached blocks ``hashes`` were evicted from ``scheduler`` (``"kv_events"``)."""

    def on_prefill_completed(self, uuid: int, now_ms: float) -> None:
        """The pass that computed the last prompt token of request ``uuid`` ended (``"prefill"``)."""

    def on_terminal(self, uuid: int, now_ms: float) -> None:
        """A placed request reached a terminal status: completed, rejected, ... (``"terminal"``)."""

    def on_worker_ready(self, worker: WorkerView, now_ms: float) -> None:
        """A worker became active (scaling up); ``self.pool`` lists it already."""

    def on_worker_draining(self, worker: WorkerView, now_ms: float) -> None:
        """A worker stopped taking work (scaling down); it finishes what it holds."""

    def on_worker_removed(self, worker: WorkerView, now_ms: float) -> None:
        """A worker left the pool; forget what is known of it."""
