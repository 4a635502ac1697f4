"""One pool's placement in the runtime: the policy, its live pool view, queued requests.

The router builds the ``PlacementRequest``, checks the policy's answer once (an active worker
of the pool, a rank it has), records the route the request's ``routing_history`` reports, and
hands the request to ``deliver(request, worker, rank_index, now_ms)``, the simulation's
submission. A policy that answers ``QUEUED`` keeps the request; its later
``pool.release(uuid, answer)`` calls are buffered and delivered, in release order, when the
runtime calls ``flush`` (after each notification batch), so that a release made while a pass
completes reaches its engine only once that pass is fully settled.

Only the notifications a policy lists in ``OBSERVES`` are wired (``wants_*``): round robin
pays one ``place`` call per request and nothing per pass.

A policy running in C (``NATIVE_ROUTER``: the built-in ``kv_router`` on the C backend,
plugins/placement's kv_router_native.py) is called directly: ``place_simulated`` with the
simulated request (no PlacementRequest, no guard: its errors are the core's), its notifications
without a SchedulerView, and, without a pending queue, prefill completions and terminals at
once instead of in the pass's running order (their order only matters to a queue's releases).
"""

from __future__ import annotations

import numbers

from .. import native as _native_core
from ..errors import ConfigError, PluginError
from ..guards import GuardedPlacement
from ..placement import QUEUED, Placement, PlacementRequest, PoolView, SchedulerView, WorkerView


