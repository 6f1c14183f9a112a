"""One unit per dimension: a verdict never depends on the unit a side was written in.

The metamorphic property: writing one side's samples in another unit of the same dimension (times
x1000 and "us" for "ms", and so on) leaves the verdict, the interval and the exit code unchanged; so
does reading the same seconds through any importer. Two sides of different dimensions are refused
(exit 2). Files made by the real tools sit on both sides of each unit boundary (1 us, 1 ms, 1 s)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from compare_helpers import launch, run_record
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regdiag import importers, units
from regdiag.compare import compare_runs
from regdiag.errors import BadInput

FACTOR = {"s": 1e-3, "ms": 1.0, "us": 1e3, "ns": 1e6}  # ms -> unit


def _side(medians_ms: list[float], unit: str, phases: bool = True) -> dict[str, Any]:
    """A run whose launches' cycles sit around these medians (ms), written in `unit`."""
    f = FACTOR[unit]
    las = []
    for i, m in enumerate(medians_ms):
        cyc = [m * (1 + 0.002 * k) * f for k in (-2, -1, 0, 1, 2)]
        samples = {"cycle": cyc}
        if phases:
            samples |= {"draft": [c * 0.25 for c in cyc], "verify": [c * 0.75 for c in cyc]}
        las.append(launch(samples, index=i))
    u = {"cycle": unit} | ({"draft": unit, "verify": unit} if phases else {})
    return run_record(las, units=u, phases=["draft", "verify"] if phases else [])


def _key(c: Any) -> tuple[Any, ...]:
    m = c.metric(c.primary)
    e = m.estimate
    return (c.verdict, c.exit_code, round(e.ratio, 9), round(e.lo, 9), round(e.hi, 9))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from([0.0004, 0.0009, 0.002, 0.5, 0.95, 1.05, 20.0, 800.0, 1100.0, 40000.0]),
    change=st.floats(min_value=0.5, max_value=2.0),
    spread=st.lists(st.floats(min_value=0.97, max_value=1.03), min_size=3, max_size=3),
    unit_old=st.sampled_from(sorted(FACTOR)),
    unit_new=st.sampled_from(sorted(FACTOR)),
)
def test_the_verdict_does_not_depend_on_the_unit_of_either_side(
    base: float, change: float, spread: list[float], unit_old: str, unit_new: str
) -> None:
    """Medians straddling 1 us, 1 ms and 1 s (base in ms), each side in any time unit."""
    old = [base * s for s in spread]
    new = [base * change * s for s in reversed(spread)]
    ref = compare_runs(_side(old, "ms"), _side(new, "ms"), host_reading=False)
    other = compare_runs(_side(old, unit_old), _side(new, unit_new), host_reading=False)
    assert _key(other) == _key(ref)
    # the attribution still adds up: one unit for the cycle and its phases
    assert other.attribution is not None and ref.attribution is not None
    assert other.attribution.unit == other.metric("cycle").unit


def test_a_slower_side_in_a_smaller_unit_is_regressed_not_improved() -> None:
    """The bug this guards: 0.92 ms written as 920 us against 1.6 ms read as 920 -> 1.6, IMPROVED."""
    c = compare_runs(_side([0.92, 0.921, 0.919], "us"), _side([1.6, 1.61, 1.59], "ms"), host_reading=False)
    assert c.verdict == "REGRESSED" and c.exit_code == 1
    m = c.metric("cycle")
    assert m.unit == "us" and m.estimate.old_center == pytest.approx(920, rel=0.01)
    assert m.estimate.new_center == pytest.approx(1600, rel=0.01)


def test_different_dimensions_are_refused_naming_both() -> None:
    old = _side([10.0, 10.1, 9.9], "ms", phases=False)
    new = _side([10.0, 10.1, 9.9], "ms", phases=False)
    new["units"]["cycle"] = "tokens"
    with pytest.raises(BadInput, match=r"'cycle' is in 'ms' in OLD and in 'tokens' in NEW"):
        compare_runs(old, new, host_reading=False)
    new["units"]["cycle"] = "GB/s"
    with pytest.raises(BadInput, match="a time against a bandwidth"):
        compare_runs(old, new, host_reading=False)


