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
