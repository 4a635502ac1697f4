"""What the cluster layer reads of an SGLang rank: gauges, counters, router events, FPM rows.

The runtime sets ``rank.watched`` when a router watches the engines, telemetry samples them or a
scaling policy reads forward-pass metrics; until then none of this runs (one test per call of
``schedule`` and ``complete``).

An SGLang pass decides everything when it is formed (``schedule``): the rank's state is the
state after the pass at once, and the pass end only makes it visible. So a submission during a
pass shows that state plus the new request, and the gauges at the pass's completion are the
state then, requests submitted during the pass waiting (as the reference's rows show).

Gauges follow the reference's SGLang metrics: ``active_blocks`` = pages of the pool in use
(radix-resident pages included), ``inactive_blocks`` = 0 (CLUSTER.md §4).

Router events: "stored" for the prompt's full pages the radix tree gains in the pass (output
pages are unique to their request, so no prompt can match them and they are not reported),
"removed" for the pages evicted in the pass that are not on the tree again (the radix cache's
eviction log), then the prompts completed, each signalled with the pass's terminals in running
order when the router asks for order.
"""

from __future__ import annotations

from . import sglang_fpm


class SglangClusterHooks:
    """Mixed into SglangRank."""

    def _init_cluster_hooks(self):
        self.num_blocks = self.total_kv_tokens // self.page_size
        # the runtime turns the eviction log on through ``rank.pool`` (the vLLM ranks' block
        # pool): the radix cache is this rank's pool
        self.pool = self.cache
        self.watched = False
        self._observer = None
        self._stored = None          # (request, from depth, to depth) inserted this pass
        self.capture_gauges = False
        self._gauges = None
        self.decode_steps = 0        # tokens after each request's first, over completed passes
        self._pass_steps = 0
        # SGLang's retractions are not preemptions to the reference's telemetry (its SGLang
        # metrics report none; CLUSTER.md §4)
        self.preemptions = 0
        # prefix-cache counters of the prefill chunks of completed passes (telemetry's
        # interval metrics): tokens matched on the radix tree at admission, and those plus the
        # tokens computed
        self.cache_hit_tokens = 0
        self.cache_total_tokens = 0
        self._pass_chunks = []       # (request, prefix, chunk end, fresh) prefilled this pass
        self._pass_hits = (0, 0)
        self._prefilled = []         # first token emitted this pass, more to come
        self._decoders = None        # members before this pass's decode step
        self._decoder_lens = None    # their lengths (for FPM)
        self.fpm_on = False
        self.fpm_last = None         # (end ms, row) of the latest completed pass
        self.fpm_clock = 0.0
        self._fpm_pending = None

    @property
    def observer(self):
        return self._observer

    @observer.setter
    def observer(self, value):
        """A router's observer: the tree's inserts are noted from now on."""
        self._observer = value
        self._stored = [] if value is not None else None

    # ------------------------------------------------------------------ gauges
    def live_gauges(self):
        """(active blocks, inactive blocks, running, waiting) now."""
        cache = self.cache
        used = cache.total_tokens - cache.free_tokens
        return -(-used // self.page_size), 0, len(self.running), len(self.waiting)

    def kv_gauges(self):
        """(active, inactive) KV blocks as the reference's SGLang reports them."""
        return self.live_gauges()[:2]

    def submission_gauges(self):
        return self.live_gauges()

    def telemetry_gauges(self):
        """``live_gauges()`` as of the latest pass completion or submission."""
        return self._gauges if self._gauges is not None else self.live_gauges()

    def pending_prefill_tokens(self):
        """Prompt tokens not computed yet, over the requests waiting here (running requests have
        their whole prompt computed)."""
        total = 0
        for r in self.waiting:
            if r.computed < r.prompt_len:
                total += r.prompt_len - r.computed
        return total

    # ------------------------------------------------------------------ per pass
    def _watch_decoders(self):
        """Before a decode step: how many members it steps and, for FPM, their lengths before
        the step (retracted ones included, as in the reference's FPM)."""
        running = self.running
        self._decoders = len(running)
        if self.fpm_on:
            D = running.D
            self._decoder_lens = [r.prompt_len + r.base_gen + D - r.open_start for r in running]

    def _watch_decoded(self, emitted):
        """After the decode step: every member left in the batch emitted a token (when any
        did): those are the pass's decode steps."""
        self._pass_steps = self._decoders - len(self._retracted) if emitted else 0

    def _watch_formed(self, now_ms, batch):
        """The pass just formed: its counters, FPM row and gauges, kept until it completes."""
        hit = total = 0
        for _, prefix, chunk_end, fresh in self._pass_chunks:
            if fresh:
                hit += prefix
                total += chunk_end
            else:
                total += chunk_end - prefix
        self._pass_hits = (hit, total)
        if batch or self._decoders is None:
            self._pass_steps = 0          # a prefill forward's first tokens are not decode steps
        if self.fpm_on:
            self._fpm_pending = sglang_fpm.pass_row(self, now_ms)
        self._pass_chunks = []
        self._decoders = self._decoder_lens = None

    def _watch_completed(self):
        """The pass completes: counters, FPM, and the router's KV and prefill events."""
        hit, total = self._pass_hits
        self.cache_hit_tokens += hit
        self.cache_total_tokens += total
        self.decode_steps += self._pass_steps
        row = self._fpm_pending
        if row is not None:
            self._fpm_pending = None
            # the duration of the grouped pass (attention DP): every rank's ends with the slowest
            row["wall_time"] = (self.pass_end_ms - row["wall_time"]) / 1000.0
            self.fpm_last = (self.pass_end_ms, row)
        prefilled, self._prefilled = self._prefilled, []
        observer = self._observer
        if observer is None:
            return
        self._report_kv(observer)
        if observer.ordered:
            # the reference signals each request in running order (join order here)
            signaled = prefilled + [r for r, status in self._done if status == "completed"]
            signaled.sort(key=_join_number)
            observer.begin_pass({r.uuid: i for i, r in enumerate(signaled)})
        for r in prefilled:
            observer.prefill_done(self, r)

    def _watch_settled(self):
        if self.capture_gauges:
            self._gauges = self.live_gauges()
        observer = self._observer
        if observer is not None and observer.ordered:
            observer.end_pass()

    def _report_kv(self, observer):
        stored, self._stored = self._stored, []
        ps = self.page_size
        for r, lo, hi in stored:
            full = r.prompt_len - r.prompt_len % ps
            if hi > full:
                hi = full
            if lo < hi:
                observer.kv_stored(self, r.prompt.block_hashes(ps)[lo // ps:hi // ps])
        evicted = self.cache.take_evicted(absent_only=True)
        if len(evicted):
            observer.kv_removed(self, evicted)


def _join_number(r):
    return r.bucket_key
