"""The report: collects terminal requests and token gaps, then builds the reference's summary
(flat dict, keys in the reference's order) and its per-request records.

What counts (SEMANTICS.md §4): only requests admitted at least once *and* completed contribute
to the counts, token totals, duration and latency samples. The summary's key order is a
contract: see ``summary_keys``.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import uuid as _uuid
from array import array
from typing import Any, Callable, Iterable

import attrs
import msgspec

from .stats import (KEY_MULTIPLIER, MIN_INDEXABLE, DistributionStats, exact_stats,
                    summary_stats)
from .token_stats import TokenGaps

# ---------------------------------------------------------------------------------------------
# records


@attrs.define(slots=True)
class RequestRecord:
    """One request at its terminal status, filled by the runtime."""

    uuid: int
    request_id: str | None  # authored id
    session_id: str | None
    turn_index: int | None
    play_id: str | None
    metadata: object | None
    arrival_time_ms: float
    dispatched_at_ms: float | None  # the reference sets it only for agentic requests
    terminal_time_ms: float
    terminal_status: str  # completed | rejected | canceled | failed
    input_length: int
    requested_output_length: int
    output_length: int  # tokens actually emitted
    first_token_ms: float | None
    second_token_ms: float | None
    last_token_ms: float | None
    reused_input_tokens: int  # max over admissions (all pools)
    first_admission_reused_input_tokens: int | None  # None when never admitted
    admissions: list  # [(at_ms, pool, reused_input_tokens, is_readmission[, g1, host])]
    prefill_worker_idx: int | None
    decode_worker_idx: int | None
    routing: list  # [(pool, logical_worker_id, dp_rank[, scheduler_id])] or dicts of route keys
    # disaggregated lifecycle, None in aggregated runs:
    prefill_admit_ms: float | None = None
    source_held_ms: float | None = None
    destination_reserved_ms: float | None = None
    destination_activated_ms: float | None = None
    decode_admit_ms: float | None = None
    source_released_ms: float | None = None
    decode_reused_input_tokens: int | None = None
    # optional detail; None means "derive" (route overlaps) or "omit" (tier split)
    prefill_route_overlap_tokens: int | None = None
    decode_route_overlap_tokens: int | None = None
    first_admission_g1_reused_input_tokens: int | None = None
    first_admission_host_reused_input_tokens: int | None = None
    pressure_record_ordinals: list | None = None
    agentic: dict | None = None  # an agentic graph node's ids (request, play, root, parent)


class SummaryRecord:
    """What the summary (and a traffic window) reads of a terminal request, under the
    RequestRecord field names, for a run that keeps no per-request record
    (``Collector.keeps_records`` false): a third of a record's fields, and nothing built per
    admission or route (``admissions`` is the rank's own list: only whether it is empty is
    read)."""

    __slots__ = ("uuid", "request_id", "arrival_time_ms", "terminal_time_ms", "terminal_status",
                 "input_length", "output_length", "first_token_ms", "second_token_ms",
                 "last_token_ms", "reused_input_tokens", "first_admission_reused_input_tokens",
                 "admissions")

    def __init__(self, uuid, request_id, arrival_time_ms, terminal_time_ms, terminal_status,
                 input_length, output_length, first_token_ms, second_token_ms, last_token_ms,
                 reused_input_tokens, first_admission_reused_input_tokens, admissions):
        self.uuid = uuid
        self.request_id = request_id
        self.arrival_time_ms = arrival_time_ms
        self.terminal_time_ms = terminal_time_ms
        self.terminal_status = terminal_status
        self.input_length = input_length
        self.output_length = output_length
        self.first_token_ms = first_token_ms
        self.second_token_ms = second_token_ms
        self.last_token_ms = last_token_ms
        self.reused_input_tokens = reused_input_tokens
        self.first_admission_reused_input_tokens = first_admission_reused_input_tokens
        self.admissions = admissions


def _nonneg(x: float) -> float:
    return x if x > 0.0 else 0.0


# the text of a run's own numbering, 0 <= uuid < 2**48 (the usual uuid: only the last group of
# str(uuid.UUID(int=uuid)) has digits)
_run_uuid_text = "00000000-0000-0000-0000-{:012x}".format


def _uuid_text(value: Any) -> str:
    # str(uuid.UUID(int=value)), without building the object
    if not isinstance(value, int):
        return str(value)
    if not 0 <= value < 1 << 128:
        return str(_uuid.UUID(int=value))  # its error
    if value < 1 << 48:
        return _run_uuid_text(value)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# ---------------------------------------------------------------------------------------------
# SLA


@attrs.frozen
class _Sla:
    ttft_ms: float | None
    itl_ms: float | None
    e2e_ms: float | None

    @classmethod
    def from_obj(cls, sla: Any) -> "_Sla | None":
        if sla is None:
            return None
        get = sla.get if isinstance(sla, dict) else (lambda k: getattr(sla, k, None))
        parsed = cls(get("ttft_ms"), get("itl_ms"), get("e2e_ms"))
        if parsed.ttft_ms is None and parsed.itl_ms is None and parsed.e2e_ms is None:
            return None
        return parsed

    def is_good(self, ttft_ms: float, e2e_ms: float, output_length: int) -> bool:
        if self.e2e_ms is not None and e2e_ms > self.e2e_ms:
            return False
        if self.ttft_ms is not None and ttft_ms > self.ttft_ms:
            return False
        if self.itl_ms is not None and output_length > 1:
            if (e2e_ms - ttft_ms) / (output_length - 1.0) > self.itl_ms:
                return False
        return True

    def is_good_without_tokens(self, e2e_ms: float) -> bool:
        return (self.ttft_ms is None and self.itl_ms is None
                and self.e2e_ms is not None and e2e_ms <= self.e2e_ms)


# ---------------------------------------------------------------------------------------------
# summary key order (observed on ai-dynamo-runtime 1.6.1; optional groups in brackets below)

_DIST_FIELDS = ("mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std")


@functools.lru_cache(maxsize=None)   # a dozen names; every report asks for six of them
def _dist_keys(name: str, unit: str = "_ms") -> tuple[str, ...]:
    return tuple(f"{field}_{name}{unit}" for field in _DIST_FIELDS)


# the distributions' keys: constants of the summary's format, named once
_TTFT_KEYS = _dist_keys("ttft")
_TTST_KEYS = _dist_keys("ttst")
_TPOT_KEYS = _dist_keys("tpot")
_ITL_KEYS = _dist_keys("itl")
_E2E_KEYS = _dist_keys("e2e_latency")
_RATE_KEYS = _dist_keys("output_token_throughput_per_user", "")
_TRAJECTORY_KEYS = _dist_keys("trajectory_e2e_latency")

# extras that sit in fixed places; anything else passed to add_extra goes at the end
_HEAD_EXTRAS = ("kv_eviction_policy", "kv_eviction_assumption", "committed_prefill_tokens",
                "g3_offload", "g2_domains")
_POWER_EXTRAS = ("power_w", "power_coverage", "power_diagnostics")
_AGENTIC_EXTRAS = (
    "total_trajectories", "completed_trajectories", "incomplete_trajectories",
    *_dist_keys("trajectory_e2e_latency"), "p50_trajectory_e2e_latency_ms",
    "agentic_graph", "agentic_snapshots", "agentic_phases", "agentic_profile",
    "agentic_lifecycle_event_count", "agentic_lifecycle_digest", "agentic_play_outcomes",
)
_ALWAYS = {"kv_eviction_policy", "committed_prefill_tokens", "power_w", "power_coverage"}

_COUNT_KEYS = (
    "num_requests", "completed_requests", "total_input_tokens", "total_output_tokens",
    "duration_ms", "wall_time_ms", "request_throughput_rps", "input_throughput_tok_s",
    "output_throughput_tok_s", "total_throughput_tok_s", "prefill_worker_seconds",
    "decode_worker_seconds", "prefill_gpus_per_worker", "decode_gpus_per_worker", "gpu_hours",
)
_GOODPUT_KEYS = ("goodput_completed_requests", "goodput_request_throughput_rps",
                 "goodput_output_throughput_tok_s")
_HOST_CACHE_SAMPLE_KEYS = (
    "processed_tokens", "processed_tokens_per_s", "processed_output_tokens_per_s",
    "prefix_cache_reused_ratio", "first_admission_prefix_cache_reused_ratio",
    "num_ttft_samples", "num_tpot_samples", "num_e2e_latency_samples",
)


def summary_keys(*, goodput: bool = False, extras: Iterable[str] = ()) -> list[str]:
    """The summary's keys in order, given whether an SLA is set and which extras were added."""
    return list(_key_order(goodput, tuple(dict.fromkeys(extras))))


