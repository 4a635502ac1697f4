"""Traffic over a window of virtual time: what telemetry samples and scaling snapshots report.

A window counts arrivals, completed requests (their prompt and output lengths, TTFT and average
ITL), router KV hit rates (counted when a request is placed) and decode steps (the decode
forwards, read from the ranks' cumulative counters) with the tokens they emitted:
``avg_accept_length`` is tokens / steps over the window (above 1 with MTP bursts).
``take_*`` closes the window at t and opens the next one there.
"""

from __future__ import annotations


def _decode_counts(decode):
    """(steps, tokens) of a cumulative decode count: a pool's pair (PoolState.decode_steps),
    or a number of steps that emitted one token each."""
    if isinstance(decode, tuple):
        return decode
    return decode, decode


class TrafficWindow:
    __slots__ = ("start_ms", "arrivals", "completed", "isl", "osl", "ttft", "ttft_n", "itl",
                 "itl_n", "hit", "hit_n", "steps_mark", "tokens_mark")

    def __init__(self, start_ms=0.0):
        self._open(start_ms, 0)

    def _open(self, start_ms, decode):
        self.start_ms = start_ms
        self.arrivals = 0
        self.completed = 0
        self.isl = self.osl = 0
        self.ttft = 0.0
        self.ttft_n = 0
        self.itl = 0.0
        self.itl_n = 0
        self.hit = 0.0
        self.hit_n = 0
        # the ranks' cumulative decode steps and their tokens at the start
        self.steps_mark, self.tokens_mark = _decode_counts(decode)

    # ------------------------------------------------------------------ feeds
    def arrival(self):
        self.arrivals += 1

    def placed(self, overlap_blocks, input_length, block_size):
        blocks = -(-input_length // block_size)
        if blocks > 0:
            self.hit += overlap_blocks / blocks
            self.hit_n += 1

    def completed_request(self, record):
        """A completed (not rejected) request, from its report record."""
        self.completed += 1
        self.isl += record.input_length
        self.osl += record.output_length
        first, last = record.first_token_ms, record.last_token_ms
        if first is not None:
            self.ttft += first - record.arrival_time_ms
            self.ttft_n += 1
            if record.output_length > 1 and last is not None:
                self.itl += (last - first) / (record.output_length - 1)
                self.itl_n += 1

    # ------------------------------------------------------------------ closing
    def _common(self, t, decode):
        steps, tokens = _decode_counts(decode)
        steps -= self.steps_mark
        tokens -= self.tokens_mark
        n = self.completed
        values = {
            "duration_s": (t - self.start_ms) / 1000.0,
            "avg_isl": self.isl / n if n else 0.0,
            "avg_osl": self.osl / n if n else 0.0,
            "avg_ttft_ms": self.ttft / self.ttft_n if self.ttft_n else 0.0,
            "avg_itl_ms": self.itl / self.itl_n if self.itl_n else 0.0,
            "avg_hit": self.hit / self.hit_n if self.hit_n else 0.0,
            "accept": tokens / steps if steps > 0 else None,
            "steps": steps,
        }
        return values

    def take_sample_traffic(self, t, decode_steps):
        """The telemetry sample's ``traffic`` object for (start, t]; opens the next window."""
        v = self._common(t, decode_steps)
        out = {"duration_s": v["duration_s"], "arriving_requests": self.arrivals,
               "completed_requests": self.completed, "avg_isl": v["avg_isl"],
               "avg_osl": v["avg_osl"], "avg_ttft_ms": v["avg_ttft_ms"],
               "avg_itl_ms": v["avg_itl_ms"], "ttft_count": self.ttft_n, "itl_count": self.itl_n,
               "avg_router_kv_hit_rate": v["avg_hit"], "router_kv_hit_rate_count": self.hit_n,
               "avg_accept_length": v["accept"], "accept_length_forward_count": v["steps"]}
        self._open(t, decode_steps)
        return out

    def take_snapshot_traffic(self, t, decode_steps=0):
        """The scaling snapshot's ``traffic`` object (the reference's key names)."""
        v = self._common(t, decode_steps)
        out = {"duration_s": v["duration_s"], "num_req": self.arrivals, "avg_isl": v["avg_isl"],
               "avg_osl": v["avg_osl"], "avg_ttft_ms": v["avg_ttft_ms"],
               "avg_itl_ms": v["avg_itl_ms"], "shape_count": self.completed,
               "ttft_count": self.ttft_n, "itl_count": self.itl_n,
               "avg_accept_length": v["accept"], "avg_kv_hit_rate": v["avg_hit"],
               "hit_rate_count": self.hit_n, "accept_length_forward_count": v["steps"]}
        self._open(t, decode_steps)
        return out
