"""The fast tier's guard (tests/conftest.py): an unmarked test that uses CPU past the limit fails the
session and is named; one that waits past it on an idle box does not, nor one marked with what it
starts. Run as a child pytest session with this suite's conftest and markers, with and without xdist."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CASES = """
import time
import pytest


def _spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_spins_unmarked():
    _spin(1.5)


def test_waits_unmarked():
    time.sleep(1.0)


@pytest.mark.launch
def test_spins_marked():
    _spin(1.5)


def test_quick():
    assert True
"""


def _session(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "test_cases.py").write_text(CASES)
    env = {**os.environ, "REGDIAG_TEST_UNMARKED_LIMIT_S": "0.5", "PYTEST_ADDOPTS": ""}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, "test_cases.py"]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.cli
@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_cpu_past_the_limit_fails_the_session_and_names_only_that_test(tmp_path: Path, extra) -> None:
    res = _session(tmp_path, *extra)
    err = res.stdout + res.stderr
    assert res.returncode == 1, err
    assert "4 passed" in err, err
    assert "test_cases.py::test_spins_unmarked (call:" in err and "of CPU > 0.5 s" in err, err
    # 1 s of waiting is under 6 x 0.5 s; a marked test says what it starts
    assert "test_waits_unmarked" not in err.split("unit-test limit")[-1], err
    assert "test_spins_marked" not in err, err
