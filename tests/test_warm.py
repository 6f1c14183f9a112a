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


def _interrupt(p: subprocess.Popen[str], sig: int, at_least: int) -> list[psutil.Process]:
    """Wait until regdiag's tree has `at_least` live processes, send `sig`, wait for regdiag to end;
    every process of its tree seen on the way."""
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and len(_live(list(seen.values()))) < at_least:
            seen.update({c.pid: c for c in _tree(p.pid)})
            time.sleep(0.1)
        assert len(_live(list(seen.values()))) >= at_least, _live(list(seen.values()))
        time.sleep(1.0)
        seen.update({c.pid: c for c in _tree(p.pid)})
        p.send_signal(sig)
        p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return list(seen.values())


def _none_left(procs: list[psutil.Process]) -> None:
    end = time.monotonic() + 30
    while _live(procs) and time.monotonic() < end:
        time.sleep(0.2)
    assert not _live(procs), "still running after regdiag ended"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["term", "int", "kill"])
def test_no_process_outlives_an_interrupted_warm_run(tmp_path: Path, sig: int) -> None:
    out = tmp_path / "i.json"
    p = _regdiag("--cycles", "4000", "--launches", "3", "--tp", "2", "-o", str(out))
    # the warm parent, the launch client, the supervisor and its two ranks
    _none_left(_interrupt(p, sig, 5))
    if sig != signal.SIGKILL:
        assert p.returncode == 128 + sig
        run = load_record(out, "run")
        assert run["status"] == "interrupted" and run["launches"][-1]["start"] == "warm"


# A bisect and an A/B run: the probe's hook slows verify by 5 ms in one environment (docs/probes.md).
SLOW = "REGDIAG_PROBE_SLOW=verify:5"
PROBE_ARGS = ["--", "--preset", "tiny", "--context", "64", "--warmup", "2", "--block", "3"]


def _cmd(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "regdiag", *args], cwd=ROOT, text=True,
                            env=dict(os.environ, COLUMNS="120"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip


def _journal_launches(path: Path) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [d for d in lines if d.get("type") == "launch"]


def test_a_bisect_forks_each_points_launches_from_its_own_warm_interpreter(tmp_path: Path) -> None:
    journal = tmp_path / "b.jsonl"
    p = _cmd("bisect", "--good", "NCCL_PROTO=LL", "--bad", f"NCCL_PROTO=Simple {SLOW}", "--probe",
             "spec-decode", "--metric", "verify", "--journal", str(journal), "--json", *PROBE_ARGS,
             "--cycles", "8")  # fmt: skip
    stdout, err = p.communicate(timeout=900)
    assert p.returncode in (0, 3), err  # CULPRIT, or INCONCLUSIVE on a box too loaded to tell
    report = json.loads(stdout)
    if report["verdict"] == "CULPRIT":
        assert "REGDIAG_PROBE_SLOW" in [f["name"] for c in report["culprits"] for f in c["factors"]]
    launches = _journal_launches(journal)
    assert len(launches) >= 6 and {la["start"] for la in launches} == {"warm"}
    assert len({la["point"] for la in launches}) >= 2  # several points, each its own parent
    assert not _live(_tree(p.pid))


def test_an_ab_run_records_warm_launches_per_side_and_cold_on_request(tmp_path: Path) -> None:
    runs = {}
    for how in ("warm", "cold"):
        prefix = tmp_path / how
        cold = ["--cold"] if how == "cold" else []
        p = _cmd("ab", "--a", "", "--b", SLOW, "--probe", "spec-decode", "-L", "2", "--no-snapshot",
                 "-o", str(prefix), *cold, *PROBE_ARGS, "--cycles", "4")  # fmt: skip
        _, err = p.communicate(timeout=600)
        assert p.returncode in (0, 1, 3), err  # a verdict, whichever it is on a loaded box
        runs[how] = {s: load_record(Path(f"{prefix}-{s}.json"), "run") for s in "ab"}
    for side in runs["warm"].values():
        assert side["probe"]["start"]["mode"] == "warm"
        assert [la["start"] for la in side["launches"]] == ["warm", "warm"]
    for side in runs["cold"].values():
        assert side["probe"]["start"] == {"mode": "cold", "why": "--cold"}
        assert [la["start"] for la in side["launches"]] == ["cold", "cold"]


def test_no_process_outlives_a_bisect_stopped_mid_run(tmp_path: Path) -> None:
    journal = tmp_path / "s.jsonl"
    p = _cmd("bisect", "--good", "NCCL_PROTO=LL", "--bad", f"NCCL_PROTO=Simple {SLOW}", "--probe",
             "spec-decode", "--metric", "verify", "--journal", str(journal), *PROBE_ARGS, "--cycles", "4000",
             "--tp", "2")  # fmt: skip
    _none_left(_interrupt(p, signal.SIGTERM, 5))
    assert p.returncode == 128 + signal.SIGTERM


def test_a_gpu_lanes_warm_launch_is_forked_with_its_lanes_gpus(tmp_path: Path) -> None:
    """`bisect --lanes gpu`: each lane has its own warm parent, started pinned; the forked launch sees
    its lane's CUDA_VISIBLE_DEVICES (the header's device.visible), not the parent's or the machine's."""
    from regdiag.hosts.gpu_lanes import GpuLane
    from regdiag.measure.launch import launch
    from regdiag.measure.stream import LaunchStream
    from regdiag.measure.warm import WarmPool

    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    args = ["--preset", "tiny", "--context", "64", "--warmup", "1", "--cycles", "2", "--launch-index", "0"]
    seen = {}
    with WarmPool() as pool:
        for lane in (GpuLane(["0"]), GpuLane(["2", "3"])):
            argv, how = pool.argv("point", lane, "spec_decode.py", args, env=env, cwd=str(ROOT))
            assert how == "warm" and argv is not None, pool.starts
            stream = LaunchStream()
            res = launch(lane, argv, stream, env=env, cwd=str(ROOT), timeout=300, regdiag_code=True)
            assert stream.failure(res, 300) is None, stream.stderr_tail
            seen[lane.name] = stream.header["device"]["visible"]
    assert seen == {"gpu0": "0", "gpu2-3": "2,3"}
