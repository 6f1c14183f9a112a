"""`regdiag probe spec-decode`, `probe collectives` and `runs` as users run them: real processes, real
gloo ranks on CPU, real files. A crash of one rank, a Ctrl-C and bad input each end in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli
from probe_helpers import ROOT, load_run

pytestmark = pytest.mark.slow

SMALL = ["--preset", "tiny", "--context", "64", "--cycles", "6", "--warmup", "2", "--block", "3"]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> dict:
    home = tmp_path_factory.mktemp("home")
    r = run_cli("probe", "spec-decode", *SMALL, "--tp", "2", "--launches", "2", "--naive-timer",
                env={"REGDIAG_HOME": str(home)})  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    paths = sorted((home / "runs").glob("*.json"))
    assert len(paths) == 1
    return {"home": home, "result": r, "path": paths[0], "run": load_run(paths[0])}


def test_tp2_run_is_recorded_in_the_documented_format(stored):
    run = stored["run"]
    assert run["schema"] == "regdiag.run/1" and run["kind"] == "probe" and run["status"] == "complete"
    assert run["probe"]["name"] == "spec-decode" and run["probe"]["version"] == "1"
    cfg = run["probe"]["config"]
    assert cfg["preset"] == "tiny" and cfg["tp"] == 2 and cfg["context"] == 64 and cfg["layers"] == 4
    assert run["primary"] == "cycle" and run["phases"] == ["draft", "verify", "extend"]
    assert run["units"]["verify"] == "ms" and run["host"]["via"] == "local"
    for key in ("snapshot_before", "snapshot_after"):
        snap = run[key]
        if snap is None:  # a failing snapshot is recorded as a warning, never fatal
            assert any(key.split("_")[1] in w for w in run.get("warnings", []))
        else:
            assert snap["schema"] == "regdiag.snapshot/2"
    assert [la["index"] for la in run["launches"]] == [0, 1]
    for la in run["launches"]:
        assert la["status"] == "ok" and la["error"] is None and la["returncode"] == 0
        assert la["header"]["backend"] == "gloo" and la["header"]["world"] == 2
        assert la["header"]["launch_index"] == la["index"]
        assert la["warmup_dropped"] == 2
        assert {k: len(v) for k, v in la["samples"].items()} == {
            "cycle": 6,
            "draft": 6,
            "verify": 6,
            "extend": 6,
        }
        assert set(la["naive_samples"]) == {"cycle", "draft", "verify", "extend"}
        assert len(la["bare_samples"]["cycle"]) == 6
        assert all(1 <= a <= 3 for a in la["values"]["accept_len"])
        assert la["scalars"]["accept_len_simulated"] is True
        assert isinstance(la["clocks"], list) and "clocks" not in la["footer"]
        # Max over ranks: no phase can exceed its cycle.
        for i, cyc in enumerate(la["samples"]["cycle"]):
            assert all(la["samples"][p][i] <= cyc + 1e-3 for p in run["phases"])


def test_summary_table_names_the_record(stored):
    out = stored["result"].stdout
    for word in (
        "cycle",
        "draft",
        "verify",
        "extend",
        "per-launch medians",
        "SIMULATED",
        str(stored["path"]),
    ):
        assert word in out.replace("\n", ""), word


def test_runs_lists_stored_runs(stored):
    env = {"REGDIAG_HOME": str(stored["home"])}
    r = run_cli("runs", "--json", env=env)
    assert r.returncode == 0, r.stderr
    items = json.loads(r.stdout)["runs"]
    assert len(items) == 1 and items[0]["id"] == stored["run"]["id"]
    assert items[0]["launches"] == 2 and items[0]["ok_launches"] == 2 and items[0]["probe"] == "spec-decode"
    r = run_cli("runs", env=env)
    assert r.returncode == 0 and "spec-decode" in r.stdout and "2/2" in r.stdout


def test_crash_of_one_rank_ends_that_launch_and_keeps_earlier_ones(tmp_path):
    # Baseline mode, so the launch that finishes also shows the one-token decode's structure.
    out = tmp_path / "crash.json"
    r = run_cli("probe", "spec-decode", *SMALL, "--mode", "baseline", "--tp", "2", "--launches", "3",
                "--no-snapshot", "-o", str(out), "--crash-rank", "1", "--crash-at-launch", "1")  # fmt: skip
    assert r.returncode == 5, r.stderr
    # the error is one line; the `[ Ns] probe ...` lines before it are progress (stderr is no terminal)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("[")]
    assert len(lines) == 1 and lines[0].startswith("regdiag: error: launch 1 failed: rank 1")
    run = load_run(out)
    assert run["status"] == "partial"
    assert [la["status"] for la in run["launches"]] == ["ok", "error"]
    assert "rank 1" in run["launches"][1]["error"] and "crashing on purpose" in run["launches"][1]["error"]
    ok = run["launches"][0]
    assert run["phases"] == ["decode"] and set(ok["samples"]) == {"cycle", "decode"}
    assert len(ok["samples"]["cycle"]) == 6 and "accept_len" not in ok["values"]
    assert ok["values"]["experts_decode"] == [2.0] * 6  # one token reads exactly top-k experts per layer
    assert ok["scalars"]["experts_decode_expected"] == 2.0


def test_ctrl_c_keeps_finished_launches(tmp_path):
    out = tmp_path / "int.json"
    env = dict(os.environ, COLUMNS="120")
    cmd = [sys.executable, "-m", "regdiag", "probe", "spec-decode", *SMALL, "--launches", "6", "--no-snapshot",
           "--seed", "4271", "-o", str(out)]  # fmt: skip
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if out.exists() and json.loads(out.read_text())["launches"]:
                break
            time.sleep(0.3)
        else:
            pytest.fail("no launch finished in time")
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("regdiag: error: interrupted")
    run = load_run(out)
    assert run["status"] == "interrupted"
    assert run["launches"][0]["status"] == "ok" and run["launches"][-1]["status"] in ("interrupted", "ok")
    # -o is a copy: the stored run holds the same launches, and the line names both files
    stored = Path(os.environ["REGDIAG_HOME"]) / "runs" / f"{run['id']}.json"
    assert load_run(stored) == run
    assert f"kept in {stored} and {out}" in " ".join(err.split())
    time.sleep(0.5)
    leftovers = [p for p in Path("/proc").glob("[0-9]*") if _cmdline_has(p, "--seed", "4271")]
    assert not leftovers, "probe processes left behind"


def _cmdline_has(proc: Path, *tokens: str) -> bool:
    try:
        parts = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    text = [x.decode(errors="replace") for x in parts]
    return "spec_decode.py" in " ".join(text) and all(t in text for t in tokens)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--preset", "gpt-5"], "'gpt-5'"),
        (["--preset", "tiny", "--tp", "3"], "not divisible"),
        (["--tp", "2", "--tp-slice", "8"], "--tp-slice"),
        (["--preset", "tiny", "--launches", "0"], "--launches"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_leaves_no_record(tmp_path, args, needle):
    home = tmp_path / "h"
    r = run_cli("probe", "spec-decode", *args, env={"REGDIAG_HOME": str(home)})
    assert r.returncode == 2, r.stderr
    # the error is one line; the `[ Ns] probe ...` lines before it are progress (stderr is no terminal)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("[")]
    assert len(lines) == 1 and lines[0].startswith("regdiag: error:") and needle in lines[0]
    assert not list(home.glob("runs/*.json"))


def test_collectives_sweep_records_one_metric_per_size(tmp_path):
    out = tmp_path / "coll.json"
    r = run_cli("probe", "collectives", "--tp", "2", "--sizes", "1K,64K", "--iters", "2", "--reps", "2",
                "--warmup", "1", "--launches", "1", "--no-snapshot", "-o", str(out), "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert [m["metric"] for m in summary["metrics"]] == ["ar_64KiB", "ar_1KiB"]  # primary (largest) first
    run = load_run(out)
    assert run["primary"] == "ar_64KiB" and run["phases"] == [] and run["units"]["ar_1KiB"] == "us"
    la = run["launches"][0]
    assert la["status"] == "ok" and set(la["samples"]) == {"ar_1KiB", "ar_64KiB"}
    assert la["header"]["env"]["NCCL_NVLS_ENABLE"] == "0" and la["header"]["backend"] == "gloo"
    for rep in range(2):
        us = la["samples"]["ar_64KiB"][rep]
        algbw = la["values"]["algbw_64KiB"][rep]
        assert algbw == pytest.approx(65536 / (us * 1e-6) / 1e9, rel=1e-3)
        assert la["values"]["busbw_64KiB"][rep] == pytest.approx(algbw * 2 * (2 - 1) / 2, rel=1e-3)
    assert {row["metric"] for row in la["footer"]["table"]} == {"ar_1KiB", "ar_64KiB"}
