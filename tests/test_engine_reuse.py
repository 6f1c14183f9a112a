"""Launches that share an engine start (regdiag/engine/reuse.py, engine/keeper.py): the hook's windows,
the independence check of shared starts, and `probe engine -L N` / `ab --probe engine` against the fake
served engine (tests/engine_fake), the engine in its own processes as a user's would be."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from server_helpers import free_port
from test_engine_probe import FAKE, FAKE_PHASES

from regdiag.measure.starts import fresh_start, start_check, start_warning

ROOT = Path(__file__).resolve().parent.parent
HOOK = ROOT / "probes" / "_engine_hook"

# The hook in a plain process: a target called in cycles (start to start), the window file moved
# as regdiag moves it, with idle gaps longer than the hook's GAP_S between windows.
WINDOWS = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    import regdiag_phase_timer as t
    t.install(sys.argv[3])
    import winmod

    def say(text):
        with open(sys.argv[4], "w") as f:
            f.write(text)
        time.sleep(0.12)

    for k in range(2):
        if k:
            say(str(k))
        for _ in range(7):
            winmod.verify()
        say(f"{k} end")
        for _ in range(3):  # the request that carries the news: never measured
            winmod.verify()
    """
)


def test_the_hook_writes_each_window_with_its_own_warmup_and_footer(tmp_path):
    (tmp_path / "winmod.py").write_text("def verify():\n    return 1\n")
    out = tmp_path / "out"
    out.mkdir()
    window = tmp_path / "window"
    window.write_text("0")
    cfg = tmp_path / "hook.json"
    cfg.write_text(json.dumps({"phases": [["verify", "winmod:verify"]], "out_dir": str(out), "warmup": 2,
                               "block": 0, "window_file": str(window)}))  # fmt: skip
    r = subprocess.run([sys.executable, "-c", WINDOWS, str(HOOK), str(tmp_path), str(cfg), str(window)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for f in out.iterdir() for x in f.read_text().splitlines()]
    for k in range(2):
        cycles = [c for c in lines if c["type"] == "cycle" and c.get("window") == k]
        # 7 calls start to start: 6 cycles closed, the 7th left open over the gap and dropped
        assert len(cycles) == 6, cycles
        assert [bool(c.get("warmup")) for c in cycles] == [True, True, False, False, False, False]
        footers = [f for f in lines if f["type"] == "footer" and f.get("window") == k]
        assert len(footers) == 1 and footers[0]["patched"] == ["winmod:verify"]
    # the news calls wrote nothing: every cycle line is in window 0 or 1, none after an end
    assert {c.get("window") for c in lines if c["type"] == "cycle"} == {0, 1}


def test_fresh_starts_are_the_first_and_the_third_launch():
    assert [fresh_start(i) for i in range(5)] == [True, False, True, False, False]


def _launches(starts: list[list[float]]) -> list[dict]:
    out = []
    for group in starts:
        for j, x in enumerate(group):
            out.append({"status": "ok", "start": "reused" if j else "fresh", "samples": {"cycle": [x, x]}})
    return out


def test_the_check_flags_starts_that_differ_more_than_launches_of_one_start():
    # launches of one start within 0.1 %, two starts 5 % apart: the spread understates a start's
    check = start_check(_launches([[10.0, 10.01, 9.99, 10.0], [10.5, 10.51, 10.49]]))
    assert check is not None and check["understated"] and check["launches_per_start"] == [4, 3]
    assert "vary less than launches of different starts" in str(start_warning(check))
    # as far apart within a start as between starts: nothing to say
    check = start_check(_launches([[10.0, 10.4, 9.7], [10.2, 9.9, 10.3]]))
    assert check is not None and not check["understated"] and start_warning(check) is None
    # one start, or no launch to spare within a start: no check
    assert start_check(_launches([[10.0, 10.1, 10.2]])) is None
    assert start_check(_launches([[10.0], [10.2]])) is None


def _fake(port: int, env: str = "") -> list[str]:
    cmd = f"{env} PYTHONPATH={FAKE}/site python3 {FAKE}/fake_engine.py --port {port} --workers 2".strip()
    return ["--launch-cmd", cmd, "--url", f"http://127.0.0.1:{port}", "--no-snapshot", *FAKE_PHASES]


@pytest.mark.launch
@pytest.mark.engine
def test_probe_engine_launches_share_a_start_with_a_restart_among_them(cli, tmp_path):
    out = tmp_path / "run.json"
    r = cli("probe", "engine", *_fake(free_port()), "-L", "3", "-R", "2", "--max-tokens", "45",
            "-o", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = json.loads(out.read_text())
    las = run["launches"]
    assert [la["start"] for la in las] == ["fresh", "reused", "fresh"]
    assert [la["engine_start"] for la in las] == [0, 0, 1]
    for la in las:
        # every window is whole and its own: 2 requests x 45 tokens at 3 a cycle, none of the
        # request that tells the engine the window ended; its warm-up dropped again
        n = len(la["samples"]["cycle"]) + len(la["bare_samples"]["cycle"]) + la["warmup_dropped"]
        assert (n, la["warmup_dropped"], la["processes_timed"]) == (30, 2, 2)
        assert isinstance(la["loaded"], list) and la["hook"]["patched"]
    start = run["probe"]["start"]
    assert start["mode"] == "reused" and len(start["starts_s"]) == 2
    assert start["check"]["launches_per_start"] == [2, 1]
    # each start stopped (its last launch says how), nothing left running
    assert las[1]["server_process"]["stopped_by"] == "SIGTERM"
    assert las[2]["server_process"]["stopped_by"] == "SIGTERM"


def _engines(port: int) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [ln for ln in ps.splitlines() if f"--port {port}" in ln and "fake_engine.py" in ln]


@pytest.mark.slow
@pytest.mark.engine
def test_ab_sides_reuse_their_engine_and_a_killed_run_leaves_no_engine(cli, tmp_path):
    port = free_port()
    sides = ["--a", "FAKE_VERIFY_N=2000", "--b", "FAKE_VERIFY_N=20000", "--probe", "engine", "--no-snapshot"]
    args = ["--", *_fake(port), "-R", "1", "--max-tokens", "45"]
    r = cli("ab", *sides, "--launches", "2", "-o", str(tmp_path / "ab"), *args)
    assert r.returncode in (0, 1, 3), r.stderr[-2000:]  # 2 pairs: a verdict or INCONCLUSIVE
    # A B B A, one engine alive at a time: B's second launch reuses B's engine, A's starts again
    a, b = (json.loads((tmp_path / f"ab-{s}.json").read_text()) for s in "ab")
    assert [la["start"] for la in a["launches"]] == ["fresh", "fresh"]
    assert [la["start"] for la in b["launches"]] == ["fresh", "reused"]
    assert b["probe"]["start"]["mode"] == "reused"
    verify = [statistics_median(la["samples"]["verify"]) for la in b["launches"]]
    assert min(verify) > 2 * max(statistics_median(la["samples"]["verify"]) for la in a["launches"])
    assert _engines(port) == []
    # SIGKILL of regdiag while an engine serves: its keeper sees its parent gone and stops the engine
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "regdiag", "ab", *sides, "--launches", "4",
                          "-o", str(tmp_path / "killed"), *args], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    t0 = time.monotonic()
    while not _engines(port) and time.monotonic() - t0 < 60:
        time.sleep(0.2)
    assert _engines(port), "the engine never started"
    p.send_signal(signal.SIGKILL)
    p.wait()
    t0 = time.monotonic()
    while _engines(port) and time.monotonic() - t0 < 30:
        time.sleep(0.3)
    assert _engines(port) == []


def statistics_median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def test_bisect_shares_engine_starts_only_for_a_served_engine():
    from regdiag.bisect.run import Request, argv_builder
    from regdiag.errors import BadInput

    def builder(*args: str):
        return argv_builder(Request(good="X=1", bad="X=2", probe="engine", probe_args=list(args)))

    assert builder("--launch-cmd", "python serve.py", "--url", "http://127.0.0.1:9").reusable
    assert not builder("--launch-cmd", "python gen.py").reusable  # a script: each launch its own start
    for own in ("--cold", "--serve-launches=/tmp/s"):
        with pytest.raises(BadInput, match="the bisect's to set"):
            builder("--launch-cmd", "python serve.py", own)
