"""What the disaggregated roles of the C ranks share, vLLM's (engine/vllm_native_roles.py)
and SGLang's (engine/sglang_native_roles.py): the prefill role's held sources (a copy that
completes keeps its slot and its KV until the runtime releases its source; C counts them,
Python keeps the copy -> slot map) and the decode role's counts of its destinations."""

from __future__ import annotations

from .. import native
from ..native import check_status as _check


class HeldSources:
    """Mixed in before the C rank's class; ``RELEASE`` names the C call that frees a held
    slot, ``NO_SEQ`` is a request's ``seq`` once it holds no KV."""

    holds_sources = True
    RELEASE = ""
    NO_SEQ = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._held = {}              # id(copy) -> its slot, while its source is held

    @property
    def held_sources(self):
        return self._view.held_sources

    def holds_kv(self):
        return self._view.held_sources > 0

    def _hold(self, r, slot):
        self._held[id(r)] = slot

    def release_source(self, r):
        """Free the KV of a held copy (SGLang caches its prompt first): the decode side has
        it, or the handoff failed."""
        slot = self._held.pop(id(r))
        _check(getattr(native.lib, self.RELEASE)(self._rank, slot), self.RELEASE)
        self._requests[slot] = None
        r.seq = self.NO_SEQ
        if self.capture_gauges:
            self._gauges = self.live_gauges()


class DestinationCounts:
    """Mixed in before a C decode role's class: the counts C keeps of its destinations."""

    @property
    def holds(self):
        """Reserved destinations waiting for their KV."""
        return self._view.holds

    @property
    def generation(self):
        """The capacity generation (a release of KV moves it): gates retries of a refused
        head."""
        return self._view.generation
