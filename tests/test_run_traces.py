"""The profile traces beside a stored run record (`probe spec-decode --profile`:
`<record>.profile-<launch>.json.gz` in $REGDIAG_HOME/runs): `regdiag runs` lists and counts them with
their size, a run that leaves no record leaves no trace, and `regdiag clean` removes a trace whose record
is gone, saying so."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from compare_helpers import launch, run_record

from regdiag.records import save_record
from regdiag.runs import RunWriter, list_runs, orphan_traces, runs_dir, trace_path, traces_of


def _stored(run_id: str, traces: int = 0, size: int = 3000) -> Path:
    record = runs_dir() / f"{run_id}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    save_record(record, run_record([launch({"cycle": [1.0, 1.1]}, index=i) for i in range(2)], run_id=run_id))
    for i in range(traces):
        trace_path(record, i).write_bytes(b"x" * size)
    return record


def _cli(capsys, *args: str) -> tuple[int | None, str]:
    from regdiag.cli import app

    name, *rest = args
    cmd = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    rc = cmd.main(args=rest, standalone_mode=False)
    return rc, capsys.readouterr().out


def test_runs_count_each_records_traces_and_those_whose_record_is_gone(capsys) -> None:
    traced = _stored("20261203-100000-spec-decode-aaaa", traces=1, size=3 << 20)
    plain = _stored("20261203-090000-spec-decode-bbbb")
    orphan = trace_path(runs_dir() / "20261203-080000-spec-decode-cccc.json", 0)
    orphan.write_bytes(b"y" * 2048)
    assert traces_of(traced) == [trace_path(traced, 0)] and traces_of(plain) == []
    assert orphan_traces() == [orphan]
    items = {r["id"]: r for r in list_runs()}
    assert len(items) == 2  # a trace is no run of its own
    assert items[traced.stem]["traces"] == [{"path": str(trace_path(traced, 0)), "bytes": 3 << 20}]
    assert items[plain.stem]["traces"] == []

    _, out = _cli(capsys, "runs", "--json")
    listed = json.loads(out)
    assert listed["orphan_traces"] == [{"path": str(orphan), "bytes": 2048}]
    assert {r["id"]: len(r["traces"]) for r in listed["runs"]} == {traced.stem: 1, plain.stem: 0}
    _, out = _cli(capsys, "runs")
    assert "traces" in out.split() and "1 (3 MiB)" in out
    assert "orphan profile traces: 1 (2 KiB) whose run record is gone (`regdiag clean` removes them)" in out
    _, out = _cli(capsys, "runs", "--format", "csv")
    rows = out.splitlines()
    assert rows[0].endswith(",host,traces")
    assert [r.startswith(traced.stem) for r in rows[1:] if r.endswith(",1 (3 MiB)")] == [True]


def test_clean_removes_a_trace_whose_record_is_gone_and_says_so(capsys) -> None:
    kept = _stored("20261203-100000-spec-decode-aaaa", traces=1)
    gone = _stored("20261203-090000-spec-decode-bbbb", traces=2)
    gone.unlink()  # the user removed the record; its traces stayed behind
    orphans = [trace_path(gone, 0), trace_path(gone, 1)]
    rc, out = _cli(capsys, "clean")
    assert rc in (None, 0)
    for trace in orphans:
        assert not trace.exists()
        assert f"local: removed {trace} (a profile trace whose run record is gone)" in out
    assert trace_path(kept, 0).exists() and kept.exists()
    _, out = _cli(capsys, "clean", "--json")
    assert json.loads(out)["hosts"][0]["orphan_traces"] == []
    trace_path(gone, 0).write_bytes(b"z")
    _, out = _cli(capsys, "clean", "--format", "csv")
    assert out.splitlines()[0] == "host,path,existed,kib,pruned,orphan_traces,traces_kept,error"
    assert out.splitlines()[1].endswith(f",{trace_path(gone, 0)},,")


def test_a_run_that_leaves_no_record_leaves_no_trace() -> None:
    run = run_record([], run_id="20261203-100000-spec-decode-dddd")
    writer = RunWriter(None, run)
    trace = trace_path(writer.path, 0)
    trace.write_bytes(b"x")  # the first launch kept its trace, then the run was refused (busy machine)
    other = trace_path(runs_dir() / "20261203-100000-spec-decode-dddd0.json", 0)  # another record's
    other.write_bytes(b"x")
    writer.discard()
    assert not writer.path.exists() and not trace.exists() and other.exists()
