"""kill -9 in the middle of a bisect, twice, then --resume: the same answer, every finished launch
kept, no launch measured twice (counted in the journal)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from bisect_helpers import command, write_probe

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent

GOOD = "A=0 B=0 C=0 NCCL_PROTO=LL OMP_NUM_THREADS=2"
BAD = "A=1 B=1 C=1 NCCL_PROTO=Simple OMP_NUM_THREADS=4 PROBE_EXTRA_1=verify:4 PROBE_EXTRA_2=draft:2"


def _lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for raw in path.read_text().split("\n"):
        try:
            out.append(json.loads(raw))
        except ValueError:
            pass  # a torn last line
    return out


def _launches(path: Path) -> int:
    return sum(1 for e in _lines(path) if e.get("type") == "launch")


def _argv(probe: Path, journal: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "regdiag", "bisect", "--good", GOOD, "--bad", BAD, "--command", command(probe),
        "--launches", "3", "--max-launches", "6", "--journal", str(journal), "--json", *extra,
    ]  # fmt: skip


def _kill_after(argv: list[str], journal: Path, launches: int, extra_s: float) -> None:
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while _launches(journal) < launches:
            assert proc.poll() is None, "the bisect finished before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(extra_s)  # land inside the next launch
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and the launch it is running
        proc.wait()


def test_kill_9_twice_then_resume(tmp_path) -> None:
    probe = write_probe(tmp_path)
    journal = tmp_path / "journal.jsonl"
    _kill_after(_argv(probe, journal), journal, launches=7, extra_s=0.1)
    first = _launches(journal)
    _kill_after(_argv(probe, journal, "--resume"), journal, launches=first + 6, extra_s=0.05)
    second = _launches(journal)
    assert second > first

    res = subprocess.run(
        _argv(probe, journal, "--resume"), cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout)
    assert r["resumed"] is True and r["replay_mismatches"] == []
    names = sorted(c["factors"][0]["name"] for c in r["culprits"])
    assert names == ["PROBE_EXTRA_1", "PROBE_EXTRA_2"]
    assert r["cost"]["launches_reused"] == second  # everything finished before the kills was used
    events = _lines(journal)
    keys = Counter((e["point"], e["index"]) for e in events if e["type"] == "launch")
    assert keys and max(keys.values()) == 1  # no launch measured twice
    assert sum(keys.values()) == second + r["cost"]["launches_run"]
    # The decisions were written once each, in order, across the three sessions.
    seqs = [e["seq"] for e in events if e["type"] == "decision"]
    assert seqs == list(range(len(seqs)))
    assert [e["type"] for e in events].count("start") == 1

    # And the answer is the one an uninterrupted bisect gives.
    fresh = subprocess.run(
        _argv(probe, tmp_path / "fresh.jsonl"), cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    f = json.loads(fresh.stdout)
    assert [(c["change"]) for c in f["culprits"]] == [(c["change"]) for c in r["culprits"]]
