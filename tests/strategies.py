"""Hypothesis strategies for the property tests: small execution payloads, trace rows, and
mutations that turn either into bad input.

Sizes are kept tiny on purpose (a handful of requests of at most a few hundred tokens on
pools of a few hundred blocks) so that one run takes milliseconds and KV pressure,
rejection and preemption are common rather than rare.
"""

from __future__ import annotations

import gzip
import json
import math

from hypothesis import strategies as st

BACKENDS = ("vllm", "sglang", "trtllm")
CHAIN = [11, 12, 13, 14]  # hash ids (trace rows) and tokens (inline prompts) many requests share
CHAIN_TOKENS = [(7 * i) % 5 for i in range(120)]
TRACE_FORMATS = ("mooncake", "mooncake-delta")

# -- valid payloads -----------------------------------------------------------------------------


@st.composite
def timing_models(draw):
    if draw(st.booleans()):
        return {"type": "polynomial"}
    return {"type": "fixed",
            "prefill_ms": draw(st.sampled_from((0.0, 0.5, 10.0))),
            "decode_ms": draw(st.sampled_from((0.0, 0.25, 5.0)))}


@st.composite
def ranks(draw, backend):
    """One scheduler rank of ``backend`` with a small KV pool and batch limits."""
    block = draw(st.sampled_from((1, 2, 4, 16) if backend == "sglang" else (2, 4, 16)))
    rank = {
        "backend": backend,
        "block_size": block,
        "num_gpu_blocks": draw(st.integers(2, 256)),
        "max_num_seqs": draw(st.sampled_from((1, 2, 4, 8))),
        "max_num_batched_tokens": draw(st.sampled_from((8, 32, 64, 512, 8192))),
        "enable_prefix_caching": draw(st.booleans()),
        "preemption_mode": draw(st.sampled_from(("lifo", "fifo"))),
        "timing_model": draw(timing_models()),
    }
    if backend != "sglang" and draw(st.integers(0, 3)) == 0:
        # without chunking a prompt must fit one batch
        rank["enable_chunked_prefill"] = False
        rank["max_num_batched_tokens"] = draw(st.sampled_from((64, 8192)))
    if draw(st.booleans()):
        rank["max_model_len"] = draw(st.integers(1, 256))
    if draw(st.booleans()):
        rank["speedup_ratio"] = draw(st.sampled_from((0.5, 1.0, 3.0)))
    if backend == "sglang":
        rank["sglang"] = {
            "schedule_policy": draw(st.sampled_from(("fifo", "lpm"))),
            "max_prefill_tokens": draw(st.sampled_from((256, 16384, 16384))),
            # at least one page per rank of a DP group of two
            "chunked_prefill_size": block * draw(st.sampled_from((2, 8, 64))),
            "clip_max_new_tokens": draw(st.sampled_from((1, 8, 4096))),
            "schedule_conservativeness": draw(st.sampled_from((0.0, 0.5, 1.0, 1.5))),
        }
    return rank


@st.composite
def engines_and_topologies(draw, backend, disaggregated):
    engine = {"dp_size": draw(st.integers(1, 2)), "rank": draw(ranks(backend))}
    if not disaggregated:
        topology = {"kind": "aggregated",
                    "workers": {"initial_workers": draw(st.integers(1, 3))}}
        return engine, topology
    topology = {"kind": "disaggregated",
                "prefill": {"initial_workers": draw(st.integers(1, 2))},
                "decode": {"initial_workers": draw(st.integers(1, 2))}}
    if draw(st.booleans()):  # a decode role of its own, often smaller (decode preemption)
        engine["decode"] = {"dp_size": draw(st.integers(1, 2)), "rank": draw(ranks(backend))}
        # KV moves block by block: the roles share a block size
        engine["decode"]["rank"]["block_size"] = engine["rank"]["block_size"]
    if draw(st.booleans()):
        for role in _ranks(engine):
            role["kv_transfer_bandwidth"] = draw(st.sampled_from((0.0, 1.0, 64.0)))
            role["kv_bytes_per_token"] = draw(st.sampled_from((1, 131072)))
            role["kv_transfer_timing_mode"] = draw(
                st.sampled_from(("full_prompt", "destination_missing")))
    return engine, topology


