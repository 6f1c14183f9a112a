"""A sweep is judged per size: a slowdown at small messages fails the gate though 1 GiB held.

The files are real nccl-tests output recorded on two H200s (baselines/h200x2-collectives/), repeated
as three launches a side with a little jitter; the new side is made 30 % slower at 1-64 KiB only,
which the 1 GiB row alone (the primary) would call UNCHANGED."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, run_cli

NCCL = ROOT / "baselines" / "h200x2-collectives" / "nccl-tests.txt"
SMALL = 64 << 10


def _section(name: str) -> str:
    parts = re.split(r"^(?==== RUN )", NCCL.read_text(), flags=re.M)
    return next(p for p in parts if p.split(" ", 3)[2:3] == [name])


def _scaled(text: str, rng: np.random.Generator, slow_small: float) -> str:
    """The section with every row's times x (1 +- 0.2 % jitter), and x slow_small up to 64 KiB."""
    out = []
    for line in text.splitlines():
        tok = line.split()
        if line.startswith("#") or len(tok) < 13 or not tok[0].isdigit():
            out.append(line)
            continue
        f = (1 + 0.002 * rng.standard_normal()) * (slow_small if int(tok[0]) <= SMALL else 1.0)
        for t, a, b in ((5, 6, 7), (9, 10, 11)):  # out-of-place and in-place time, algbw, busbw
            tok[t] = f"{float(tok[t]) * f:.2f}"
            tok[a] = f"{float(tok[a]) / f:.2f}"
            tok[b] = f"{float(tok[b]) / f:.2f}"
        out.append("  ".join(tok))
    return "\n".join(out) + "\n"


def _side(path: Path, seed: int, slow_small: float) -> Path:
    rng = np.random.default_rng(seed)
    sec = _section("ar-default-eager")
    path.write_text("".join(_scaled(sec, rng, slow_small) for _ in range(3)))
    return path


@pytest.fixture
def sweeps(tmp_path: Path) -> tuple[Path, Path]:
    return _side(tmp_path / "old.txt", 1, 1.0), _side(tmp_path / "new.txt", 2, 1.3)


@pytest.mark.cli
def test_a_small_message_regression_is_regressed_with_exit_1(sweeps: tuple[Path, Path]) -> None:
    old, new = sweeps
    p = run_cli("compare", str(old), str(new))
    assert p.returncode == 1, p.stdout + p.stderr
    head = p.stdout.splitlines()[0]
    assert "REGRESSED per size" in head and "REGRESSED at 1 KiB-64 KiB (+2" in head, head
    assert "unchanged at 128 KiB-" in " ".join(p.stdout.split()), p.stdout
    js = json.loads(run_cli("compare", str(old), str(new), "--json").stdout)
    assert js["verdict"] == "REGRESSED" and js["exit_code"] == 1 and js["sweep"].startswith("REGRESSED at")
    rows = js["sizes"]
    assert [r["bytes"] for r in rows] == sorted(r["bytes"] for r in rows)  # the size axis by size
    slow = {r["bytes"] for r in rows if r["latency"]["verdict"] == "REGRESSED"}
    assert slow == {1 << k for k in range(10, 17)}


@pytest.mark.cli
def test_metric_judges_one_size_and_the_sweep_is_unchanged_without_the_slowdown(
    sweeps: tuple[Path, Path], tmp_path: Path
) -> None:
    old, new = sweeps
    big = run_cli("compare", str(old), str(new), "--metric", "ar_256MiB", "--json")
    assert big.returncode == 0, big.stderr
    assert json.loads(big.stdout)["verdict"] == "UNCHANGED"
    small = run_cli("compare", str(old), str(new), "--metric", "ar_4KiB")
    assert small.returncode == 1 and small.stdout.startswith(" REGRESSED  ar_4KiB +")
    same = _side(tmp_path / "same.txt", 3, 1.0)
    p = run_cli("compare", str(old), str(same))
    assert p.returncode == 0, p.stdout
    assert "per size" in p.stdout.splitlines()[0] and "REGRESSED" not in p.stdout, p.stdout
    bad = run_cli("compare", str(old), str(new), "--metric", "ar_3KiB")
    assert bad.returncode == 2 and "--metric 'ar_3KiB': not a metric both runs hold" in bad.stderr
