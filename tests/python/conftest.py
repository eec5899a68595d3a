"""The Python package's tests (tools/python, docs/python.md), run by ctest (tests/python/CMakeLists.txt) with
the package of the build under test on PYTHONPATH and HETSIM_BUILD_DIR naming that build (its `hetsim` CLI)."""

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def cli():
    """Runs the CLI of the build under test from the repository root; returns the completed process."""
    build = os.environ.get("HETSIM_BUILD_DIR", os.path.join(ROOT, "build"))
    binary = os.path.join(build, "hetsim")
    if not os.path.exists(binary):
        pytest.skip(f"no CLI at {binary} (set HETSIM_BUILD_DIR)")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # the CLI is linked with the sanitizers

    def run(*args):
        return subprocess.run([binary, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)

    return run


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    """Every test runs from the repository root, as the README's commands do."""
    monkeypatch.chdir(ROOT)
