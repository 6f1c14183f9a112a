"""bisect over env-var factors that really change the speed of a real probe process: one culprit
among harmless ones, two independent culprits, an interaction, a regression that does not
reproduce, a launch that fails (SKIP), and the command line's exits and outputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bisect_helpers import command, write_probe

from regdiag.bisect import Request, run_bisect
from regdiag.report.bisect import to_markdown

pytestmark = pytest.mark.slow

HARMLESS_GOOD = "NCCL_PROTO=LL OMP_NUM_THREADS=2 NCCL_ALGO=Ring"
HARMLESS_BAD = "NCCL_PROTO=Simple OMP_NUM_THREADS=4 NCCL_ALGO=Tree"


def _req(tmp_path: Path, good: str, bad: str, **kw) -> Request:
    probe = write_probe(tmp_path)
    return Request(
        good=good,
        bad=bad,
        command=command(probe),
        journal=str(tmp_path / "journal.jsonl"),
        launches=2,
        max_launches=6,
        **kw,
    )


def _journal(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "journal.jsonl").read_text().splitlines()]


def test_one_culprit_among_harmless_factors_with_ms_per_phase(tmp_path) -> None:
    r = run_bisect(_req(tmp_path, HARMLESS_GOOD, HARMLESS_BAD + " PROBE_EXTRA=verify:4"))
    assert r["verdict"] == "CULPRIT"
    [c] = r["culprits"]
    assert [f["name"] for f in c["factors"]] == ["PROBE_EXTRA"]
    assert c["ms"]["verify"] == pytest.approx(4.0, abs=0.4)
    assert abs(c["ms"]["draft"]) < 0.3 and abs(c["ms"]["extend"]) < 0.3
    assert c["share"] == pytest.approx(1.0, abs=0.1)
    assert abs(r["unexplained_ms"]["cycle"]) < 0.4
    assert r["endpoints"]["good"]["verify"] == pytest.approx(2.0, abs=0.3)
    # 4 factors: endpoints + ceil(log2 4) = 2 chain points + the alone check
    assert r["cost"]["points_measured"] <= 5
    assert r["cost"]["launches_run"] == sum(1 for e in _journal(tmp_path) if e["type"] == "launch")
    md = to_markdown(r)
    assert "| PROBE_EXTRA unset -> 'verify:4' |" in md and "| unexplained rest |" in md


def test_two_independent_culprits_each_with_its_share(tmp_path) -> None:
    good = "A=0 " + HARMLESS_GOOD
    bad = "A=1 PROBE_EXTRA_1=verify:4 PROBE_EXTRA_2=draft:2 " + HARMLESS_BAD
    r = run_bisect(_req(tmp_path, good, bad))
    assert r["verdict"] == "CULPRIT"
    by_name = {c["factors"][0]["name"]: c for c in r["culprits"]}
    assert set(by_name) == {"PROBE_EXTRA_1", "PROBE_EXTRA_2"}
    assert by_name["PROBE_EXTRA_1"]["ms"]["verify"] == pytest.approx(4.0, abs=0.4)
    assert by_name["PROBE_EXTRA_2"]["ms"]["draft"] == pytest.approx(2.0, abs=0.4)
    shares = sorted(c["share"] for c in r["culprits"])
    assert shares[0] == pytest.approx(1 / 3, abs=0.08) and shares[1] == pytest.approx(2 / 3, abs=0.08)
    assert not any(c["interaction"] for c in r["culprits"])


def test_interaction_slow_only_together(tmp_path) -> None:
    together = "PROBE_TOGETHER=FEAT_X,FEAT_Z=verify:4"
    good = f"{together} FEAT_X=0 FEAT_Y=0 FEAT_Z=0 NCCL_PROTO=LL"
    bad = f"{together} FEAT_X=1 FEAT_Y=1 FEAT_Z=1 NCCL_PROTO=Simple"
    r = run_bisect(_req(tmp_path, good, bad))
    assert r["verdict"] == "CULPRIT"
    [c] = r["culprits"]
    assert c["interaction"] is True
    assert sorted(f["name"] for f in c["factors"]) == ["FEAT_X", "FEAT_Z"]
    assert c["alone"] == "GOOD"
    assert c["ms"]["verify"] == pytest.approx(4.0, abs=0.4)
    # each member alone does nothing, the two together all of it
    assert c["interaction_of"] == "interaction: FEAT_Z with FEAT_X"
    assert [m["name"] for m in c["members"]] == ["FEAT_X", "FEAT_Z"]
    assert all(abs(m["share"]) < 0.15 for m in c["members"])
    assert c["together"]["share"] == pytest.approx(1.0, abs=0.15)


def test_a_culprit_that_does_a_third_alone_is_named_with_its_partner(tmp_path) -> None:
    """The held-out case: FEAT_B alone does a third of the effect, FEAT_A alone nothing, the two together
    all of it. FEAT_B, found in the context of FEAT_A, is named with it as one culprit, each member's
    share alone and the group's together given."""
    together = "PROBE_TOGETHER=FEAT_B=verify:2;FEAT_A,FEAT_B=verify:4"
    good = f"{together} FEAT_A=0 FEAT_B=0 NCCL_PROTO=LL NCCL_ALGO=Ring"
    bad = f"{together} FEAT_A=1 FEAT_B=1 NCCL_PROTO=Simple NCCL_ALGO=Tree"
    r = run_bisect(_req(tmp_path, good, bad, metric="verify"))
    assert r["verdict"] == "CULPRIT", r["unresolved"]
    [c] = r["culprits"]
    assert c["interaction"] is True and c["alone"] in ("GOOD", "PARTIAL")
    assert sorted(f["name"] for f in c["factors"]) == ["FEAT_A", "FEAT_B"]
    assert c["interaction_of"] == "interaction: FEAT_B with FEAT_A"
    share = {m["name"]: m["share"] for m in c["members"]}
    assert share["FEAT_B"] == pytest.approx(1 / 3, abs=0.12) and abs(share["FEAT_A"]) < 0.12
    assert c["together"]["share"] == pytest.approx(1.0, abs=0.15)
    assert all(m["ms_ci"] and m["ms_ci"][0] <= m["ms"] <= m["ms_ci"][1] for m in c["members"])
    assert not r["unresolved"]
    assert "interaction: FEAT_B with FEAT_A: FEAT_A alone" in to_markdown(r)
    assert "FEAT_B alone 33%" in r["statement"] or "FEAT_B alone 3" in r["statement"]


