"""Shared test fixtures: a private REGDIAG_HOME per test, and a helper to run the CLI as users do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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
# unit test, and a unit test that takes more than UNMARKED_LIMIT_S seconds (set up or run; scaled by
# how oversubscribed the CPUs were, so two CPU hogs do not fail it) fails the session, naming it: it
# starts something and must say what, or go to the full tier.
STARTS = ("slow", "launch", "ssh", "engine", "cli", "tool", "vllm", "slurm", "gpu")
UNMARKED_LIMIT_S = float(os.environ.get("REGDIAG_TEST_UNMARKED_LIMIT_S", "5"))
_too_slow: list[str] = []


def _oversubscribed() -> float:
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:
        return 1.0


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when not in ("setup", "call") or report.outcome == "skipped":
        return
    if any(m in report.keywords for m in STARTS):
        return
    limit = UNMARKED_LIMIT_S * _oversubscribed()
    if report.duration > limit:
        _too_slow.append(f"{report.nodeid} ({report.when} {report.duration:.1f} s > {limit:.1f} s)")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _too_slow and not hasattr(session.config, "workerinput"):  # the controller (or a run without -n)
        print("\nunmarked tests over the unit-test limit (mark what they start, or slow):", file=sys.stderr)
        for line in _too_slow:
            print(f"  {line}", file=sys.stderr)
        if session.exitstatus == 0:
            session.exitstatus = 1
