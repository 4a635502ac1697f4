"""Every rank class the build makes implements ``engine/rank.py: Rank``, and states its
capabilities truly: the runtime reads the flags instead of probing ranks for methods.

The ranks are built through ``build_simulation`` from small bare specs on both backends (the C
ranks on the C backend, their Python twins on the Python one), so a class the build stops
making, or a new one it starts making without this contract, shows here."""

from __future__ import annotations

import inspect

import pytest

from aisimulate_core import native
from aisimulate_core.engine import rank as contract
from aisimulate_core.engine.sglang import SglangRank
from aisimulate_core.runtime.build import build_simulation
from aisimulate_core.spec import load_payload

TIMING = {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 5.0}
REQUESTS = [{"id": f"r{i}", "arrival_time_ms": 0.0, "input_tokens": 32, "output_tokens": 4}
            for i in range(2)]
MTP = {"aic_nextn": 3, "aic_nextn_accept_rates": "0.8,0.5,0.2"}
OFFLOAD = {"kv_cache_bytes_per_token": 62500,
           "native_host_offload": {"num_host_blocks": 16, "d2h_bandwidth_gbps": 1.0,
                                   "h2d_bandwidth_gbps": 1.0}}
G3 = {**OFFLOAD, "g3_offload": {"scope": "worker_local", "num_g3_blocks": 32,
                                "latency_to_first_byte_ms": 0.5, "read_bandwidth_gbps": 1.0,
                                "write_bandwidth_gbps": 1.0}}
STATE = {"kv_cache_bytes_per_token": 1000, "state_cache": {"bytes_per_request": 32000}}
TRANSFER = {"kv_transfer_bandwidth": 1.0, "kv_transfer_bytes_per_token": 1000}


def rank_config(backend, extra):
    block_size = 1 if backend == "sglang" else 16
    return {"backend": backend, "block_size": block_size, "num_gpu_blocks": 4096 // block_size,
            "max_num_batched_tokens": 8192, "timing_model": TIMING, **extra}


def spec(backend="vllm", dp=1, disaggregated=False, **extra):
    rank = rank_config(backend, {**extra, **(TRANSFER if disaggregated else {})})
    if disaggregated:
        topology = {"kind": "disaggregated", "prefill": {"initial_workers": 1},
                    "decode": {"initial_workers": 1}}
        engine = {"rank": rank, "prefill": {"rank": rank, "dp_size": dp},
                  "decode": {"rank": rank, "dp_size": dp}}
    else:
        topology = {"kind": "aggregated", "workers": {"initial_workers": 1}}
        engine = {"rank": rank, "dp_size": dp}
    return {"version": 1, "topology": topology, "engine": engine, "requests": REQUESTS}


SPECS = {
    "vllm": spec(), "trtllm": spec("trtllm"), "vllm dp2": spec(dp=2), "vllm mtp": spec(**MTP),
    "vllm offload": spec(**OFFLOAD), "vllm g3": spec(**G3), "vllm state": spec(**STATE),
    "sglang": spec("sglang"), "sglang dp2": spec("sglang", dp=2),
    "vllm pd": spec(disaggregated=True), "vllm pd dp2": spec(dp=2, disaggregated=True),
    "sglang pd": spec("sglang", disaggregated=True),
}

# the classes the specs above reach, per backend (the build's choice: runtime/build.py)
EXPECTED = {
    "c": {"NativeVllmRank", "NativeVllmMtpRank", "NativeVllmStateRank", "VllmOffloadRank",
          "VllmG3Rank", "NativeSglangRank", "SglangRank", "NativeVllmPrefillRank",
          "NativeVllmDecodeRank", "NativeSglangPrefillRank", "NativeSglangDecodeRank"},
    "python": {"VllmRank", "StateCacheRank", "VllmOffloadRank", "VllmG3Rank", "SglangRank",
               "VllmPrefillRank", "VllmDecodeRank", "SglangPrefillRank", "SglangDecodeRank"},
}

# capability flag -> the sub-protocol a rank stating it implements
CAPABILITIES = {"extends": contract.ExtendableRank, "joins_groups": contract.GroupedRank,
                "indexes_prefix": contract.IndexedRank}
ROLES = {"prefill": contract.PrefillRank, "decode": contract.DecodeRank}


def built_ranks(backend, monkeypatch):
    """(role, rank) of every rank every spec builds, on ``backend``."""
    if backend == "c" and native.lib is None:
        pytest.skip("the C extension is not built")
    monkeypatch.setattr(native, "BACKEND", backend)   # (AISIMULATE_BACKEND, read at import)
    out = []
    for doc in SPECS.values():
        sim = build_simulation(load_payload(doc))
        pools = (("prefill", sim.prefill_workers), ("decode", sim.decode_workers)) \
            if hasattr(sim, "decode_workers") else (("aggregated", sim.workers),)
        out += [(role, rank) for role, workers in pools for w in workers for rank in w.ranks]
    return out