@pytest.mark.cli
def test_different_dimensions_exit_2_on_the_command_line(tmp_path: Path) -> None:
    old = _side([10.0, 10.1, 9.9], "ms", phases=False)
    new = _side([10.0, 10.1, 9.9], "ms", phases=False)
    new["units"]["cycle"] = "req/s"
    (tmp_path / "a.json").write_text(json.dumps(old))
    (tmp_path / "b.json").write_text(json.dumps(new))
    p = run_cli("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "which do not convert" in p.stderr


def test_canonical_converts_every_series_and_leaves_a_canonical_record_alone() -> None:
    run = _side([1.0, 1.0], "us")
    run["launches"][0]["values"] = {"cycle": [2000.0]}
    run["launches"][0]["scalars"] = {"cycle": 3000.0, "tok_s": 5.0}
    run["launches"][0]["naive_samples"] = {"cycle": [4000.0]}
    run["units"]["tok_s"] = "tok/s"
    c = units.canonical(run)
    la = c["launches"][0]
    assert c["units"]["cycle"] == "ms" and c["units"]["tok_s"] == "tok/s"
    assert la["values"]["cycle"] == [2.0] and la["scalars"] == {"cycle": 3.0, "tok_s": 5.0}
    assert la["naive_samples"]["cycle"] == [4.0]
    assert run["units"]["cycle"] == "us"  # the input is not changed
    assert units.canonical(c) is c


# --- the importers: the same seconds through every reader give one verdict ------------------------


def _pyperf_text(values_s: list[list[float]]) -> str:
    runs = [{"metadata": {"date": "2026-12-01 10:00:00"}, "values": v} for v in values_s]
    bench = {"metadata": {"name": "bench", "unit": "second"}, "runs": runs}
    return json.dumps({"version": "1.0", "metadata": {}, "benchmarks": [bench]})


def _hyperfine_text(times_s: list[float]) -> str:
    return json.dumps({"results": [{"command": "x", "times": times_s, "exit_codes": [0] * len(times_s)}]})


@settings(max_examples=25, deadline=None)
@given(
    base_s=st.sampled_from([8e-7, 1.2e-6, 9e-4, 1.1e-3, 0.95, 1.1]),
    change=st.sampled_from([0.6, 0.97, 1.0, 1.04, 1.5]),
)
def test_pyperf_and_hyperfine_files_give_the_native_verdict(base_s: float, change: float) -> None:
    rng = np.random.default_rng(7)
    old = [[base_s * (1 + 0.003 * x) for x in rng.standard_normal(6)] for _ in range(4)]
    new = [[v * change for v in vs] for vs in old[::-1]]
    native = [
        run_record([launch({"bench": [v * 1e3 for v in vs]}, index=i) for i, vs in enumerate(side)],
                   primary="bench", phases=[], units={"bench": "ms"})
        for side in (old, new)
    ]  # fmt: skip
    ref = compare_runs(*native, host_reading=False)
    pp = [importers.import_text(_pyperf_text(side), "pp.json")[0] for side in (old, new)]
    got = compare_runs(*pp, host_reading=False, allow_mismatch=True)
    assert (got.verdict, got.exit_code) == (ref.verdict, ref.exit_code)
    assert got.metric("bench").estimate.ratio == pytest.approx(ref.metric("bench").estimate.ratio)
    # hyperfine: one sample per launch (each time is one process)
    hf = [importers.import_text(_hyperfine_text([vs[0] for vs in side]), "hf.json")[0] for side in (old, new)]
    flat = [
        run_record([launch({"time": [vs[0] * 1e3]}, index=i) for i, vs in enumerate(side)],
                   primary="time", phases=[], units={"time": "ms"})
        for side in (old, new)
    ]  # fmt: skip
    a, b = compare_runs(*hf, host_reading=False, allow_mismatch=True), compare_runs(*flat, host_reading=False)
    assert (a.verdict, a.exit_code) == (b.verdict, b.exit_code)


def test_an_old_record_with_a_display_unit_is_read_and_converted() -> None:
    """Records imported before 2026-12-01 hold each file's display unit (us here, ms there)."""
    old = run_record([launch({"timeit": [920.0, 921.0]}, index=i) for i in range(3)],
                     primary="timeit", phases=[], units={"timeit": "us"})  # fmt: skip
    new = run_record([launch({"timeit": [1.6, 1.61]}, index=i) for i in range(3)],
                     primary="timeit", phases=[], units={"timeit": "ms"})  # fmt: skip
    c = compare_runs(old, new, host_reading=False)
    assert c.verdict == "REGRESSED" and c.metric("timeit").change == pytest.approx(0.74, abs=0.01)


# --- real tools' files --------------------------------------------------------------------------


def _pyperf(path: Path, seconds: float) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pyperf", "timeit", "-q", "-p", "4", "-n", "8", "-l", "3", "-w", "1",
         "-s", "import time", f"time.sleep({seconds})", "-o", str(path)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return path


@pytest.mark.tool
def test_two_real_pyperf_files_across_the_ms_boundary_regress_with_exit_1(tmp_path: Path) -> None:
    """0.8 ms (pyperf shows us) against 1.2 ms (pyperf shows ms): REGRESSED, exit 1, in one unit."""
    pytest.importorskip("pyperf")
    a, b = _pyperf(tmp_path / "a.json", 0.0008), _pyperf(tmp_path / "b.json", 0.0012)
    p = run_cli("compare", str(a), str(b))
    assert p.returncode == 1, p.stdout + p.stderr
    head = p.stdout.splitlines()[0]
    assert "REGRESSED" in head and " us," in head and " ms" not in head, head
    back = run_cli("compare", str(b), str(a))
    assert back.returncode == 0 and "IMPROVED" in back.stdout.splitlines()[0]


@pytest.mark.tool
@pytest.mark.skipif(shutil.which("hyperfine") is None, reason="hyperfine not installed")
def test_two_real_hyperfine_files_across_the_s_boundary_regress_with_exit_1(tmp_path: Path) -> None:
    """0.95 s (hyperfine's ms) against 1.1 s: REGRESSED, exit 1."""
    files = []
    for name, secs in (("a", 0.95), ("b", 1.1)):
        f = tmp_path / f"{name}.json"
        subprocess.run(
            ["hyperfine", "-N", "--style", "none", "-w", "0", "-r", "3", "--export-json", str(f), f"sleep {secs}"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        files.append(f)
    p = run_cli("compare", *map(str, files), "--json")
    assert p.returncode == 1, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["verdict"] == "REGRESSED" and doc["metrics"][0]["change"] == pytest.approx(0.158, abs=0.03)


@pytest.mark.cli
def test_several_files_a_side_are_pooled_as_launches(tmp_path: Path) -> None:
    """One process per file (a bench run each): alone, one launch a side settles nothing; pooled,
    the three files of each side are three launches, and the slower side is REGRESSED."""
    sides = {}
    for side, base in (("a", 0.100), ("b", 0.130)):
        sides[side] = []
        for k, jitter in enumerate((0.999, 1.0, 1.001)):
            f = tmp_path / f"{side}{k}.json"
            f.write_text(_hyperfine_text([base * jitter]))
            sides[side].append(str(f))
    one = run_cli("compare", sides["a"][0], sides["b"][0])
    assert one.returncode == 3, one.stdout + one.stderr
    args = [x for f in sides["a"] for x in ("--old", f)] + [x for f in sides["b"] for x in ("--new", f)]
    p = run_cli("compare", *args, "--json")
    assert p.returncode == 1, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["verdict"] == "REGRESSED" and doc["old"]["launches_used"] == 3
    nsys = tmp_path / "n.csv"
    nsys.write_text("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Style,Range\n"
                    "100,5,1,5,5,5,5,0,PushPop,verify\n")  # fmt: skip
    bad = run_cli("compare", "--old", sides["a"][0], "--old", str(nsys), "--new", sides["b"][0])
    assert bad.returncode == 2 and "one side pools one measurement" in bad.stderr
