"""A launch cannot hang a run, and nothing outlives regdiag (issue: TP=2 teardown hang, orphaned ranks).

Real processes throughout: two ranks over gloo on CPU, the probe's own test hooks (REGDIAG_PROBE_HANG
really blocks a rank, docs/probes.md), real signals to a real regdiag. The GPU side (NCCL, CUDA graphs,
nvidia-smi's process list) is tests/test_gpu_tp.py, run on a GPU host.
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
from conftest import ROOT, run_cli

from regdiag.records import load_record

SMALL = ["--preset", "tiny", "--context", "64", "--cycles", "6", "--warmup", "2", "--block", "3"]
pytestmark = pytest.mark.slow


def _ours(tag: str) -> list[int]:
    """Pids of live processes whose command line carries our unique --seed tag."""
    pids = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            parts = (p / "cmdline").read_bytes().split(b"\0")
            state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and b"--seed" in parts and tag.encode() in parts:
            pids.append(int(p.name))
    return pids


def _wait_gone(tag: str, timeout: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = _ours(tag)
        if not left:
            return []
        time.sleep(0.2)
    return _ours(tag)


def test_a_hung_rank_ends_the_launch_named_with_its_stack(tmp_path):
    out = tmp_path / "hang.json"
    r = run_cli("probe", "spec-decode", *SMALL, "--tp", "2", "--launches", "2", "--no-snapshot",
                "--hang-timeout", "4", "-o", str(out), env={"REGDIAG_PROBE_HANG": "1@measure"})  # fmt: skip
    assert r.returncode == 5, r.stderr
    # the error is one line; the `[ Ns] probe ...` lines before it are progress (stderr is no terminal)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("[")]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("regdiag: error: launch 0 failed: rank 1 hung in stage measure")
    assert "hang_here (_hooks.py" in lines[0]  # where it was stuck, from its own Python stack
    run = load_record(out, "run")
    la = run["launches"][0]
    assert la["status"] == "error" and la["hang"]["rank"] == 1 and la["hang"]["stage"] == "measure"
    # Every live rank's stack is kept: rank 0 waits in the collective that rank 1 never joined.
    assert "hang_here" in la["hang"]["stacks"]["1"] and "all_reduce" in la["hang"]["stacks"]["0"]


@pytest.mark.parametrize("start", ["cold", "warm"])
def test_a_rank_stuck_in_teardown_does_not_cost_the_measurement(tmp_path, start):
    out = tmp_path / "td.json"
    t0 = time.monotonic()
    r = run_cli("probe", "spec-decode", *SMALL, "--tp", "2", "--launches", "1", "--no-snapshot",
                "--hang-timeout", "3", "-o", str(out), *(["--cold"] if start == "cold" else []),
                env={"REGDIAG_PROBE_HANG": "1@teardown"})  # fmt: skip
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    run = load_record(out, "run")
    la = run["launches"][0]
    assert la["status"] == "ok" and la["samples"]["cycle"] and la["start"] == start
    if start == "cold":
        td = la["teardown"]
    else:  # a warm launch returned at its footer; its parent told how the teardown went after
        assert la["teardown"] == {"detached": True}
        [td] = run["probe"]["start"]["forced_teardowns"]
        assert any("teardown" in w for w in run["warnings"])
        td = {"forced": True, **td}
    assert td["forced"] is True and td["ranks"] == [1] and "hang_here" in td["where"]["1"]
    assert took < 120, f"a stuck teardown held the run for {took:.0f} s"


def test_communication_share_is_measured_per_phase_at_tp2(tmp_path):
    out = tmp_path / "comm.json"
    r = run_cli(
        "probe", "spec-decode", *SMALL, "--tp", "2", "--launches", "2", "--no-snapshot", "-o", str(out)
    )
    assert r.returncode == 0, r.stderr
    run = load_record(out, "run")
    for la in run["launches"]:
        assert set(la["nocomm_samples"]) == {"cycle", "draft", "verify", "extend"}
        assert len(la["nocomm_samples"]["verify"]) == 6  # as many as the measured cycles
        comm = la["footer"]["comm"]
        for ph in ("cycle", "draft", "verify", "extend"):
            c = comm[ph]
            assert c["pairs"] == 2 and c["with_ms"] > 0 and c["without_ms"] > 0
            assert c["share"] == pytest.approx(c["comm_ms"] / c["with_ms"], abs=1e-3)
        # as SGLang issues them: the embedding's all-reduce, 2 per layer (4 layers), the logits'
        # all-gather (2L + 2 in all), each with its size
        table = la["header"]["model"]["collectives"]["verify"]
        assert sum(t["count"] for t in table if t["op"] == "all_reduce") == 9
        assert sum(t["count"] for t in table if t["op"] == "all_gather") == 1
        assert all(t["bytes"] > 0 for t in table)
    # gloo over loopback costs real time: communication is a clear share of verify
    from regdiag.measure.summary import summarize_run

    s = summarize_run(run)
    v = s["comm"]["verify"]
    assert v["share"] > 0.05 and v["launches"] == 2 and v["ci_ms"][0] <= v["comm_ms"] <= v["ci_ms"][1]


def _start(tag: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "regdiag", "probe", "spec-decode", *SMALL, "--cycles", "400", "--launches", "3",
           "--tp", "2", "--no-snapshot", "--seed", tag, "-o", str(out), "--cold", *extra]  # fmt: skip
    return subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, COLUMNS="120"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def _wait_ranks(tag: str, n: int = 3, timeout: float = 120.0) -> None:
    """Until the supervisor and both ranks exist (and have had time to arm their signals)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(_ours(tag)) >= n:
            time.sleep(2.0)
            return
        time.sleep(0.1)
    pytest.fail("the probe's ranks never started")


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_signal_stops_every_process_and_keeps_the_record(tmp_path, sig, code):
    tag = str(7_000_000 + sig)
    out = tmp_path / "sig.json"
    p = _start(tag, out)
    try:
        _wait_ranks(tag)
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == code, err
    assert err.strip().splitlines()[-1].startswith("regdiag: error: ")
    assert "Traceback" not in err
    run = load_record(out, "run")
    assert run["status"] == "interrupted" and run["launches"][-1]["status"] == "interrupted"
    assert not _wait_gone(tag, 10.0), "probe processes outlived regdiag"