def _own(protocol):
    """The protocols ``protocol`` is made of, itself first (``Rank`` last)."""
    return [c for c in protocol.__mro__ if c.__module__ == contract.__name__]


def methods(protocol):
    return {name: value for c in _own(protocol) for name, value in vars(c).items()
            if inspect.isfunction(value) and not name.startswith("_")}


def attributes(protocol):
    return {name for c in _own(protocol) for name in vars(c).get("__annotations__", {})}


def signature_problem(declared, actual):
    """Why ``actual`` cannot be called as ``declared`` is (the runtime passes the required
    arguments by position, the optional ones also by name), or None."""
    want = list(inspect.signature(declared).parameters.values())[1:]
    try:
        have = list(inspect.signature(actual).parameters.values())[1:]
    except (TypeError, ValueError):
        return "no signature"
    required = [p for p in want if p.default is inspect.Parameter.empty]
    have_required = [p for p in have if p.default is inspect.Parameter.empty
                     and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(have_required) != len(required):
        return f"takes {len(have_required)} required arguments, the contract {len(required)}"
    names = [p.name for p in have]
    for p in want[len(required):]:
        if p.name not in names:
            return f"has no optional argument {p.name!r}"
        if have[names.index(p.name)].default is inspect.Parameter.empty:
            return f"argument {p.name!r} is not optional"
    return None


def implements(rank, protocol):
    """What ``rank`` lacks of ``protocol`` (a list of lines; empty: it implements it)."""
    cls = type(rank)
    problems = []
    for name, declared in methods(protocol).items():
        actual = getattr(cls, name, None)
        if not callable(actual):
            problems.append(f"{cls.__name__}.{name} missing")
            continue
        problem = signature_problem(declared, actual)
        if problem is not None:
            problems.append(f"{cls.__name__}.{name} {problem}")
    problems += [f"{cls.__name__}.{name} missing" for name in sorted(attributes(protocol))
                 if not hasattr(rank, name)]
    return problems


def contract_problems(role, rank):
    """Every way ``rank`` breaks the contract: a member missing, a flag that lies."""
    problems = implements(rank, contract.Rank)
    for flag, protocol in CAPABILITIES.items():
        stated = getattr(type(rank), flag, None)
        if type(stated) is not bool:
            problems.append(f"{type(rank).__name__}.{flag} is not a class-level bool")
            continue
        lacks = implements(rank, protocol)
        if stated and lacks:
            problems.append(f"{type(rank).__name__}.{flag} is True but: {'; '.join(lacks)}")
        if not stated and not lacks:
            problems.append(f"{type(rank).__name__}.{flag} is False but it implements "
                            f"{protocol.__name__}")
    if role in ROLES:
        problems += implements(rank, ROLES[role])
    return problems


@pytest.mark.parametrize("backend", ["c", "python"])
def test_every_built_rank_keeps_the_contract(backend, monkeypatch):
    ranks = built_ranks(backend, monkeypatch)
    assert {type(rank).__name__ for _, rank in ranks} == EXPECTED[backend]
    problems = sorted({line for role, rank in ranks for line in contract_problems(role, rank)})
    assert problems == []


@pytest.mark.parametrize("backend", ["c", "python"])
def test_the_flags_are_what_the_runtime_reads(backend, monkeypatch):
    """A worker extends its lone rank's passes, groups the SGLang ranks of a DP worker, and a
    pool reads the engines' prefix index only where the vLLM ranks answer it."""
    for role, rank in built_ranks(backend, monkeypatch):
        is_sglang = rank.__class__.__name__.find("Sglang") >= 0
        assert rank.extends
        assert rank.indexes_prefix is not is_sglang
        assert rank.joins_groups is (is_sglang and isinstance(rank, SglangRank))


def test_the_check_catches_a_missing_member_and_a_lying_flag(monkeypatch):
    """The check above is not vacuous: removing a member or stating a capability a class
    lacks (or hiding one it has) is reported."""
    role, rank = next((role, rank) for role, rank in built_ranks("python", monkeypatch)
                      if type(rank) is SglangRank)
    assert contract_problems(role, rank) == []
    for patch, expected in (
            ({"complete": None}, "SglangRank.complete missing"),
            ({"indexes_prefix": True}, "SglangRank.indexes_prefix is True but: "
                                       "SglangRank.indexed_prefix missing"),
            ({"joins_groups": False}, "SglangRank.joins_groups is False but it implements "
                                      "GroupedRank"),
            ({"stall_reason": lambda self: ""}, "SglangRank.stall_reason takes 0 required "
                                                "arguments, the contract 1"),
            ({"extend": lambda self, horizon_ms, cutoff_ms: 0.0},
             "SglangRank.extends is True but: SglangRank.extend has no optional argument "
             "'max_passes'")):
        liar = type("SglangRank", (SglangRank,), patch)
        rank.__class__ = liar
        try:
            assert expected in contract_problems(role, rank)
        finally:
            rank.__class__ = SglangRank
