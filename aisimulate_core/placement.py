"""The contract between the runtime and placement policies (which scheduler serves a request).

A pool is a list of workers; each worker has ``dp_size`` attention-DP ranks, and each
(worker, rank) pair is one scheduler. A policy is built once per pool as
``PolicyClass(config, pool)`` and answers ``place(request)`` with ``(worker index, dp_rank)``,
where the index is into the pool's workers (ascending ``worker_id``) as they stand after every
``on_worker_added`` / ``on_worker_removed`` call so far.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import attrs

from aisimulate_core.registry import check_provider_config

PoolKind = Literal["agg", "prefill", "decode"]
POOL_KINDS: tuple[str, ...] = ("agg", "prefill", "decode")
CONFIG_PATH = "$.spec.adapters.placement.config"


@attrs.frozen
class WorkerView:
    """One worker of a pool as placement sees it."""

    worker_id: int
    dp_size: int = attrs.field(validator=attrs.validators.ge(1))


@attrs.frozen
class PoolView:
    """A pool of workers: the aggregated pool, or the prefill or decode pool of a disaggregated run."""

    kind: PoolKind = attrs.field(validator=attrs.validators.in_(POOL_KINDS))
    workers: tuple[WorkerView, ...] = attrs.field(converter=tuple)


@attrs.frozen
class PlacementRequest:
    """What a policy knows about a request when placing it.

    ``dp_rank`` is the rank the request asks for, or None: in the aggregated and decode pools the
    request's ``dp_rank``, in the prefill pool its ``prefill_dp_rank`` falling back to ``dp_rank``.
    """

    uuid: int
    dp_rank: int | None
    input_length: int
    session_id: str | None


class PlacementPolicy:
    """Base of placement policies; subclasses set ``NAME`` and implement ``place``.

    ``CONFIG_KEYS`` lists the keys the policy accepts in ``spec.adapters.placement.config``; any
    other key is a ConfigError naming ``$.spec.adapters.placement.config.<key>``.
    The ``on_*`` notifications default to doing nothing; ``self.pool`` stays the pool the policy
    was built with, so a policy that follows scaling keeps its own list of workers.
    """

    NAME: ClassVar[str]
    CONFIG_KEYS: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, config: dict, pool: PoolView) -> None:
        self.config = check_provider_config(config, self.CONFIG_KEYS, CONFIG_PATH)
        self.pool = pool

    def place(self, request: PlacementRequest) -> tuple[int, int]:
        """The scheduler for ``request``: ``(index into the pool's workers, dp_rank)``.

        Called once per request as it arrives at the pool. A ``dp_rank`` the pool cannot serve
        is a ConfigError ("request <uuid>: dp_rank 3 out of range for dp_size 2"). The runtime
        calls the policy through ``aisimulate_core.guards.GuardedPlacement``: an exception
        other than an ``AisimError``, an answer that is not two integers, or a worker index
        outside the pool stops the run with one PluginError line naming the policy and its
        distribution.
        """
        raise NotImplementedError(f"{type(self).__name__}.place")

    def on_terminal(self, uuid: int) -> None:
        """Called when a placed request reaches a terminal status (completed, rejected, ...)."""

    def on_worker_added(self, worker: WorkerView) -> None:
        """Called when a worker joins the pool (scaling up); it takes its ``worker_id`` order."""

    def on_worker_removed(self, worker: WorkerView) -> None:
        """Called when a worker leaves the pool (scaling down); later indices shift down."""
