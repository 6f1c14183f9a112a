"""The JSON-lines protocol every probe speaks, and the small helpers both its sides use.

Standard library only: the supervisor imports this without torch. docs/probes.md documents the lines.

stdout: one JSON object per line with a "type" (header, cycle, footer, error, teardown).
stderr: `regdiag-progress {...}` lines (progress, also the supervisor's hang watch), a rank's fatal
problem as one `regdiag-probe-error {...}` line, and free text kept for error messages.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

PROTOCOL = 1
PROGRESS_PREFIX = "regdiag-progress "
RANK_ERROR_PREFIX = "regdiag-probe-error "

# A lent multi-GPU machine requires NVLink multicast off in every process (it can take the host's
# GPUs out of service); set where the user has not set them, and say so in the header.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

# The environment families a probe header reports (regdiag redacts values before they reach a record).
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "NVSHMEM_", "TORCH_SYMM_MEM_")


def apply_env_defaults() -> dict[str, str]:
    """Set the multicast-off variables where unset; return the ones this call set."""
    applied = {}
    for k, v in MULTICAST_OFF.items():
        if k not in os.environ:
            os.environ[k] = v
            applied[k] = v
    return applied


def env_vars(prefixes: tuple[str, ...] = ENV_PREFIXES) -> dict[str, str]:
    """The communication-relevant variables this process sees (regdiag redacts them on receipt)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


def one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def loaded_or_none() -> list[dict[str, str]] | None:
    """The distributions this process has loaded, or None when they cannot be told."""
    try:
        from _loaded import loaded_distributions

        return loaded_distributions()
    except Exception:  # noqa: BLE001 - never fail a measured launch over its bookkeeping
        return None


class UsageError(Exception):
    """Bad arguments or a configuration this probe cannot run; reported with kind 'usage'."""


class Emitter:
    """Writes protocol lines to stdout, one JSON object per line, flushed, thread-safe."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()

    def emit(self, obj: dict[str, Any]) -> None:
        if obj.get("type") == "footer" and "loaded" not in obj:
            # What this process loaded (probes/_loaded.py): a rank's footer says it; the supervisor,
            # which passes it on, adds nothing of its own.
            obj["loaded"] = loaded_or_none()
        line = json.dumps(obj, allow_nan=False, separators=(",", ":"))
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()


def emit_error(message: str, kind: str = "error", rank: int | None = None, **extra: Any) -> None:
    Emitter().emit({"type": "error", "kind": kind, "rank": rank, "message": one_line(message), **extra})


class Progress:
    """Progress lines on stderr: regdiag's progress bar and the supervisor's hang watch read them.

    At most ~10 a second; a new stage or the last step of one always goes out."""

    def __init__(self, min_interval_s: float = 0.1) -> None:
        self.min_interval_s = min_interval_s
        self._last = 0.0
        self._stage = ""

    def __call__(
        self, stage: str, done: int | None = None, total: int | None = None, force: bool = False
    ) -> None:
        now = time.monotonic()
        final = done is not None and total is not None and done >= total
        if not (force or final or stage != self._stage or now - self._last >= self.min_interval_s):
            return
        self._last, self._stage = now, stage
        obj: dict[str, Any] = {"stage": stage}
        if done is not None:
            obj["done"] = done
        if total is not None:
            obj["total"] = total
        sys.stderr.write(PROGRESS_PREFIX + json.dumps(obj, separators=(",", ":")) + "\n")
        sys.stderr.flush()


def rank_error(message: str, kind: str = "error") -> None:
    """How a rank reports a fatal problem: one line on stderr that the supervisor turns into the error line."""
    sys.stderr.write(RANK_ERROR_PREFIX + json.dumps({"kind": kind, "message": one_line(message)}) + "\n")
    sys.stderr.flush()


class ProbeArgParser(argparse.ArgumentParser):
    """argparse that reports errors as one protocol error line (kind 'usage') and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        emit_error(message, "usage")
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


MAX_RANKS = 1024  # --tp
MAX_COUNT = 1_000_000  # cycles, iterations, repetitions
MAX_SECONDS = 7 * 86400.0  # a timeout: up to a week


def check_ranges(a: Any, **ranges: tuple[float, float]) -> None:
    """Each option named (by its dest) within lo..hi inclusive where given, NaN never. Raises UsageError."""

    def num(x: float) -> str:
        return str(int(x)) if x == x and abs(x) < 1e15 and float(x).is_integer() else f"{x:g}"

    for name, (lo, hi) in ranges.items():
        value = getattr(a, name)
        if value is not None and not lo <= value <= hi:
            raise UsageError(f"--{name.replace('_', '-')} {num(value)}: must be within {num(lo)}..{num(hi)}")


def add_common_args(p: argparse.ArgumentParser) -> None:
    """Options every probe takes: the launch index, the hang watch, the busy-GPU check; and the internal
    arguments the supervisor passes to each rank (not for users)."""
    p.add_argument(
        "--launch-index", type=int, default=0, help="which launch of a run this is (set by regdiag)"
    )
    p.add_argument(
        "--hang-timeout",
        type=float,
        default=None,
        help="seconds a rank may go without progress before the launch is ended as hung "
        "(default 180 before measuring, 60 while measuring)",
    )
    p.add_argument(
        "--allow-busy-gpu",
        action="store_true",
        help="run even when other processes hold memory on the GPUs this launch uses",
    )
    p.add_argument("--_rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_world", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_port", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_t0", type=float, default=None, help=argparse.SUPPRESS)


def summary(values: list[float]) -> dict[str, float]:
    """Median and quartiles, stdlib only."""
    if not values:
        return {}
    s = sorted(values)

    def q(p: float) -> float:
        pos = p * (len(s) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    return {"median": q(0.5), "p25": q(0.25), "p75": q(0.75), "min": s[0], "max": s[-1], "n": len(s)}
