"""Each launch records its host (probes/_hoststat.py) and compare names host contention: real probe
launches of the tiny CPU probe, pinned to one CPU, quiet and beside real busy processes (CPU hogs
pinned to the same CPU at the same priority); a real server started by --launch-cmd; the redaction
scrubber on process names.

Each hog runs in a session of its own, as another user's job would: with the scheduler's autogroups
(sched_autogroup_enabled) a session shares a CPU as one party, however many processes it runs, and
the probe runs in its own session. The hogs are ten, not the two that contend on a quiet machine: on
a shared test machine the "quiet" launches already share their CPU with other work (they ran 36-61 %
of their window on a 2-core machine at load 9), and it takes more than that to stand out from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, run_cli
from server_helpers import free_port, launch_cmd

from regdiag import stats
from regdiag.compare import compare_runs
from regdiag.host_phantom import explain_launches, features, flag_launches, scrub_host

pytestmark = pytest.mark.slow

SMALL = ["--preset", "tiny", "--tp", "1", "--no-snapshot"]
QUIET = ["--cycles", "60", "--launches", "3"]
BESIDE_HOGS = ["--cycles", "30", "--launches", "2"]  # each cycle some 7 x slower there
HOGS = 10
CPU = max(os.sched_getaffinity(0))


def _pinned() -> None:
    """Child setup: the chosen CPU only."""
    os.sched_setaffinity(0, {CPU})


def _hog() -> None:
    """Child setup of a hog: a session of its own, on the chosen CPU."""
    os.setsid()
    os.sched_setaffinity(0, {CPU})


def _probe(out: Path, how: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-m", "regdiag", "probe", "spec-decode", *SMALL, *how, "-o", str(out)],
        capture_output=True, text=True, env=env, timeout=600, preexec_fn=_pinned, cwd=str(ROOT),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Path, dict[str, Any]]]]:
    d = tmp_path_factory.mktemp("host")
    out = {}
    out["quiet"] = (d / "quiet.json", _probe(d / "quiet.json", QUIET))
    # an A/A pair measured interleaved (regdiag ab, identical sides): a sequential pair on a shared
    # machine differs by the drift between them (load 9 at one run's start, 16 at the next's)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-m", "regdiag", "ab", "--a", "", "--b", "", "--probe", "spec-decode", "-L", "4",
         "-o", str(d / "aa"), "--", *SMALL[:-1], "--cycles", "40"],
        capture_output=True, text=True, env=env, timeout=900, preexec_fn=_pinned, cwd=str(ROOT),
    )  # fmt: skip
    assert r.returncode in (0, 3), r.stderr[-2000:]
    for side in ("a", "b"):
        out[f"aa-{side}"] = (d / f"aa-{side}.json", json.loads((d / f"aa-{side}.json").read_text()))
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_hog) for _ in range(HOGS)
    ]
    try:
        out["hogs"] = (d / "hogs.json", _probe(d / "hogs.json", BESIDE_HOGS))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    yield out


def _keys(obj: Any) -> Iterator[str]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _keys(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _keys(v)


def test_each_launch_records_a_plausible_host(runs: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    for name in ("quiet", "hogs"):
        for la in runs[name][1]["launches"]:
            h = la["host"]
            assert h["status"] == "proc", h
            lo, hi = la["footer"]["measure_window_s"]
            # the window is rank 0's measuring (progress stages), the footer's on the probe's clock
            assert 0.5 * (hi - lo) - 0.5 <= h["window_s"] <= 1.5 * (hi - lo) + 1.0, (h["window_s"], lo, hi)
            m = h["measured"]
            assert m["processes"] == 1 and m["affinity"] == str(CPU) and m["ran_on"] == str(CPU)
            cpu_s = m["user_s"] + m["sys_s"]
            assert 0 < cpu_s <= 1.2 * h["window_s"] + 0.2  # one rank on one CPU: at most the window
            assert isinstance(m["ctx_invol"], int) and m["ctx_invol"] >= 0 and m["ctx_vol"] >= 0
            s = h["system"]
            for key in ("busy_pct", "steal_pct", "iowait_pct"):
                assert 0 <= s[key] <= 100, (key, s)
            assert s["load_1m"] >= 0 and s["runnable_max"] >= 1
            o = h["others"]
            assert 0 <= o["pct"] <= 100 and o["their_cpus"] == str(CPU) and 0 <= o["pct_of_their_cpus"] <= 100
            assert all(isinstance(p["name"], str) and p["cpu_s"] >= 0 for p in o["top"])
            assert h["own_cpu_s"] >= 0 and h["cpus_usable"] >= 1
            assert "pid" not in set(_keys(h)), "no pid is recorded"
            assert la["host_flags"] is not None, name
            # the canary: the host's speed before, between and after the cycles (probes/_canary.py)
            can = la["footer"]["canary"]
            assert can["at"] == ["before", "between", "after"] and can["launch_us"] is None  # CPU: no kernel
            assert all(0 < v < 1000 for v in [*can["py_ms"], *can["c_ms"]]) and len(can["py_ms"]) == 3


def test_hogs_are_named_as_host_contention(runs: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    (qp, quiet), (hp, hogs) = runs["quiet"], runs["hogs"]
    # beside the hogs on its CPU the rank gets a small part of it
    share = [features(la)["cpu_share"] for la in hogs["launches"]]
    assert max(share) < 0.5, share
    c = compare_runs(quiet, hogs, old_label="quiet", new_label="hogs")
    seen = [
        (n, la["index"], features(la)) for n, r in (("quiet", quiet), ("hogs", hogs)) for la in r["launches"]
    ]
    text = "\n".join(c.phantom) + f"\n(features: {seen})"
    assert "host contention on hogs" in text or "the hogs side's host" in text, text
    assert any(w in text for w in ("other processes took", "of the time", "context switches")), text
    # ten hogs on one of the machine's CPUs: others took at least that CPU's share in every hogs launch
    hogged = [la["host"]["others"]["pct"] for la in hogs["launches"]]
    if min(hogged) >= 100 / (os.cpu_count() or 1) * 0.5:
        assert f"of the {os.cpu_count()} CPUs during" in text and "answers need a quieter machine" in text, (
            text
        )
    # the CLI: --exclude-flagged leaves the flagged launches out and shows the verdict with them
    r = run_cli("compare", str(qp), str(hp), "--json")
    d = json.loads(r.stdout)
    assert set(d["host"]) == {"flagged", "excluded", "verdict_other"} and not d["host"]["excluded"]
    if d["host"]["flagged"]["new"]:
        assert d["host"]["verdict_other"] is not None
        x = json.loads(run_cli("compare", str(qp), str(hp), "--json", "--exclude-flagged").stdout)
        if d["host"]["verdict_other"].startswith("none"):  # every launch of the hogs flagged: none left
            assert not x["host"]["excluded"] and x["verdict"] == d["verdict"]
            assert any("not left out (--exclude-flagged)" in p for p in x["phantom"])
        else:
            assert x["host"]["excluded"] and x["host"]["verdict_other"] == d["verdict"]
            assert any("flagged launches left out" in p for p in x["phantom"])


def test_a_quiet_pair_is_not_called_a_change(runs: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    a, b = runs["aa-a"][1], runs["aa-b"][1]
    assert all(la["host"]["status"] == "proc" for la in [*a["launches"], *b["launches"]])
    for exclude in (False, True):  # flagged launches kept or left out: still no change
        c = compare_runs(a, b, old_label="a", new_label="b", margin=0.10, exclude_flagged=exclude)
        assert c.verdict in (stats.UNCHANGED, stats.INCONCLUSIVE), (exclude, c.verdict, c.phantom)
        assert c.host["verdict_other"] in (None, stats.UNCHANGED, stats.INCONCLUSIVE) or c.host[
            "verdict_other"
        ].startswith("none"), c.host


def test_server_launch_records_its_host_and_says_no_gpu(tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "server.json"
    r = run_cli(
        "probe",
        "server",
        "--url",
        f"http://127.0.0.1:{port}",
        "--launch-cmd",
        launch_cmd(port, busy_ms=2.0),  # CPU time the window must see (sleeps alone can read 0 ticks)
        "-L",
        "2",
        "-R",
        "4",
        "--max-tokens",
        "32",
        "--no-snapshot",
        "--cold",
        "-o",
        str(out),
        timeout=180,
    )  # fmt: skip  (--cold: a start per launch, each with its own host samples; a shared start's are on its last)
    assert r.returncode == 0, r.stderr[-2000:]
    run = json.loads(out.read_text())
    for la in run["launches"]:
        h = la["host"]
        assert h["status"] == "proc" and h["measured"]["processes"] >= 1, h
        assert h["measured"]["user_s"] + h["measured"]["sys_s"] > 0
        assert h["window_s"] > 0 and "pid" not in set(_keys(h))
        lo, hi = la["clocks_window_s"]  # the load's window, on the launcher's clock
        assert 0 <= lo < hi
        # no NVIDIA driver here: the field says so, and there are no samples
        assert la["clock_sampler"].startswith("no GPU") and la["clocks"] == []
        assert isinstance(la["host_flags"], list)


def test_engine_launch_measures_every_process_of_its_group(tmp_path: Path) -> None:
    from test_engine_probe import FAKE_PHASES, _fake_server

    out = tmp_path / "engine.json"
    r = run_cli("probe", "engine", *_fake_server(free_port()), *FAKE_PHASES, "-L", "1", "-R", "3",
                "--max-tokens", "45", "-o", str(out), timeout=180)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    la = json.loads(out.read_text())["launches"][0]
    h = la["host"]
    # the fake engine and its two worker processes: one process group, each measured
    assert h["status"] == "proc" and h["measured"]["processes"] >= 3, h
    assert la["clock_sampler"].startswith("no GPU") and la["clocks"] == [] and la["clocks_window_s"][1] > 0


def _launch(i: int, verify: float, ctx: int, others: float, window: float = 2.0) -> dict[str, Any]:
    return {
        "index": i,
        "samples": {"verify": [verify] * 5, "cycle": [verify + 1.0] * 5},
        "host": {
            "status": "proc", "window_s": window, "cpus_usable": 8,
            "measured": {"per_process": [{"name": "python3", "user_s": 1.9, "sys_s": 0.05, "ctx_invol": ctx}]},
            "system": {"steal_pct": 0.0, "iowait_pct": 0.0}, "others": {"pct": others, "top": []},
        },
    }  # fmt: skip


def test_an_outlier_launch_is_explained_from_its_record() -> None:
    new = [_launch(0, 10.2, 20, 1.0), _launch(1, 10.3, 22, 2.0), _launch(2, 18.0, 900, 38.0)]
    old = [_launch(0, 10.1, 21, 1.0), _launch(1, 10.2, 19, 1.5), _launch(2, 10.2, 20, 1.0)]
    lines = explain_launches([("old", old), ("new", new)], ["verify", "cycle"], "ms")
    assert len(lines) == 1, lines
    assert lines[0].startswith("launch 2 of new: verify 18 ms vs 10.2; its busiest process had 45x the "), (
        lines
    )
    assert "other processes took 38 % of the CPUs (vs 1 %)" in lines[0]
    assert flag_launches([*old, *new]) and list(flag_launches([*old, *new])) == [5]
    # the same outlier with an unremarkable host: said so
    new[2] = _launch(2, 18.0, 21, 1.0)
    lines = explain_launches([("old", old), ("new", new)], ["verify"], "ms")
    assert lines == ["launch 2 of new: verify 18 ms vs 10.2; nothing recorded about its host or GPU differs "
                     "from the other launches"]  # fmt: skip
    assert flag_launches([*old, *new]) == {}


def test_process_names_go_through_the_scrubber() -> None:
    secret = "ghp_0123456789abcdefghijABCDEFGHIJ0123"
    rec = {"status": "proc", "others": {"top": [{"name": f"tok={secret}", "cpu_s": 1.0, "pct": 5.0}]},
           "measured": {"per_process": [{"name": secret, "user_s": 1.0}]}}  # fmt: skip
    kept = json.dumps(scrub_host(rec))
    assert secret not in kept and "cpu_s" in kept


def test_a_busy_machine_is_said_only_when_enough_launches_were_busy() -> None:
    from regdiag.host_phantom import busy_line

    line = busy_line([71.0, 80.0, 65.0, 10.0, None], 2, "--max-launches 20")
    assert line == (
        "others used 71 % of the 2 CPUs during 3 of 4 launches; answers need a quieter machine or more "
        "launches (--max-launches 20)"
    )
    assert busy_line([30.0, 5.0, 5.0, 5.0], 2, "x") is None  # one busy launch of four
    assert busy_line([None, None], 2, "x") is None and busy_line([], None, "x") is None


def test_the_canary_names_the_host_speed_of_a_slow_launch() -> None:
    """The held-out eager case: verify 13.7 ms in one launch against 10.3 in the others, GPU clocks
    alike and nothing else recorded apart; the canary (probes/_canary.py) ran 31 % slower there."""

    def canary(la: dict[str, Any], py: float) -> dict[str, Any]:
        la["footer"] = {
            "canary": {"at": ["before", "between", "after"], "py_ms": [py] * 3, "c_ms": [1.0] * 3}
        }
        return la

    old = [canary(_launch(i, 10.3, 20, 1.0), 2.0) for i in range(3)]
    new = [canary(_launch(0, 13.7, 20, 1.0), 2.62), *(canary(_launch(i, 10.3, 20, 1.0), 2.0) for i in (1, 2))]
    [line] = explain_launches([("old", old), ("new", new)], ["verify"], "ms")
    want = (
        "launch 0 of new: verify 13.7 ms vs 10.3; the host ran 31 % slower in that window (canary: Python "
        "loop 2.62 ms vs 2; r = 1.00 between the canary and verify over 3 launches)"
    )
    assert line == want
    # the same outlier with the canary unchanged: the host's speed is ruled out, not guessed
    new[0] = canary(_launch(0, 13.7, 20, 1.0), 2.02)
    [line] = explain_launches([("old", old), ("new", new)], ["verify"], "ms")
    same = "nothing recorded about its host or GPU differs from the other launches; the host's speed did not "
    assert same + "change (canary: Python loop 2.02 ms vs 2" in line, line