@functools.lru_cache(maxsize=64)
def _key_order(goodput: bool, extras: tuple[str, ...]) -> tuple[str, ...]:
    # cached: a run's extras are one of a few sets, and a small run should not rebuild this
    present = set(extras) | _ALWAYS
    keys = [k for k in _HEAD_EXTRAS if k in present]
    keys += _COUNT_KEYS
    if goodput:
        keys += _GOODPUT_KEYS
    keys += [k for k in _POWER_EXTRAS if k in present]
    keys += _HOST_CACHE_SAMPLE_KEYS
    for name in ("ttft", "ttst", "tpot", "itl"):
        keys += _dist_keys(name)
    keys += [k for k in _AGENTIC_EXTRAS if k in present]
    keys += _dist_keys("e2e_latency")
    keys += _dist_keys("output_token_throughput_per_user", "")
    placed = set(keys)
    keys += [k for k in extras if k not in placed]  # unknown extras last, in the order added
    return tuple(keys)


# ---------------------------------------------------------------------------------------------
# report


@attrs.define(slots=True)
class Report:
    summary: dict
    per_request: list | None = None
    # {"sample_interval_ms", "samples"} when telemetry was asked for (not part of to_dict())
    telemetry: dict | None = None

    def to_dict(self) -> dict:
        if self.per_request is None:
            return dict(self.summary)
        return {**self.summary, "per_request": self.per_request}

    def to_json(self) -> str:
        return msgspec.json.encode(self.to_dict()).decode()