@st.composite
def synthetic_traffic(draw):
    source = draw(st.sampled_from(("synthetic", "synthetic-session")))
    load = draw(st.sampled_from(("concurrency", "poisson", "constant_rate",
                                 "kv_capacity_fraction")))
    traffic = {"source_type": source, "load_type": load,
               # short prompts with long outputs grow in decode: preemption
               "isl": draw(st.one_of(st.integers(1, 16), st.integers(1, 200))),
               "osl": draw(st.integers(1, 64)),
               "request_count": draw(st.integers(1, 8)),
               "arrival_seed": draw(st.integers(0, 2**32))}
    if load == "concurrency":
        traffic["concurrency"] = draw(st.integers(1, 4))
    elif load == "kv_capacity_fraction":
        traffic["kv_load_ratio"] = draw(st.sampled_from((0.05, 0.5, 1.0, 2.0)))
    else:
        traffic["request_rate"] = draw(st.sampled_from((1.0, 50.0, 1000.0)))
    if draw(st.booleans()):
        traffic["shared_prefix_ratio"] = draw(st.sampled_from((0.25, 0.5, 1.0)))
        traffic["num_prefix_groups"] = draw(st.integers(1, 3))
    if source == "synthetic-session":
        traffic["turns_per_session"] = draw(st.integers(1, 3))
        traffic["inter_turn_delay_ms"] = draw(st.sampled_from((0.0, 3.0)))
    return traffic


@st.composite
def mooncake_rows(draw, max_rows=8):
    """Valid mooncake rows: a few sessions over a small pool of hash ids (so prefixes are
    shared), lengths within the capacity of their hash ids at trace block size 16."""
    rows = []
    clock = 0.0
    for index in range(draw(st.integers(1, max_rows))):
        # a prefix of one common chain, then ids of its own: later rows hit cached blocks
        ids = CHAIN[:draw(st.integers(0, 4))] + draw(st.lists(st.integers(0, 6), max_size=3))
        ids = ids or [0]
        row = {"hash_ids": ids, "output_length": draw(st.integers(0, 48))}
        if draw(st.booleans()):
            row["input_length"] = draw(st.integers(1, len(ids) * 16))
        session = draw(st.sampled_from((None, "a", "b", "c")))
        if session is not None:
            row["session_id"] = session
        else:
            row["request_id"] = f"r{index}"
        clock += draw(st.sampled_from((0.0, 0.5, 7.0, 100.0)))
        row["timestamp"] = clock
        rows.append(row)
    return rows


@st.composite
def applied_compute_rows(draw, max_rows=4):
    """Valid ``applied_compute_agentic`` rows: one agent session per row, ``num_turns`` + 1
    requests whose prompts grow by each response and tool output."""
    rows = []
    for _ in range(draw(st.integers(1, max_rows))):
        turns = draw(st.integers(0, 2))
        lengths = st.lists(st.integers(0, 16), min_size=turns, max_size=turns)
        rows.append({
            "num_turns": turns, "input_prompt_length": draw(st.integers(1, 64)),
            "assistant_response_length": draw(lengths),
            "tool_call_output_length": draw(lengths),
            "tool_call_latency": draw(st.lists(st.sampled_from((0.0, 0.002, 0.01)),
                                               min_size=turns, max_size=turns)),
            "final_assistant_response_length": draw(st.integers(0, 16)),
        })
    return rows


def requests_of_row(traffic, row):
    """How many requests one trace row makes."""
    if traffic["trace_format"] == "applied_compute_agentic":
        return row["num_turns"] + 1
    return 1


@st.composite
def trace_traffic(draw, disaggregated=False):
    # mooncake-delta needs an aggregated topology: rarely break that rule
    delta = draw(st.integers(0, 1 if not disaggregated else 7)) == 1
    traffic = {"source_type": "trace", "trace_format": TRACE_FORMATS[delta],
               "trace_block_size": 16}
    if draw(st.integers(0, 3)) == 0:  # agent sessions: a closed loop by definition
        traffic["trace_format"] = "applied_compute_agentic"
        traffic["replay_concurrency"] = draw(st.integers(1, 3))
        return traffic
    choice = draw(st.sampled_from(("timestamps", "concurrency", "speedup", "cutoff")))
    if choice == "concurrency":
        traffic["replay_concurrency"] = draw(st.integers(1, 3))
    elif choice == "speedup":
        traffic["arrival_speedup_ratio"] = draw(st.sampled_from((0.5, 4.0)))
    elif choice == "cutoff":
        traffic["max_sim_time_ms"] = draw(st.sampled_from((0.0, 20.0, 150.0)))
    return traffic


