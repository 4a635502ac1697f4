"""The per-request state the engines and the runtime share.

Token timings are not stored per token: a request that emits one token in each of the
consecutive passes a..b of its rank holds the *stretch* (a, b); the rank keeps every pass's end
time, so token times and inter-token gaps are derived when the request finishes.
"""

from __future__ import annotations

# request status values
WAITING = 0
RUNNING = 1
PREEMPTED = 2
FINISHED = 3


class SimRequest:
    __slots__ = (
        # identity and workload
        "uuid", "request_id", "session_id", "turn_index", "play_id", "metadata",
        "arrival_ms", "dispatched_ms", "prompt_len", "max_output", "output_token_ids",
        "prompt", "dp_rank", "prefill_dp_rank", "worker_idx", "rank", "driver_ref",
        # engine state
        "status", "seq", "computed", "generated", "out_limit", "held_blocks",
        "hash_cache", "admissions", "first_reused", "max_reused", "preemptions",
        "stretches", "open_start", "base_pass", "base_gen", "base_len", "bucket_key", "grown_mark",
        "in_stretch", "itl_span", "terminal_ms", "terminal_status", "committed_blocks", "pass_chunk", "footprint_blocks",
        # disaggregated: the handoff a role copy belongs to; a decode copy's accept order and
        # the capacity generation of its last reservation attempt
        "handoff", "waiting_order", "last_attempt",
        # placement: routing metadata, and the routing_history entry of a router's placement
        "priority", "strict_priority", "route",
    )

    def __init__(self, uuid, prompt, max_output, arrival_ms, *, request_id=None, session_id=None,
                 turn_index=None, play_id=None, metadata=None, output_token_ids=None,
                 dp_rank=None, prefill_dp_rank=None, driver_ref=None, priority=0,
                 strict_priority=0):
        self.uuid = uuid
        self.prompt = prompt                  # workload.prompt.Prompt
        self.prompt_len = prompt.length
        self.max_output = max_output
        self.output_token_ids = output_token_ids
        self.arrival_ms = arrival_ms
        self.dispatched_ms = arrival_ms
        self.request_id = request_id
        self.session_id = session_id
        self.turn_index = turn_index
        self.play_id = play_id
        self.metadata = metadata
        self.dp_rank = dp_rank
        self.prefill_dp_rank = prefill_dp_rank  # disaggregated: the prefill pool's rank, if not dp_rank
        self.driver_ref = driver_ref
        self.priority = priority              # routing metadata (a router's queue order)
        self.strict_priority = strict_priority
        self.route = None                     # dict: the routing_history entry, when not plain
        self.worker_idx = None
        self.rank = None
        self.status = WAITING
        self.seq = -1                         # block-pool sequence handle while holding KV
        self.computed = 0
        self.generated = 0
        self.out_limit = max_output           # lowered by max_model_len
        self.held_blocks = 0
        self.footprint_blocks = 0             # TRT-LLM: blocks reserved through completion
        self.pass_chunk = None                # (tokens, isl, prefix) scheduled this pass
        self.committed_blocks = 0             # leading blocks of the KV table given hashes
        self.hash_cache = None                # sequence hashes of prompt (+ output) blocks
        self.admissions = []                  # (at_ms, reused_tokens, is_readmission)
        self.first_reused = None
        self.max_reused = 0
        self.preemptions = 0
        self.stretches = []                   # closed (first_pass, last_pass) emission runs
        self.in_stretch = False
        self.itl_span = None                  # SGLang: its last decode run, counted per rank
        self.base_pass = 0                    # open stretch: pass index of its first emission
        self.base_gen = 0                     # tokens generated before that pass
        self.base_len = 0                     # sequence length before that pass
        self.bucket_key = -1
        self.grown_mark = 0                   # its bucket's growth when it joined (engine/vllm.py)
        self.terminal_ms = None
        self.terminal_status = None
        self.handoff = None
        self.waiting_order = 0
        self.last_attempt = -1

    @property
    def seq_len(self):
        return self.prompt_len + self.generated


def request_name(r):
    """How messages name a request: its authored id quoted, else ``#uuid``."""
    return repr(r.request_id) if r.request_id else f"#{r.uuid}"


def never_scheduled(reason, r):
    """The message of a request that can never start: the limit, then the request."""
    return f"{reason}; request {request_name(r)} can never be scheduled"