def test_regression_that_does_not_reproduce_stops_after_the_endpoints(tmp_path, cli) -> None:
    probe = write_probe(tmp_path)
    res = cli(
        "bisect", "--good", HARMLESS_GOOD, "--bad", HARMLESS_BAD, "--command", command(probe),
        "--launches", "3", "--max-launches", "6", "--journal", str(tmp_path / "journal.jsonl"), "--json",
    )  # fmt: skip
    assert res.returncode == 3, res.stderr
    r = json.loads(res.stdout)
    assert r["verdict"] == "NOT-REPRODUCED" and r["culprits"] == []
    assert "does not reproduce" in r["statement"]
    assert r["cost"]["points_measured"] == 2  # nothing searched past the endpoints
    kinds = [e.get("what") for e in _journal(tmp_path) if e["type"] == "decision"]
    assert kinds == ["endpoints"]


def test_a_point_whose_launch_fails_is_skip_and_reported(tmp_path) -> None:
    # The command exits 125 ("cannot test", git's convention) where B=1 and C=0: the chain point
    # A=1,B=1 is SKIP, the search takes its neighbour and still names the culprit.
    probe = write_probe(tmp_path)
    script = tmp_path / "wrap.sh"
    script.write_text(f'[ "$B" = 1 ] && [ "$C" = 0 ] && exit 125\nexec python {probe}\n')
    req = Request(
        good="A=0 B=0 C=0",
        bad="A=1 B=1 C=1 PROBE_EXTRA=verify:4",
        command=f"sh {script}",
        journal=str(tmp_path / "journal.jsonl"),
        launches=2,
        max_launches=6,
    )
    r = run_bisect(req)
    assert r["verdict"] == "CULPRIT"
    assert [f["name"] for f in r["culprits"][0]["factors"]] == ["PROBE_EXTRA"]
    [skip] = r["skipped"]
    assert skip["point"] == "A=1, B=1" and "125" in skip["reason"]


