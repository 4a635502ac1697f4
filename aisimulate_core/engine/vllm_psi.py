"""vLLM's attention-DP prefill cadence, ``prefill_schedule_interval`` (FEATURES.md §2).

The worker (runtime/worker.py) counts its grouped passes: ``wave`` is 0 for the first one,
+1 per grouped pass, back to 0 whenever the whole worker is drained. At the start of a pass a
rank *defers prefills* iff the wave is not a multiple of the interval, its
``capacity_bound`` flag is false and it runs a decoder (a request whose prompt is fully
computed). A lone rank (``dp_size`` 1) is never told a wave: it never defers. On a deferring pass, running requests still computing their prompt get no tokens
(skipped, not blocking the others) and admission stops at the first waiting request that needs
more than one new prompt token after prefix caching. ``capacity_bound`` is recomputed at the
end of the admission of every pass that did not defer and preempted nothing: whether requests
are still waiting.

``PrefillCadence`` is the twin and specification of the C rank's gate (csrc/vllm_rank.c
psi_begin, the ``aisim_vllm_psi`` struct with the same fields, which engine/vllm_native.py
gives the worker as the rank's ``psi``).
"""

from __future__ import annotations


class PrefillCadence:
    """One rank's gate; the worker sets ``wave`` before each grouped pass."""

    __slots__ = ("interval", "wave", "capacity_bound", "defer")

    def __init__(self, interval):
        self.interval = interval
        self.wave = 0
        self.capacity_bound = False
        self.defer = False          # the pass being formed defers prefills

    def begin(self, running):
        """Whether the pass starting now defers prefills (``running``: the rank's requests)."""
        defer = False
        if self.wave % self.interval and not self.capacity_bound:
            for r in running:
                if r.in_stretch or r.computed >= r.prompt_len:
                    defer = True
                    break
        self.defer = defer
        return defer

    def end_admission(self, waiting, preempted):
        """The pass's admission is over: a pass that admitted freely records whether the queue
        kept requests (capacity or max_num_seqs bound)."""
        if not self.defer and not preempted:
            self.capacity_bound = bool(waiting)


def cadence_of(engine):
    """The gate of a rank of this configuration, or None without an interval."""
    interval = getattr(engine, "prefill_schedule_interval", 1)
    if interval > 1:
        return PrefillCadence(interval)
    return None
