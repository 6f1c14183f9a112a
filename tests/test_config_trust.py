"""A config.toml that another user may have written (a team home's, mode 2770, written by a member of
its group) chooses no interpreter for the user running regdiag and cannot make the home acceptable:
its python and shared_home are ignored, said in one warning line naming the file and why."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cli


def _interpreter(tmp_path: Path) -> tuple[Path, Path]:
    """An interpreter that leaves a marker and then is this one: what a group member would plant."""
    marker = tmp_path / "ran"
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\ntouch "{marker}"\nexec "{sys.executable}" "$@"\n')
    script.chmod(0o755)
    return script, marker


def _config(home: Path, text: str, mode: int, uid: int | None = None) -> Path:
    cfg = home / "config.toml"
    cfg.write_text(text)
    os.chmod(cfg, mode)
    if uid is not None:
        os.chown(cfg, uid, uid)
    return cfg


def _warning(cfg: Path, why: str, keys: str) -> str:
    return (
        f"regdiag: warning: {cfg}: {why}; its {keys} ignored: a file another user may write chooses no "
        "code for this user and does not make REGDIAG_HOME acceptable"
    )


def test_a_config_toml_another_user_may_write_picks_no_interpreter(cli, tmp_path: Path) -> None:
    home = Path(os.environ["REGDIAG_HOME"])
    script, marker = _interpreter(tmp_path)
    text = f'[defaults]\npython = "{script}"\n\n[hosts.gpu-box]\npython = "{script}"\n'
    cases = [(0o664, None, "writable by its group (mode 664)"), (0o646, None, "writable by anyone (mode 646)")]
    if os.geteuid() == 0:
        cases.append((0o644, 12345, "owned by another user (uid 12345)"))
    spec = ["probe", "spec-decode", "--preset", "tiny", "-L", "2", "-n", "2", "--no-snapshot"]
    for mode, uid, why in cases:
        cfg = _config(home, text, mode, uid)
        keys = "[defaults] python, [hosts.gpu-box] python"
        for args in (["snapshot", "--json"], [*spec, "-o", str(tmp_path / f"p{mode:o}.json")]):
            r = cli(*args)
            assert not marker.exists(), (args, r.stderr)
            assert r.returncode == 0, r.stderr[-2000:]
            assert r.stderr.splitlines()[0] == _warning(cfg, why, keys)
            assert r.stderr.count("regdiag: warning:") == 1
    # this user's own config.toml chooses the interpreter, as ever: the refusal is what kept it out
    _config(home, text, 0o644, os.geteuid())
    r = cli("snapshot", "--json")
    assert r.returncode == 0 and marker.exists() and "warning" not in r.stderr


def test_a_team_homes_config_toml_cannot_accept_the_home(cli, tmp_path: Path) -> None:
    home = tmp_path / "team"
    home.mkdir()
    os.chmod(home, 0o2770)
    script, marker = _interpreter(tmp_path)
    cfg = _config(home, f'[defaults]\nshared_home = true\npython = "{script}"\n', 0o664)
    env = {"REGDIAG_HOME": str(home)}
    r = cli("snapshot", "--json", env=env)
    assert r.returncode == 2 and not marker.exists()
    assert r.stderr.splitlines() == [
        _warning(cfg, "writable by its group (mode 664)", "[defaults] shared_home, [defaults] python"),
        f"regdiag: error: {home}: writable by its group (mode 2770); chmod g-w it, or pass --shared-home "
        "for a team home",
    ]
    # the user accepts the team home: the member's interpreter is still not run
    r = cli("--shared-home", "snapshot", "--json", env=env)
    assert r.returncode == 0 and not marker.exists(), r.stderr[-2000:]
    assert r.stderr.count("regdiag: warning:") == 1
    assert stat.S_IMODE(home.stat().st_mode) == 0o2770
