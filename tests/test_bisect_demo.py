"""`regdiag demo` end to end, as the README runs it: the real tiny CPU probe, real snapshots, compare,
bisect, explain. The culprit it names, if any, must be the one planted; it never names another."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from regdiag import schemas

pytestmark = [pytest.mark.slow, pytest.mark.launch]


def test_demo_diagnoses_the_planted_verify_slowdown(cli) -> None:
    res = cli("demo", "--launches", "2", "--json", timeout=900)
    assert res.returncode in (0, 3), res.stderr
    out = json.loads(res.stdout)
    # its --json is what docs/schemas/demo.schema.json says (one demo run serves both checks)
    schema = json.loads(schemas.path_for("demo").read_text(encoding="utf-8"))
    jsonschema.validate(out, schema, cls=jsonschema.Draft202012Validator)
    assert out["compare"]["schema"].startswith("regdiag.comparison/")
    work = Path(out["workdir"])
    for side in ("good", "bad"):
        run = json.loads(Path(out["runs"][side]).read_text())
        assert run["schema"] == "regdiag.run/1" and len(run["launches"]) == 2
        assert run["snapshot_before"]["groups"]["env"]["fields"]["NCCL_PROTO"]["value"] in ("LL", "Simple")
    assert (work / "bisect.jsonl").exists()
    verify = next(m for m in out["compare"]["metrics"] if m["name"] == "verify")
    assert verify["estimate"]["ratio"] > 1.2  # 20 ms of busy work on a verify of 5-25 ms
    b = out["bisect"]
    names = {f["name"] for c in b["culprits"] for f in c["factors"]}
    assert names <= {"REGDIAG_PROBE_SLOW"}  # never a harmless NCCL variable
    if res.returncode == 0:
        # the phase compare found regressed, or the cycle when compare could not single one out
        assert names == {"REGDIAG_PROBE_SLOW"} and b["metric"] in ("verify", "cycle")
        [c] = b["culprits"]
        assert c["ms"]["verify"] == pytest.approx(20.0, abs=7.0)
    else:
        assert b["verdict"] in ("INCONCLUSIVE", "NOT-REPRODUCED") and b["statement"]
    assert out["explain"]["throughput"]["accept_len"] > 1.0
    assert "regdiag bisect --good" in out["commands"][1]


def test_demo_as_markdown_is_one_page_on_stdout(cli) -> None:
    """--format markdown (a CI job summary): stdout is the page alone, headings and progress go to
    stderr, and the page holds compare's, bisect's and explain's own markdown."""
    res = cli("demo", "--launches", "2", "--format", "markdown", timeout=600)
    assert res.returncode in (0, 3), res.stderr[-2000:]
    page = res.stdout
    assert page.startswith("# regdiag demo\n\n**found:** ")
    heads = [ln for ln in page.splitlines() if ln.startswith("## ")]
    assert heads == ["## compare good bad", "## bisect", "## explain bad", "## each step by hand"]
    assert "### regdiag bisect: " in page and "| metric |" in page  # bisect's and compare's own tables
    assert page.rstrip().endswith("```") and "regdiag bisect --good" in page
    assert "probe spec-decode --preset tiny" in res.stderr and "launch" not in page.split("## compare")[0]
    # two asks for the output are refused in one line
    bad = cli("demo", "--json", "--format", "markdown", timeout=60)
    assert (
        bad.returncode == 2
        and bad.stderr == "regdiag: error: choose one output format (asked for json, markdown)\n"
    )


def test_demo_beside_two_cpu_hogs_names_the_culprit_or_says_the_machine_is_busy(cli) -> None:
    """Two real CPU hogs (busy loops, each in a session of its own, as another user's jobs): the demo
    names the planted culprit, or says that the machine was too busy to answer; either way its last
    line says what the others took of the CPUs."""
    import subprocess
    import sys

    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(2)
    ]
    try:
        res = cli("demo", "--launches", "2", timeout=900, env={"COLUMNS": "400"})
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert res.returncode in (0, 3), res.stderr[-2000:]
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    found = next(ln for ln in lines if ln.startswith("found: "))
    if res.returncode == 0:
        assert "REGDIAG_PROBE_SLOW" in found and "NCCL" not in found
    else:
        assert "others used" in found, found  # never a bare "no culprit"
    assert lines[-1].startswith("the machine was busy: others used "), lines[-3:]