class Collector:
    """Accumulates what the summary needs; ``finalize`` builds the report once.

    Memory does not grow with the records a run makes, only with its samples: each completed
    request leaves its TTFT, E2E, TTST and TPOT as 8-byte doubles (``_Totals``), in the
    summary's order, and the token gaps are one count per distinct gap, held in C on the C
    backend (``token_stats.TokenGaps``; ``backend`` "c" or "python" forces one). Records are
    kept only when asked for: all of them in memory (``record_per_request``), or handed to a
    sink as they settle (``stream_records_to``).
    """

    def __init__(self, *, sla: Any = None, record_per_request: bool,
                 report_start_ms: float = 0.0, backend: str | None = None) -> None:
        self._totals = _Totals(_Sla.from_obj(sla), report_start_ms)
        self._num_requests = 0
        self._order = _ArrivalOrder(self._settled)
        self._authored: list[RequestRecord] = []   # completed ones with a request id
        # kept records go into this list in the report's order, at finalize (records made
        # by hand need not arrive in uuid order, so none is placed early)
        self._records: list[dict] | None = [] if record_per_request else None
        self._stream = (_RecordStream(self._records.append, running=False)
                        if record_per_request else None)
        self._fallback_committed_prefill = 0
        # gap (ms) -> number of token gaps of that length (in C on the C backend); the
        # sketches and moments are built from its summary in finalize
        self._gaps = TokenGaps(backend)
        self._worker_seconds = (0.0, 0.0)
        self._gpus_per_worker = (0, 0)
        self._extras: dict[str, Any] = {}

    @property
    def totals(self) -> "_Totals":
        """The summary's running totals (their ``sla``): the C loops set their report up
        from them and fill them (``fill_totals``)."""
        return self._totals

    @property
    def record_stream(self) -> "_RecordStream | None":
        """Where settled records go in the report's order (kept or streamed), or None: the C
        loops hand it the records they gather (runtime/plain_native.py)."""
        return self._stream

    def holds_terminals(self) -> bool:
        """Whether any request has arrived or settled here yet (a run the C loops take over
        must start on an empty collector)."""
        stream = self._stream
        return bool(self._num_requests or self._order.waiting or self._authored
                    or (stream is not None and (stream.heap or stream.later)))

    @property
    def keeps_records(self) -> bool:
        """Whether terminals must come as full ``RequestRecord``s (records kept or streamed);
        when not, a ``SummaryRecord`` gives the same summary for less."""
        return self._stream is not None

    def stream_records_to(self, sink: Callable[[dict], Any]) -> None:
        """Hand each per-request record dict to ``sink`` instead of keeping it (call before the
        run; the report's ``per_request`` is then None).

        Records reach the sink in the report's order (``_record_order``), each once every
        record before it is known: the runtime numbers requests in arrival order, so a record
        waits only for requests that arrived no later than it and are still in flight, and for
        the other requests of its arrival instant. Records with an authored ``request_id``,
        which the report puts last, come when the report is finalized.
        """
        self._records = None
        self._stream = _RecordStream(sink)

    # -- events ---------------------------------------------------------------------------------

    def on_arrival(self, count: int = 1) -> None:
        self._num_requests += count

    def on_terminal(self, rec: RequestRecord) -> None:
        order = self._order
        if rec.uuid == order.next_uuid and not order.waiting:
            order.next_uuid += 1   # the usual terminal: next in uuid order, nothing waits
            self._settled(rec)
        else:
            order.push(rec)

    def _settled(self, rec: RequestRecord) -> None:
        """``rec`` comes next in uuid order."""
        # _admitted(rec), inlined: this runs once per request
        if rec.first_admission_reused_input_tokens is not None or rec.admissions:
            self._fallback_committed_prefill += max(0, rec.input_length - rec.reused_input_tokens)
            if rec.terminal_status == "completed":
                if rec.request_id is None:
                    self._totals.add(rec)
                else:
                    self._authored.append(rec)  # summed after the others, in id order
        if self._stream is not None:
            self._stream.settled(rec)

    def add_itl_gaps(self, gaps_ms, counts) -> None:
        """Record ``counts[i]`` token gaps of ``gaps_ms[i]`` ms (completed, admitted requests);
        NaN and +inf gaps are not samples, a negative gap counts as 0 (the reference clamps it);
        a count must fit an int64. Arrays (``'d'``, ``'q'``), as ``RankBase.itl_gaps`` gives
        them, go in without a copy."""
        self._gaps.add(gaps_ms, counts)

    def add_pass_gaps(self, pass_ends, diff, breaks=None) -> None:
        """A rank's token gaps from its pass history (``RankBase.add_gaps_to``): the gaps
        ``TokenGaps.add_passes`` reads, added as ``add_itl_gaps`` adds them."""
        self._gaps.add_passes(pass_ends, diff, breaks)

    def _token_distributions(self) -> tuple[DistributionStats, DistributionStats]:
        """The ITL and per-user rate (1000 / gap) figures, from one summary call (the sketch's
        quantiles read off the summary's sorted keys: ``stats.summary_stats``)."""
        itl_summary, rate_summary = self._gaps.summaries(KEY_MULTIPLIER, MIN_INDEXABLE)
        return summary_stats(itl_summary), summary_stats(rate_summary)

    def set_worker_seconds(self, *, prefill_worker_seconds: float, decode_worker_seconds: float,
                           prefill_gpus_per_worker: int, decode_gpus_per_worker: int) -> None:
        self._worker_seconds = (prefill_worker_seconds, decode_worker_seconds)
        self._gpus_per_worker = (prefill_gpus_per_worker, decode_gpus_per_worker)

    def add_extra(self, key: str, value: Any) -> None:
        self._extras[key] = value

    def set_trajectories(self, *, total: int, completed: int, e2e_latencies_ms: list) -> None:
        """Agentic trajectory counts and the exact trajectory E2E distribution."""
        stats = exact_stats(e2e_latencies_ms)
        # stored in the summary's order, without a keyword dict built to be merged
        extras = self._extras
        extras["total_trajectories"] = total
        extras["completed_trajectories"] = completed
        extras["incomplete_trajectories"] = max(0, total - completed)
        extras.update(zip(_TRAJECTORY_KEYS, stats))
        extras["p50_trajectory_e2e_latency_ms"] = stats.median

    # -- report ---------------------------------------------------------------------------------

    def finalize(self, *, wall_time_ms: float, report_end_ms: float | None = None) -> Report:
        if self._stream is not None:
            self._stream.close()
        self._order.flush()  # records behind a request that never ended (a cutoff)
        totals = self._totals
        # the reference walks requests by (authored id, None first; uuid): the order only
        # matters for the last bits of the sequential sums behind the means
        for rec in sorted(self._authored, key=_summary_order):
            totals.add(rec)
        self._authored = []
        duration_ms = totals.duration_ms
        if report_end_ms is not None:
            duration_ms = max(_nonneg(report_end_ms - totals.start_ms), duration_ms)

        values: dict[str, Any] = {
            "kv_eviction_policy": "lru",
            "committed_prefill_tokens": self._fallback_committed_prefill,
            "power_w": None,
            "power_coverage": None,
        }
        values.update(self._extras)
        values.update(self._count_values(duration_ms, wall_time_ms))
        values.update(self._distribution_values())
        order = _key_order(totals.sla is not None, tuple(self._extras))
        summary = dict(zip(order, map(values.__getitem__, order)))   # (the comprehension, in C)

        if self._stream is not None:
            self._stream.flush()
        return Report(summary=summary, per_request=self._records)

    def _count_values(self, duration_ms: float, wall_time_ms: float) -> dict[str, Any]:
        """Counts, token totals, throughputs, worker time, reuse ratios and goodput."""
        totals = self._totals
        completed = totals.completed
        input_tokens, output_tokens = totals.input_tokens, totals.output_tokens
        duration_s = max(duration_ms / 1000.0, 1e-9)
        prefill_ws, decode_ws = self._worker_seconds
        prefill_gpw, decode_gpw = self._gpus_per_worker
        processed = input_tokens + output_tokens
        wall_ok = math.isfinite(wall_time_ms) and wall_time_ms > 0.0
        values = dict(
            num_requests=self._num_requests,
            completed_requests=completed,
            total_input_tokens=input_tokens,
            total_output_tokens=output_tokens,
            duration_ms=duration_ms,
            wall_time_ms=wall_time_ms,
            request_throughput_rps=completed / duration_s,
            input_throughput_tok_s=input_tokens / duration_s,
            output_throughput_tok_s=output_tokens / duration_s,
            total_throughput_tok_s=processed / duration_s,
            prefill_worker_seconds=prefill_ws,
            decode_worker_seconds=decode_ws,
            prefill_gpus_per_worker=prefill_gpw,
            decode_gpus_per_worker=decode_gpw,
            gpu_hours=(prefill_ws * prefill_gpw + decode_ws * decode_gpw) / 3600.0,
            processed_tokens=processed,
            processed_tokens_per_s=processed / wall_time_ms * 1000.0 if wall_ok else 0.0,
            processed_output_tokens_per_s=(
                output_tokens / wall_time_ms * 1000.0 if wall_ok else 0.0),
            prefix_cache_reused_ratio=totals.reused / input_tokens if input_tokens else 0.0,
            first_admission_prefix_cache_reused_ratio=(
                totals.first_reused / input_tokens if input_tokens else 0.0),
            num_ttft_samples=len(totals.ttft),
            num_tpot_samples=len(totals.tpot),
            num_e2e_latency_samples=len(totals.e2e),
        )
        if totals.sla is not None:
            values.update(
                goodput_completed_requests=totals.good,
                goodput_request_throughput_rps=totals.good / duration_s,
                goodput_output_throughput_tok_s=totals.good_tokens / duration_s,
            )
        return values

    def _distribution_values(self) -> dict[str, float]:
        """The nine figures of each latency and token-rate distribution."""
        totals = self._totals
        itl, rate_per_user = self._token_distributions()
        values: dict[str, float] = {}
        for keys, stats in (
                (_TTFT_KEYS, totals.stats("ttft")),
                (_TTST_KEYS, totals.stats("ttst")),
                (_TPOT_KEYS, totals.stats("tpot")),
                (_ITL_KEYS, itl),
                (_E2E_KEYS, totals.stats("e2e")),
                (_RATE_KEYS, rate_per_user)):
            values.update(zip(keys, stats))
        return values


