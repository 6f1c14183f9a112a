"""Other tools' result files (regdiag/importers/): made by the tools themselves in the test (pyperf,
hyperfine), or real output recorded on an H200 (nccl-tests, baselines/h200x2-collectives/), then
compared as any run is. The nsys importer reads a hand-made fixture (tests/data/README.md says why)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from test_cli_bad_input import one_error_line

from regdiag import importers
from regdiag.errors import BadInput

ROOT = Path(__file__).resolve().parent.parent
NCCL_TESTS = ROOT / "baselines" / "h200x2-collectives" / "nccl-tests.txt"
PROBE_NOMIX = ROOT / "baselines" / "h200x2-collectives" / "coll-nomix.json"
DATA = ROOT / "tests" / "data"
needs_pyperf = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import pyperf"], capture_output=True).returncode != 0,
    reason="pyperf is not installed (pip install pyperf)",
)
needs_hyperfine = pytest.mark.skipif(shutil.which("hyperfine") is None, reason="hyperfine not installed")


def _pyperf(out: Path, stmt: str) -> Path:
    cmd = [sys.executable, "-m", "pyperf", "timeit", "-q", "-p", "4", "-n", "3", "-l", "20", "-o", str(out)]
    subprocess.run([*cmd, stmt], check=True, capture_output=True, timeout=120)
    return out


def _hyperfine(out: Path, *named: tuple[str, str], runs: int = 10) -> Path:
    args = [a for name, cmd in named for a in ("-n", name, cmd)]
    cmd = ["hyperfine", "-N", "--style", "none", "--runs", str(runs), "--export-json", str(out)]
    subprocess.run([*cmd, *args], check=True, capture_output=True, timeout=120)
    return out


def _sections(text: str, *names: str) -> str:
    """The nccl-tests output of the named `=== RUN` sections of the bench script's log, verbatim."""
    parts = re.split(r"^(?==== RUN )", text, flags=re.M)
    return "".join(p for p in parts if p.split(" ", 3)[2:3] and p.split(" ", 3)[2] in names)


@pytest.mark.tool
@needs_pyperf
def test_a_slower_pyperf_benchmark_compares_as_regressed(tmp_path: Path) -> None:
    fast = _pyperf(tmp_path / "fast.json", "sum(range(500))")
    slow = _pyperf(tmp_path / "slow.json", "sum(range(5000))")
    run = importers.load_run(fast)
    assert run["probe"]["name"] == "pyperf" and run["primary"] == "timeit"
    raw = json.loads(fast.read_text())["benchmarks"][0]["runs"]
    processes = [r for r in raw if r.get("values")]  # pyperf's calibration run has no values
    assert len(run["launches"]) == len(processes) == 4
    scale = {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}[run["units"]["timeit"]]
    assert run["launches"][0]["samples"]["timeit"] == pytest.approx(
        [v * scale for v in processes[0]["values"]]
    )
    assert run["better"]["timeit"] == "lower"
    p = run_cli("compare", str(fast), str(slow), "--json")
    assert p.returncode == 1, p.stderr
    out = json.loads(p.stdout)
    assert out["verdict"] == "REGRESSED" and out["metrics"][0]["change"] > 1.0


@pytest.mark.tool
@needs_hyperfine
def test_hyperfine_commands_are_records_picked_by_name(tmp_path: Path) -> None:
    hf = _hyperfine(tmp_path / "hf.json", ("fast", "sleep 0.005"), ("slow", "sleep 0.03"))
    runs = importers.import_text(hf.read_text(), str(hf))
    assert [r["select"] for r in runs] == ["fast", "slow"]
    times = json.loads(hf.read_text())["results"][1]["times"]
    assert [la["samples"]["time"][0] for la in runs[1]["launches"]] == pytest.approx([t * 1e3 for t in times])
    assert runs[1]["units"]["time"] == "ms"
    p = run_cli("compare", f"{hf}#fast", f"{hf}#slow")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "REGRESSED" in p.stdout.splitlines()[0]
    assert run_cli("compare", f"{hf}#slow", f"{hf}#fast").returncode == 0  # IMPROVED
    line = one_error_line(run_cli("compare", str(hf), f"{hf}#fast"))
    assert "holds 2 results ('fast', 'slow'): pick one as" in line
    line = one_error_line(run_cli("compare", f"{hf}#medium", f"{hf}#fast"))
    assert "#medium: no such result; the file holds 'fast', 'slow'" in line


@pytest.mark.tool
@needs_hyperfine
def test_a_failed_hyperfine_run_is_a_failed_launch(tmp_path: Path) -> None:
    hf = tmp_path / "hf.json"
    cmd = ["hyperfine", "-N", "-i", "--style", "none", "--runs", "3", "--export-json", str(hf), "false"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)
    (run,) = importers.import_text(hf.read_text(), str(hf))
    assert {la["status"] for la in run["launches"]} == {"error"}
    assert run["launches"][0]["error"] == "exit code 1"
    assert "no launch" in one_error_line(run_cli("compare", str(hf), str(hf)))


