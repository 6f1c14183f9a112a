"""Tensor parallelism on real GPUs (skipped without two): every launch finishes, nothing of ours is left
on a GPU after a run, a SIGTERM or a SIGKILL of regdiag, and a busy GPU is refused by name.

Run on a 2-GPU host: `PYTHONPATH=. python3 -m pytest -q -m gpu tests/test_gpu_tp.py`. GPU occupancy is
read from `nvidia-smi --query-compute-apps`, independently of regdiag's own NVML code.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, run_cli


def _gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(1 for ln in r.stdout.splitlines() if ln.startswith("GPU ")) if r.returncode == 0 else 0


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_gpu_count() < 2, reason="needs two NVIDIA GPUs"),
]

# Kimi-K2's per-rank shapes at TP=2, two full layers: every mechanism (NCCL all-reduce inside CUDA graphs,
# grouped_mm, the draft) in a launch of a few seconds.
KIMI2 = ["--preset", "kimi-k2", "--tp", "2", "--layers", "2", "--cycles", "30", "--warmup", "5"]


def compute_pids() -> set[int]:
    r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    return {int(x) for x in r.stdout.split() if x.strip().isdigit()}


def wait_gpus_free(before: set[int], timeout: float = 20.0) -> set[int]:
    """Compute processes that are new since `before`, once they are gone or the timeout passed."""
    deadline = time.monotonic() + timeout
    while True:
        extra = compute_pids() - before
        if not extra or time.monotonic() > deadline:
            return extra
        time.sleep(0.5)


@pytest.fixture
def idle_gpus() -> Iterator[set[int]]:
    before = compute_pids()
    yield before
    left = wait_gpus_free(before)
    assert not left, f"processes left on the GPUs: {left}"


def _launch_seconds(run: dict) -> float:
    return sum(la["duration_s"] for la in run["launches"])


def test_tp2_spec_decode_finishes_in_about_the_time_of_its_launches(tmp_path, idle_gpus):
    out = tmp_path / "sd.json"
    t0 = time.monotonic()
    r = run_cli(
        "probe", "spec-decode", *KIMI2, "--launches", "2", "--no-snapshot", "-o", str(out), timeout=600
    )
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    run = json.loads(out.read_text())
    assert [la["status"] for la in run["launches"]] == ["ok", "ok"]
    for la in run["launches"]:
        # a warm launch returns at its footer (`detached`) and tears down after; a cold one waits for it
        td = la["teardown"]
        assert td == {"detached": True} or (td["forced"] is False and td["s"] < 10), td
        assert la["header"]["graphs"] == {"draft": True, "verify": True, "extend": True}
        assert la["header"]["backend"] == "nccl" and la["header"]["world"] == 2
        comm = la["footer"]["comm"]["verify"]
        assert 0 < comm["without_ms"] < comm["with_ms"], comm  # NVLink all-reduces cost real time
    assert not run["probe"]["start"].get("forced_teardowns"), run["probe"]["start"]
    # The run is its launches plus start-up: no minutes spent waiting on a teardown.
    assert wall < _launch_seconds(run) + 30, (wall, _launch_seconds(run))


def test_tp2_collectives_finishes(tmp_path, idle_gpus):
    out = tmp_path / "coll.json"
    t0 = time.monotonic()
    r = run_cli("probe", "collectives", "--tp", "2", "--sizes", "1K:4M:8", "--launches", "2", "--no-snapshot",
                "-o", str(out), timeout=300)  # fmt: skip
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    run = json.loads(out.read_text())
    assert all(la["status"] == "ok" for la in run["launches"])
    assert wall < _launch_seconds(run) + 30
    h = run["launches"][0]["header"]
    # The default on CUDA calls NCCL itself, on the library torch loaded: the same version torch reports.
    assert h["api"] == "nccl" and h["nccl"] and h["modes"] == ["eager", "graph"], h


def test_tp2_collectives_both_apis_agree_at_large_messages(tmp_path, idle_gpus):
    """At 64 MiB the call path is noise next to the transfer: NCCL called directly and through
    torch.distributed must land on the same bus bandwidth (within 10 %), eager and in a graph."""
    busbw = {}
    for api in ("nccl", "torch"):
        out = tmp_path / f"{api}.json"
        r = run_cli("probe", "collectives", "--tp", "2", "--sizes", "64M", "--api", api, "--launches", "1",
                    "--no-snapshot", "-o", str(out), timeout=300)  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        la = json.loads(out.read_text())["launches"][0]
        assert la["header"]["api"] == api
        busbw[api] = {row["mode"]: row["busbw_GBps"] for row in la["footer"]["table"]}
    for mode in ("eager", "graph"):
        assert abs(busbw["nccl"][mode] / busbw["torch"][mode] - 1) < 0.10, busbw


def _start(out: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "regdiag", "probe", "spec-decode", *KIMI2, "--cycles", "20000", "--launches", "2",
           "--no-snapshot", "-o", str(out)]  # fmt: skip
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_measuring(before: set[int], timeout: float = 240.0) -> None:
    """Until both ranks hold their GPU (the model is on it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(compute_pids() - before) >= 2:
            time.sleep(3.0)
            return
        time.sleep(0.5)
    pytest.fail("the ranks never appeared on the GPUs")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT])
def test_stopping_regdiag_empties_the_gpus(tmp_path, idle_gpus, sig):
    p = _start(tmp_path / "stop.json")
    try:
        _wait_measuring(idle_gpus)
        t = time.monotonic()
        p.send_signal(sig)
        p.wait(timeout=60)
        left = wait_gpus_free(idle_gpus, 20.0)
        freed_s = time.monotonic() - t
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert not left, f"after {signal.Signals(sig).name}: {left} still on the GPUs"
    assert freed_s < 15, f"GPUs freed only after {freed_s:.1f} s"
    if sig != signal.SIGKILL:
        assert p.returncode == 128 + sig


HOLDER = (
    "import sys, time, torch\n"
    "x = torch.empty(3 * 2**30, dtype=torch.uint8, device='cuda:0')\n"
    "print('holding', flush=True)\n"
    "time.sleep(600)\n"
)


def test_a_busy_gpu_is_refused_by_name(tmp_path, idle_gpus):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        out = tmp_path / "busy.json"
        r = run_cli(
            "probe", "spec-decode", *KIMI2, "--launches", "1", "--no-snapshot", "-o", str(out), timeout=300
        )
        # the `[ Ns] probe ...` lines are progress (stderr is no terminal); the error is one line
        lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("[")]
        assert r.returncode == 5, r.stderr
        assert len(lines) == 1 and f"pid {holder.pid}" in lines[0] and "GiB" in lines[0], lines
        held = float(lines[0].split(" holds ")[1].split(" GiB")[0])
        assert "GPU 0: " in lines[0] and 3.0 <= held < 4.5  # 3 GiB of ours plus the CUDA context
        assert not out.exists()  # nothing measured, nothing left behind
        chk = run_cli("snapshot", "--check", timeout=120)
        assert chk.returncode == 1 and f"pid {holder.pid}" in chk.stdout + chk.stderr
        # The user can still insist.
        ok = run_cli("probe", "spec-decode", *KIMI2, "--cycles", "5", "--launches", "1", "--no-snapshot",
                     "--allow-busy-gpu", "-o", str(out), timeout=300)  # fmt: skip
        assert ok.returncode == 0, ok.stderr[-2000:]
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
