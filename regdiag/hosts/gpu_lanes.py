"""The GPUs of this machine as lanes (`regdiag bisect --lanes gpu`): groups of the probe's TP size, each
launch pinned to its group with CUDA_VISIBLE_DEVICES, the groups measured at once.

    gpu_lanes(tp=1)  -> [GpuLane gpu0, GpuLane gpu1, ...]    one per GPU
    gpu_lanes(tp=2)  -> [GpuLane gpu0-1, GpuLane gpu2-3]     one per pair

The GPUs are those CUDA_VISIBLE_DEVICES already names, else those `nvidia-smi -L` lists. REGDIAG_TEST_GPUS=N
(a test hook) says N GPUs without asking: a CPU test lays out N lanes and checks their pinning (nothing
runs on a GPU there).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from regdiag.errors import BadInput
from regdiag.hosts.base import CommandResult
from regdiag.hosts.local import LocalHost

TEST_GPUS = "REGDIAG_TEST_GPUS"


def gpu_ids() -> list[str]:
    """The GPUs a launch here may be pinned to: CUDA_VISIBLE_DEVICES's list when it is set, else the
    indexes `nvidia-smi -L` lists (none without it); REGDIAG_TEST_GPUS=N: 0..N-1."""
    fake = os.environ.get(TEST_GPUS)
    if fake:
        try:
            return [str(i) for i in range(int(fake))]
        except ValueError:
            raise BadInput(f"{TEST_GPUS}={fake!r}: give a number of GPUs") from None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        return [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    try:
        res = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, ln in enumerate(ln for ln in res.stdout.splitlines() if ln.startswith("GPU "))]


class GpuLane(LocalHost):
    """This machine, every command pinned to one group of GPUs (CUDA_VISIBLE_DEVICES)."""

    def __init__(self, gpus: Sequence[str], python: str | None = None) -> None:
        super().__init__(python)
        self.gpus = list(gpus)
        self.name = "gpu" + "-".join([self.gpus[0], self.gpus[-1]] if len(self.gpus) > 1 else self.gpus)

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, **kw: Any) -> CommandResult:  # type: ignore[override]
        return super().run(argv, env={**(env or {}), "CUDA_VISIBLE_DEVICES": ",".join(self.gpus)}, **kw)

    def placement(self) -> dict[str, Any]:
        return {"lane": self.name, "gpus": ",".join(self.gpus)}


def gpu_lanes(tp: int, python: str | None = None) -> list[GpuLane]:
    """This machine's GPUs in groups of `tp` (the GPUs one launch uses), one lane each; BadInput in one
    line where there is no GPU, or fewer than one launch needs."""
    ids = gpu_ids()
    if not ids:
        raise BadInput(
            "--lanes gpu: no GPU here (nvidia-smi -L lists none); leave --lanes out to measure on this machine"
        )
    tp = max(1, tp)
    if len(ids) < tp:
        raise BadInput(
            f"--lanes gpu: a launch needs {tp} GPUs (the probe's --tp) and this machine has {len(ids)}"
        )
    return [GpuLane(ids[i : i + tp], python) for i in range(0, len(ids) - tp + 1, tp)]
