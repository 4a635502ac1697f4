"""The disaggregated roles of the C vLLM / TensorRT-LLM rank: ``NativeVllmPrefillRank`` and
``NativeVllmDecodeRank``.

Their twins and specification are engine/vllm_roles.py's ``VllmPrefillRank`` and
``VllmDecodeRank``: the role logic runs in C (csrc/vllm_rank.c, the rank's ``role``), with the
same checks, gauges and messages as the Python roles (shared from them where the text or the
arithmetic is the same). Python keeps a role's request objects: the pending FIFO of a decode
rank (the runtime reads ``pending``), and the slots of held sources and reserved destinations.
"""

from __future__ import annotations

from collections import deque

from .. import native
from ..native import check_status as _check
from .decode_run import MAX_PASSES
from .native_roles import DestinationCounts, HeldSources
from .request import WAITING
from .vllm import VllmRank
from .vllm_native import _SCRATCH, NativeVllmRank
from .vllm_roles import VllmDecodeRank, VllmPrefillRank
from ..workload.prompt import IdRanges


class NativeVllmPrefillRank(HeldSources, NativeVllmRank):
    """The prefill role: a finished copy's KV stays held until ``release_source``."""

    role = "prefill"
    charges_decode = False
    RELEASE = "aisim_vllm_release_source"
    NO_SEQ = -1

    def submission_gauges(self):
        # a copy the pass in flight completes leaves the batch but keeps its KV held (the
        # source), so only the running count drops
        active, inactive, running, waiting = self.live_gauges()
        if self.in_flight:
            ends = self._macro_ends
            out = _SCRATCH.gauges
            _check(native.lib.aisim_vllm_finishing_gauges(
                self._rank, len(ends) - 1 if ends else 0, out), "aisim_vllm_finishing_gauges")
            running -= out[0]
        return active, inactive, running, waiting


class NativeVllmDecodeRank(DestinationCounts, NativeVllmRank):
    """The decode role: destinations accepted, reserved (``retry``) and activated."""

    role = "decode"
    charges_prefill = False
    open_activations = True      # as VllmDecodeRank.open_activations

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pending = deque()       # accepted destinations waiting for their reservation
        self._accepted = 0
        self.activation_runs = 0     # extended passes that began with activations' first tokens
        self._reserved = {}          # id(destination) -> its slot, until activated
        self._retry_out = (native.ffi.new("int32_t *"), native.ffi.new("int64_t *"),
                           native.ffi.new("int32_t *"))

    # the same text and arithmetic over the same fields: one definition, VllmDecodeRank's
    _destination_fits = VllmDecodeRank._destination_fits
    holds_kv = VllmDecodeRank.holds_kv
    live_gauges = VllmDecodeRank.live_gauges
    stall_reason = VllmDecodeRank.stall_reason

    def accept(self, r):
        """Take destination ``r`` (a copy with the full output); False when it can never fit
        this rank (the handoff fails)."""
        self._limit_output(r)
        if not self._destination_fits(r):
            return False
        # (hashed past max_model_len too: the reservation looks its prompt up)
        slot = None
        if self.caching and r.output_token_ids is None:
            source = getattr(r.prompt, "_source", None)
            if source is not None and type(source[0]) is IdRanges:
                slot = self._submit_ranges(r, r.prompt_len, source,
                                           native.lib.aisim_vllm_accept_ranges)
        if slot is None:
            slot = native.lib.aisim_vllm_accept(self._rank, *self._request_args(r, hashed=True))
        self._take_slot(_check(slot, "aisim_vllm_accept"), r)
        r.waiting_order = self._accepted
        self._accepted += 1
        self._reserved[id(r)] = slot
        self.pending.append(r)
        if self.capture_gauges:
            self._gauges = self.submission_gauges()
        return True

    def retry(self):
        """Reserve the prompt blocks of the pending head if it fits; returns ``(request,
        tokens to transfer when only missing blocks move)`` or None."""
        if not self.pending:
            return None
        slot, fresh, seq = self._retry_out
        _check(native.lib.aisim_vllm_retry(self._rank, slot, fresh, seq), "aisim_vllm_retry")
        if slot[0] < 0:
            return None
        head = self.pending.popleft()
        head.seq = seq[0]
        if self.capture_gauges:
            self._gauges = self.live_gauges()
        return head, fresh[0]

    def activate(self, r):
        """The prompt's KV has arrived: ``r`` waits to start, ahead of the first waiting request
        accepted after it."""
        _check(native.lib.aisim_vllm_activate(self._rank, self._reserved.pop(id(r))),
               "aisim_vllm_activate")
        r.computed = r.prompt_len
        r.status = WAITING
        if self.capture_gauges:
            self._gauges = self.live_gauges()

    def extend(self, horizon_ms, cutoff_ms, max_passes=MAX_PASSES):
        if self._view.retry_due:
            return self.pass_end_ms  # the next pass end may reserve the head
        # (as VllmDecodeRank.extend: activations' first tokens may open stretches now)
        if (self.open_activations and self._view.n_ready and self._observer is None
                and not self._fpm_on
                and self.pass_end_ms < horizon_ms):
            status = native.lib.aisim_vllm_open_activated(self._rank)
            if status < 0:
                raise native.status_error(status, "aisim_vllm_open_activated")
            if status:
                ends = super().extend(horizon_ms, cutoff_ms, max_passes)
                if self._macro_ends is not None:
                    self.activation_runs += 1
                return ends
        return super().extend(horizon_ms, cutoff_ms, max_passes)


# role -> (the C rank's class, its Python twin)
RANK_CLASSES = {
    "aggregated": (NativeVllmRank, VllmRank),
    "prefill": (NativeVllmPrefillRank, VllmPrefillRank),
    "decode": (NativeVllmDecodeRank, VllmDecodeRank),
}
