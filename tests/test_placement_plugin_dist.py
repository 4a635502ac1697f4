"""A third-party placement policy shipped as its own distribution: written here as a tiny
project (a pyproject with an ``aisimulate`` entry point), installed with pip into a fresh
virtual environment, listed by ``aisimulate plugins`` and selected by a payload. The policy
reads the live SchedulerViews (fewest waiting requests, then fewest active KV blocks) and
observes ``terminal`` notifications; the run's records follow its decisions.

The fresh environment sees the project's own environment (the core, pip, setuptools) through a
``.pth`` line that adds that environment's site-packages: ``--system-site-packages`` would add
the base interpreter's, which the project's virtual environment does not install into. Nothing
is downloaded (``--no-index --no-deps --no-build-isolation``); the module takes a few seconds.
"""

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

DISTRIBUTION = "aisimulate-fewest-waiting"
ENTRY_POINT = "fewest_waiting"

PYPROJECT = f"""\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{DISTRIBUTION}"
version = "0.3.0"
dependencies = ["aisimulate-core"]

[project.entry-points.aisimulate]
{ENTRY_POINT} = "aisimulate_fewest_waiting"

[tool.setuptools]
py-modules = ["aisimulate_fewest_waiting"]
"""

POLICY = '''\
"""Placement on the scheduler with the fewest waiting requests, then the fewest active KV
blocks, then the fewest of this policy's requests not yet terminal, then the lowest
(worker_id, dp_rank). With config "log" it appends one JSON line per decision (the views it
read) and per terminal notification."""

import json

from aisimulate_core.hookspecs import hookimpl
from aisimulate_core.placement import PlacementPolicy


class FewestWaiting(PlacementPolicy):
    NAME = "fewest_waiting"
    CONFIG_KEYS = frozenset({"log"})
    OBSERVES = frozenset({"terminal"})

    def __init__(self, config, pool):
        super().__init__(config, pool)
        self.in_flight = {}          # uuid -> (worker_id, dp_rank), until its terminal
        self.log = open(self.config["log"], "a") if "log" in self.config else None

    def write(self, entry):
        if self.log is not None:
            self.log.write(json.dumps(entry) + "\\n")
            self.log.flush()

    def place(self, request):
        seen = []
        for view in self.pool.schedulers:
            mine = sum(1 for where in self.in_flight.values()
                       if where == (view.worker_id, view.dp_rank))
            seen.append([view.waiting_requests, view.active_blocks, mine,
                         view.worker_id, view.dp_rank])
        best = min(seen)
        choice = (best[3], best[4])
        self.in_flight[request.uuid] = choice
        self.write({"place": request.uuid, "now_ms": request.now_ms, "views": seen,
                    "choice": list(choice)})
        return choice

    def on_terminal(self, uuid, now_ms):
        self.in_flight.pop(uuid, None)
        self.write({"terminal": uuid, "now_ms": now_ms})


@hookimpl
def aisimulate_register_placement_policies(register):
    register(FewestWaiting)
'''


def clean_env():
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "AISIMULATE_PLUGINS")
            and not k.startswith("PIP_")}