def test_kill_9_of_regdiag_leaves_no_probe_behind(tmp_path):
    tag = "7000009"
    p = _start(tag, tmp_path / "k.json")
    try:
        _wait_ranks(tag)
        p.kill()
        p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    left = _wait_gone(tag, 15.0)
    assert not left, f"still running after regdiag was SIGKILLed: {left}"


def test_crash_cause_is_the_rank_that_died_first_not_the_lowest(tmp_path):
    # Rank 1 crashes; rank 0 then fails in its collective. The error must name rank 1, the cause.
    out = tmp_path / "c.json"
    r = run_cli("probe", "spec-decode", *SMALL, "--tp", "2", "--launches", "1", "--no-snapshot", "-o", str(out),
                "--crash-rank", "1")  # fmt: skip
    assert r.returncode == 5, r.stderr
    assert "rank 1" in r.stderr and "crashing on purpose" in r.stderr
    la = load_record(out, "run")["launches"][0]
    assert la["status"] == "error" and la["error"].startswith("rank 1 exited with status 17")


def test_interrupts_are_held_back_while_a_child_starts():
    # regdiag.interrupts.deferred: a signal that lands while a child is being started is raised after
    # the block, so the code that stops the child always has its handle.
    code = (
        "import os, signal, sys\n"
        "from regdiag import interrupts\n"
        "interrupts.install()\n"
        "try:\n"
        "    with interrupts.deferred():\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        print('still inside', flush=True)\n"
        "except KeyboardInterrupt as e:\n"
        "    print('raised after', interrupts.exit_status(e), interrupts.describe(e), flush=True)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.stdout.splitlines() == ["still inside", "raised after 143 terminated (SIGTERM)"], r.stderr


def test_nohup_keeps_sighup_ignored():
    code = (
        "import signal\nfrom regdiag import interrupts\n"
        "signal.signal(signal.SIGHUP, signal.SIG_IGN)\ninterrupts.install()\n"
        "print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "True", r.stderr


def test_record_of_a_hang_is_json_all_the_way(tmp_path):
    # The stacks travel in the error line; the record stays valid JSON that compare can read.
    out = tmp_path / "h.json"
    run_cli("probe", "spec-decode", *SMALL, "--tp", "2", "--launches", "1", "--no-snapshot", "--hang-timeout", "3",
            "-o", str(out), env={"REGDIAG_PROBE_HANG": "0@build"})  # fmt: skip
    data = json.loads(out.read_text())
    assert data["status"] == "failed" and data["launches"][0]["hang"]["stage"] == "build"
