"""compare and explain on real runs of the tiny CPU probe: A/A, and A/B with a real slowdown.

The slowdown is real work: the probe's test hook REGDIAG_PROBE_SLOW=verify:MS adds MS of busy work
to the verify phase of every cycle (docs/probes.md). Launches of the two sides are interleaved
(A B A B ..., one `regdiag probe` call per launch, merged into one record per side) because this
is a shared 2-core machine whose load changes from minute to minute: interleaving is what DESIGN
asks of real comparisons too. The margin is wide (25 %) for the same reason; the statistics at 2 %
are tested on simulated data (test_stats.py, bench/bench_stats.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from regdiag.records import load_record, save_record

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "probes" / "spec_decode.py"
SLOW_MS = 60.0
PAIRS = 4

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PROBE.exists(), reason="probe not available"),
]


def _merge(paths: list[Path], out: Path) -> Path:
    """One run record from single-launch runs of the same configuration, launches renumbered."""
    runs = [load_record(p, "run") for p in paths]
    merged = copy.deepcopy(runs[0])
    merged["launches"] = []
    for r in runs:
        for la in r["launches"]:
            la = copy.deepcopy(la)
            la["index"] = len(merged["launches"])
            merged["launches"].append(la)
    save_record(out, merged)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from conftest import run_cli

    d = tmp_path_factory.mktemp("probe-runs")
    made: dict[str, list[Path]] = {"a": [], "b": []}
    for i in range(PAIRS):
        for side, env in (("a", {}), ("b", {"REGDIAG_PROBE_SLOW": f"verify:{SLOW_MS:g}"})):
            path = d / f"{side}{i}.json"
            args = [
                "probe",
                "spec-decode",
                "--preset",
                "tiny",
                "--launches",
                "1",
                "--cycles",
                "30",
                "-o",
                str(path),
            ]
            r = run_cli(*args, *(["--no-snapshot"] if i else []), env=env)
            assert r.returncode == 0, r.stderr[-2000:]
            made[side].append(path)
    return {
        "a": _merge(made["a"], d / "a.json"),
        "b": _merge(made["b"], d / "b.json"),
        "a_even": _merge(made["a"][0::2], d / "a_even.json"),
        "a_odd": _merge(made["a"][1::2], d / "a_odd.json"),
    }


def test_a_a_on_the_tiny_probe_is_not_a_regression(cli, runs):
    r = cli("compare", str(runs["a_even"]), str(runs["a_odd"]), "--margin", "25%", "--json")
    d = json.loads(r.stdout)
    assert r.returncode in (0, 3), r.stderr
    assert d["verdict"] in ("UNCHANGED", "INCONCLUSIVE", "IMPROVED")
    assert [m["name"] for m in d["metrics"]][:4] == ["cycle", "draft", "verify", "extend"]
    assert d["old"]["launches_used"] == PAIRS // 2 and d["new"]["launches_used"] == PAIRS // 2
    assert d["throughput"] is not None  # accept_len / cycle from the probe's simulated accept lengths


def test_a_b_slower_verify_on_the_tiny_probe_is_found_in_verify(cli, runs):
    r = cli("compare", str(runs["a"]), str(runs["b"]), "--margin", "25%", "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr
    assert d["verdict"] == "REGRESSED"
    att = d["attribution"]
    assert att["dominant"] == "verify"
    verify = next(t for t in att["terms"] if t["name"] == "verify")
    assert 0.8 * SLOW_MS < verify["delta"] < 2.0 * SLOW_MS
    assert d["throughput"]["verdict"] == "REGRESSED"
    md = cli("compare", str(runs["a"]), str(runs["b"]), "--margin", "25%", "--markdown")
    assert md.returncode == 1 and md.stdout.startswith("**REGRESSED: cycle +")


def test_explain_on_a_real_tiny_run(cli, runs):
    r = cli("explain", str(runs["a"]), "--decode-ms", "5", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["throughput"]["accept_len"] > 1
    # the run's phases, then the given --decode-ms as a decode row beside them
    assert [p["phase"] for p in d["phases"]] == ["draft", "verify", "extend", "decode"]
    assert d["model"]["name"] == "tiny"
    assert all(p["measured_ms"] and p["bytes"] > 0 for p in d["phases"])