@st.composite
def inline_requests(draw, dp_size=1, max_requests=8):
    """A bare spec's ``requests``: token ids from a tiny vocabulary so prompts share
    prefixes; some pinned to a DP rank, some with a priority."""
    requests = []
    for index in range(draw(st.integers(1, max_requests))):
        request = {"id": f"q{index}",
                   "arrival_time_ms": draw(st.sampled_from((0.0, 1.0, 5.5, 40.0, 300.0))),
                   "output_tokens": draw(st.integers(0, 48))}
        if draw(st.booleans()):
            # a shared prefix, then tokens of its own
            ids = (CHAIN_TOKENS[:draw(st.integers(0, 120))]
                   + draw(st.lists(st.integers(0, 2), max_size=40))) or [0]
            request["input_tokens"] = len(ids)
            request["input_token_ids"] = ids
        else:
            request["input_tokens"] = draw(st.one_of(st.integers(1, 16), st.integers(1, 160)))
        if draw(st.integers(0, 3)) == 0:
            request["dp_rank"] = draw(st.integers(0, dp_size - 1))
        if draw(st.integers(0, 3)) == 0:
            request["metadata"] = {"priority": draw(st.integers(0, 2))}
        requests.append(request)
    return requests


@st.composite
def cases(draw):
    """A mostly-valid execution, as ``(payload dict, trace rows or None)``.

    The payload's ``traffic.trace_path`` is left out for trace traffic: the test writes the
    rows to a file and sets it. Combinations the spec rejects (for example two roles of
    different backends) are kept: they exercise the error path.
    """
    backend = draw(st.sampled_from(BACKENDS))
    disaggregated = draw(st.integers(0, 2)) == 0
    engine, topology = draw(engines_and_topologies(backend, disaggregated))
    spec = {"version": 1, "topology": topology, "engine": engine, "record_per_request": True}
    sla = draw(st.sampled_from((None, {"ttft_ms": 50.0}, {"ttft_ms": 20.0, "itl_ms": 5.0},
                                {"e2e_ms": 100.0})))
    if sla is not None:
        spec["sla"] = sla
    kind = draw(st.sampled_from(("synthetic", "trace", "requests", "pressure")))
    if kind == "pressure":
        return draw(decode_pressure(spec)), None
    if kind == "requests":
        spec["requests"] = draw(inline_requests(engine["dp_size"]))
        if draw(st.booleans()):
            spec["max_in_flight"] = draw(st.integers(1, 3))
        elif draw(st.integers(0, 3)) == 0:
            spec["max_sim_time_ms"] = draw(st.sampled_from((0.0, 30.0)))
        payload, rows = spec, None
    elif kind == "trace":
        traffic = draw(trace_traffic(disaggregated))
        agentic = traffic["trace_format"] == "applied_compute_agentic"
        rows = draw(applied_compute_rows() if agentic else mooncake_rows())
        payload = {"spec": spec, "traffic": traffic}
    else:
        payload, rows = {"spec": spec, "traffic": draw(synthetic_traffic())}, None
    if draw(st.booleans()):
        # a pool that holds the largest request with a few blocks to spare, but not two of
        # them: preemption, retraction and readmission instead of rejection
        largest = largest_request_tokens(payload, rows)
        for rank in _ranks(engine):
            rank["num_gpu_blocks"] = -(-largest // rank["block_size"]) + draw(st.integers(0, 3))
    return payload, rows


@st.composite
def decode_pressure(draw, spec):
    """Short prompts with long outputs, admitted together on a pool that holds about one
    and a half of them: decode outgrows the pool, so requests are preempted (vLLM),
    retracted (SGLang) or held back (TRT-LLM reserves the whole output)."""
    isl, osl = draw(st.integers(1, 16)), draw(st.integers(24, 64))
    for rank in _ranks(spec["engine"]):
        rank["num_gpu_blocks"] = -(-(isl + osl) * 3 // (2 * rank["block_size"]))
        rank["max_num_seqs"] = 8
        rank.pop("max_model_len", None)
    traffic = {"source_type": "synthetic", "load_type": "concurrency", "isl": isl, "osl": osl,
               "concurrency": draw(st.integers(2, 4)), "request_count": draw(st.integers(2, 6))}
    return {"spec": spec, "traffic": traffic}


def _ranks(engine):
    return [engine["rank"]] + ([engine["decode"]["rank"]] if "decode" in engine else [])


def largest_request_tokens(payload, rows):
    """Prompt plus output tokens of the largest request the payload makes (an upper bound:
    sessions count all their turns)."""
    if "requests" in payload:
        return max(r["input_tokens"] + r["output_tokens"] for r in payload["requests"])
    traffic = payload["traffic"]
    if rows is None:
        return traffic["isl"] * traffic.get("turns_per_session", 1) + traffic["osl"]
    if traffic["trace_format"] == "applied_compute_agentic":
        return max(row["input_prompt_length"] + sum(row["assistant_response_length"])
                   + sum(row["tool_call_output_length"]) + row["final_assistant_response_length"]
                   for row in rows)
    sessions = {}
    for index, row in enumerate(rows):
        tokens = row.get("input_length", len(row["hash_ids"]) * 16) + row["output_length"]
        key = row.get("session_id", index)
        sessions[key] = sessions.get(key, 0) + tokens
    return max(sessions.values())


# -- mutations ----------------------------------------------------------------------------------

# numbers at the edges a parser or an allocator cares about
EDGE_INTEGERS = (-1, 0, 1, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64,
                 -(2**63) - 1, 10**30)
EDGE_FLOATS = (-0.0, 0.5, -1.5, 5e-324, 2.2250738585072014e-308, 1e-300, 1e308, -1e308,
               1.7976931348623157e308)
EDGE_TEXT = ("", " ", "vllm ", "ü", "\u2028line", "x\u0085y", "\x00", "\x1b[31m", "😀" * 3,
             "a" * 300)


def weird_values():
    """A JSON value of the wrong type or at an edge of its range."""
    scalars = st.one_of(
        st.none(), st.booleans(),
        # small, or far past any bound: a mid-size count can be valid and take minutes
        st.sampled_from(EDGE_INTEGERS), st.integers(-16, 16),
        st.integers(2**40, 2**70), st.integers(-(2**70), -(2**40)),
        st.sampled_from(EDGE_FLOATS),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(EDGE_TEXT), st.text(max_size=8),
    )
    return st.one_of(
        scalars,
        st.lists(scalars, max_size=3),
        st.dictionaries(st.sampled_from(("type", "kind", "x", "")), scalars, max_size=2),
    )


def paths_of(value, prefix=()):
    """Every path into a JSON document (the root is ``()``), containers before children."""
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out += paths_of(child, prefix + (key,))
    elif isinstance(value, list):  # the first few entries: long lists would crowd out keys
        for index, child in enumerate(value[:3]):
            out += paths_of(child, prefix + (index,))
    return out


def _replace(doc, path, new):
    if not path:
        return new
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return doc


def _delete(doc, path):
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    del parent[path[-1]]
    return doc


# sizes and rates a user can set far beyond any deployment (memory and time bounds)
SIZE_FIELDS = frozenset((
    "block_size", "num_gpu_blocks", "dp_size", "tensor_parallel_size", "initial_workers",
    "max_num_seqs", "max_num_batched_tokens", "max_model_len", "isl", "osl",
    "request_count", "concurrency", "turns_per_session", "request_rate", "input_tokens",
    "output_tokens", "arrival_time_ms", "trace_block_size", "replay_concurrency",
    "max_in_flight", "prefill_ms", "decode_ms", "speedup_ratio", "max_prefill_tokens",
    "chunked_prefill_size", "clip_max_new_tokens", "kv_bytes_per_token",
    "kv_transfer_bandwidth", "inter_turn_delay_ms", "arrival_speedup_ratio", "kv_load_ratio",
    "input_length", "output_length", "timestamp", "delay",  # trace rows
))
# free text a user authors: any string must survive into the report or one clear error
TEXT_FIELDS = frozenset(("id", "request_id", "session_id", "policy_class"))
# past the bounds of aisimulate_core/spec/bounds.py (10^7 requests, 2^24 tokens, 2^16 ranks),
# or at a float's edge; a value inside a bound can be valid and legitimately slow
HUGE = (10**7 + 1, 2**24 + 1, 2**29, 2**32, 10**12, 2**63, 2**64, 1e12, 1e308, 5e-324)


@st.composite
def mutated(draw, doc):
    """``doc`` (a JSON document, copied) with one or two edits: a value replaced by a weird
    one, a size set far out of range, a key deleted, or an unknown key added."""
    doc = json.loads(json.dumps(doc))
    paths = paths_of(doc)
    sizes = [path for path in paths if path and path[-1] in SIZE_FIELDS]
    texts = [path for path in paths if path and path[-1] in TEXT_FIELDS]
    focus = draw(st.integers(0, 5))
    if sizes and focus <= 1:
        doc = _replace(doc, draw(st.sampled_from(sizes)), draw(st.sampled_from(HUGE)))
        if draw(st.booleans()):
            return doc
    elif texts and focus == 2:
        for path in texts:  # the same text everywhere keeps ids unique only if there is one
            doc = _replace(doc, path, draw(st.sampled_from(EDGE_TEXT + ("\ud800x",))))
        return doc
    for _ in range(draw(st.integers(1, 2))):
        paths = paths_of(doc)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(("replace", "replace", "replace", "delete", "add")))
        if action == "delete" and path:
            doc = _delete(doc, path)
        elif action == "add":
            target = doc
            for step in path:
                target = target[step]
            if isinstance(target, dict):
                target[draw(st.sampled_from(("unknown", "kind", "Backend", "\u2028")))] = (
                    draw(weird_values()))
            elif isinstance(target, list):
                target.append(draw(weird_values()))
            else:
                doc = _replace(doc, path, draw(weird_values()))
        else:
            doc = _replace(doc, path, draw(weird_values()))
    return doc


def nested(depth, leaf="1"):
    """JSON text of ``depth`` nested arrays (recursion limits of parsers and converters)."""
    return "[" * depth + leaf + "]" * depth


@st.composite
def broken_json_texts(draw, doc):
    """JSON text that does not parse, or parses to something odd: truncated, deep, NaN,
    a BOM, invalid UTF-8, a duplicated key, a bare scalar."""
    text = json.dumps(doc)
    kind = draw(st.sampled_from(("truncate", "deep", "nan", "bom", "bytes", "scalar",
                                 "duplicate")))
    if kind == "truncate":
        return text[: draw(st.integers(0, max(0, len(text) - 1)))]
    if kind == "deep":
        depth = draw(st.sampled_from((50, 1000, 100_000)))
        return '{"spec": ' + nested(depth) + ', "traffic": null}'
    if kind == "nan":
        return text.replace("1", "NaN", 1) if "1" in text else "NaN"
    if kind == "bom":
        return "\ufeff" + text
    if kind == "bytes":
        return text.encode()[: draw(st.integers(0, 40))] + b"\xff\xfe\x80"
    if kind == "scalar":
        return draw(st.sampled_from(("1", "null", '"spec"', "[]", "true", "1e999")))
    return text[:-1] + ', "spec": ' + text + "}" if text.endswith("}") else text


@st.composite
def trace_lines(draw, rows):
    """The lines of a mooncake file built from ``rows``, some of them broken."""
    lines = [json.dumps(row) for row in rows]
    for _ in range(draw(st.integers(0, 2))):
        index = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(("mutate", "mutate", "mutate", "garbage", "deep",
                                     "truncate", "blank")))
        if kind == "mutate":
            lines[index] = json.dumps(draw(mutated(rows[index])))
        elif kind == "garbage":
            lines[index] = draw(st.sampled_from(("\x00\x01", "{", "[]", "NaN", "\ufeff{}",
                                                 '{"hash_ids": [1e999]}', "\u2028")))
        elif kind == "deep":
            lines[index] = '{"hash_ids": ' + nested(draw(st.sampled_from((64, 5000)))) + "}"
        elif kind == "truncate":
            lines[index] = lines[index][: len(lines[index]) // 2]
        else:
            lines[index] = ""
    return lines


@st.composite
def trace_files(draw, lines):
    """``(suffix, bytes, intact)`` of a trace file holding ``lines``: plain, gzip, or a
    broken gzip (cut short, or plain text under a .gz name)."""
    text = ("\n".join(lines) + "\n").encode()
    kind = draw(st.sampled_from(("plain", "plain", "gzip", "gzip-truncated", "gzip-garbage")))
    if kind == "plain":
        return ".jsonl", text, True
    packed = gzip.compress(text, mtime=0)
    if kind == "gzip-truncated":
        return ".jsonl.gz", packed[: draw(st.integers(0, len(packed) - 1))], False
    if kind == "gzip-garbage":
        return ".jsonl.gz", text, False
    return ".jsonl.gz", packed, True


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