class Router:
    __slots__ = ("kind", "policy", "view", "deliver", "block_size", "by_id", "active",
                 "queued", "_released", "wants_kv", "wants_index", "wants_prefill",
                 "wants_terminal",
                 "_views", "_label", "_batch", "_order", "_active_ids", "parked", "_unpinned",
                 "_native", "_native_direct", "_kvr", "_kvr_prefill", "_kvr_terminal",
                 "wants_order", "native_release", "_worker_views")

    def __init__(self, kind, provider, config, workers, *, block_size, max_num_batched_tokens,
                 deliver=None):
        self.kind = kind
        self.deliver = deliver
        self.block_size = block_size
        self.by_id = {}              # worker_id -> Worker, every live worker of the pool
        self.active = []             # active workers (ready, not draining), ascending id
        self.queued = {}             # uuid -> (request, queued at ms)
        # a disaggregated pool scaled to no active worker holds its requests until one is
        # ready, then places them (the reference's replay waits; an aggregated pool fails)
        self.parked = []
        self._released = []
        # while the C loop holds the requests (runtime/plain_native.py): flush hands it the
        # releases instead of delivering them
        self.native_release = None
        self._batch = None           # a pass's signals, while its rank completes
        self._order = None
        self._views = {}             # rank -> SchedulerView
        self._worker_views = {}      # worker id -> its WorkerView (frozen: made once)
        self._label = provider.label()
        self.view = PoolView(kind, block_size=block_size,
                             max_num_batched_tokens=max_num_batched_tokens,
                             release=self._on_release,
                             engine_index=all(rank.indexes_prefix
                                              for w in workers for rank in w.ranks),
                             native=_native_core.BACKEND == "c")
        for worker in workers:
            self.by_id[worker.worker_id] = worker
            self.active.append(worker)
        self._refresh_view()
        self.policy = GuardedPlacement(provider, config, self.view)
        observes = getattr(self.policy.policy, "OBSERVES", frozenset())
        self.wants_kv = "kv_events" in observes
        self.wants_index = "kv_index" in observes
        self.wants_prefill = "prefill" in observes
        self.wants_terminal = "terminal" in observes
        # the built-in round robin answers a request without a PlacementRequest: only a class
        # that defines both place and its UNPINNED_PLACE itself (a subclass that changes how
        # place() chooses, in any method, goes through place())
        cls = type(self.policy.policy)
        own = vars(cls)
        stands_for = own.get("UNPINNED_PLACE")
        unpinned = stands_for is not None and stands_for is own.get("place")
        self._unpinned = self.policy.policy.place_unpinned if unpinned else None
        policy = self.policy.policy
        self._native = policy if getattr(policy, "NATIVE_ROUTER", False) else None
        # without a pending queue a C router takes prefill completions and terminals at once,
        # straight into C (no candidate changes matter to them: nothing is released)
        self._native_direct = self._native is not None and not policy.holds_requests
        if self._native_direct:
            lib = _native_core.lib
            self._kvr = policy._r
            self._kvr_prefill, self._kvr_terminal = lib.aisim_kvr_prefill_done, lib.aisim_kvr_terminal
        # whether a pass's prefill completions and terminals must reach the policy in the
        # pass's running order (begin_pass / end_pass): only when releases can follow them
        self.wants_order = (self.wants_prefill or self.wants_terminal) and not self._native_direct

    @property
    def observes_engine(self):
        """Whether the engines must report pass-level events (KV blocks, prefill ends)."""
        return self.wants_kv or self.wants_index or self.wants_prefill

    def scheduler_view(self, rank):
        view = self._views.get(rank)
        if view is None:
            view = SchedulerView(rank, rank.worker_idx, rank.dp_rank, rank.scheduler_id)
            self._views[rank] = view
        return view

    def worker_view(self, worker):
        """The ``WorkerView`` of one of the pool's workers (the same object every time)."""
        view = self._worker_views.get(worker.worker_id)
        if view is None:
            view = self._worker_views[worker.worker_id] = WorkerView(
                worker_id=worker.worker_id, dp_size=len(worker.ranks))
        return view

    def _refresh_view(self):
        self._active_ids = {w.worker_id: w for w in self.active}
        view = self.view
        view.workers = tuple(self.worker_view(w) for w in self.active)
        view.schedulers = tuple(self.scheduler_view(rank) for w in self.active for rank in w.ranks)

    # ------------------------------------------------------------------ placement
    def place(self, request, now_ms, dp_rank):
        """Place an arriving ``request`` (asking for ``dp_rank`` or None): delivered now, or
        kept by the policy. Returns whether it was delivered."""
        if dp_rank is None and self._unpinned is not None:
            answer = self._unpinned()
            if answer is not None:
                worker = self._active_ids.get(answer[0])
                if worker is not None and answer[1] < len(worker.ranks):
                    self.deliver(request, worker, answer[1], now_ms)
                else:
                    self._route(request, answer, now_ms, None)   # (its error)
                if self._released:
                    self.flush(now_ms)
                return True
            # no active worker: place() words the error
        if not self.active and self.kind != "agg" and self._parks():
            self.parked.append((request, dp_rank))
            return False
        native = self._native
        if native is not None:
            return self._place_native(native, request, now_ms)
        answer = self.policy.place(_Routed(request, dp_rank, now_ms, self.block_size))
        if type(answer) is tuple and len(answer) == 2:   # the usual answer, checked inline
            worker_id, dp_rank = answer
            worker = self._active_ids.get(worker_id) if type(worker_id) is int else None
            if worker is not None and type(dp_rank) is int and 0 <= dp_rank < len(worker.ranks):
                self.deliver(request, worker, dp_rank, now_ms)
                if self._released:
                    self.flush(now_ms)
                return True
        if answer is QUEUED:
            self.queued[request.uuid] = (request, now_ms)
            return False
        self._route(request, answer, now_ms, None)
        if self._released:
            self.flush(now_ms)
        return True

    def _place_native(self, native, request, now_ms):
        if not native.place_simulated(request, now_ms, self.block_size):
            self.queued[request.uuid] = (request, now_ms)
            return False
        view = native._view
        worker_id, dp_rank = view.worker_id, view.dp_rank
        worker = self._active_ids[worker_id]
        rank = worker.ranks[dp_rank]
        selected, best = view.overlap, view.best_overlap
        # route_entry's, for a Placement with its overlaps
        request.route = {"pool": self.kind, "logical_worker_id": worker_id,
                         "scheduler_id": rank.scheduler_id, "dp_rank": rank.dp_rank,
                         "reported_overlap_tokens": selected * self.block_size,
                         "selected_overlap_blocks": selected,
                         "best_available_overlap_blocks": best,
                         "overlap_regret_blocks": best - selected}
        self.deliver(request, worker, dp_rank, now_ms)
        if self._released:
            self.flush(now_ms)
        return True

    def _on_release(self, uuid, answer):
        self._released.append((uuid, answer))

    def flush(self, now_ms):
        """Deliver the requests the policy released since the last flush, in release order;
        returns them."""
        if self.native_release is not None:
            released, self._released = self._released, []
            return self.native_release(released, now_ms)
        delivered = []
        while self._released:
            released, self._released = self._released, []
            for uuid, answer in released:
                entry = self.queued.pop(uuid, None)
                if entry is None:
                    raise PluginError(f"{self._label}: pool.release() named request {uuid}, "
                                      f"which the policy does not hold queued")
                request, queued_ms = entry
                self._route(request, answer, now_ms, queued_ms)
                delivered.append(request)
        return delivered

    def _route(self, request, answer, now_ms, queued_ms):
        if type(answer) is tuple and len(answer) == 2 and type(answer[0]) is int \
                and type(answer[1]) is int:
            worker_id, dp_rank = answer      # the usual answer, checked with a few type tests
            detail = None
        elif isinstance(answer, Placement):
            worker_id, dp_rank = answer.worker_id, answer.dp_rank
            detail = answer
        else:
            worker_id, dp_rank = self._read(answer)
            detail = None
        worker = self._active_ids.get(worker_id)
        if worker is None:
            raise PluginError(f"{self._label}: place() returned worker {worker_id}, which is not "
                              f"an active worker of the {self.kind} pool (active: "
                              f"{[w.worker_id for w in self.active]})")
        if not 0 <= dp_rank < len(worker.ranks):
            raise ConfigError(f"request {request.request_id or request.uuid}: dp_rank {dp_rank} "
                              f"out of range for dp_size {len(worker.ranks)}")
        if detail is not None or queued_ms is not None:
            rank = worker.ranks[dp_rank]
            request.route = route_entry(self.kind, worker_id, rank, detail, self.block_size,
                                        queued_ms, now_ms)
        self.deliver(request, worker, dp_rank, now_ms)

    def _read(self, answer):
        """``(worker_id, dp_rank)`` from any pair of integers (numpy's too), else one line."""
        try:
            worker_id, dp_rank = answer
        except (TypeError, ValueError):
            raise self.policy.malformed(answer) from None
        if not (_is_integer(worker_id) and _is_integer(dp_rank)):
            raise self.policy.malformed(answer)
        return int(worker_id), int(dp_rank)

    def pending_count(self):
        return len(self.queued)

    # ------------------------------------------------------------------ notifications
    def kv_stored(self, rank, hashes, now_ms):
        if self._native is not None:
            self._native.kv_event(rank.worker_idx, rank.dp_rank, True, hashes, now_ms)
        else:
            self.policy.notify("on_kv_stored", self.scheduler_view(rank), hashes, now_ms)

    def kv_removed(self, rank, hashes, now_ms):
        if self._native is not None:
            self._native.kv_event(rank.worker_idx, rank.dp_rank, False, hashes, now_ms)
        else:
            self.policy.notify("on_kv_removed", self.scheduler_view(rank), hashes, now_ms)

    def prefill_completed(self, uuid, now_ms):
        if self._native_direct:
            status = self._kvr_prefill(self._kvr, uuid, now_ms)
            if status:
                self._native._released(status, "aisim_kvr_prefill_done")
        elif self._batch is not None:
            self._batch.append((uuid, "on_prefill_completed"))
        else:
            self.policy.notify("on_prefill_completed", uuid, now_ms)

    def terminal(self, uuid, now_ms):
        if self.wants_terminal:
            if self._native_direct:
                status = self._kvr_terminal(self._kvr, uuid, now_ms)
                if status:
                    self._native._released(status, "aisim_kvr_terminal")
            elif self._batch is not None:
                self._batch.append((uuid, "on_terminal"))
            else:
                self.policy.notify("on_terminal", uuid, now_ms)

    def begin_pass(self, order):
        """A rank's pass completes: hold its prefill completions and terminals, then deliver
        them in ``order`` (request uuid -> running position; rejections last)."""
        self._batch = []
        self._order = order

    def end_pass(self, now_ms):
        batch, order = self._batch, self._order
        self._batch = self._order = None
        if not batch:
            return
        if len(batch) > 1:
            last = len(order) + len(batch)
            batch.sort(key=lambda signal: order.get(signal[0], last))
        native = self._native
        if native is not None:
            for uuid, method in batch:
                getattr(native, method)(uuid, now_ms)
            return
        for uuid, method in batch:
            self.policy.notify(method, uuid, now_ms)

    # ------------------------------------------------------------------ worker lifecycle
    def worker_ready(self, worker, now_ms):
        self.by_id[worker.worker_id] = worker
        self.active.append(worker)
        self.active.sort(key=lambda w: w.worker_id)
        self._refresh_view()
        self.policy.notify("on_worker_ready", self.worker_view(worker), now_ms)

    def unpark(self, now_ms):
        """After a change of the pool's workers: place the requests it held while empty, in
        arrival order, once the whole change is done (the reference places them then)."""
        if self.parked and self.active:
            parked, self.parked = self.parked, []
            for request, dp_rank in parked:
                self.place(request, now_ms, dp_rank)

    def _parks(self):
        """Whether this pool's policy leaves an empty pool to the runtime: a policy with its
        own pending queue (``kv_router`` with a threshold) says ``holds_requests`` and keeps
        the requests itself."""
        return not getattr(self.policy.policy, "holds_requests", False)

    def worker_draining(self, worker, now_ms):
        if worker in self.active:
            self.active.remove(worker)
            self._refresh_view()
        self.policy.notify("on_worker_draining", self.worker_view(worker), now_ms)

    def worker_removed(self, worker, now_ms):
        if worker in self.active:
            self.active.remove(worker)
            self._refresh_view()
        self.by_id.pop(worker.worker_id, None)
        for rank in worker.ranks:
            self._views.pop(rank, None)
        view = self.worker_view(worker)
        del self._worker_views[worker.worker_id]
        self.policy.notify("on_worker_removed", view, now_ms)