class _Totals:
    """What the summary keeps of completed, admitted requests, added in the summary's order:
    counts and token sums, the latest terminal, goodput, and each latency sample as a double
    (the means are sequential sums in that order, the percentiles exact order statistics)."""

    __slots__ = ("sla", "start_ms", "completed", "input_tokens", "output_tokens", "reused",
                 "first_reused", "duration_ms", "good", "good_tokens", "ttft", "ttst", "tpot",
                 "e2e", "known")

    def __init__(self, sla: _Sla | None, start_ms: float) -> None:
        self.sla = sla
        self.start_ms = start_ms
        self.completed = self.input_tokens = self.output_tokens = 0
        self.reused = self.first_reused = self.good = self.good_tokens = 0
        self.duration_ms = 0.0
        self.ttft, self.ttst, self.tpot, self.e2e = (array("d") for _ in range(4))
        self.known = {}   # name -> (its sample count, exact_stats of it) computed elsewhere

    def stats(self, name: str) -> DistributionStats:
        """``exact_stats`` of sample array ``name``, or what ``fill_totals`` was given for it
        while no sample was added since."""
        values = getattr(self, name)
        known = self.known.get(name)
        if known is not None and known[0] == len(values):
            return known[1]
        return exact_stats(values)

    def add(self, rec: RequestRecord) -> None:
        # once per completed request: _nonneg and the TTST/TPOT rules inlined
        self.completed += 1
        output = rec.output_length
        self.input_tokens += rec.input_length
        self.output_tokens += output
        self.reused += rec.reused_input_tokens
        first_reused = rec.first_admission_reused_input_tokens
        if first_reused:
            self.first_reused += first_reused
        end = rec.terminal_time_ms - self.start_ms
        if end > self.duration_ms:   # max(duration, _nonneg(end)): duration is never negative
            self.duration_ms = end
        first, last = rec.first_token_ms, rec.last_token_ms
        arrival = rec.arrival_time_ms
        sla = self.sla
        if first is None or last is None:
            if sla is not None and sla.is_good_without_tokens(
                    _nonneg(rec.terminal_time_ms - arrival)):
                self.good += 1
            return
        ttft = first - arrival
        if not ttft > 0.0:
            ttft = 0.0
        e2e = last - arrival
        if not e2e > 0.0:
            e2e = 0.0
        self.ttft.append(ttft)
        self.e2e.append(e2e)
        if sla is not None and sla.is_good(ttft, e2e, output):
            self.good += 1
            self.good_tokens += output
        second = rec.second_token_ms
        if second is not None:
            ttst = second - first
            self.ttst.append(ttst if ttst > 0.0 else 0.0)
        if output > 1:
            span = last - first
            self.tpot.append((span if span > 0.0 else 0.0) / (output - 1))


def fill_totals(collector: Collector, *, completed: int, input_tokens: int, output_tokens: int,
                reused: int, first_reused: int, duration_ms: float, good: int, good_tokens: int,
                committed_prefill: int, ttft: array, e2e: array, ttst: array,
                tpot: array, stats: dict | None = None) -> None:
    """What ``Collector._settled`` and ``_Totals.add`` would have gathered from a run's
    terminals, gathered elsewhere (runtime/plain_native.py's C loop): the counts and sums, and
    each sample array in the order the summary adds them (uuid order), taken without a copy
    into an empty collector; ``stats``: name -> ``exact_stats`` of that array, when computed
    already (they stand while nothing is added)."""
    totals = collector._totals
    totals.completed += completed
    totals.input_tokens += input_tokens
    totals.output_tokens += output_tokens
    totals.reused += reused
    totals.first_reused += first_reused
    if duration_ms > totals.duration_ms:
        totals.duration_ms = duration_ms
    totals.good += good
    totals.good_tokens += good_tokens
    for name, values in (("ttft", ttft), ("e2e", e2e), ("ttst", ttst), ("tpot", tpot)):
        mine = getattr(totals, name)
        if mine:
            mine.extend(values)
        else:
            setattr(totals, name, values)
            if stats is not None and name in stats:
                totals.known[name] = (len(values), stats[name])
    collector._fallback_committed_prefill += committed_prefill