def run(command, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, env=clean_env(), timeout=120,
                          **kwargs)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The fresh environment's python, with the policy's distribution installed by pip."""
    work = tmp_path_factory.mktemp("plugin_dist")
    source = work / "fewest-waiting"
    source.mkdir()
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "aisimulate_fewest_waiting.py").write_text(POLICY)
    env_dir = work / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site_packages = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    project_site = sysconfig.get_paths()["purelib"]
    (Path(site_packages.stdout.strip()) / "_project_env.pth").write_text(
        f"import site; site.addsitedir({project_site!r})\n")
    done = run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                "--no-index", "--no-deps", "--no-build-isolation", str(source)], cwd=work)
    assert done.returncode == 0, done.stderr[-3000:]
    return python, work


def spec(log):
    """Two workers, fixed timing. r0 (16/60) and r1 (256/60) at 0; short requests at 50, 60
    and 70; one more at 400 when everything has finished."""
    requests = [(0.0, 16, 60), (0.0, 256, 60), (50.0, 16, 20), (60.0, 16, 20), (70.0, 16, 20),
                (400.0, 16, 4)]
    return {
        "version": 1,
        "topology": {"kind": "aggregated", "workers": {"initial_workers": 2}},
        "engine": {"rank": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 1024,
                            "max_num_batched_tokens": 8192,
                            "timing_model": {"type": "fixed", "prefill_ms": 10.0,
                                             "decode_ms": 5.0}}},
        "adapters": {"placement": {"provider": "fewest_waiting", "config": {"log": str(log)}}},
        "record_per_request": True,
        "requests": [{"id": f"r{i}", "arrival_time_ms": at, "input_tokens": isl,
                      "output_tokens": osl} for i, (at, isl, osl) in enumerate(requests)],
    }


def run_policy(python, work, *options, name="run"):
    folder = work / name
    folder.mkdir()
    log = folder / "decisions.jsonl"
    payload = folder / "payload.json"
    payload.write_text(json.dumps(spec(log)))
    done = run([str(python), "-m", "aisimulate_core", *options, "run", str(payload),
                "--output", str(folder / "report.json"), "--per-request",
                str(folder / "records.jsonl"), "--quiet"], cwd=folder)
    if done.returncode != 0:
        return done, None, None
    records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]
    decisions = [json.loads(line) for line in log.read_text().splitlines()]
    return done, records, decisions


def uuid_number(text):
    return int(text.replace("-", ""), 16)


def test_aisimulate_plugins_lists_the_distribution(installed):
    python, work = installed
    listed = run([str(python), "-m", "aisimulate_core", "plugins"], cwd=work)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert [ENTRY_POINT, DISTRIBUTION, "0.3.0", "aisimulate_register_placement_policies",
            "placement", "policy:", "fewest_waiting"] in rows


def test_its_placements_follow_the_scheduler_views(installed):
    python, work = installed
    done, records, decisions = run_policy(python, work)
    assert done.returncode == 0, done.stderr
    by_arrival = sorted(records, key=lambda r: (r["arrival_time_ms"], r["input_length"]))
    # r0 -> 0; r1 -> 1 (worker 0 has r0 waiting); r2..r4 -> 0: both run one request and wait
    # for none, and worker 0's short prompts hold fewer blocks than r1's 17; the request at 400
    # -> 0: everything finished and the terminal notifications emptied the policy's counts
    # (round robin: 0, 1, 0, 1, 0, 1; least_loaded, by running + waiting: 0, 1, 0, 1, 0, 0)
    assert [r["decode_worker_idx"] for r in by_arrival] == [0, 1, 0, 0, 0, 0]
    placed = [d for d in decisions if "place" in d]
    worker_of = {uuid_number(r["uuid"]): r["decode_worker_idx"] for r in records}
    arrival_of = {uuid_number(r["uuid"]): r["arrival_time_ms"] for r in records}
    assert len(placed) == len(records) == 6
    for decision in placed:
        # the views it read: [waiting, active_blocks, in flight, worker_id, dp_rank] per scheduler
        assert sorted(v[3] for v in decision["views"]) == [0, 1]
        assert decision["choice"] == min(decision["views"])[3:]
        assert worker_of[decision["place"]] == decision["choice"][0]
        assert decision["now_ms"] == arrival_of[decision["place"]]
    views_at = {d["now_ms"]: d["views"] for d in placed}
    assert views_at[60.0][1][:2] == [0, 17]          # r1's 256 + decoded tokens on worker 1
    assert views_at[400.0] == [[0, 0, 0, 0, 0], [0, 0, 0, 1, 0]]
    # one terminal notification per request, at its record's terminal time
    terminals = {d["terminal"]: d["now_ms"] for d in decisions if "terminal" in d}
    assert terminals == {uuid_number(r["uuid"]): r["terminal_time_ms"] for r in records}


def test_it_loads_by_name_without_autoload_and_can_be_blocked(installed):
    python, work = installed
    done, records, _ = run_policy(python, work, "--disable-plugin-autoload",
                                  "--plugin", ENTRY_POINT, name="explicit")
    assert done.returncode == 0, done.stderr
    assert sorted(r["decode_worker_idx"] for r in records) == [0, 0, 0, 0, 0, 1]
    blocked, _, _ = run_policy(python, work, "--plugin", f"no:{ENTRY_POINT}", name="blocked")
    assert (blocked.returncode, blocked.stdout) == (2, "")
    assert blocked.stderr.startswith("aisimulate: error: unknown placement policy "
                                     "'fewest_waiting'; installed: ")
    assert len(blocked.stderr.splitlines()) == 1


def test_the_project_environment_alone_does_not_have_it(installed, tmp_path):
    # the policy comes from the distribution only: the project's own environment refuses it
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps(spec(tmp_path / "log.jsonl")))
    done = run([sys.executable, "-m", "aisimulate_core", "run", str(payload), "--quiet"],
               cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("aisimulate: error: unknown placement policy 'fewest_waiting'")


def test_the_policy_text_is_what_the_distribution_ships(installed):
    python, _ = installed
    shown = run([str(python), "-c", textwrap.dedent("""\
        import importlib.metadata as m
        d = m.distribution("aisimulate-fewest-waiting")
        print([ep.value for ep in d.entry_points if ep.group == "aisimulate"])
        print(d.locate_file("aisimulate_fewest_waiting.py").read_text() == open(0).read())
        """)], input=POLICY)
    assert shown.stdout.splitlines() == ["['aisimulate_fewest_waiting']", "True"]
