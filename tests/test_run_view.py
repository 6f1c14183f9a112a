"""One definition of which launches count, one reader of snapshot fields, and the schema table:
literal records, and the consumers (compare, explain, runs, baselines) agreeing on one run."""

from __future__ import annotations

import json

import pytest
from compare_helpers import simulate_spec_run, write

from regdiag import baselines, explain, runs
from regdiag.bisect.journal import Journal
from regdiag.compare import compare_runs
from regdiag.errors import BadInput
from regdiag.records import OUTPUT_KINDS, SCHEMAS, RecordError, check_record, schema_id
from regdiag.run_view import RunView, usable
from regdiag.snapshot.fields import value_of


@pytest.mark.parametrize(
    "launch, counts",
    [
        ({"status": "ok", "samples": {"cycle": [1.0]}}, True),
        ({"status": "interrupted", "samples": {"cycle": [1.0, 2.0]}}, True),  # the cycles it finished
        ({"status": "error", "samples": {"cycle": [1.0]}}, False),
        ({"status": "ok", "samples": {"cycle": []}}, False),
        ({"status": "ok", "samples": {}}, False),
        ({"status": "ok"}, False),
    ],
)
def test_usable_on_literal_launches(launch, counts):
    assert usable(launch) is counts


def _mixed_run() -> dict:
    """5 launches: ok, two interrupted with cycles, error with cycles, interrupted before any cycle (an
    "ok" launch without cycles is refused when a record is read: records.check_record)."""
    run = simulate_spec_run(3, launches=5)
    la = run["launches"]
    la[1]["status"] = la[2]["status"] = "interrupted"
    la[3]["status"], la[3]["error"] = "error", "rank 1 died"
    la[4]["status"] = "interrupted"
    la[4]["samples"] = {k: [] for k in la[4]["samples"]}
    return run


def test_compare_explain_runs_and_baselines_count_the_same_launches(tmp_path):
    run = _mixed_run()
    view = RunView.of(run)
    assert [la.index for la in view.usable] == [0, 1, 2]
    c = compare_runs(run, run, allow_mismatch=True)
    assert c.old.launches_used == 3
    assert len(explain.ok_launches(run)) == 3
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()  # a record is written only into a directory that exists (docs/reliability.md)
    write(runs_dir / "r.json", run)
    [item] = runs.list_runs(runs_dir)
    assert (item["launches"], item["ok_launches"]) == (5, 3)
    write(tmp_path / "r.json", run)
    baselines.save("mixed", str(tmp_path / "r.json"))
    [b] = baselines.list_baselines()
    assert b["launches"] == 3


def test_value_of_reads_only_fields_that_were_read():
    snap = {
        "groups": {
            "gpu": {
                "fields": {
                    "gpu0.name": {"status": "ok", "value": "H200"},
                    "gpu0.numa_node": {"status": "unsupported", "value": 3},
                }
            }
        }
    }
    assert value_of(snap, "gpu", "gpu0.name") == "H200"
    assert value_of(snap, "gpu", "gpu0.numa_node") is None
    assert value_of(snap, "host", "hostname") is None and value_of(None, "gpu", "gpu0.name") is None


def test_every_schema_id_comes_from_the_one_table():
    records = {
        "snapshot": "regdiag.snapshot/2",
        "run": "regdiag.run/1",
        "journal": "regdiag.journal/1",
        "bisect-report": "regdiag.bisect-report/1",
        "comparison": "regdiag.comparison/1",
        "explanation": "regdiag.explanation/1",
    }
    # the files regdiag reads back, then every other --json output's kind, at version 1
    outputs = {k: f"regdiag.{k}/1" for k in OUTPUT_KINDS.values() if k not in records}
    assert {k: schema_id(k) for k in SCHEMAS} == {**records, **outputs}
    run = simulate_spec_run(1, launches=2)
    assert compare_runs(run, run).to_dict()["schema"] == schema_id("comparison")
    with pytest.raises(RecordError, match=r"unknown record kind 'journal'"):
        check_record({"schema": "regdiag.journal/1"}, "x.json")  # a journal is not a record file


def test_a_newer_journal_is_refused_with_upgrade_not_as_not_a_journal(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps({"type": "start", "schema": "regdiag.journal/2", "inputs": {}}) + "\n")
    with pytest.raises(BadInput) as e:
        Journal(path, {}, resume=True)
    assert "regdiag.journal/2" in str(e.value) and "upgrade regdiag" in str(e.value)
    path.write_text(json.dumps({"type": "start", "schema": "regdiag.run/1"}) + "\n")
    with pytest.raises(BadInput, match="not a regdiag bisect journal"):
        Journal(path, {}, resume=True)


def test_the_probe_summary_counts_the_launches_compare_counts():
    # Two interrupted launches with cycles count (they measured something); the summary once said 1.
    from regdiag.measure.summary import summarize_run

    run = _mixed_run()
    summary = summarize_run(run)
    assert summary["ok_launches"] == compare_runs(run, run, allow_mismatch=True).old.launches_used == 3
    assert len(next(m for m in summary["metrics"] if m["metric"] == "verify")["launch_medians"]) == 3


def test_the_probe_summary_clock_is_the_clock_while_measuring() -> None:
    """An H200 record (baselines/h200-venv-round/graph.json): the launch's first samples are at the idle
    345 MHz while the model is built; the summary gives the clock inside the footer's measure window."""
    from pathlib import Path

    from regdiag.measure.summary import summarize_run

    path = Path(__file__).resolve().parent.parent / "baselines" / "h200-venv-round" / "graph.json"
    run = json.loads(path.read_text())
    every = [c["sm_mhz"] for la in run["launches"] for c in la["clocks"]]
    assert min(every) == 345 and max(every) == 1980  # what the summary said before: "345–1980 MHz"
    clock = summarize_run(run)["clocks"]
    assert clock["sm_mhz_min"] == clock["sm_mhz_max"] == 1980 and 0 < clock["samples"] < len(every)
