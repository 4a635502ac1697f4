"""The contract between an engine rank and the runtime: what ``runtime/`` calls on a rank.

One rank is one attention rank of a worker (``runtime/worker.py``); the engines here
(``VllmRank``, ``SglangRank``, their disaggregated roles, offload and state-cache ranks and the
C ranks ``NativeVllmRank``/``NativeSglangRank`` with their roles) all implement ``Rank``.
Times are milliseconds of simulated time throughout. ``engine/rank_base.py: RankBase`` gives
the pass history, the ITL bookkeeping, ``truncate``/``ends_pass_at`` and the defaults of the
optional members below; tests/test_rank_protocol.py checks every class the build makes.

Capabilities are class attributes (``extends``, ``joins_groups``, ``indexes_prefix``), read
once when a worker or router is built, never per pass: a rank states what it does instead of
the runtime probing it for methods. The C-loop fast paths (``runtime/plain_native.py``,
``plain_disagg_native.py``, the placement plugin's C router) also read a C rank's private
handles (``_rank``, ``_view``); those belong to the C ranks, not to this contract.
"""

from __future__ import annotations

from typing import Any, Protocol

class Rank(Protocol):
    """One attention rank: takes requests, forms passes, records when tokens appeared."""

    # -- identity (set by the build: runtime/build.py worker_factory)
    worker_idx: int          # the worker's id within its pool
    dp_rank: int             # the rank's index within its worker (attention DP)
    scheduler_id: int        # worker_idx * dp_size + dp_rank: the report's scheduler
    config_path: str | None  # JSON path of the rank's settings, for messages (None: unnamed)
    timer: Any               # its StepTimer (engine/timing.py)
    cb: Any                  # the simulation's EngineEvents: finished and retired requests
    num_blocks: int          # KV blocks (pages) of the rank, for telemetry and messages
    max_model_len: int | None
    caching: bool            # prefix caching on

    # -- queues: sized, iterable collections of the rank's requests (SimRequest)
    running: Any
    waiting: Any

    # -- capabilities, class attributes (RankBase holds the defaults)
    extends: bool
    """It can run a pass on as a decode-only run of passes ending in one event: it has
    ``extend`` and ``truncate`` (``ExtendableRank``). A worker of one such rank extends its
    passes; without it every pass is one event."""
    joins_groups: bool
    """A member of an attention-DP group: it has ``join_group``/``finish_round`` and the pass
    flags ``prefill_in_pass``/``model_work_in_pass`` (``GroupedRank``). A worker of several
    ranks tells these ranks the group's round; other ranks hear nothing."""
    indexes_prefix: bool
    """It answers ``indexed_prefix(hashes)`` (``IndexedRank``): the pool's placement view
    reads the engine's own prefix index only when every rank answers it."""
    psi: Any
    """vLLM's prefill_schedule_interval gate (engine/vllm_psi.py, or the C rank's struct), with
    a settable ``wave``; None without one (the worker tells the gates its wave count)."""
    tier_split: dict | None
    """KV offload tiers: uuid -> (G1, host) reused tokens of the first admission, popped by the
    record; None on ranks without tiers."""

    # -- the pass in flight
    pass_end_ms: float       # end of the pass just formed (a group's end for DP members)
    stuck: bool              # the pass just formed is a fixed point: no pass will change
    pass_ends: Any           # end time of every pass, by pass index (array 'd')
    break_gaps: dict         # (last pass, first pass) across a break -> finished requests

    # -- counters, cumulative over the run
    committed_prefill_tokens: int   # prompt tokens computed (the report's prefill total)
    preemptions: int
    decode_steps: int
    # optional counters, read by runtime/cluster.py with these defaults when absent:
    # completed_preemptions (preemptions), decode_tokens (decode_steps; more with MTP),
    # cache_hit_tokens and cache_total_tokens (0; SGLang's prefix cache)

    # -- watch switches (the simulation and the scaling loop set them)
    observer: Any            # EngineEvents that reports KV/prefill events to a router, or None
    watched: bool            # someone reads per-pass events: engines keep them
    capture_gauges: bool     # the rank keeps ``live_gauges`` current at every completion
    fpm_on: bool             # forward-pass metrics rows for a scaling policy (engine/fpm.py)
    fpm_last: Any            # (end ms, row) of the latest pass, or None
    fpm_clock: float         # ms: the idle clock of the metrics rows

    def submit(self, request) -> None:
        """Take ``request`` into the waiting queue."""

    def schedule(self, now_ms: float) -> float | None:
        """Form the next pass starting at ``now_ms``; returns its end time (``pass_end_ms``),
        or None when there is nothing to run."""

    def complete(self) -> None:
        """The pass formed last has ended: tokens become visible, finished requests leave
        (through ``cb``)."""

    def has_work(self) -> bool:
        """Requests running or waiting."""

    def holds_kv(self) -> bool:
        """KV held for a request outside the queues (a disaggregated source or destination)."""

    def progressed(self) -> bool:
        """Whether the pass just formed changed state (asked only after zero-time passes)."""

    def stuck_error(self, now_ms: float) -> Exception:
        """The SimulationError explaining a ``stuck`` pass."""

    def ends_pass_at(self, t_ms: float) -> bool:
        """Whether a pass before the last of an extended run ends exactly at ``t_ms``."""

    def add_gaps_to(self, collector) -> None:
        """Its inter-token gaps into the report's ``Collector`` (``add_pass_gaps``)."""

    def gap_history(self) -> tuple:
        """(pass ends, gap multiplicity differences, break gaps): what ITL is read from."""

    def itl_gaps(self, backend=None) -> tuple:
        """(gap values, multiplicities) of its recorded gaps (arrays 'd' and 'q')."""

    def stall_reason(self, r) -> str:
        """Why ``r`` at the head of the queue can never be scheduled (a livelock message)."""

    def fit_error(self, r) -> str | None:
        """Why ``r`` can never fit this rank, checked at submission; None when it can."""

    def kv_summary(self) -> str:
        """How much KV is free, for a livelock message."""

    def live_gauges(self) -> tuple:
        """(active blocks, inactive blocks, running, waiting) now (telemetry's source while
        ``capture_gauges``)."""

    def kv_gauges(self) -> tuple:
        """(active, inactive) KV blocks: referenced by requests, and cached with no reference
        (the placement view, ``SchedulerView``)."""

    def submission_gauges(self) -> tuple:
        """``live_gauges()`` as a submission sees them (a pass in flight's finishing requests
        already gone)."""

    def telemetry_gauges(self) -> tuple:
        """(active blocks, inactive blocks, running, waiting) for a telemetry row."""

    def pending_prefill_tokens(self) -> int:
        """Prompt tokens not yet computed of its waiting and running requests."""


