"""weka: the corpus rules of CLUSTER.md 5.1 (each refusal one line naming file, line and field),
source names and ids, nested timestamp bases, streams and the lowering's edges (5.2)."""

from __future__ import annotations

import json
import os

import pytest

from aisimulate_core.errors import TraceError
from aisimulate_trace_formats import Weka
from aisimulate_trace_formats.weka import to_ms
from tf_helpers import ROOT, deps

DOC = (ROOT / "tests/fixtures/traces/weka/doc_play.json").read_text()
DOC_NS = "weka:4933310b9532f425"          # BLAKE3("doc_play.json"), CLUSTER.md 5.2


def req(t, n, out=2, hashes=None, api=0.01, model="m", kind="n", **extra):
    row = {"type": kind, "t": t, "model": model, "in": n, "out": out, "api_time": api}
    if hashes is not None:
        row["hash_ids"] = hashes
    return row | extra


def play(requests, pid="p", **extra):
    return {"id": pid, "block_size": 16, "hash_id_scope": "local", "requests": requests} | extra


def sub(t, requests, agent="a", status="completed", **extra):
    return {"type": "subagent", "t": t, "agent_id": agent, "subagent_type": "x",
            "status": status, "requests": requests} | extra


def write(tmp_path, name, *plays_, raw=None):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(raw if raw is not None else "\n".join(json.dumps(p) for p in plays_) + "\n")
    return path


def load(path, basis=None, block=None):
    return Weka().load((str(path),), trace_block_size=block, weka_nested_timestamp_basis=basis)


