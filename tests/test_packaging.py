"""The package as a user gets it: the sdist holds everything its build needs, the wheel ships
the C core and py.typed, and the sdist installs in a fresh virtual environment, where the core
alone names the distribution of a missing provider and the README example runs once the
bundled plugins are installed by path (the documented command)."""

import os
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JUNK = (".so", ".o", ".pyc", ".tmp", "_native.c")


UNTRACKED = {".git", ".venv", "build", "dist", "__pycache__", ".pytest_cache", ".hypothesis"}


def project_files():
    """The files of the checkout that git tracks (or would: new files not ignored); outside
    a git checkout, every file but the build products."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0:
        return [name for name in listed.stdout.splitlines() if (ROOT / name).is_file()]
    return [str(path.relative_to(ROOT)) for path in ROOT.rglob("*")
            if path.is_file() and not path.name.endswith(JUNK)
            and not any(part in UNTRACKED or part.endswith(".egg-info")
                        for part in path.relative_to(ROOT).parts)]


def copy_of_the_checkout(destination):
    for name in project_files():
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return destination


def build(kind, source, out):
    """Run setuptools' PEP 517 backend (what pip and `python -m build` call) in ``source``."""
    code = f"from setuptools import build_meta; print(build_meta.build_{kind}({str(out)!r}))"
    result = subprocess.run([sys.executable, "-c", code], cwd=source, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return out / result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    work = tmp_path_factory.mktemp("sdist")
    return build("sdist", copy_of_the_checkout(work / "src"), work / "dist")


def sdist_names(sdist):
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        return {name[len(top) + 1:] for name in archive.getnames() if name != top}


def test_the_sdist_holds_what_its_build_needs(sdist):
    from aisimulate_core import __version__

    assert sdist.name == f"aisimulate_core-{__version__}.tar.gz"
    names = sdist_names(sdist)
    c_core = {f"csrc/{name}" for name in os.listdir(ROOT / "csrc")}
    package = {name for name in project_files()
               if name.startswith("aisimulate_core/") and name.endswith((".py", ".typed"))}
    needed = {"setup.py", "pyproject.toml", "README.md", "PKG-INFO", "csrc/ffi_build.py",
              "csrc/aisim_cdef.h", "csrc/aisim.h", "examples/synthetic_poisson.json",
              "aisimulate_core/py.typed", *c_core, *package}
    assert needed - names == set()
    assert [name for name in names if name.endswith(JUNK) or "__pycache__" in name] == []
    assert [name for name in names if name.startswith(("tests/", "plugins/", "bench/", ".venv"))] == []


def test_the_wheel_ships_the_c_core_and_py_typed(sdist, tmp_path):
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path, filter="data")
    (source,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    wheel = build("wheel", source, tmp_path / "dist")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
        metadata = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert "aisimulate_core/py.typed" in names
    assert "aisimulate_core/__main__.py" in names
    assert any(name.startswith("aisimulate_core/_native") and name.endswith((".so", ".pyd")) for name in names)
    assert not any(name.startswith(("csrc/", "tests/")) for name in names)
    assert "aisimulate = aisimulate_core.cli:main" in entry_points
    assert "Provides-Extra: all" in metadata
    assert "Requires-Dist: aisimulate-placement>=0.1.0; extra == \"placement\"" in metadata


def run(command, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, **kwargs)


@pytest.mark.slow
def test_the_sdist_installs_in_a_fresh_venv_and_runs_the_readme_example(sdist, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    cli = env_dir / "bin" / "aisimulate"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    installed = run([*pip, str(sdist)], env=clean)
    assert installed.returncode == 0, installed.stderr[-3000:]
    example = ["run", str(ROOT / "examples" / "synthetic_poisson.json"), "--quiet"]

    alone = run([str(cli), *example], env=clean, cwd=tmp_path)
    assert (alone.returncode, alone.stdout) == (2, "")
    assert alone.stderr == (
        "aisimulate: error: unknown placement policy 'round_robin'; installed: (nothing); it is "
        "provided by the aisimulate-placement distribution: pip install 'aisimulate-core[placement]'\n")

    plugins = run([*pip, str(ROOT / "plugins" / "placement"), str(ROOT / "plugins" / "trace_formats")],
                  env=clean, cwd=tmp_path)
    assert plugins.returncode == 0, plugins.stderr[-3000:]
    bundled = run([str(cli), *example], env=clean, cwd=tmp_path)
    assert bundled.returncode == 0, bundled.stderr
    assert "requests completed  2,000 / 2,000" in bundled.stdout

    typed = run([str(python), "-c", "import aisimulate_core, pathlib; "
                 "print((pathlib.Path(aisimulate_core.__file__).parent / 'py.typed').is_file())"],
                env=clean, cwd=tmp_path)
    assert typed.stdout == "True\n"
    version = run([str(python), "-m", "aisimulate_core", "--version"], env=clean, cwd=tmp_path)
    assert version.stdout.splitlines()[1:] == ["plugin placement: aisimulate-placement 0.1.0",
                                               "plugin trace_formats: aisimulate-trace-formats 0.1.0"]
