"""The renderer registry: every entry resolves, commands pick renderers by --format, and the CSV
renderer (one file plus one registry line) gives the numbers the JSON view gives."""

from __future__ import annotations

import csv
import importlib
import io
import json
from pathlib import Path

import pytest
from compare_helpers import simulate_spec_run, write

from regdiag.report import registry
from regdiag.report.registry import Out, formats, render


@pytest.mark.parametrize("entry", sorted(registry.RENDERERS))
def test_every_registry_line_names_a_function(entry):
    module, _, name = registry.RENDERERS[entry].partition(":")
    assert callable(getattr(importlib.import_module(module), name))


def test_each_result_defaults_to_the_terminal_and_has_json():
    whats = {w for w, _ in registry.RENDERERS}
    assert whats == {
        "compare",
        "explain",
        "snapshot",
        "check",
        "diff",
        "bisect",
        "probe",
        "server",
        "ingest",
        "runs",
        "baselines",
        "trust",
        "host-check",
        "clean",
        "demo",
    }
    for w in whats:
        assert formats(w)[0] == "terminal" and "json" in formats(w)


def test_compare_csv_matches_the_json_numbers(cli, tmp_path: Path):
    old = write(tmp_path / "old.json", simulate_spec_run(11, verify=15.0))
    new = write(tmp_path / "new.json", simulate_spec_run(12, verify=25.0))
    r = cli("compare", str(old), str(new), "--format", "csv")
    assert r.returncode == 1 and r.stderr == ""
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    j = json.loads(cli("compare", str(old), str(new), "--format", "json").stdout)
    assert [row["metric"] for row in rows] == [m["name"] for m in j["metrics"]]
    by_name = {row["metric"]: row for row in rows}
    assert by_name["cycle"]["role"] == "primary" and by_name["cycle"]["verdict"] == "REGRESSED"
    assert by_name["verify"]["verdict"] == "REGRESSED" and by_name["draft"]["verdict"] != "REGRESSED"
    for m in j["metrics"]:
        e = m["estimate"]
        assert float(by_name[m["name"]]["ratio"]) == pytest.approx(e["ratio"], rel=1e-12)
        assert float(by_name[m["name"]]["ci_lo"]) == pytest.approx(e["lo"], rel=1e-12)


def test_compare_html_format_is_the_html_file(cli, tmp_path: Path):
    old = write(tmp_path / "old.json", simulate_spec_run(11, verify=15.0))
    new = write(tmp_path / "new.json", simulate_spec_run(12, verify=25.0))
    r = cli("compare", str(old), str(new), "--format", "html", "--html", str(tmp_path / "r.html"))
    assert r.stdout.startswith("<!DOCTYPE html>") and r.stdout == (tmp_path / "r.html").read_text()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--format", "yaml"],
            "--format 'yaml': compare can be shown as terminal, json, markdown, html, csv",
        ),
        (["--json", "--markdown"], "choose one output format (asked for json, markdown)"),
        (["--json", "--format", "csv"], "choose one output format (asked for csv, json)"),
    ],
)
def test_unknown_or_conflicting_formats_are_one_line_exit_2(cli, tmp_path: Path, args, message):
    old = write(tmp_path / "old.json", simulate_spec_run(11))
    r = cli("compare", str(old), str(old), *args)
    assert r.returncode == 2
    assert r.stderr.strip() == f"regdiag: error: {message}"
    # where --json was asked for, stdout holds the error as an object; else nothing
    want = {"schema": "regdiag.error/1", "error": message, "exit_code": 2} if "--json" in args else None
    assert (json.loads(r.stdout) if r.stdout else None) == want


def test_diff_refuses_a_format_it_lacks(cli, tmp_path: Path):
    old = write(tmp_path / "old.json", simulate_spec_run(11))
    r = cli("diff", str(old), str(old), "--format", "csv")
    assert (
        r.returncode == 2
        and r.stderr.strip() == "regdiag: error: --format 'csv': diff can be shown as terminal, json"
    )


def test_probe_summary_csv():
    summary = {
        "metrics": [
            {
                "metric": "cycle",
                "unit": "ms",
                "run": 2.4,
                "n": 20,
                "median": 2.5,
                "p25": 2.4,
                "p75": 2.75,
                "launch_medians": [2.5, 2.25],
            },
            {
                "metric": "tok_s",
                "unit": "",
                "run": 800.0,
                "n": 10,
                "median": 800.0,
                "p25": 790.0,
                "p75": 810.0,
                "launch_medians": [800.0],
            },
        ]
    }
    buf: list[str] = []
    render("probe", "csv", summary, Out(None, write=buf.append))
    assert "".join(buf) == (
        "metric,unit,run,launch_medians,cycles_p25,cycles_p75,cycles\n"
        "cycle,ms,2.4,2.5 2.25,2.4,2.75,20\ntok_s,,800.0,800.0,790.0,810.0,10\n"
    )
