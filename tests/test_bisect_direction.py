"""Bisect judges a metric by its direction: a bandwidth or a rate that drops is the regression."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run_cli

from regdiag import direction
from regdiag.bisect import classify as C
from regdiag.bisect.measure import Launch, run_launch
from regdiag.hosts.local import LocalHost

# A probe whose rate (GB/s, higher is better) halves when SLOWBW=1 and whose cycle does not move.
PROBE = r"""
import json, os, random
rng = random.Random(os.urandom(8))
out = lambda o: print(json.dumps(o), flush=True)
header = {"type": "header", "protocol": 1, "probe": "bw-probe", "version": "1", "primary": "cycle", "phases": []}
declared = os.environ.get("DECLARE", "1") == "1"
out({**header, "units": {"cycle": "ms", "rate": "GB/s"} if declared else {"cycle": "ms"},
     **({"better": {"cycle": "lower", "rate": "higher"}} if declared else {})})
rate = 50.0 if os.environ.get("SLOWBW") == "1" else 100.0
for i in range(8):
    out({"type": "cycle", "i": i, "t": {"cycle": 1.0 * rng.lognormvariate(0, 0.002),
                                        "rate": rate * rng.lognormvariate(0, 0.002)}})
out({"type": "footer", "cycles": 8})
"""


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    p = tmp_path / "bw_probe.py"
    p.write_text(PROBE)
    return p


def test_endpoint_verdict_follows_the_direction() -> None:
    good, bad = [100.0, 100.2, 99.8], [50.0, 50.1, 49.9]
    assert C.regression(good, bad, 0.02, False, better=direction.HIGHER).verdict == C.REPRODUCED
    assert C.regression(good, bad, 0.02, False).verdict == C.NOT_REPRODUCED  # as a time, it got faster
    with pytest.raises(ValueError, match="context"):
        C.regression(good, bad, 0.02, False, better=direction.CONTEXT)


def test_a_launch_keeps_the_declared_direction_through_the_journal(probe: Path) -> None:
    la = run_launch(LocalHost(), [sys.executable, str(probe)], "rate")
    assert la.status == "ok" and la.better == "higher"
    assert Launch.from_dict(json.loads(json.dumps(la.to_dict()))).better == "higher"
    assert run_launch(LocalHost(), [sys.executable, str(probe)], "cycle").better == "lower"
    # a journal line written before launches kept a direction reads back without one
    old = {k: v for k, v in la.to_dict().items() if k != "better"}
    assert Launch.from_dict(old).better is None


def test_bisect_finds_the_variable_that_halves_a_bandwidth(probe: Path, tmp_path: Path) -> None:
    res = run_cli(
        "bisect", "--good", "A=0", "--bad", "A=1 SLOWBW=1", "--command", f"{sys.executable} {probe}",
        "--metric", "rate", "--launches", "3", "--max-launches", "6",
        "--journal", str(tmp_path / "j.jsonl"), "--json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    r = json.loads(res.stdout)
    assert r["verdict"] == "CULPRIT", r
    assert [[f["name"] for f in c["factors"]] for c in r["culprits"]] == [["SLOWBW"]]