def test_nccl_tests_output_is_named_as_probe_collectives(tmp_path: Path) -> None:
    f = tmp_path / "nccl.txt"
    f.write_text(_sections(NCCL_TESTS.read_text(), "ar-default-eager", "ar-default-graph"))
    run = importers.load_run(f)
    assert run["probe"]["measures"] == "collectives" and run["imported"]["tool_version"] == "2.19.6"
    assert run["probe"]["config"]["tp"] == 2 and run["probe"]["config"]["modes"] == ["eager", "graph"]
    (la,) = run["launches"]
    # The 1 KiB row of ar-default-eager, in-place columns (all-reduce runs in place in the probe):
    row = next(ln for ln in f.read_text().splitlines() if ln.split()[:1] == ["1024"])
    assert la["samples"]["ar_1KiB"] == [
        pytest.approx(float(row.split()[9]) / 1e3)
    ]  # us in the file, ms stored
    assert la["values"]["busbw_1KiB"] == [float(row.split()[11])]
    assert run["primary"] == "ar_256MiB" and "arg_256MiB" in la["samples"]
    assert run["better"]["busbw_1KiB"] == "higher" and run["derived"]["busbw_1KiB"] == "ar_1KiB"


def test_nccl_tests_compares_with_a_probe_collectives_record(tmp_path: Path) -> None:
    f = tmp_path / "nccl.txt"
    f.write_text(_sections(NCCL_TESTS.read_text(), "ar-nomix-eager", "ar-nomix-graph"))
    p = run_cli("compare", str(PROBE_NOMIX), str(f), "--json")
    assert p.returncode == 3, p.stderr  # one nccl-tests launch: no CI, so no verdict, but no refusal
    out = json.loads(p.stdout)
    assert any(n.startswith("collectives against nccl-tests: two instruments") for n in out["notes"])
    assert {r["mode"] for r in out["sizes"]} == {"eager", "graph"} and len(out["sizes"]) == 38


def test_repeated_nccl_tests_runs_are_launches(tmp_path: Path) -> None:
    text = NCCL_TESTS.read_text()
    old, new = tmp_path / "default.txt", tmp_path / "p2p-off.txt"
    old.write_text(_sections(text, "ar-default-eager") * 3)
    new.write_text(_sections(text, "ar-p2p-off-eager") * 3)
    assert len(importers.load_run(old)["launches"]) == 3
    out = json.loads(run_cli("compare", str(old), str(new), "--json").stdout)
    assert out["old"]["launches_used"] == 3 and out["new"]["launches_used"] == 3


def test_nsys_nvtx_summary_is_one_launch_per_file() -> None:
    run = importers.load_run(DATA / "nsys_nvtx_sum_fixture.csv")
    assert run["probe"]["name"] == "nsys" and run["imported"]["report"] == "nvtx_sum"
    (la,) = run["launches"]
    assert la["samples"]["verify"] == [pytest.approx(8.9121)]  # Med (ns) 8912100 in ms
    assert run["units"]["verify"] == "ms" and run["better"]["verify"] == "lower"


@pytest.mark.tool
def test_not_a_record_nor_importable_is_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    line = one_error_line(run_cli("compare", str(junk), str(junk)))
    assert "nor a file regdiag imports: pyperf, hyperfine, nccl-tests" in line
    broken = tmp_path / "broken.json"
    broken.write_text('{"version": "1.0", "benchmarks": [{"runs": [{"values": ["x"]}]}]}')
    assert "not a positive number" in one_error_line(run_cli("compare", str(broken), str(broken)))
    with pytest.raises(BadInput, match="--from 'yaml'"):
        importers.load_run(junk, fmt="yaml")


@pytest.mark.tool
@needs_pyperf
def test_an_imported_file_can_be_a_baseline(tmp_path: Path) -> None:
    fast = _pyperf(tmp_path / "fast.json", "sum(range(500))")
    env = {"REGDIAG_HOME": str(tmp_path / "home")}
    p = run_cli("baseline", "save", "fast", str(fast), env=env)
    assert p.returncode == 0, p.stderr
    p = run_cli("compare", "fast", str(fast), "--json", env=env)
    assert p.returncode in (0, 3) and json.loads(p.stdout)["old"]["probe"] == "pyperf", p.stderr


@pytest.mark.tool
@needs_pyperf
def test_export_writes_pyperf_json_that_pyperf_compares(tmp_path: Path) -> None:
    on, off = (ROOT / "baselines" / f"h200-kimi-slice-eagle-vgraph-{s}.json" for s in ("on-a", "off"))
    a, b = tmp_path / "on.json", tmp_path / "off.json"
    assert run_cli("export", str(on), "--to", "pyperf", "-o", str(a)).returncode == 0
    assert run_cli("export", str(off), "-o", str(b)).returncode == 0
    doc = json.loads(a.read_text())
    verify = next(x for x in doc["benchmarks"] if x["metadata"]["name"] == "verify")
    record = json.loads(on.read_text())
    assert len(verify["runs"]) == len([la for la in record["launches"] if la.get("samples")])
    assert verify["runs"][0]["values"][0] == pytest.approx(
        record["launches"][0]["samples"]["verify"][0] / 1e3
    )
    p = subprocess.run(
        [sys.executable, "-m", "pyperf", "compare_to", str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("| verify") or ln.startswith("verify"))
    assert "slower" in line  # eager verify (graphs off) is slower, as compare says (docs/bench/gpu_probe.md)
    assert "--to 'csv'" in one_error_line(run_cli("export", str(on), "--to", "csv"))