def error(path, **kwargs):
    with pytest.raises(TraceError) as info:
        load(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def by_suffix(graph, ns):
    """The nodes of the play named ``ns``, by their id's suffix ("outer:0")."""
    prefix = ns + ":request:"
    return {n.request_id.removeprefix(prefix): n for n in graph.nodes
            if n.request_id.startswith(prefix)}


# ---------------------------------------------------------------------------- source names


def test_a_single_file_is_named_by_its_file_name_wherever_it_lies(tmp_path):
    graph = load(write(tmp_path, "deep/er/doc_play.json", raw=DOC))
    nodes = by_suffix(graph, DOC_NS)
    assert sorted(nodes) == ["outer:0", "outer:1:inner:0", "outer:1:inner:1", "outer:2",
                             "outer:3"]
    assert {n.play_id for n in graph.nodes} == {DOC_NS + ":play:doc"}
    assert nodes["outer:1:inner:0"].session_id == DOC_NS + ":session:subagent:1:scout"
    assert graph.summary_extras == {"weka_nested_timestamp_basis": "relative"}
    assert graph.source_format == "weka" and len(graph.source_digest) == 64


def test_a_directory_names_files_by_their_path_below_it(tmp_path):
    write(tmp_path, "corpus/sub/doc_play.json", raw=DOC)
    graph = load(tmp_path / "corpus")
    assert {n.play_id for n in graph.nodes} == {"weka:410c42b2504da84b:play:doc"}
    write(tmp_path, "alone/doc_play.json", raw=DOC)
    assert ({n.request_id for n in load(tmp_path / "alone").nodes}
            == {n.request_id for n in load(tmp_path / "alone/doc_play.json").nodes})


def test_each_play_of_a_jsonl_has_its_own_ids_and_kv_identities(tmp_path):
    first = play([req(0.0, 32, hashes=[1, 2]), req(0.1, 48, hashes=[1, 2, 3])], "alpha")
    second = play([req(1.0, 32, hashes=[1, 2])], "beta")
    graph = load(write(tmp_path, "w.jsonl", first, second))
    a = by_suffix(graph, "weka:d31e103079951f1f")
    b = by_suffix(graph, "weka:d45d61ea265bffd6")
    assert sorted(a) == ["outer:0", "outer:1"] and sorted(b) == ["outer:0"]
    assert a["outer:1"].hash_ids[:2] == a["outer:0"].hash_ids     # shared within a play
    assert not set(b["outer:0"].hash_ids) & set(a["outer:0"].hash_ids)   # not across plays
    assert [p.play_id for p in graph.plays] == ["weka:d31e103079951f1f:play:alpha",
                                                "weka:d45d61ea265bffd6:play:beta"]
    assert b["outer:0"].not_before_ms == 0.0                      # every play starts at 0


def test_a_partial_last_block_and_missing_hashes_are_private(tmp_path):
    graph = load(write(tmp_path, "w.json", play([
        req(0.0, 40, hashes=[1, 2, 3]), req(0.1, 40, hashes=[1, 2, 3]), req(0.2, 48)])))
    nodes = by_suffix(graph, "weka:" + __import__("blake3").blake3(b"w.json").hexdigest()[:16])
    first, second, bare = nodes["outer:0"], nodes["outer:1"], nodes["outer:2"]
    assert len(first.hash_ids) == 3 and first.hash_ids[:2] == second.hash_ids[:2]
    assert first.hash_ids[2] != second.hash_ids[2]                # 8 tokens of block 3
    assert len(bare.hash_ids) == 3 and not set(bare.hash_ids) & set(first.hash_ids)


# ---------------------------------------------------------------------------- bases


def test_auto_reads_absolute_times_when_no_child_precedes_its_marker(tmp_path):
    path = write(tmp_path, "w.json", play([req(0.0, 16, hashes=[1]),
                                           sub(0.1, [req(0.2, 16, hashes=[5])])]))
    graph = load(path)
    assert graph.summary_extras["weka_nested_timestamp_basis"] == "absolute"
    inner = next(n for n in graph.nodes if n.request_id.endswith("inner:0"))
    assert inner.not_before_ms == 200.0
    assert load(path, "relative").summary_extras["weka_nested_timestamp_basis"] == "relative"
    inner = next(n for n in load(path, "relative").nodes if n.request_id.endswith("inner:0"))
    assert inner.not_before_ms == 300.0                          # marker 0.1 + 0.2


def test_without_subagent_requests_the_basis_does_not_apply(tmp_path):
    path = write(tmp_path, "w.json", play([req(0.0, 16, hashes=[1]),
                                           sub(0.1, [], status="async_launched")]))
    assert load(path).summary_extras == {"weka_nested_timestamp_basis": "not_applicable"}
    assert load(path, "absolute").summary_extras == {"weka_nested_timestamp_basis": "absolute"}


def test_to_ms_keeps_whole_nanoseconds_and_floors_at_zero():
    assert to_ms(0.33) == 330.0
    assert to_ms(0.1 - 0.03) == 70.0
    assert to_ms(-0.5) == 0.0
    assert to_ms(1.5e-9) == 2e-6                                  # halves away from zero


# ---------------------------------------------------------------------------- edges


def test_doc_play_edges(tmp_path):
    nodes = by_suffix(load(write(tmp_path, "doc_play.json", raw=DOC)), DOC_NS)
    r = DOC_NS + ":request:"
    assert deps(nodes["outer:0"]) == []
    assert deps(nodes["outer:1:inner:0"]) == [(r + "outer:0", "completion", 70.0, "spawn")]
    assert deps(nodes["outer:1:inner:1"]) == [(r + "outer:1:inner:0", "completion", 30.0,
                                               "sequence")]
    assert deps(nodes["outer:2"]) == [(r + "outer:0", "completion", 170.0, "sequence")]
    assert deps(nodes["outer:3"]) == [(r + "outer:2", "completion", 280.0, "sequence"),
                                      (r + "outer:1:inner:1", "completion", 330.0, "join")]
    assert [n.not_before_ms for n in (nodes["outer:2"], nodes["outer:3"])] == [200.0, 500.0]


def test_a_child_starting_before_its_parent_ended_is_spawned_at_dispatch(tmp_path):
    ns = "weka:" + __import__("blake3").blake3(b"w.json").hexdigest()[:16]
    nodes = by_suffix(load(write(tmp_path, "w.json", play([
        req(0.0, 16, hashes=[1], api=0.5), sub(0.1, [req(0.2, 16, hashes=[5])],
                                              status="async_launched")]))), ns)
    assert deps(nodes["outer:1:inner:0"]) == [(ns + ":request:outer:0", "dispatch", 200.0,
                                               "spawn")]


def test_unrelated_prompts_become_a_worker_stream_with_replay_barriers(tmp_path):
    ns = "weka:" + __import__("blake3").blake3(b"w.json").hexdigest()[:16]
    r = ns + ":request:"
    nodes = by_suffix(load(write(tmp_path, "w.json", play([
        req(0.0, 32, hashes=[1, 2], api=0.02), req(0.01, 32, hashes=[8, 9], api=0.05),
        req(0.1, 48, hashes=[1, 2, 3]), req(0.2, 48, hashes=[8, 9, 7])]))), ns)
    assert [nodes[k].session_id.removeprefix(ns + ":session:") for k in sorted(nodes)] == [
        "root", "root:worker:0", "root", "root:worker:0"]
    # the worker's first prompt shares nothing: spawned at the root's dispatch
    assert deps(nodes["outer:1"]) == [(r + "outer:0", "dispatch", 10.0, "spawn")]
    # each waits for the latest request of the other stream that ended before it started
    assert deps(nodes["outer:2"]) == [(r + "outer:0", "completion", 80.0, "sequence"),
                                      (r + "outer:1", "completion", 0.0, "replay_barrier")]
    assert deps(nodes["outer:3"]) == [(r + "outer:1", "completion", 140.0, "sequence"),
                                      (r + "outer:2", "completion", 0.0, "replay_barrier")]


def test_a_fork_from_an_unextended_tail_continues_its_stream(tmp_path):
    ns = "weka:" + __import__("blake3").blake3(b"w.json").hexdigest()[:16]
    nodes = by_suffix(load(write(tmp_path, "w.json", play([
        req(0.0, 48, hashes=[1, 2, 3]), req(0.1, 48, hashes=[1, 2, 9])]))), ns)
    # [1, 2, 9] does not extend [1, 2, 3]; it forks from it after it ended: a seam
    assert {n.session_id for n in nodes.values()} == {ns + ":session:root"}
    assert deps(nodes["outer:1"]) == [(ns + ":request:outer:0", "completion", 90.0, "sequence")]


def test_a_duration_shorter_than_the_subagent_joins_at_once(tmp_path):
    # the wheel takes it (its public source later refuses it): the join has no delay
    ns = "weka:" + __import__("blake3").blake3(b"w.json").hexdigest()[:16]
    r = ns + ":request:"
    nodes = by_suffix(load(write(tmp_path, "w.json", play([
        req(0.0, 16, hashes=[1]), sub(0.1, [req(0.1, 16, hashes=[5], api=0.5)], duration_ms=100),
        req(0.3, 32, hashes=[1, 2])]))), ns)
    assert (r + "outer:1:inner:0", "completion", 0.0, "join") in deps(nodes["outer:2"])


# ---------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("entry, expected", [
    (play([]), "requests: holds no top-level request"),
    (play([req(0.0, 16)], pid=" "), "id: must not be empty"),
    (play([req(0.0, 16)], block_size=0), "block_size: must be > 0, got 0"),
    (play([req(0.0, 16)], hash_id_scope="global"), "hash_id_scope: must be 'local', got \"global\""),
    (play([req(-1.0, 16)]), "requests[0].t: must be finite and >= 0, got -1.0"),
    (play([req(0.0, 0)]), "requests[0].in: must be > 0, got 0"),
    (play([req(0.0, 16, api=-0.1)]), "requests[0].api_time: must be finite and >= 0, got -0.1"),
    (play([req(0.0, 16, model="")]), "requests[0].model: must not be empty"),
    (play([req(0.0, 16, model="z")], models=["m"]),
     "requests[0].model: 'z' is not one of the play's models ['m']"),
    (play([req(0.0, 16, hashes=[2**64])]),
     "requests[0].hash_ids: ids must fit in 64 bits, got 18446744073709551616"),
    (play([req(0.0, 11_000_000)]),
     "requests[0].in: expected `int` <= 10000000, got 11000000"),
    (play([req(0.0, 16, kind="x")]), "requests[0].type: invalid value 'x'"),
    (play([req(0.0, 16), sub(0.1, [req(0.2, 16)], status="failed")]),
     "requests[1].status: must be 'completed' (blocking) or 'async_launched' (background), "
     "got \"failed\""),
    (play([req(0.0, 16), sub(0.1, [])]),
     "requests[1].requests: a blocking subagent needs at least one request (external waits "
     "are not modelled)"),
    (play([req(0.0, 16), sub(0.1, [req(0.2, 16)], duration_ms=-1)]),
     "requests[1].duration_ms: must be >= 0, got -1"),
    (play([req(0.0, 16), sub(0.1, [req(0.2, 16)], agent="")]),
     "requests[1].agent_id: must not be empty"),
    (play([req(0.0, 16), sub(0.1, [sub(0.1, [req(0.2, 16)])])]),
     "requests[1].requests[0].type: invalid value 'subagent'"),
    (play([req(0.0, 16), sub(0.1, [req(0.2, 16)], status=None)]),
     "requests[1].status: expected `str`, got `null`"),
    (play([sub(0.0, [req(0.0, 16)]), req(0.1, 16)]),
     "requests[0]: subagent 'a' has no parent request before it"),
])
def test_a_bad_play_is_one_line_naming_its_field(tmp_path, entry, expected):
    path = write(tmp_path, "w.jsonl", play([req(0.0, 16)], "fine"), entry)
    assert error(path) == f"{path}:2: {expected}"