class _ArrivalOrder:
    """Terminal records handed on in uuid order, which is arrival order: the runtime numbers
    requests 1, 2, 3, ... as they arrive.

    A record waits while a request numbered before it is in flight, so what waits is what
    finished out of order: bounded by the requests in flight, not by the run. Records numbered
    otherwise (hand-made, or replayed reference records) wait until ``flush``, which hands
    them on in uuid order (ties in the order they came).
    """

    __slots__ = ("next_uuid", "waiting", "take")

    def __init__(self, take: Callable[[RequestRecord], None]) -> None:
        self.next_uuid = 1
        self.waiting: dict[Any, list[RequestRecord]] = {}
        self.take = take

    def push(self, rec: RequestRecord) -> None:
        uuid = rec.uuid
        if uuid != self.next_uuid:
            self.waiting.setdefault(uuid, []).append(rec)
            return
        take = self.take
        waiting = self.waiting
        take(rec)
        uuid += 1
        while uuid in waiting:
            for later in waiting.pop(uuid):
                take(later)
            uuid += 1
        self.next_uuid = uuid

    def flush(self) -> None:
        waiting = self.waiting
        self.waiting = {}
        for uuid in sorted(waiting):
            for rec in waiting[uuid]:
                self.take(rec)


class _RecordStream:
    """Per-request records to a sink in the report's order.

    Records come in uuid (= arrival) order, so any record still to come arrived no earlier
    than the last one that came; a record that arrived strictly before that is in its final
    place. Those wait in a heap keyed as the report sorts until then. Records that settle
    while the stream is not running wait in a list sorted once at ``flush``: they come almost
    in order, which a sort takes in about one comparison each, a heap in log n.
    """

    __slots__ = ("sink", "heap", "later", "numbers", "running")

    def __init__(self, sink: Callable[[dict], Any], running: bool = True) -> None:
        self.sink = sink
        self.heap: list = []
        # (order, number, record) settled while not running: a RequestRecord, or a row
        # builder and its values (``settled_row``)
        self.later: list = []
        self.numbers = itertools.count()   # each entry's, after its order: ties keep their turn
        self.running = running  # False: nothing reaches the sink before ``flush``

    def settled(self, rec: RequestRecord) -> None:
        uuid, admissions = rec.uuid, rec.admissions
        first_admit = admissions[0][0] if admissions else None
        if (rec.request_id is None and first_admit is not None and type(uuid) is int
                and 0 <= uuid < 1 << 48):
            # _record_order of the usual record (no authored id, admitted, a run's uuid)
            order = (False, "", rec.arrival_time_ms, True, first_admit, _run_uuid_text(uuid))
        else:
            order = _record_order(rec)
        self._place(order, rec)

    def settled_row(self, uuid: int, arrival: float, first_admit: float, make: Callable,
                    values: tuple) -> None:
        """The record ``make(uuid_text, *values)`` makes (a row builder: ``aggregated_record``,
        ``disaggregated_record``) of a request of the run's own numbering (``uuid`` below
        2**48) that arrived at ``arrival``, was first admitted at ``first_admit`` and has no
        authored id. It is made when it reaches the sink, as a RequestRecord's is: the values
        take less memory than the record until then."""
        # _record_order's key of it
        self._place((False, "", arrival, True, first_admit, _run_uuid_text(uuid)),
                    (make, values))

    def _place(self, order: tuple, record: "RequestRecord | tuple") -> None:
        entry = (order, next(self.numbers), record)
        if not self.running:
            self.later.append(entry)
            return
        heap = self.heap
        heapq.heappush(heap, entry)
        frontier = (False, "", order[2])
        sink = self.sink
        while heap[0][0] < frontier:
            order, _, ready = heapq.heappop(heap)
            sink(_made(order, ready))
            if not heap:
                break

    def close(self) -> None:
        """The run is over: what settles from now on (in any order) is only sorted in."""
        self.running = False

    def flush(self) -> None:
        # the numbers are distinct: sorting the entries is the heap's pop order
        entries = self.heap + self.later
        self.heap, self.later = [], []
        entries.sort(reverse=True)
        sink = self.sink
        while entries:   # popped from the end: each record is freed once its dict is made
            order, _, rec = entries.pop()
            sink(_made(order, rec))


def _made(order: tuple, record: "RequestRecord | tuple") -> dict:
    """The record dict of a stream's entry (its order, its RequestRecord or (row builder,
    values): ``_RecordStream.settled_row``)."""
    if type(record) is tuple:
        make, values = record
        return make(order[5], *values)
    return per_request_record(record, order[5])


def _summary_order(rec: RequestRecord):
    rid = rec.request_id
    return (rid is not None, rid or "", rec.uuid)


def _record_order(rec: RequestRecord):
    # ai-dynamo-runtime 1.6.1 orders records by arrival, then first admission (never admitted
    # first, as Rust orders None); its remaining ties come out of an unstable sort, in uuid
    # order for small reports. Authored ids (None first) lead, as in the reference source.
    rid = rec.request_id
    first_admit = rec.admissions[0][0] if rec.admissions else None
    return (rid is not None, rid or "", rec.arrival_time_ms, first_admit is not None,
            first_admit if first_admit is not None else 0.0, _uuid_text(rec.uuid))


# ---------------------------------------------------------------------------------------------
# per-request records