class ExtendableRank(Rank, Protocol):
    """A rank with ``extends``: a lone rank's pass runs on as decode-only passes."""

    def extend(self, horizon_ms: float, cutoff_ms: float, max_passes: int = ...) -> float:
        """Called right after ``schedule``: lengthen the pass by the decode-only passes that
        follow it, until a request finishes, KV would run out, a request could join
        (``horizon_ms``: the next known arrival) or the run's time limit (``cutoff_ms``), at
        most ``max_passes``; returns the end of the last pass (the pass's own end when it
        cannot extend)."""

    def truncate(self, arrival_ms: float, started: bool = False) -> float:
        """A request arrived at ``arrival_ms`` during the run: stop after the pass in flight
        then; returns the new end (``RankBase.truncate``)."""

    # optional: ``schedule_extended(now_ms, horizon_ms, cutoff_ms)``, ``schedule`` and
    # ``extend`` in one call (the C SGLang rank); the worker looks for it once, at the first
    # pass, and calls the two otherwise


class GroupedRank(Rank, Protocol):
    """A rank with ``joins_groups``: its worker's ranks share one scheduler round."""

    prefill_in_pass: bool    # the pass just formed prefilled
    model_work_in_pass: bool  # the pass just formed ran a forward

    def join_group(self, dp_size: int) -> None:
        """It is one of ``dp_size`` > 1 ranks of a worker (called once, at construction)."""

    def finish_round(self, any_rank_prefilled: bool, any_rank_ran_model: bool) -> None:
        """A grouped pass formed: what the group did, told to every member, idle ones too."""


class IndexedRank(Rank, Protocol):
    """A rank with ``indexes_prefix``: placement reads its prefix index."""

    def indexed_prefix(self, hashes) -> int:
        """How many leading blocks of ``hashes`` (full-block sequence hashes) an index fed by
        the rank's KV events would hold, as of its latest pass end."""


class PrefillRank(Rank, Protocol):
    """A disaggregated prefill rank: holds a finished prefill's KV as a handoff source."""

    partial: Any             # running requests not in an open stretch (empty: none)

    def release_source(self, r) -> None:
        """The destination has the KV of ``r``: free the source blocks."""


class DecodeRank(Rank, Protocol):
    """A disaggregated decode rank: reserves KV for an incoming handoff, then decodes it."""

    partial: Any

    def accept(self, r) -> bool:
        """Reserve the KV of handoff copy ``r`` now; False: it waits (``retry``)."""

    def retry(self):
        """Reserve for the oldest waiting handoff if it fits now; returns it, or None."""

    def activate(self, r) -> None:
        """The KV of ``r`` arrived: it joins the running batch."""

    # SGLang's decode roles also ``cancel(r)`` a reservation (runtime/sglang_handoff.py), and
    # vLLM's name their settings in messages with ``setting_prefix(field)``
