"""The disaggregated roles of the C SGLang rank: ``NativeSglangPrefillRank`` and
``NativeSglangDecodeRank``, in the destination-first handoff (FEATURES.md §8;
runtime/sglang_handoff.py).

Their twins and specification are engine/sglang_roles.py's ``SglangPrefillRank`` and
``SglangDecodeRank``: the role logic runs in C (csrc/sglang_roles.c, the rank's ``role``):
held sources and their release; the decode role's pending FIFO, its retries (the head only,
once per capacity generation, and the admission ratio's decay after an idle pass), activations,
cancellations, the promotion of prebuilt requests at a pass start, the shut prefill queue and
the extension's cuts. Python keeps a role's request objects: the pending FIFO of a decode rank
(the runtime reads ``pending``), and the slots of held sources (engine/native_roles.py, as in
the C vLLM prefill role) and of reserved destinations. It still times the passes (a decode
role's prefill forwards are free) and tells the next retry whether the pass it formed was idle.
"""

from __future__ import annotations

from collections import deque

from .. import native
from ..native import check_status as _check
from .native_roles import DestinationCounts, HeldSources
from .request import WAITING
from .sglang import SglangRank
from .sglang_native import _PROMOTED, NativeSglangRank, supports
from .sglang_roles import SglangDecodeRank, SglangPrefillRank


# (bound once, as sglang_native's per-pass calls: a decode rank retries at every pass end)
_C_RETRY = native.lib.aisim_sglang_retry if native.lib is not None else None
_C_ACTIVATE = native.lib.aisim_sglang_activate if native.lib is not None else None


class _Roles:
    """What both C roles add to the C rank."""

    # (the disaggregated loop asks whether a parked rank computes something at every drive:
    # an SGLang pass that changed nothing does nothing the next time either)
    partial = ()

    def off_queue_tokens(self):
        """KV tokens requests in neither queue own off the tree: held sources, reserved
        destinations, prebuilt ones (the invariant checker adds them)."""
        out = native.ffi.new("int64_t *")
        _check(native.lib.aisim_sglang_off_queue_tokens(self._rank, out),
               "aisim_sglang_off_queue_tokens")
        return out[0]


class NativeSglangPrefillRank(HeldSources, _Roles, NativeSglangRank):
    """The prefill role: a completed copy's KV stays held until ``release_source``, which
    caches its prompt and unlocks it."""

    role = "prefill"
    TWIN = SglangPrefillRank
    RELEASE = "aisim_sglang_release_source"


class NativeSglangDecodeRank(DestinationCounts, _Roles, NativeSglangRank):
    """The decode role: destinations accepted, reserved (``retry``), activated, started."""

    role = "decode"
    TWIN = SglangDecodeRank
    charges_prefill = False
    _tracks_idle_pass = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pending = deque()      # accepted destinations waiting for their reservation
        self._reserved = {}         # id(destination) -> its slot, until activated or cancelled
        self._idle_pass = False     # the pass just formed took no time and changed nothing
        ffi = native.ffi
        self._retry_out = (ffi.new("int32_t *"), ffi.new("int64_t *"), ffi.new("int64_t *"))

    # the same text over the same fields: one definition, SglangDecodeRank's
    _refuses = SglangDecodeRank._refuses

    def holds_kv(self):
        view = self._view
        return view.holds > 0 or bool(view.n_pending) or bool(view.n_prebuilt)

    # ------------------------------------------------------------------ the destination
    def accept(self, r):
        """Take destination ``r`` (the full output) into the pending FIFO; False when this rank
        refuses it (SglangDecodeRank.accept): the request fails."""
        SglangRank._take_request(self, r)
        if self._refuses(r):
            return False
        lib = native.lib
        slot = self._enter(r, lib.aisim_sglang_accept, lib.aisim_sglang_accept_ranges)
        self._reserved[id(r)] = slot
        self.pending.append(r)
        return True

    def retry(self):
        """Reserve the pending head if it is due and fits (SglangDecodeRank.retry); returns
        ``(request, tokens the reservation allocated)`` or None."""
        idle = self._idle_pass
        self._idle_pass = False
        if not self.pending and not idle:
            return None
        slot, fresh, node = self._retry_out
        status = _C_RETRY(self._rank, idle, slot, fresh, node)
        if status < 0:   # (no check's call on AISIM_OK: a decode rank retries at every pass end)
            _check(status, "aisim_sglang_retry")
        if slot[0] < 0:
            return None
        head = self.pending.popleft()
        head.seq = node[0]
        return head, fresh[0]

    def activate(self, r):
        """The prompt's KV has arrived: on the tree, and prebuilt for the next pass."""
        status = _C_ACTIVATE(self._rank, self._reserved.pop(id(r)))
        if status < 0:   # (no check's call on AISIM_OK: an activation per request)
            _check(status, "aisim_sglang_activate")
        r.computed = r.prompt_len
        r.status = WAITING

    def cancel(self, r):
        """Drop the reservation of ``r``, whose prefill failed before its KV came."""
        slot = self._reserved.pop(id(r))
        _check(native.lib.aisim_sglang_cancel(self._rank, slot), "aisim_sglang_cancel")
        self._requests[slot] = None
        r.seq = None
        r.held_blocks = r.committed_blocks = 0

    # ------------------------------------------------------------------ passes
    def schedule(self, now_ms):
        end = NativeSglangRank.schedule(self, now_ms)
        self._idle_pass = (end == now_ms and not self.pass_effect
                           and not self._i32[_PROMOTED])
        return end


# role -> (the C rank's class, its Python twin)
SGLANG_RANK_CLASSES = {
    "prefill": (NativeSglangPrefillRank, SglangPrefillRank),
    "decode": (NativeSglangDecodeRank, SglangDecodeRank),
}


def role_class(engine, role, *, dp_size=1, backend=None):
    """The class of an SGLang rank in disaggregated ``role``: the C role where
    ``sglang_native.supports`` takes the configuration, else its Python twin."""
    c_class, python_class = SGLANG_RANK_CLASSES[role]
    return c_class if supports(engine, dp_size=dp_size, backend=backend) is None else python_class
