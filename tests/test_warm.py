"""Warm launches (probes/_warm.py, regdiag/measure/warm.py): every launch of a run forked from one
interpreter that imported torch once, each still its own process tree, recorded as warm, and nothing
left behind however regdiag ends: done, SIGTERM, SIGINT or SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from regdiag.records import load_record

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--preset", "tiny", "--context", "64", "--warmup", "2", "--block", "3", "--no-snapshot"]

pytestmark = [pytest.mark.launch, pytest.mark.slow]


def _regdiag(*args: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "regdiag", "probe", "spec-decode", *SMALL, *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, COLUMNS="120"), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def _tree(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _live(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            pass
    return out


def test_every_launch_is_forked_from_one_warm_interpreter_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    p = _regdiag("--cycles", "6", "--launches", "3", "--tp", "2", "-o", str(out), "--json")
    stdout, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    run = load_record(out, "run")
    assert run["probe"]["start"]["mode"] == "warm" and run["probe"]["start"]["import_torch_s"] > 0
    assert [la["start"] for la in run["launches"]] == ["warm"] * 3
    assert all(la["status"] == "ok" and len(la["samples"]["cycle"]) == 6 for la in run["launches"])
    # each launch seeds its inputs with its own index, as a fresh process does: not one shared state
    medians = [json.dumps(la["samples"]["cycle"]) for la in run["launches"]]
    assert len(set(medians)) == 3
    assert json.loads(stdout)["ok_launches"] == 3
    assert not _live(_tree(p.pid))


def test_cold_is_one_fresh_interpreter_per_launch(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    p = _regdiag("--cycles", "4", "--launches", "2", "-o", str(out), "--cold")
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    run = load_record(out, "run")
    assert run["probe"]["start"] == {"mode": "cold", "why": "--cold"}
    assert [la["start"] for la in run["launches"]] == ["cold", "cold"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["term", "int", "kill"])
def test_no_process_outlives_an_interrupted_warm_run(tmp_path: Path, sig: int) -> None:
    out = tmp_path / "i.json"
    p = _regdiag("--cycles", "4000", "--launches", "3", "--tp", "2", "-o", str(out))
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + 300
    try:
        # the warm parent, the launch client, the supervisor and its two ranks
        while time.monotonic() < deadline and len(_live(list(seen.values()))) < 5:
            seen.update({c.pid: c for c in _tree(p.pid)})
            time.sleep(0.1)
        assert len(_live(list(seen.values()))) >= 5, _live(list(seen.values()))
        time.sleep(1.0)
        seen.update({c.pid: c for c in _tree(p.pid)})
        p.send_signal(sig)
        p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    end = time.monotonic() + 30
    while _live(list(seen.values())) and time.monotonic() < end:
        time.sleep(0.2)
    assert not _live(list(seen.values())), "still running after regdiag ended"
    if sig != signal.SIGKILL:
        assert p.returncode == 128 + sig
        run = load_record(out, "run")
        assert run["status"] == "interrupted" and run["launches"][-1]["start"] == "warm"
