"""Every reproducer in ../shared/repro (defects found by fuzzing and by new users) gives a report or
one clear error line through the CLI, quickly and in bounded memory (issue 8's acceptance).

The folder is read-only, and the gzip bomb is made by a script there, so the cases run from a
copy in a temporary folder. Each case is its own process, measured with ``os.wait4``.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPRO = Path(__file__).resolve().parents[2] / "shared" / "repro"
CASES = sorted(p.name for p in REPRO.glob("*.json")) if REPRO.is_dir() else []
# The acceptance says 10 s on this machine; repro_check.py checks that on an idle one. A loaded
# CI run gets twice as long here so that the test does not flake; memory is the hard bound.
TIMEOUT_S = 20.0
MAX_RSS_BYTES = 1 << 30
ADDRESS_SPACE_BYTES = 2 << 30


@pytest.fixture(scope="module")
def repro_copy(tmp_path_factory):
    if not CASES:
        pytest.skip(f"no reproducers at {REPRO}")
    folder = tmp_path_factory.mktemp("repro")
    for path in REPRO.iterdir():
        if path.is_file():
            shutil.copy(path, folder / path.name)
    subprocess.run([sys.executable, "make-dynamo-gzip-bomb.py"], cwd=folder, check=True,
                   capture_output=True)
    return folder


def _limit_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


def _run(folder, name):
    """(exit status, stderr, peak RSS in bytes) of ``aisimulate run NAME --quiet``, the child
    reaped with ``wait4`` so that its own peak is known."""
    err_path = folder / f".{name}.stderr"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "aisimulate_core", "run", name, "--quiet"],
                                cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, preexec_fn=_limit_address_space)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            os.wait4(proc.pid, 0)
            pytest.fail(f"{name}: no answer in {TIMEOUT_S} s")
        time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    stderr = err_path.read_text(encoding="utf-8", errors="replace")
    return proc.returncode, stderr, usage.ru_maxrss * 1024  # kilobytes on Linux


@pytest.mark.parametrize("name", CASES)
def test_reproducer_gives_a_report_or_one_clear_error(repro_copy, name):
    status, stderr, peak_rss = _run(repro_copy, name)
    lines = stderr.splitlines()
    assert "Traceback" not in stderr, stderr
    assert status in (0, 2), (status, stderr)
    if status == 2:
        assert lines and all(line.startswith("aisimulate: error: ") for line in lines), lines
    else:
        assert not lines, lines
    assert peak_rss < MAX_RSS_BYTES, f"{name}: peak RSS {peak_rss / 2**20:.0f} MiB"
