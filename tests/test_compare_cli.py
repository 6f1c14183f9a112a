"""`regdiag compare` and `regdiag baseline` as users run them: real files, a real subprocess, exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from compare_helpers import simulate_spec_run, snapshot, write

from regdiag.cli import main


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """In-process CLI (fast); the subprocess test below covers the real entry point."""
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


@pytest.fixture
def seeds(tmp_path: Path) -> tuple[Path, Path]:
    old = write(tmp_path / "old.json", simulate_spec_run(11, verify=15.0, sm_mhz=1980))
    new = write(tmp_path / "new.json", simulate_spec_run(12, verify=25.0, sm_mhz=1980))
    return old, new


def test_regression_exits_1_with_the_verdict_first(cli, seeds):
    old, new = seeds
    r = cli("compare", str(old), str(new))
    assert r.returncode == 1, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.strip().startswith("REGRESSED") and "cycle +5" in first
    assert "Nearly all of the change is in verify" in r.stdout
    assert "tok/s" in r.stdout and r.stderr == ""
    # one screen (a few more lines where a loaded machine adds a drift note to the verdict)
    assert len(r.stdout.splitlines()) <= 40


def test_exit_codes_improved_and_inconclusive(capsys, tmp_path, seeds):
    old, new = seeds
    code, out, _ = _main(capsys, "compare", str(new), str(old))
    assert code == 0 and out.lstrip().startswith("IMPROVED")
    one_a = write(tmp_path / "a1.json", simulate_spec_run(1, launches=1))
    one_b = write(tmp_path / "b1.json", simulate_spec_run(2, launches=1))
    code, out, _ = _main(capsys, "compare", str(one_a), str(one_b))
    assert code == 3 and out.lstrip().startswith("INCONCLUSIVE")


def test_json_is_the_only_stdout(capsys, seeds):
    old, new = seeds
    code, out, _ = _main(capsys, "compare", str(old), str(new), "--json")
    d = json.loads(out)
    assert code == 1 and d["verdict"] == "REGRESSED" and d["exit_code"] == 1
    assert d["attribution"]["dominant"] == "verify"
    assert d["old"]["clocks"]["sm_mhz"] == 1980


def test_markdown_is_a_table_to_paste(capsys, seeds):
    old, new = seeds
    code, out, _ = _main(capsys, "compare", str(old), str(new), "--markdown", "--margin", "5%")
    assert code == 1
    assert out.startswith("**REGRESSED: cycle +")
    assert "| metric | old | new | change | 95 % CI | p (Holm) | verdict |" in out
    # the attribution's rows: where the change lives (delta, CI, share), no second old/new cycle number
    assert re.search(r"\| \*\*verify\*\* \| \+10\.\d\d \| \[", out)
    assert "margin ±5 %" in out and "old and new: geometric means of the launch medians" in out


def test_html_report_is_self_contained(capsys, tmp_path, seeds):
    old, new = seeds
    report = tmp_path / "out" / "report.html"
    report.parent.mkdir()  # regdiag makes missing directories only inside REGDIAG_HOME
    code, _out, err = _main(capsys, "compare", str(old), str(new), "--html", str(report))
    assert code == 1 and f"wrote {report}" in err
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<svg") == 3
    assert "<script" not in html and "http://" not in html and "https://" not in html and "<link" not in html
    assert "REGRESSED" in html and "SM clock of GPU 0" in html and "<polyline" in html


def test_bad_input_is_one_line_exit_2(cli, capsys, tmp_path, seeds):
    old, _new = seeds
    snap = write(tmp_path / "snap.json", snapshot())
    other = simulate_spec_run(3, config={"preset": "kimi-k2"})
    other_path = write(tmp_path / "other.json", other)
    empty = tmp_path / "empty.json"
    empty.write_text("")
    cases = [
        ((str(snap), str(old)), "is a snapshot record"),
        ((str(old), str(other_path)), "probe configs differ: preset: 'tiny' vs 'kimi-k2'"),
        ((str(old), str(empty)), "file is empty"),
        ((str(old), "no-such-thing"), "no-such-thing: no such file, baseline"),
        ((str(old), str(old), "--margin", "2"), "--margin 2: write 2% or 0.02"),
        ((str(old), str(old), "--method", "magic"), "--method 'magic'"),
    ]
    for i, (args, message) in enumerate(cases):
        if i < 2:  # the real entry point, as a user runs it
            r = cli("compare", *args)
            code, err = r.returncode, r.stderr
        else:
            code, _out, err = _main(capsys, "compare", *args)
        assert code == 2, (args, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("regdiag: error: ") and message in lines[0], err
        assert "Traceback" not in err


def test_allow_mismatch_compares_with_a_warning(capsys, tmp_path, seeds):
    old, _ = seeds
    off = write(
        tmp_path / "off.json",
        simulate_spec_run(4, verify=25.0, config={"preset": "tiny", "verify_graph": "off"}),
    )
    code, out, _ = _main(capsys, "compare", str(old), str(off), "--allow-mismatch")
    assert code == 1
    assert "warning: probe configs differ" in out and "verify_graph" in out


def test_named_baselines_save_list_compare_remove(capsys, seeds):
    old, new = seeds
    code, out, _ = _main(capsys, "baseline", "save", "h200-graph-on", str(old))
    assert code == 0 and "saved baseline h200-graph-on" in out
    code, _, err = _main(capsys, "baseline", "save", "h200-graph-on", str(old))
    assert code == 2 and "exists" in err and "--force" in err
    code, out, _ = _main(capsys, "baseline", "list", "--json")
    items = json.loads(out)["baselines"]
    assert [b["name"] for b in items] == ["h200-graph-on"]
    assert items[0]["launches"] == 8 and items[0]["primary"] == "cycle"
    assert items[0]["primary_median"] == pytest.approx(20, rel=0.05)
    code, out, _ = _main(capsys, "baseline", "list")
    assert "h200-graph-on" in out and "cycle" in out
    code, out, _ = _main(capsys, "compare", "h200-graph-on", str(new), "--json")
    assert code == 1 and json.loads(out)["old"]["label"] == "baseline h200-graph-on"
    code, _, err = _main(capsys, "baseline", "save", "../evil", str(old))
    assert code == 2 and "not valid" in err
    code, out, _ = _main(capsys, "baseline", "rm", "h200-graph-on")
    assert code == 0
    code, _, err = _main(capsys, "compare", "h200-graph-on", str(new))
    assert code == 2 and "no such file, baseline" in err


def test_a_file_wins_over_a_baseline_of_the_same_name(capsys, tmp_path, monkeypatch, seeds):
    old, new = seeds
    _main(capsys, "baseline", "save", "old.json.bak", str(new))  # a baseline whose name looks like a file
    monkeypatch.chdir(tmp_path)
    code, out, _ = _main(capsys, "compare", "old.json", "new.json", "--json")
    assert code == 1 and json.loads(out)["old"]["label"] == "old.json"


def test_every_command_documents_its_defaults(cli):
    for args in (("compare", "--help"), ("explain", "--help"), ("baseline", "save", "--help")):
        r = cli(*args, env={"COLUMNS": "200"})
        assert r.returncode == 0, r.stderr
    r = cli("compare", "--help", env={"COLUMNS": "200"})
    for text in (
        "default 2%",
        "Exit status",
        "0 unchanged or improved, 1 regressed, 2 bad input, 3 inconclusive",
    ):
        assert text in r.stdout