def _route(route: Any, prefill_worker: Any, decode_worker: Any) -> dict:
    if isinstance(route, dict):
        pool = route.get("pool")
        out = route_entry(pool, prefill_worker if pool == "prefill" else decode_worker,
                          None, None)
        if route.keys() <= out.keys():   # the usual route: every key one the reference knows
            out.update(route)            # (known keys keep their places: the loop's result)
            return out
        for key, value in route.items():
            if key in out:   # keys the reference does not know are left out
                out[key] = value
        return out
    pool = route[0]
    scheduler = route[3] if len(route) > 3 else None
    if scheduler is None:
        scheduler = prefill_worker if pool == "prefill" else decode_worker
    return route_entry(pool, scheduler, route[1], route[2])


def route_entry(pool: Any, scheduler_id: Any, logical_worker_id: Any, dp_rank: Any) -> dict:
    """A routing_history entry of an immediate placement, keys in the reference's order."""
    return {
        "pool": pool,
        "outcome": "immediate",
        "queue_entered_at_ms": None,
        "released_at_ms": None,
        "queue_wait_ms": 0.0,
        "logical_worker_id": logical_worker_id,
        "scheduler_id": scheduler_id,
        "dp_rank": dp_rank,
        "reported_overlap_tokens": 0,
        "selected_overlap_blocks": None,
        "best_available_overlap_blocks": None,
        "overlap_regret_blocks": None,
        "placement_replica_id": None,
    }


def _first_into_pool(ordinal: int, pool: Any, at_ms: Any, reused: Any) -> dict:
    """The admission_history entry of a request's first admission into ``pool`` (without a
    tier split)."""
    return {"admission_ordinal": ordinal, "pool_admission_ordinal": 0, "pool": pool,
            "at_ms": at_ms, "reused_input_tokens": reused, "is_readmission": False}


def _admission_history(admissions: list) -> tuple[list[dict], int, dict[str, list]]:
    """The admission history entries, the readmission count and, per pool, its first
    admission's time and its largest reuse (one walk over the admissions)."""
    if len(admissions) == 1 and len(admissions[0]) <= 5:   # the usual record: admitted once
        at_ms, pool, reused = admissions[0][0], admissions[0][1], admissions[0][2]
        return [_first_into_pool(0, pool, at_ms, reused)], 0, {pool: [1, at_ms, reused]}
    if (len(admissions) == 2 and len(admissions[0]) <= 5 and len(admissions[1]) <= 5
            and admissions[0][1] != admissions[1][1]):
        # the usual disaggregated record: once into each pool (the walk below, unrolled)
        (at_ms, pool, reused), (at2, pool2, reused2) = admissions[0][:3], admissions[1][:3]
        return ([_first_into_pool(0, pool, at_ms, reused),
                 _first_into_pool(1, pool2, at2, reused2)],
                0, {pool: [1, at_ms, reused], pool2: [1, at2, reused2]})
    pools: dict[str, list] = {}  # pool -> [admissions so far, first at_ms, max reuse]
    history = []
    for ordinal, admission in enumerate(admissions):
        at_ms, pool, reused = admission[0], admission[1], admission[2]
        facts = pools.get(pool)
        if facts is None:
            pool_ordinal = 0
            pools[pool] = [1, at_ms, reused]
        else:
            pool_ordinal = facts[0]
            facts[0] = pool_ordinal + 1
            if reused > facts[2]:  # max() keeps the first of equal values too
                facts[2] = reused
        entry = {
            "admission_ordinal": ordinal,
            "pool_admission_ordinal": pool_ordinal,
            "pool": pool,
            "at_ms": at_ms,
            "reused_input_tokens": reused,
        }
        if len(admission) > 5:  # optional G1 / host split, omitted when absent
            if admission[4] is not None:
                entry["g1_reused_input_tokens"] = admission[4]
            if admission[5] is not None:
                entry["host_reused_input_tokens"] = admission[5]
        # the reference defines a readmission as a later admission into the same pool
        entry["is_readmission"] = pool_ordinal > 0
        history.append(entry)
    readmissions = sum(facts[0] - 1 for facts in pools.values())
    return history, readmissions, pools


def _route_overlap(routes: list[dict], pool: str) -> int | None:
    for route in routes:
        if route["pool"] == pool:
            return route["reported_overlap_tokens"]
    return None


def per_request_record(rec: RequestRecord, uuid_text: str | None = None) -> dict:
    """The reference's ``PerRequestRecord`` for one terminal request, keys in its order
    (``uuid_text``: the uuid as ``_uuid_text`` gives it, when the caller has it already).

    Built as one literal of the keys every record has (``_record``); the optional ones,
    mostly unset, are put in their places only when set (``_with_optional``)."""
    admissions = rec.admissions
    history, readmissions, pools = _admission_history(admissions)
    routing = rec.routing
    prefill_worker, decode_worker = rec.prefill_worker_idx, rec.decode_worker_idx
    prefill_overlap = rec.prefill_route_overlap_tokens
    decode_overlap = rec.decode_route_overlap_tokens
    routes = []
    placed = ()          # pools of the immediate placements (their overlap is 0)
    for route in routing:
        if type(route) is tuple and len(route) > 3 and route[3] is not None:
            # an immediate placement that names its scheduler (_route's work, inline)
            routes.append(route_entry(route[0], route[3], route[1], route[2]))
            placed += (route[0],)
        else:
            placed = None
            break
    if placed is None and len(routing) == 1 and type(routing[0]) is dict:
        # one placement's route keys (the kv_router's usual record): the two _route_overlap
        # walks, inline
        entry = _route(routing[0], prefill_worker, decode_worker)
        routes = [entry]
        pool = entry["pool"]
        if prefill_overlap is None and pool == "prefill":
            prefill_overlap = entry["reported_overlap_tokens"]
        if decode_overlap is None and pool == "decode":
            decode_overlap = entry["reported_overlap_tokens"]
    elif placed is None:
        routes = [_route(route, prefill_worker, decode_worker) for route in routing]
        if prefill_overlap is None:
            prefill_overlap = _route_overlap(routes, "prefill")
        if decode_overlap is None:
            decode_overlap = _route_overlap(routes, "decode")
    else:
        if prefill_overlap is None and "prefill" in placed:
            prefill_overlap = 0
        if decode_overlap is None and "decode" in placed:
            decode_overlap = 0
    # in P/D the record shows the prefill side's reuse; the summary uses the max over all pools
    prefill_facts = pools.get("prefill")
    decode_facts = pools.get("decode")
    decode_reuse = rec.decode_reused_input_tokens
    if decode_reuse is None and decode_facts is not None:
        decode_reuse = decode_facts[2]
    prefill_admit = rec.prefill_admit_ms
    if prefill_admit is None and prefill_facts is not None:
        prefill_admit = prefill_facts[1]
    decode_admit = rec.decode_admit_ms
    if decode_admit is None and decode_facts is not None:
        decode_admit = decode_facts[1]
    out = _record(
        rec.session_id, rec.turn_index, _uuid_text(rec.uuid) if uuid_text is None else uuid_text,
        rec.arrival_time_ms, rec.dispatched_at_ms, admissions[0][0] if admissions else None,
        rec.terminal_time_ms, rec.first_token_ms, rec.second_token_ms, rec.last_token_ms,
        rec.input_length, rec.requested_output_length, rec.output_length,
        prefill_facts[2] if prefill_facts is not None else rec.reused_input_tokens,
        prefill_worker, decode_worker, prefill_admit, rec.source_held_ms,
        rec.destination_reserved_ms, rec.destination_activated_ms, decode_admit,
        rec.source_released_ms, decode_reuse, prefill_overlap, decode_overlap, routes, history,
        readmissions, list(rec.pressure_record_ordinals or ()), rec.terminal_status)
    if (rec.request_id is None and rec.play_id is None and rec.agentic is None
            and rec.metadata is None and rec.first_admission_g1_reused_input_tokens is None
            and rec.first_admission_host_reused_input_tokens is None):
        return out
    return _with_optional(rec, out)


