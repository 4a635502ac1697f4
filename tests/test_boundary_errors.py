"""Nothing but AisimError leaves the library boundary on bad input: nesting depth, C status
codes, unreadable trace files (the size bounds are in test_bounds.py)."""

import json

import pytest

from aisimulate_core import run_replay
from aisimulate_core.errors import (AisimError, ConfigError, NativeArgumentError,
                                    NativeMemoryError, TraceError)
from aisimulate_core.kv.block_pool import BlockPool
from aisimulate_core.native import ENOMEM, lib, status_error
from aisimulate_core.spec import load_payload
from aisimulate_core.spec.load import MAX_JSON_DEPTH
from reference import ROOT

REPRO = ROOT.parent / "shared" / "repro"
BACKENDS = ["python"] + (["c"] if lib is not None else [])


def nested(depth):
    return "[" * depth + "]" * depth


BASE = {"spec": {"version": 1, "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
                 "adapters": {"placement": {"provider": "round_robin", "config": "CONFIG"}}},
        "traffic": {"source_type": "synthetic", "isl": 8, "osl": 1, "request_count": 1,
                    "concurrency": 1}}


def payload_with_config(config_json):
    """The payload text with `config_json` four levels down (root, spec, adapters, placement)."""
    return json.dumps(BASE).replace('"CONFIG"', config_json)


def test_the_deep_nesting_repro_is_one_config_error():
    path = REPRO / "deep-nesting-1000-recursionerror.json"
    if not path.exists():
        pytest.skip("../shared/repro is not beside the project")
    with pytest.raises(ConfigError) as info:
        run_replay(path.read_text())
    assert str(info.value) == f"$: invalid JSON: nested deeper than {MAX_JSON_DEPTH} levels"


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 5000, 100_000])
def test_nesting_past_the_limit_is_refused_before_structuring(depth):
    with pytest.raises(ConfigError, match=r"^\$: invalid JSON: nested deeper than 64 levels$"):
        load_payload(payload_with_config(nested(depth - 4)))


def test_nesting_at_the_limit_loads_and_brackets_in_strings_do_not_count():
    load_payload(payload_with_config(nested(MAX_JSON_DEPTH - 4)))
    load_payload(payload_with_config(json.dumps("[" * 1000)))


def test_a_deep_parsed_document_is_refused_too():
    deep = []
    node = deep
    for _ in range(500):
        node.append([])
        node = node[0]
    payload = json.loads(payload_with_config("null"))
    payload["spec"]["adapters"]["placement"]["config"] = deep
    with pytest.raises(ConfigError, match=r"^\$: nested deeper than 64 levels$"):
        load_payload(payload)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pool_size_out_of_range_is_a_native_error_naming_its_owner(backend):
    owner = "$.spec.engine.rank.num_gpu_blocks, worker 0 rank 1"
    for size in (0, 2**64):
        with pytest.raises(NativeArgumentError) as info:
            BlockPool(size, backend, owner=owner)
        assert isinstance(info.value, AisimError) and isinstance(info.value, ValueError)
        assert str(info.value) == (f"BlockPool({owner}): num_blocks must be in "
                                   f"1..{2**64 - 1}, got {size}")


def test_out_of_memory_in_the_core_is_an_aisim_error():
    error = status_error(ENOMEM, "BlockPool(worker 3)", "536870912 blocks")
    assert isinstance(error, NativeMemoryError) and isinstance(error, AisimError)
    assert isinstance(error, MemoryError)
    assert str(error) == "BlockPool(worker 3): out of memory (536870912 blocks)"


TRACE_PAYLOAD = {
    "spec": {"version": 1, "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
             "engine": {"rank": {"block_size": 16, "num_gpu_blocks": 64,
                                 "timing_model": {"type": "fixed", "prefill_ms": 1.0,
                                                  "decode_ms": 1.0}}}},
    "traffic": {"source_type": "trace", "trace_format": "mooncake", "trace_block_size": 16},
}


def run_trace(path):
    payload = json.loads(json.dumps(TRACE_PAYLOAD))
    payload["traffic"]["trace_path"] = str(path)
    with pytest.raises(TraceError) as info:
        run_replay(payload)
    return str(info.value)


def test_os_errors_on_a_trace_are_one_line_naming_the_file(tmp_path):
    assert run_trace(tmp_path) == f"{tmp_path}: cannot read the trace file: Is a directory"
    missing = tmp_path / "absent.jsonl.gz"
    assert run_trace(missing) == f"{missing}: cannot read the trace file: No such file or directory"


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
                    reason="root reads files whatever their mode")
def test_an_unreadable_trace_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"input_length": 4, "output_length": 1, "hash_ids": [1]}\n')
    path.chmod(0)
    assert run_trace(path) == f"{path}: cannot read the trace file: Permission denied"


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_time_pool_errors_name_the_owner_too(backend):
    pool = BlockPool(8, backend, owner="worker 2 rank 0")
    with pytest.raises(AisimError) as info:
        pool.release(5)
    assert str(info.value) == ("BlockPool[worker 2 rank 0].release(seq=5) failed: unknown or "
                               "released sequence handle (AISIM_EBADSEQ)")
