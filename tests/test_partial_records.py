"""Every command with -o leaves a record there when it is interrupted or fails, not only at success.

Real processes and real signals: `regdiag probe server` against the HTTP emulator of
tests/server_helpers.py, `regdiag probe engine` against the fake engine of tests/engine_fake (a real
server process whose workers run the traced methods), `regdiag ab` with the protocol probe of
tests/bisect_helpers.py. SIGINT or SIGTERM is sent to regdiag itself mid-run, as Ctrl-C or a
scheduler would; a failure is a server that dies or a probe that exits with an error. The record
named by -o must then exist, be a valid run record, and say how the run ended (`interrupted`,
`partial`, `failed`) with the launches it got to.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bisect_helpers import write_probe
from conftest import ROOT
from server_helpers import emulator, free_port

from regdiag.records import load_record

FAKE = ROOT / "tests" / "engine_fake"
PHASES = [
    "--phase", "draft=fake_spec:SpecWorker.draft",
    "--phase", "verify=fake_spec:SpecWorker.verify",
    "--phase", "extend=fake_spec:SpecWorker.extend",
]  # fmt: skip


def _start(args: list[str], home: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "regdiag", *args],
        cwd=str(ROOT),
        env={**os.environ, "REGDIAG_HOME": str(home), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_launch(path: Path, proc: subprocess.Popen[str], limit: float = 120.0) -> None:
    """Until the record at `path` holds a launch (the run is under way), or fail."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        assert proc.poll() is None, f"ended early: {proc.stderr.read() if proc.stderr else ''}"
        try:
            if json.loads(path.read_text())["launches"]:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"no launch in {path} after {limit:.0f} s")


def _stop(proc: subprocess.Popen[str], sig: int) -> tuple[int, str]:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _ended(path: Path) -> dict:
    assert path.exists(), f"{path} was not written"
    return load_record(path, "run")  # valid, whatever the ending


@pytest.mark.launch
@pytest.mark.engine
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_probe_server_o_is_written_when_interrupted(tmp_path: Path, sig: int) -> None:
    out = tmp_path / "run.json"
    with emulator(step_ms=40.0) as emu:
        proc = _start(["probe", "server", "--url", emu.url, "-L", "3", "-R", "6", "--max-tokens", "48",
                       "--no-snapshot", "-o", str(out)], tmp_path / "home")  # fmt: skip
        time.sleep(1.0)
        # the stored run holds the launch first; -o is kept as current as it
        stored = tmp_path / "home" / "runs"
        t0 = time.monotonic()
        while not (stored.is_dir() and list(stored.glob("*.json"))) and time.monotonic() - t0 < 60:
            time.sleep(0.2)
        time.sleep(2.0)  # inside the first launch's requests
        rc, err = _stop(proc, sig)
    assert rc == 128 + sig, err
    run = _ended(out)
    assert run["status"] == "interrupted"
    assert run["launches"] and run["launches"][-1]["status"] == "interrupted"
    assert run == load_record(next((tmp_path / "home" / "runs").glob("*.json")), "run")


def test_probe_server_o_is_written_when_the_server_dies(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    with emulator(die_after_requests=3) as emu:
        r = subprocess.run(
            [sys.executable, "-m", "regdiag", "probe", "server", "--url", emu.url, "-L", "2", "-R", "4",
             "--no-snapshot", "-o", str(out)],
            cwd=str(ROOT), env={**os.environ, "REGDIAG_HOME": str(tmp_path / "home")},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert r.returncode == 5, r.stderr
    run = _ended(out)
    assert run["status"] in ("partial", "failed")
    assert any(la["status"] == "error" for la in run["launches"])


def _engine_args(port: int, out: Path, launches: int = 3) -> list[str]:
    cmd = f"PYTHONPATH={FAKE}/site python3 {FAKE}/fake_engine.py --port {port} --workers 1"
    return ["probe", "engine", "--launch-cmd", cmd, "--url", f"http://127.0.0.1:{port}", "--no-snapshot",
            "-L", str(launches), "-R", "4", "--max-tokens", "400", *PHASES, "-o", str(out)]  # fmt: skip


@pytest.mark.engine
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_probe_engine_o_is_written_when_interrupted(tmp_path: Path, sig: int) -> None:
    out = tmp_path / "run.json"
    proc = _start(_engine_args(free_port(), out), tmp_path / "home")
    _wait_for_launch(out, proc)
    rc, err = _stop(proc, sig)
    assert rc == 128 + sig, err
    run = _ended(out)
    assert run["status"] == "interrupted" and run["launches"]


def test_probe_engine_o_is_written_when_the_engine_fails(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    args = _engine_args(free_port(), out, launches=2)
    (tmp_path / "crash.py").write_text("import sys\nsys.exit(7)\n")  # an engine that dies at start
    args[args.index("--launch-cmd") + 1] = f"python3 {tmp_path}/crash.py"
    args.append("--no-check")  # the targets are checked before a launch: here the launch itself fails
    r = subprocess.run(
        [sys.executable, "-m", "regdiag", *args], cwd=str(ROOT), capture_output=True, text=True,
        env={**os.environ, "REGDIAG_HOME": str(tmp_path / "home")}, timeout=180,
    )  # fmt: skip
    assert r.returncode == 5, r.stderr
    run = _ended(out)
    assert run["status"] in ("failed", "partial") and run["launches"][0]["status"] == "error"


@pytest.mark.launch
def test_ab_o_is_written_when_interrupted_and_when_a_side_fails(tmp_path: Path) -> None:
    probe = write_probe(tmp_path)
    prefix = tmp_path / "ab"
    args = ["ab", "--a", "PROBE_EXTRA=verify:0", "--b", "PROBE_EXTRA=verify:1", "--command",
            f"{sys.executable} {probe}", "-L", "6", "--no-snapshot", "-o", str(prefix)]  # fmt: skip
    proc = _start(args, tmp_path / "home", {"PROBE_CYCLES": "400"})
    _wait_for_launch(Path(f"{prefix}-a.json"), proc)
    rc, err = _stop(proc, signal.SIGINT)
    assert rc == 130, err
    for side in "ab":
        assert _ended(Path(f"{prefix}-{side}.json"))["status"] == "interrupted"
    failing = tmp_path / "failing"
    r = subprocess.run(
        [sys.executable, "-m", "regdiag", "ab", "--a", "PROBE_FAIL=", "--b", "PROBE_FAIL=1", "--command",
         f"{sys.executable} {probe}", "-L", "2", "--no-snapshot", "-o", str(failing)],
        cwd=str(ROOT), capture_output=True, text=True, timeout=180,
        env={**os.environ, "REGDIAG_HOME": str(tmp_path / "home2")},
    )  # fmt: skip
    assert r.returncode == 5, r.stderr
    b = _ended(Path(f"{failing}-b.json"))
    assert b["status"] in ("failed", "partial") and b["launches"][0]["status"] == "error"
