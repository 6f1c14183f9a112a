"""The host's speed during a launch: a fixed workload timed just before and after the measuring window
and once between cycles, recorded in the footer like the GPU clocks (docs/statistics.md, "The canary").

Eager verify on a GPU is host-bound (the Python and the kernel launches of each layer): a launch 30 %
slower with the same GPU clocks is most often a host that ran slower in that window (another process
on its core, a lower CPU clock, a noisy neighbour's cache or memory traffic). The canary measures that
directly, with work that does not change between launches:

- `py_ms`: a fixed pure-Python loop (some 2 ms on a current core): the interpreter's speed;
- `c_ms`: a fixed C-level loop (sha256 of a fixed 1 MiB buffer): the core's speed without the
  interpreter;
- `launch_us` (CUDA only): the latency of one empty kernel launch (a one-element add, 32 launches and
  one synchronize), what a host-bound eager phase pays per kernel.

Each is the median of three runs. Every rank takes its own; the footer keeps the slowest rank's
(the max over ranks, as the phases are). Standard library only, torch imported when on CUDA.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from typing import Any

PY_N = 40_000  # iterations of the pure-Python loop
C_BYTES = bytes(range(256)) * 4096  # 1 MiB hashed by the C-level loop
LAUNCHES = 32  # empty kernel launches timed together
REPEAT = 3
COLUMNS = ("py_ms", "c_ms", "launch_us")


def _py_loop(n: int) -> int:
    x = 0
    for i in range(n):
        x = (x * 31 + i) % 1_000_003
    return x


def _timed(fn: Any) -> float:
    runs = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


class Canary:
    """Samples of the host's speed at named moments of a launch (`take`), as rows for a gather."""

    def __init__(self, cuda: bool) -> None:
        self.at: list[str] = []
        self.rows: list[list[float]] = []
        self._kernel: Any = None
        if cuda:
            import torch

            x = torch.zeros(1, device="cuda")
            self._kernel = (torch, x)

    def _launch_us(self) -> float:
        if self._kernel is None:
            return 0.0
        torch, x = self._kernel
        torch.cuda.synchronize()

        def run() -> None:
            for _ in range(LAUNCHES):
                x.add_(1.0)
            torch.cuda.synchronize()

        return _timed(run) / LAUNCHES * 1e6

    def take(self, where: str) -> None:
        py = _timed(lambda: _py_loop(PY_N)) * 1e3
        c = _timed(lambda: hashlib.sha256(C_BYTES).digest()) * 1e3
        self.at.append(where)
        self.rows.append([py, c, self._launch_us()])

    def record(self, rows: list[list[float]] | None = None) -> dict[str, Any]:
        """The footer's `canary`: each column's samples in order (`at` names them), from `rows` (the
        gathered, slowest-rank ones) or this rank's own."""
        rows = self.rows if rows is None else rows
        out: dict[str, Any] = {"at": list(self.at), "of": "the slowest rank"}
        for k, name in enumerate(COLUMNS):
            vals = [round(r[k], 4) for r in rows]
            out[name] = vals if self._kernel is not None or name != "launch_us" else None
        return out