def test_a_pretty_printed_json_names_the_line_its_object_starts_on(tmp_path):
    path = write(tmp_path, "w.json", raw="\n\n" + json.dumps(play([req(0.0, 0)]), indent=1))
    assert error(path) == f"{path}:3: requests[0].in: must be > 0, got 0"


def test_an_inner_time_before_its_marker_is_refused_under_absolute(tmp_path):
    path = write(tmp_path, "doc_play.json", raw=DOC)
    assert error(path, basis="absolute") == (
        f"{path}:1: requests[1].requests[0].t: 0.0 precedes its subagent marker at 0.1 under "
        "weka_nested_timestamp_basis 'absolute'")


def test_one_corpus_holds_one_block_size(tmp_path):
    path = write(tmp_path, "w.jsonl", play([req(0.0, 16)]), play([req(0.0, 16)], block_size=32))
    assert error(path) == (f"{path}:2: block_size: 32 differs from the block size 16 of "
                           f"{path}:1; one corpus holds one block size")
    assert error(write(tmp_path, "v.json", play([req(0.0, 16)])), block=64) == (
        f"{tmp_path}/v.json:1: block_size: 16 does not match the payload's trace_block_size 64")


def test_file_and_directory_rules(tmp_path):
    assert error(write(tmp_path, "t.txt", play([req(0.0, 16)]))) == (
        f"{tmp_path}/t.txt: a weka source file must end in .json or .jsonl")
    (tmp_path / "empty").mkdir()
    write(tmp_path, "empty/notes.txt", raw="x")
    assert error(tmp_path / "empty") == f"{tmp_path}/empty: holds no .json or .jsonl files"
    assert error(write(tmp_path, "none.jsonl", raw="\n\n")) == (
        f"{tmp_path}/none.jsonl: holds no trace objects")
    two = write(tmp_path, "two.json", play([req(0.0, 16)]), play([req(0.0, 16)]))
    assert error(two) == (f"{two}:1: holds more than one JSON object; name the file .jsonl for "
                          "one trace per line")
    assert error(tmp_path / "missing.json") == (
        f"{tmp_path}/missing.json: cannot read the trace file: No such file or directory")


