"""Shared test fixtures: a private REGDIAG_HOME per test, and a helper to run the CLI as users do."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _stop_signals_as_a_terminal_gives_them() -> None:
    """A suite started in the background of a script (`cmd &`, `nohup cmd &`) inherits SIGINT and SIGHUP
    ignored, and every process it starts inherits that too: regdiag then rightly keeps running through
    them, as nohup asks. The tests of Ctrl-C and hang-up need them delivered, as at a terminal, so the
    suite restores the defaults for itself and its children once, here."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


_stop_signals_as_a_terminal_gives_them()


@pytest.fixture(autouse=True)
def _private_regdiag_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # Stored runs, baselines and environments never leak between tests or into the user's home.
    monkeypatch.setenv("REGDIAG_HOME", str(tmp_path_factory.mktemp("regdiag-home")))


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    cwd: str | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m regdiag ARGS` in a subprocess, as a user would, and capture everything."""
    full_env = dict(os.environ)
    full_env.setdefault("COLUMNS", "120")
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "regdiag", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=cwd or str(ROOT),
        input=input,
    )


@pytest.fixture
def cli():
    return run_cli


# --- tiers -------------------------------------------------------------------------------------------
# The fast tier (the README's test command) is `-m "not slow"`; the full tier is `-m slow`. A test is
# marked by what it starts (pyproject.toml lists the markers): a test marked with none of them is a
# unit test, and a unit test that uses more than UNMARKED_LIMIT_S seconds of CPU (its own process and
# the children it waited for, set up or run) fails the session, naming it: it starts something and must
# say what, or go to the full tier. CPU time, not wall time: two CPU hogs stretch a test's wall time
# but hardly its CPU time, so a loaded box does not fail the guard. A test that mostly waits is caught
# by its wall time past WALL_FACTOR times the limit, scaled by how oversubscribed the CPUs were.
STARTS = ("slow", "launch", "ssh", "engine", "cli", "tool", "vllm", "slurm", "gpu")
UNMARKED_LIMIT_S = float(os.environ.get("REGDIAG_TEST_UNMARKED_LIMIT_S", "5"))
WALL_FACTOR = 6.0
TOO_SLOW = "regdiag-unmarked-over-limit"
_too_slow: list[str] = []


def _oversubscribed() -> float:
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:
        return 1.0


def _cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _unmarked(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(m) for m in STARTS)


def _watch(item: pytest.Item, when: str):
    if not _unmarked(item):
        yield
        return
    cpu0, t0 = _cpu_s(), time.monotonic()
    yield
    cpu, wall = _cpu_s() - cpu0, time.monotonic() - t0
    wall_limit = WALL_FACTOR * UNMARKED_LIMIT_S * _oversubscribed()
    # user_properties travel with the report to xdist's controller, which prints the list
    if cpu > UNMARKED_LIMIT_S:
        item.user_properties.append((TOO_SLOW, f"{when}: {cpu:.1f} s of CPU > {UNMARKED_LIMIT_S:.1f} s"))
    elif wall > wall_limit:
        item.user_properties.append((TOO_SLOW, f"{when}: {wall:.1f} s of wall time > {wall_limit:.1f} s"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":
        for key, why in report.user_properties:
            if key == TOO_SLOW and f"{report.nodeid} ({why})" not in _too_slow:
                _too_slow.append(f"{report.nodeid} ({why})")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    yield from _watch(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    yield from _watch(item, "call")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _too_slow and not hasattr(session.config, "workerinput"):  # the controller (or a run without -n)
        print("\nunmarked tests over the unit-test limit (mark what they start, or slow):", file=sys.stderr)
        for line in _too_slow:
            print(f"  {line}", file=sys.stderr)
        if session.exitstatus == 0:
            session.exitstatus = 1