def route_entry(pool, worker_id, rank, detail, block_size, queued_ms, now_ms):
    """The ``routing_history`` entry of a placement (report.py fills the other keys)."""
    entry = {"pool": pool, "logical_worker_id": worker_id, "scheduler_id": rank.scheduler_id,
             "dp_rank": rank.dp_rank}
    if queued_ms is not None:
        entry["outcome"] = "queued"
        entry["queue_entered_at_ms"] = queued_ms
        entry["released_at_ms"] = now_ms
        entry["queue_wait_ms"] = now_ms - queued_ms
    if detail is not None and detail.overlap_blocks is not None:
        selected = detail.overlap_blocks
        best = detail.best_overlap_blocks if detail.best_overlap_blocks is not None else selected
        entry["reported_overlap_tokens"] = selected * block_size
        entry["selected_overlap_blocks"] = selected
        entry["best_available_overlap_blocks"] = best
        entry["overlap_regret_blocks"] = best - selected
    return entry


def _is_integer(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class _Routed(PlacementRequest):
    """The ``PlacementRequest`` of a simulated request, built field by field (this runs once
    per request); ``block_hashes`` are computed on first read."""

    __slots__ = ("_request", "_block_size")

    def __init__(self, request, dp_rank, now_ms, block_size):
        self.uuid = request.uuid
        self.now_ms = now_ms
        self.dp_rank = dp_rank
        self.input_length = request.prompt_len
        self.session_id = request.session_id
        self.request_id = request.request_id
        self.priority = request.priority
        self.strict_priority = request.strict_priority
        self._hashes = None
        self._request = request
        self._block_size = block_size

    @property
    def block_hashes(self):
        hashes = self._hashes
        if hashes is None:
            hashes = self._hashes = _hashes(self._request, self._block_size)
        return hashes


def _hashes(request, block_size):
    """The prompt's full-block sequence hashes at the engine's block size: the values the
    engines' KV events carry."""
    hashes = request.prompt.block_hashes(block_size)
    full = request.prompt_len // block_size
    return hashes if len(hashes) == full else hashes[:full]