def test_symlinks_are_refused_as_input_and_inside_a_corpus(tmp_path):
    target = write(tmp_path, "real/doc_play.json", raw=DOC)
    os.symlink(target, tmp_path / "link.json")
    assert error(tmp_path / "link.json") == f"{tmp_path}/link.json: a weka source may not be a symlink"
    os.symlink(target, tmp_path / "real/again.json")
    assert error(tmp_path / "real") == (
        f"{tmp_path}/real/again.json: a weka corpus may not contain symlinks")


def test_deep_nesting_in_an_ignored_field_is_refused(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    text = json.dumps(play([req(0.0, 16)]))[:-1] + f', "totals": {deep}}}'
    path = write(tmp_path, "w.jsonl", raw=text + "\n")
    assert error(path).startswith(f"{path}:1: invalid JSON: ")


def test_a_basis_outside_the_three_is_refused():
    with pytest.raises(TraceError) as info:
        Weka().load(("x.json",), trace_block_size=None, weka_nested_timestamp_basis="sideways")
    assert str(info.value) == ("x.json: weka_nested_timestamp_basis: must be one of 'auto', "
                               "'absolute', 'relative', got \"sideways\"")


def test_times_are_bounded_so_that_sums_stay_finite(tmp_path):
    path = write(tmp_path, "w.jsonl", play([req(0.0, 16), req(1e300, 16)]))
    assert error(path) == (f"{path}:1: requests[1].t: expected `float` <= 1.8446744073709552e+19, "
                           "got 1e+300")


def test_a_path_that_is_not_utf8_cannot_name_a_source(tmp_path):
    (tmp_path / "corpus").mkdir()
    name = os.fsdecode(b"\xff.json")
    try:
        (tmp_path / "corpus" / name).write_text(DOC)
    except (OSError, UnicodeError):
        pytest.skip("the file system refuses the name")
    assert error(tmp_path / "corpus") == f"{tmp_path}/corpus/?.json: a weka path must be valid UTF-8"


@pytest.mark.parametrize("keep", [0, 1, 1024])
def test_a_corpus_lowers_alike_whether_its_checked_plays_are_kept_or_decoded_again(
        tmp_path, monkeypatch, keep):
    """Up to KEEP_PLAYS plays are decoded once (the checked ones lowered); more are decoded
    again play by play: the same graph either way."""
    from aisimulate_trace_formats import weka

    plays_ = [play([req(0.0, 32, hashes=[1, 2]), sub(0.05, [req(0.06, 20)]),
                    req(0.1, 48, hashes=[1, 2, 3])], "alpha"),
              play([req(1.0, 40, hashes=[7, 8, 9])], "beta"),
              play([req(2.0, 16)], "gamma")]
    path = write(tmp_path, "c/w.jsonl", *plays_[:2])
    write(tmp_path, "c/x.json", raw=json.dumps(plays_[2]))

    def shape(graph):
        return [(n.request_id, n.play_id, n.session_id, n.input_length, n.max_output_tokens,
                 list(n.hash_ids), n.not_before_ms, n.source_play_ordinal, n.where,
                 [(d.request_id, d.trigger, d.delay_ms, d.relation) for d in n.dependencies])
                for n in graph.nodes]

    expected = shape(load(path.parent))
    monkeypatch.setattr(weka, "KEEP_PLAYS", keep)
    assert shape(load(path.parent)) == expected
