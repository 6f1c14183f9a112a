"""The probe's hang watch (probes/_supervisor.py) on real processes: before its first progress line a
rank that still uses CPU (interpreter start, `import torch` on a loaded box) is alive; one that sits
idle is not, and after its first progress line only progress counts (a rank waiting on a GPU sync
spins a core)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def supervisor() -> Iterator[object]:
    sys.path.insert(0, str(ROOT / "probes"))
    try:
        import _supervisor

        yield _supervisor
    finally:
        sys.path.remove(str(ROOT / "probes"))


def _rank(sup, code: str):  # type: ignore[no-untyped-def]
    proc = subprocess.Popen([sys.executable, "-c", code])
    return sup._Rank(0, proc)


def _within(check, seconds: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    """Whether check() comes true within `seconds` (polled; a loaded box starts processes slowly)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.3)
    return False


def test_a_busy_start_is_alive_an_idle_one_and_a_busy_measuring_rank_are_not(supervisor) -> None:
    sup = supervisor
    busy = _rank(sup, "while True: pass")
    idle = _rank(sup, "import time; time.sleep(120)")
    try:
        assert _within(busy.busy_starting)  # it spends CPU: alive
        assert _within(busy.busy_starting)  # and again, each look
        assert _within(lambda: not idle.busy_starting())  # once started, it spends none: not alive
        busy.progressed = True  # measuring: CPU is no sign of life
        assert busy.busy_starting() is False
    finally:
        for rk in (busy, idle):
            rk.proc.kill()
            rk.proc.wait()
    assert sup._cpu_seconds(busy.proc.pid) is None  # gone: nothing read, nothing raised


def test_the_busy_check_tells_our_earlier_launch_from_another_process(supervisor) -> None:
    """A warm launch's busy check (probes/_supervisor.py busy_gpus) counts a process as ours when it
    descends from the warm parent (an earlier launch's rank: parent -> supervisor -> rank), and waits
    while the parent has another child (that launch, still tearing down). Real processes stand in for
    the parent's tree here; NVML itself needs a GPU (tests/test_gpu_tp.py)."""
    sleep = "import time; time.sleep(60)"
    code = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {sleep!r}]); {sleep}"
    child = subprocess.Popen([sys.executable, "-c", code])  # this process -> child -> grandchild
    other = subprocess.Popen([sys.executable, "-c", sleep])
    grandchild = None
    try:
        assert _within(lambda: _child_of(child.pid) is not None)
        grandchild = _child_of(child.pid)
        assert grandchild is not None
        me = os.getpid()
        assert supervisor._descends(grandchild, me) and supervisor._descends(child.pid, me)
        assert not supervisor._descends(grandchild, other.pid)
        assert supervisor._siblings(me)  # a child besides the one asking
        assert supervisor._siblings(child.pid) and not supervisor._siblings(grandchild)
    finally:
        for p in (child, other):
            p.kill()
            p.wait()
        if grandchild is not None:
            os.kill(grandchild, signal.SIGKILL)


def _child_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            kids = f.read().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None
