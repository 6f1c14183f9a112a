"""`regdiag ab` for real: the tiny CPU probe, interleaved A B B A, with a real slowdown on side B.

The slowdown is the probe's test hook REGDIAG_PROBE_SLOW=verify:MS (docs/probes.md): MS of busy work
in every verify, set on side B by its spec like any env-var factor. The probe runs through --command
from this checkout's probes/ so the test measures this tree's probe. The margin is wide (25 %): this
is a shared 2-core machine; the statistics at 2 % are tested by simulation (test_stats_drift.py).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

from regdiag.records import load_record

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "probes" / "spec_decode.py"
SLOW_MS = 60

pytestmark = pytest.mark.skipif(not PROBE.exists(), reason="probe not available")


def _command(cycles: int = 12) -> str:
    return f"{sys.executable} {PROBE} --preset tiny --cycles {cycles}"


@pytest.mark.slow
def test_ab_interleaves_and_finds_the_slow_verify(cli, tmp_path):
    prefix = tmp_path / "ab"
    r = cli(
        "ab", "--a", "", "--b", f"REGDIAG_PROBE_SLOW=verify:{SLOW_MS}", "--command", _command(),
        "--launches", "4", "--margin", "25%", "--no-snapshot", "-o", str(prefix), "--json",
        env={"REGDIAG_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert r.returncode == 1, r.stderr[-2000:]  # REGRESSED
    out = json.loads(r.stdout)
    assert out["verdict"] == "REGRESSED" and out["design"]["kind"] == "interleaved"
    assert out["design"]["pairs"] == 4
    verify = next(m for m in out["metrics"] if m["name"] == "verify")
    assert verify["verdict"] == "REGRESSED" and verify["estimate"]["method"] == "paired"
    a = load_record(Path(f"{prefix}-a.json"), "run")
    b = load_record(Path(f"{prefix}-b.json"), "run")
    # ABBA: A0 B0 B1 A1 A2 B2 B3 A3, each launch knows its place in the run and its pair (4 pairs: a
    # paired t on 3 pairs was INCONCLUSIVE at load 8 for a 60 ms slowdown; 2 pairs have 1 degree of freedom).
    assert [la["order"] for la in a["launches"]] == [0, 3, 4, 7]
    assert [la["order"] for la in b["launches"]] == [1, 2, 5, 6]
    assert [la["pair"] for la in a["launches"]] == [0, 1, 2, 3] == [la["pair"] for la in b["launches"]]
    assert a["design"]["pair_id"] == b["design"]["pair_id"] and a["design"]["side"] == "A"
    assert b["env"] == {"REGDIAG_PROBE_SLOW": f"verify:{SLOW_MS}"} and a["env"] == {}
    assert a["status"] == b["status"] == "complete"
    # -o PREFIX is a copy: each side is in the store too, the same record
    stored = {f.stem: load_record(f, "run") for f in (tmp_path / "home" / "runs").glob("*.json")}
    assert stored == {a["id"]: a, b["id"]: b}
    # The slowdown is where the hook put it, and only on B: a sleep is never shorter than asked, so B's
    # every sample carries it; A's typical cycle does not (its single slowest sample may, on a loaded
    # machine a scheduler stall alone can reach the planted time, so the median speaks for A).
    slow = min(min(la["samples"]["verify"]) for la in b["launches"])
    fast = max(statistics.median(la["samples"]["verify"]) for la in a["launches"])
    assert slow >= SLOW_MS * 0.95 and fast < SLOW_MS / 2
    # compare re-reads the two records and still sees the design.
    r2 = cli("compare", f"{prefix}-a.json", f"{prefix}-b.json", "--margin", "25%")
    assert r2.returncode == 1, r2.stderr
    assert "design: interleaved" in r2.stdout and "paired t" in r2.stdout


@pytest.mark.launch
def test_ab_bad_input_is_one_line(cli, tmp_path):
    home = {"REGDIAG_HOME": str(tmp_path / "home")}
    r = cli("ab", "--a", "", "--b", "X=1", "--command", _command(), "--launches", "1", env=home)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = cli("ab", "--a", "", "--b", "commit=HEAD", "--command", _command(), env=home)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("regdiag: error: commit= is given for one side only")
    r = cli("ab", "--a", "", "--b", "X=1", "--command", _command(), "extra", env=home)
    assert r.returncode == 2 and "need --probe" in r.stderr


def test_ab_probe_usage_error_leaves_no_record(cli, tmp_path):
    prefix = tmp_path / "bad"
    r = cli(
        "ab", "--a", "", "--b", "X=1", "--probe", "spec-decode", "--no-snapshot", "-o", str(prefix),
        "--", "--preset", "no-such-preset",
        env={"REGDIAG_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("regdiag: error:")
    assert not Path(f"{prefix}-a.json").exists() and not Path(f"{prefix}-b.json").exists()


def test_ab_refuses_a_gpu_clock_factor_here_in_one_line(cli, tmp_path):
    # The sides' differences are factors of bisect's kinds, asked as the lab asks them: without NVML the
    # clock kind refuses before anything runs (never measures the same clocks twice under two names).
    r = cli(
        "ab", "--a", "gpu0.sm_lock=1980", "--b", "gpu0.sm_lock=1410", "--command", _command(),
        env={"REGDIAG_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("regdiag: error: GPU clock factors") and "Traceback" not in r.stderr


@pytest.mark.slow
def test_ab_names_a_difference_of_any_variable_in_both_records_and_compare(cli, tmp_path):
    prefix = tmp_path / "ab"
    r = cli(
        "ab", "--a", "-CUBLAS_WORKSPACE_CONFIG", "--b", "CUBLAS_WORKSPACE_CONFIG=:16:8", "--command",
        _command(cycles=3), "--launches", "2", "--margin", "25%", "-o", str(prefix),
        env={"REGDIAG_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert r.returncode in (0, 1, 3), r.stderr[-2000:]
    assert "environments identical" not in r.stdout
    assert "CUBLAS_WORKSPACE_CONFIG" in r.stdout
    for side in ("a", "b"):
        d = load_record(Path(f"{prefix}-{side}.json"), "run")["design"]["differences"]
        assert [(x["kind"], x["name"]) for x in d] == [("env", "CUBLAS_WORKSPACE_CONFIG")]
    r2 = cli("compare", f"{prefix}-a.json", f"{prefix}-b.json", "--margin", "25%")
    assert "spec.CUBLAS_WORKSPACE_CONFIG" in r2.stdout and "environments identical" not in r2.stdout