def aggregated_record(uuid_text: str, session_id: Any, turn_index: Any, arrival: float,
                      terminal: float, status: str, input_length: int,
                      requested_output_length: int, output_length: int, first: Any,
                      second: Any, last: Any, reused: int, admit_at: float,
                      admit_reused: int, scheduler: Any, route: dict) -> dict:
    """``per_request_record`` of the RequestRecord an aggregated run makes of a request
    admitted once (at ``admit_at``, reusing ``admit_reused``) and placed by ``route`` (its
    routing_history entry, ``route_entry``'s keys: copied, so a rank's can be given), with
    none of the optional keys, made without the RequestRecord (the C loop's usual record:
    runtime/plain_native.py). tests/test_report.py checks the two agree."""
    # the template's None stands for every disaggregated key (no _record call of 30 values)
    record = _request_record(session_id, turn_index, uuid_text, arrival, admit_at, terminal,
                             first, second, last, input_length, requested_output_length,
                             output_length, reused)
    record["decode_worker_idx"] = scheduler
    record["routing_history"] = [route.copy()]
    record["admission_history"] = [_first_into_pool(0, "agg", admit_at, admit_reused)]
    record["admission_count"] = 1
    record["readmission_count"] = 0
    record["pressure_record_ordinals"] = []
    record["terminal_status"] = status
    return record


def disaggregated_record(uuid_text: str, session_id: Any, turn_index: Any, arrival: float,
                         terminal: float, status: str, input_length: int,
                         requested_output_length: int, output_length: int, first: Any,
                         second: Any, last: Any, prefill_worker: Any, decode_worker: Any,
                         prefill_at: float, prefill_reused: int, decode_at: float,
                         decode_reused: int, held: Any, reserved: Any, activated: Any,
                         released: Any, prefill_route: dict, decode_route: dict) -> dict:
    """``per_request_record`` of the RequestRecord a disaggregated run makes of a request
    admitted once into the prefill pool and then once into the decode pool, placed by
    ``prefill_route`` and ``decode_route`` (routing_history entries, ``route_entry``'s keys:
    copied, so a worker's can be given), with the handoff's times and none of the optional
    keys, made without the RequestRecord (the C loop's usual record:
    runtime/plain_disagg_native.py). tests/test_report.py checks the two agree."""
    return _record(
        session_id, turn_index, uuid_text, arrival, None, prefill_at, terminal,
        first, second, last, input_length, requested_output_length, output_length, prefill_reused,
        prefill_worker, decode_worker, prefill_at, held, reserved, activated, decode_at,
        released, decode_reused, prefill_route["reported_overlap_tokens"],
        decode_route["reported_overlap_tokens"], [prefill_route.copy(), decode_route.copy()],
        [_first_into_pool(0, "prefill", prefill_at, prefill_reused),
         _first_into_pool(1, "decode", decode_at, decode_reused)], 0, [], status)


def _record(session_id, turn_index, uuid_text, arrival, dispatched, first_admit, terminal,
            first, second, last, input_length, requested_output_length, output_length,
            reused, prefill_worker, decode_worker, prefill_admit, held, reserved, activated,
            decode_admit, released, decode_reuse, prefill_overlap, decode_overlap, routes,
            history, readmissions, pressure, status) -> dict:
    """The keys every record has (``_COMMON_KEYS``) with their values, these in the keys'
    order but for TTFT, TTST, E2E and the mean ITL (``_request_record`` derives them) and the
    admission count: every way a record is made but aggregated_record's ends here.

    A record is a copy of _BLANK_RECORD (its keys already in place: a copy of a dict is one
    copy of its table, where a dict grown key by key resizes 4 times) with its values stored
    in: about 11K instructions a record against dict(zip(keys, values))'s 18K."""
    record = _request_record(session_id, turn_index, uuid_text, arrival, first_admit, terminal,
                             first, second, last, input_length, requested_output_length,
                             output_length, reused)
    record["dispatched_at_ms"] = dispatched
    record["prefill_worker_idx"] = prefill_worker
    record["decode_worker_idx"] = decode_worker
    record["prefill_admit_ms"] = prefill_admit
    record["source_held_ms"] = held
    record["destination_reserved_ms"] = reserved
    record["destination_activated_ms"] = activated
    record["decode_admit_ms"] = decode_admit
    record["source_released_ms"] = released
    record["decode_reused_input_tokens"] = decode_reuse
    record["prefill_route_overlap_tokens"] = prefill_overlap
    record["decode_route_overlap_tokens"] = decode_overlap
    record["routing_history"] = routes
    record["admission_history"] = history
    record["admission_count"] = len(history)
    record["readmission_count"] = readmissions
    record["pressure_record_ordinals"] = pressure
    record["terminal_status"] = status
    return record


