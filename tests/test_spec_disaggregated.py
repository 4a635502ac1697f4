"""What the two roles of a disaggregated topology must share (the reference's offline
disaggregated replay runs one engine type and one KV block size across prefill and decode)."""

import pytest

from aisimulate_core.errors import ConfigError
from aisimulate_core.spec import load_payload
from reference import load_fixture, run_fixture

DISAGG = {"kind": "disaggregated", "prefill": {"initial_workers": 1}, "decode": {"initial_workers": 1}}


def doc(engine):
    return {"spec": {"version": 1, "topology": DISAGG, "engine": engine},
            "traffic": {"source_type": "synthetic", "isl": 64, "osl": 4, "request_count": 2,
                        "load_type": "concurrency", "concurrency": 1}}


def problems(engine):
    with pytest.raises(ConfigError) as info:
        load_payload(doc(engine))
    return str(info.value).splitlines()


@pytest.mark.parametrize("name, expected", [
    ("disagg_block_size_mismatch",
     "$.spec.engine.decode.rank.block_size: must equal the prefill role's block_size (16) in a "
     "disaggregated topology, got 4"),
    # only the prefill role is written: it is the override that deviates from the base rank
    ("disagg_block_size_mismatch_prefill",
     "$.spec.engine.prefill.rank.block_size: must equal the decode role's block_size (16) in a "
     "disaggregated topology, got 4"),
])
def test_recorded_block_size_mismatch_is_rejected(name, expected):
    assert "requires matching prefill/decode block_size" in load_fixture(name)["error"]
    with pytest.raises(ConfigError) as info:
        run_fixture(name)
    assert str(info.value) == expected


def test_both_roles_written_blames_the_decode_role():
    rank = {"backend": "vllm", "block_size": 16}
    assert problems({"rank": rank, "prefill": {"rank": {**rank, "block_size": 32}},
                     "decode": {"rank": rank}}) == [
        "$.spec.engine.decode.rank.block_size: must equal the prefill role's block_size (32) in a "
        "disaggregated topology, got 16"]


def test_a_defaulted_block_size_counts():
    # the decode role is a whole rank: without block_size it takes trtllm's 32
    assert problems({"rank": {"backend": "trtllm", "block_size": 16},
                     "decode": {"rank": {"backend": "trtllm"}}}) == [
        "$.spec.engine.decode.rank.block_size: must equal the prefill role's block_size (16) in a "
        "disaggregated topology, got 32"]


def test_mixed_backends_name_the_written_role_only():
    # one line: the block sizes differ only because each backend has its own default
    assert problems({"rank": {"backend": "vllm"}, "prefill": {"rank": {"backend": "trtllm"}}}) == [
        "$.spec.engine.prefill.rank.backend: must match the decode role's backend \"vllm\" in a "
        "disaggregated topology, got \"trtllm\""]


@pytest.mark.parametrize("field, value", [
    ("enable_prefix_caching", False), ("enable_chunked_prefill", False), ("num_gpu_blocks", 512),
    ("max_num_batched_tokens", 512), ("max_model_len", 4096), ("kv_transfer_bytes_per_token", 1000),
    ("max_num_seqs", 4), ("preemption_mode", "fifo"), ("kv_transfer_timing_mode", "destination_missing"),
    ("speedup_ratio", 2.0),
])
def test_other_rank_fields_may_differ(field, value):
    # the reference runs each of these (probed with peer_run on disagg_lifecycle)
    rank = {"backend": "vllm", "block_size": 16}
    spec = load_payload(doc({"rank": rank, "decode": {"rank": {**rank, field: value}}})).spec
    assert getattr(spec.engine.role("decode").rank, field) == value


def test_an_aggregated_topology_has_no_such_rule():
    payload = doc({"rank": {"backend": "vllm", "block_size": 16},
                   "decode": {"rank": {"backend": "vllm", "block_size": 4}}})
    payload["spec"]["topology"] = {"kind": "aggregated", "workers": {"initial_workers": 1}}
    load_payload(payload)
