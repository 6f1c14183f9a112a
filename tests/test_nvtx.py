"""NVTX ranges of the spec-decode probe: an instrumented cycle on CUDA is a range "cycle" holding one
range per phase (draft, verify, extend), so `nsys profile` timelines name them; bare cycles and CPU
runs push nothing.

CUDA cannot run on this CPU machine: the nesting is checked on CPU with a recorder standing in for
torch.cuda.nvtx (the cycle itself, its runners and its timing are the probe's own), and the real
thing under `nsys profile` on a GPU (skipped without one; docs/probes.md, "NVTX ranges").
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from probe_helpers import PROBES, TINY

sys.path.insert(0, str(PROBES))

import _spec_runner  # noqa: E402


class Recorder:
    """Stands in for torch.cuda.nvtx where no CUDA runs: the calls in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def range_push(self, name: str) -> None:
        self.calls.append(("push", name))

    def range_pop(self) -> None:
        self.calls.append(("pop", ""))


def _cycle(inst: bool, nvtx: Recorder | None) -> list[float]:
    x = torch.randn(64, 64)
    runners = {ph: (lambda: x @ x) for ph in ("draft", "verify", "extend")}
    inp = torch.zeros(4)
    row, _ = _spec_runner._one_cycle(
        list(runners), runners, {}, [], inp, torch.ones(4), inst=inst, cuda=False, nvtx=nvtx
    )
    return row


def test_an_instrumented_cycle_is_one_range_holding_a_range_per_phase() -> None:
    rec = Recorder()
    row = _cycle(True, rec)
    assert len(row) == 4 and all(v > 0 for v in row)  # cycle, draft, verify, extend in ms
    assert rec.calls == [
        ("push", "cycle"),
        ("push", "draft"), ("pop", ""),
        ("push", "verify"), ("pop", ""),
        ("push", "extend"), ("pop", ""),
        ("pop", ""),
    ]  # fmt: skip


def test_bare_cycles_push_nothing() -> None:
    rec = Recorder()
    assert len(_cycle(False, rec)) == 1
    assert rec.calls == []


def test_ranges_only_on_cuda_and_not_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _spec_runner.nvtx_ranges(False) is None  # a CPU run: nothing to push to
    monkeypatch.setenv("REGDIAG_NVTX", "0")
    assert _spec_runner.nvtx_ranges(True) is None
    monkeypatch.delenv("REGDIAG_NVTX")
    assert _spec_runner.nvtx_ranges(True) is torch.cuda.nvtx


@pytest.mark.skipif(
    not torch.cuda.is_available() or shutil.which("nsys") is None, reason="needs CUDA and nsys"
)
def test_nsys_names_the_phases(tmp_path: Path) -> None:
    rep = tmp_path / "probe"
    subprocess.run(
        ["nsys", "profile", "-t", "cuda,nvtx", "-o", str(rep), sys.executable, str(PROBES / "spec_decode.py"),
         *TINY, "--device", "cuda"],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    out = subprocess.run(
        ["nsys", "stats", "--report", "nvtx_sum", "--format", "csv", f"{rep}.nsys-rep"],
        check=True, capture_output=True, text=True, timeout=300,
    ).stdout  # fmt: skip
    body = out[out.index("Time (%)") :] if "Time (%)" in out else out
    names = {row.get("Range", "").lstrip(":") for row in csv.DictReader(io.StringIO(body))}
    assert {"cycle", "draft", "verify", "extend"} <= names