def test_cli_human_markdown_and_bad_input(tmp_path, cli) -> None:
    probe = write_probe(tmp_path)
    args = ["bisect", "--good", "A=0 NCCL_PROTO=LL", "--bad", "A=1 NCCL_PROTO=Simple PROBE_EXTRA=verify:4",
            "--command", command(probe), "--launches", "2", "--max-launches", "4"]  # fmt: skip
    # wide: at 120 columns a pytest-xdist worker's longer tmp path turns the table into blocks
    res = cli(*args, "--journal", str(tmp_path / "a.jsonl"), env={"COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    # the table has a column per phase, whichever metric (verify, or the cycle on a loaded machine) led
    assert "PROBE_EXTRA unset -> 'verify:4'" in res.stdout and re.search(r"\bverify ms\b", res.stdout), (
        res.stdout
    )
    assert "endpoints: REPRODUCED" in res.stderr  # progress and decisions on stderr
    again = cli(*args, "--journal", str(tmp_path / "a.jsonl"))
    assert again.returncode == 2 and again.stderr.strip().endswith("or give another --journal")
    res = cli("bisect", "--good", "x>=1", "--bad", "A=1", "--command", "true")
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert res.stderr.startswith("regdiag: error: --good: cannot read 'x>=1'")


@pytest.mark.parametrize(
    ("good", "bad", "kw", "needle"),
    [
        ("A=1", "A=1", {"command": "true"}, "do not differ"),
        ("A=1", "A=2", {}, "exactly one of --probe"),
        ("A=1", "A=2", {"command": "true", "launches": 1}, "at least 2"),
        ("commit=abc", "commit=def", {"command": "true"}, "--repo"),
        ("missing.json", "A=2", {"command": "true"}, "no such file"),
        ("A=1", "A=2", {"command": "true", "find_links": "/nonexistent-dir"}, "no such directory"),
    ],
)
def test_bad_input_is_one_line(tmp_path, monkeypatch, good, bad, kw, needle) -> None:
    from regdiag.errors import BadInput

    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput) as e:
        run_bisect(Request(good=good, bad=bad, journal=str(tmp_path / "j.jsonl"), **kw))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_endpoint_that_cannot_run_is_a_clear_error(tmp_path, cli) -> None:
    res = cli("bisect", "--good", "A=0", "--bad", "A=1", "--command", "python -c 'import sys; sys.exit(3)'",
              "--journal", str(tmp_path / "j.jsonl"))  # fmt: skip
    assert res.returncode == 5
    assert "good endpoint cannot be measured: the probe exited with status 3" in res.stderr
    from regdiag.errors import BadInput

    with pytest.raises(BadInput, match="--metric 'nope': the probe reports"):
        run_bisect(_req(tmp_path, "A=0", "A=1", metric="nope"))


def test_a_busy_machine_is_said_never_a_bare_answer(tmp_path, cli) -> None:
    """Beside real CPU hogs (one per CPU, each in a session of its own as another user's job), a
    bisect whose differences cost nothing says what the others took of the CPUs, exit 3 as ever."""
    import os
    import subprocess
    import sys

    probe = write_probe(tmp_path)
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        res = cli(
            "bisect", "--good", HARMLESS_GOOD, "--bad", HARMLESS_BAD, "--command", command(probe),
            "--launches", "2", "--max-launches", "4", "--journal", str(tmp_path / "j.jsonl"), "--json",
        )  # fmt: skip
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert res.returncode == 3, res.stderr
    r = json.loads(res.stdout)
    assert r["verdict"] == "NOT-REPRODUCED"
    assert r["busy"] and re.search(r"others used \d+ % of the \d+ CPUs during \d+ of \d+ launches", r["busy"])
    assert r["statement"].endswith(r["busy"]) and "(--max-launches 8)" in r["statement"]
