"""Logs compare by what was measured, not by file name: two ingest-log records of one setup, and a log
against a live `probe server` run, compare without --allow-mismatch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, run_cli
from server_helpers import Emulator

LOG = "tests/data/sglang_decode_dot.log"


@pytest.mark.launch
def test_two_logs_of_one_setup_compare_and_keep_their_files_as_provenance(tmp_path: Path) -> None:
    copy = tmp_path / "yesterday.log"
    copy.write_bytes((ROOT / LOG).read_bytes())
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert run_cli("ingest-log", LOG, "-o", str(a)).returncode == 0
    assert run_cli("ingest-log", str(copy), "-o", str(b)).returncode == 0
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    assert ra["probe"]["config"] == rb["probe"]["config"] == {"idle_gap_s": 5.0, "rank": None}
    assert ra["provenance"] == {"files": [str(ROOT / LOG)]} and rb["provenance"] == {"files": [str(copy)]}
    p = run_cli("compare", str(a), str(b), "--json")
    assert p.returncode == 3, p.stderr  # one launch a side: INCONCLUSIVE, not refused (2)
    out = json.loads(p.stdout)
    assert out["verdict"] == "INCONCLUSIVE" and not any("differ" in w for w in out["warnings"])

    # How the log was read is still checked: a different --idle-gap is another measurement.
    c = tmp_path / "c.json"
    assert run_cli("ingest-log", LOG, "--idle-gap", "2", "-o", str(c)).returncode == 0
    p = run_cli("compare", str(a), str(c))
    assert p.returncode == 2 and "probe configs differ: idle_gap_s: 5.0 vs 2.0" in p.stderr


def test_a_log_compares_with_a_live_server_run(tmp_path: Path) -> None:
    log, live = tmp_path / "log.json", tmp_path / "live.json"
    assert run_cli("ingest-log", LOG, "-o", str(log)).returncode == 0
    emu = Emulator()
    try:
        p = run_cli(
            *("probe", "server", "--url", emu.url, "-L", "2", "-R", "3", "--max-tokens", "8"),
            *("--no-snapshot", "--warmup", "0", "-o", str(live)),
        )
    finally:
        emu.stop()
    assert p.returncode == 0, p.stderr
    p = run_cli("compare", str(log), str(live), "--json")
    assert p.returncode in (0, 1, 3), p.stderr  # a verdict, not a refusal
    out = json.loads(p.stdout)
    assert out["primary"] == "itl"
    assert (
        "ingest-log against server: two instruments of one measurement (served-itl), compared on itl "
        "and the config keys both hold; the same subject assumed" in out["notes"]
    )
    names = [m["name"] for m in out["metrics"]]
    assert names[0] == "itl" and "e2e" not in names and "gen_tok_s" not in names
