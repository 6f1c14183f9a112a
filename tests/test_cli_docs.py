"""The command reference is generated from the commands; it must be current and cover every command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer

ROOT = Path(__file__).resolve().parent.parent


def test_cli_reference_is_current() -> None:
    r = subprocess.run(
        [sys.executable, "scripts/gen_cli_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr


def test_every_command_is_documented_and_has_help() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    import gen_cli_docs

    from regdiag.cli import app

    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    root = typer.main.get_command(app)
    commands = gen_cli_docs.walk(root, ["regdiag"])
    assert len(commands) >= 8
    for path, cmd in commands:
        assert f"## `{' '.join(path)}`" in text
        assert cmd.help or cmd.short_help, f"{' '.join(path)} has no help text"


def test_help_and_version_exit_zero() -> None:
    for args in (["--help"], ["--version"], []):
        r = subprocess.run([sys.executable, "-m", "regdiag", *args], cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, (args, r.stderr)
    r = subprocess.run(
        [sys.executable, "-m", "regdiag", "no-such-command"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr


def test_fast_snapshot_path_prints_the_same_record_as_the_full_cli(tmp_path: Path) -> None:
    import json

    fast = subprocess.run(
        [sys.executable, "-m", "regdiag", "snapshot", "--json", "-o", str(tmp_path / "a.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    # --timeout is not on the fast path: this goes through typer and the snapshot command.
    full = subprocess.run(
        [sys.executable, "-m", "regdiag", "snapshot", "--json", "--timeout", "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert fast.returncode == 0 and full.returncode == 0, (fast.stderr, full.stderr)
    a, b = json.loads(fast.stdout), json.loads(full.stdout)
    assert json.loads((tmp_path / "a.json").read_text()) == a
    assert a["schema"] == b["schema"] == "regdiag.snapshot/2"
    assert a["groups"].keys() == b["groups"].keys()
    for g in a["groups"]:
        assert a["groups"][g].get("fields", {}).keys() == b["groups"][g].get("fields", {}).keys(), g
    bad = subprocess.run(
        [sys.executable, "-m", "regdiag", "snapshot", "--json", "-o", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
