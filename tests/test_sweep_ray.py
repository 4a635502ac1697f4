"""The Ray executor on a real local Ray instance: the same ledger as local processes."""

import json

import pytest

from aisimulate_core.cli import main
from aisimulate_core.sweep import comparable, load_sweep, run_sweep
from aisimulate_core.sweep.executors import LocalExecutor, RayExecutor, _trace_dir
from aisimulate_core.sweep.point import TraceDigests
from reference import ROOT

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'aisimulate-core[sweep]')")

TRACE = (ROOT.parent / "shared/data/mooncake/conversation_trace.jsonl").resolve()
OPTIONS = (True, ())


@pytest.fixture(scope="module")
def local_ray():
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    except Exception as error:  # the only reason to skip: Ray cannot start here
        pytest.skip(f"Ray cannot start on this machine: {type(error).__name__}: {error}")
    yield ray
    ray.shutdown()


def sweep_file(tmp_path, name):
    if not TRACE.is_file():
        pytest.skip(f"the shared Mooncake trace is not beside the checkout ({TRACE})")
    base = json.loads((ROOT / "tests/fixtures/payloads/mooncake_conversation_60s_2w.json").read_text())
    base["traffic"]["trace_path"] = str(TRACE)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({
        "base": base, "set": {"spec.sla": {"ttft_ms": 1000, "itl_ms": 50}},
        "axes": {"spec.topology.workers.initial_workers": [1, 3],
                 "spec.engine.rank.max_num_batched_tokens": [2048, 8192, -1]},
        "goal": {"kind": "min_gpus", "min_good_fraction": 0.7}}))
    return path


def ledger(result):
    lines = (result.spec.output / "ledger.jsonl").read_text().splitlines()
    return sorted((comparable(json.loads(line)) for line in lines), key=lambda r: r["point"])


def test_local_and_ray_give_equal_ledgers(tmp_path, local_ray):
    processes = LocalExecutor(2, OPTIONS)
    try:
        local = run_sweep(load_sweep(sweep_file(tmp_path, "local")), processes, jobs=2, plots=False)
    finally:
        processes.close()
    executor = RayExecutor(None, OPTIONS, TraceDigests())
    try:
        on_ray = run_sweep(load_sweep(sweep_file(tmp_path, "ray")), executor, jobs=2, plots=False)
    finally:
        executor.close()
    assert len(ledger(local)) == 6
    assert ledger(local) == ledger(on_ray)
    statuses = sorted(r["status"] for r in ledger(on_ray))
    assert statuses == ["failed", "failed", "ok", "ok", "ok", "ok"]  # -1 tokens is refused
    assert on_ray.chosen["point"] == local.chosen["point"]
    # the trace went through the object store: the workers read their own copy of it
    digest = TraceDigests().of(str(TRACE))
    assert (_trace_dir() / digest / TRACE.name).read_bytes() == TRACE.read_bytes()


def test_cli_sweep_on_ray(tmp_path, capsys, local_ray):
    path = sweep_file(tmp_path, "cli")
    assert main(["sweep", str(path), "--executor", "ray", "--quiet", "--no-plots"]) == 0
    out, _ = capsys.readouterr()
    assert "6 points (2 failed, 0 from the ledger)" in out
    assert ray.is_initialized()  # a Ray the command joined is left running