def _request_record(session_id, turn_index, uuid_text, arrival, first_admit, terminal, first,
                    second, last, input_length, requested_output_length, output_length,
                    reused) -> dict:
    """A copy of _BLANK_RECORD with the request's own keys set: its ids, times, lengths and
    reuse, and TTFT, TTST, E2E and the mean ITL derived from its token times, clamped at 0
    (NaN too, as _nonneg does); the placement and handoff keys are left None."""
    record = _BLANK_RECORD.copy()
    record["session_id"] = session_id
    record["turn_index"] = turn_index
    record["uuid"] = uuid_text
    record["arrival_time_ms"] = arrival
    record["first_admit_ms"] = first_admit
    record["terminal_time_ms"] = terminal
    record["input_length"] = input_length
    record["requested_output_length"] = requested_output_length
    record["output_length"] = output_length
    record["reused_input_tokens"] = reused
    # (b - a if b > a else 0.0 is _nonneg(b - a): a difference of doubles is above 0 exactly
    # when b > a, and neither is when either is NaN)
    if first is not None:
        record["first_token_ms"] = first
        record["ttft_ms"] = first - arrival if first > arrival else 0.0
        if second is not None:
            record["ttst_ms"] = second - first if second > first else 0.0
        if last is not None and output_length > 1:
            record["itl_ms"] = (last - first if last > first else 0.0) / (output_length - 1)
    if last is not None:
        record["last_token_ms"] = last
        record["e2e_latency_ms"] = last - arrival if last > arrival else 0.0
    return record


# The keys a record leaves out when unset (the reference skips them when None), each with the
# key it follows (None: they lead); each is the RequestRecord field of the same name.
_LEADING_OPTIONAL = ("request_id", "play_id")
_OPTIONAL_AFTER = {
    "turn_index": ("agentic", "metadata"),
    "reused_input_tokens": ("first_admission_g1_reused_input_tokens",
                            "first_admission_host_reused_input_tokens"),
}


def _with_optional(rec: RequestRecord, record: dict) -> dict:
    """``record`` with the optional keys ``rec`` sets, each in its place.

    ``record`` holds the keys every record has (``_COMMON_KEYS``): a copy of the blank record
    of exactly these optional keys (``_optional_template``: every key in PER_REQUEST_KEYS'
    order) takes its values by one dict merge, which keeps the template's order, where three
    runs copied key by key through islice cost about twice as much."""
    request_id, play_id = rec.request_id, rec.play_id
    agentic, metadata = rec.agentic, rec.metadata
    g1 = rec.first_admission_g1_reused_input_tokens
    host = rec.first_admission_host_reused_input_tokens
    # (spelled out: a generator over six values costs more than the merge saves)
    present = (request_id is not None, play_id is not None, agentic is not None,
               metadata is not None, g1 is not None, host is not None)
    template = _OPTIONAL_TEMPLATES.get(present)
    if template is None:
        template = _OPTIONAL_TEMPLATES[present] = _optional_template(present)
    out = template.copy()
    out.update(record)
    for key, value in zip(_OPTIONAL_IN_FLAG_ORDER,
                          (request_id, play_id, agentic, metadata, g1, host)):
        if value is not None:
            out[key] = value
    return out


# the optional keys in the order of ``_with_optional``'s values and ``present`` flags
_OPTIONAL_IN_FLAG_ORDER = ("request_id", "play_id", "agentic", "metadata",
                           "first_admission_g1_reused_input_tokens",
                           "first_admission_host_reused_input_tokens")
# present flags -> the blank record of the common keys and those optional ones, in order (at
# most 64 of them: a constant of the record format, whatever the run)
_OPTIONAL_TEMPLATES: dict[tuple, dict] = {}


def _optional_template(present: tuple) -> dict:
    chosen = {key for key, flag in zip(_OPTIONAL_IN_FLAG_ORDER, present) if flag}
    return dict.fromkeys(key for key in PER_REQUEST_KEYS
                         if key not in OPTIONAL_KEYS or key in chosen)


PER_REQUEST_KEYS = (
    "request_id", "play_id", "session_id", "turn_index", "agentic", "metadata", "uuid",
    "arrival_time_ms", "dispatched_at_ms", "first_admit_ms", "terminal_time_ms",
    "first_token_ms", "last_token_ms", "ttft_ms", "ttst_ms", "e2e_latency_ms", "itl_ms",
    "input_length", "requested_output_length",
    "output_length", "reused_input_tokens", "first_admission_g1_reused_input_tokens",
    "first_admission_host_reused_input_tokens", "prefill_worker_idx", "decode_worker_idx",
    "prefill_admit_ms", "source_held_ms", "destination_reserved_ms", "destination_activated_ms",
    "decode_admit_ms", "source_released_ms", "decode_reused_input_tokens",
    "prefill_route_overlap_tokens", "decode_route_overlap_tokens", "routing_history",
    "admission_history", "admission_count", "readmission_count", "pressure_record_ordinals",
    "terminal_status",
)
"""All per-request keys in order; request_id, play_id, agentic, metadata and the
first-admission G1/host split are omitted when unset."""
# every key a record leaves out when unset
OPTIONAL_KEYS = frozenset(_LEADING_OPTIONAL).union(*_OPTIONAL_AFTER.values())
# the keys every record has, in order
_COMMON_KEYS = tuple(key for key in PER_REQUEST_KEYS if key not in OPTIONAL_KEYS)
assert set(_OPTIONAL_IN_FLAG_ORDER) == OPTIONAL_KEYS
# every common key, unset: the dict each record is copied from (never handed out itself)
_BLANK_RECORD = dict.fromkeys(_COMMON_KEYS)
