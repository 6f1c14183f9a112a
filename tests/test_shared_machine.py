"""Shared machines: two regdiag processes on one file, a full disk, and who can read what was written.

Real processes racing on real files: of two writers one wins and the other says so in one line
(exit 2), nothing is lost silently; a write that does not fit names the file and what was kept.
"""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

from regdiag.records import FileLock, RecordError

RUN_A = ROOT / "baselines" / "h200-kimi-tp1-baseline.json"
RUN_B = ROOT / "baselines" / "h200-kimi-tp1-eagle.json"


def _popen(*args: str, env: dict[str, str] | None = None, fsize: int | None = None) -> subprocess.Popen[str]:
    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.Popen(
        [sys.executable, "-m", "regdiag", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        preexec_fn=limit,
    )


def _one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) >= 1 and lines[-1].startswith("regdiag: error: "), stderr
    return lines[-1]


@pytest.mark.cli
def test_two_saves_of_one_baseline_name_never_both_succeed() -> None:
    home = Path(os.environ["REGDIAG_HOME"])
    for trial in range(6):
        name = f"race{trial}"
        a = _popen("baseline", "save", name, str(RUN_A))
        b = _popen("baseline", "save", name, str(RUN_B))
        (_, ea), (_, eb) = a.communicate(timeout=120), b.communicate(timeout=120)
        codes = sorted([a.returncode, b.returncode])
        assert codes == [0, 2], (trial, a.returncode, ea, b.returncode, eb)
        loser = ea if a.returncode else eb
        line = _one_error_line(loser)
        assert "exists" in line or "being written by another regdiag" in line, line
        winner = RUN_A if a.returncode == 0 else RUN_B
        stored = json.loads((home / "baselines" / f"{name}.json").read_text())
        assert stored["baseline"]["source"] == str(winner)
        assert stored["launches"] == json.loads(winner.read_text())["launches"]


def test_a_second_writer_of_a_run_file_is_refused_naming_the_holder(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    with FileLock(out, "this run"):
        r = run_cli(
            "probe", "spec-decode", "--preset", "tiny", "--launches", "1", "--no-snapshot", "-o", str(out)
        )
    line = _one_error_line(r.stderr)
    assert r.returncode == 2 and f"pid {os.getpid()}" in line and str(out) in line
    assert not out.exists()
    # In one process too: a lock is per open file, so a second FileLock on the same file is refused.
    with FileLock(out, "this run"), pytest.raises(RecordError, match="being written"):
        FileLock(out, "this run")
    FileLock(out, "this run").release()  # released on leaving: free again


SLOW_PROBE = (
    "import os, sys, json, time; time.sleep(0.7); t = 10.0 if os.environ['OMP_NUM_THREADS'] == '1' else 5.0; "
    "[print(json.dumps({'type': 'cycle', 'i': i, 't': {'cycle': t}})) for i in range(5)]; "
    "print(json.dumps({'type': 'footer', 'cycles': 5, 'warmup_dropped': 0}))"
)


def _bisect_args(journal: Path) -> list[str]:
    import shlex

    return [
        "bisect", "--good", "OMP_NUM_THREADS=2", "--bad", "OMP_NUM_THREADS=1",
        "--command", f"{sys.executable} -c {shlex.quote(SLOW_PROBE)}", "--launches", "2",
        "--journal", str(journal),
    ]  # fmt: skip


@pytest.mark.launch
def test_a_concurrent_resume_is_refused_and_the_journal_stays_resumable(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    first = _popen(*_bisect_args(journal))
    deadline = time.monotonic() + 60
    while not (journal.exists() and journal.read_text().count("\n") >= 1):
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()
        time.sleep(0.05)
    second = run_cli(*_bisect_args(journal), "--resume")
    line = _one_error_line(second.stderr)
    assert second.returncode == 2 and f"pid {first.pid}" in line, line
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    lines = [json.loads(x) for x in journal.read_text().splitlines()]
    seen = [(ev["point"], ev["index"]) for ev in lines if ev["type"] == "launch"]
    assert len(seen) == len(set(seen)), "a launch was journaled twice"
    again = run_cli(*_bisect_args(journal), "--resume", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["verdict"] == "CULPRIT"


@pytest.mark.cli
def test_a_full_disk_names_the_file_and_keeps_what_was_written(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # A baseline that does not fit: one line naming it, and no half-written baseline left behind.
    p = _popen("baseline", "save", "big", str(RUN_B), env={"REGDIAG_HOME": str(home)}, fsize=16 * 1024)
    _, err = p.communicate(timeout=120)
    line = _one_error_line(err)
    assert (
        p.returncode == 2 and str(home / "baselines" / "big.json") in line and "nothing was written" in line
    )
    assert [x.name for x in (home / "baselines").iterdir() if not x.name.startswith(".")] == []
    # Replacing one that exists: the old version stays whole.
    assert run_cli("baseline", "save", "small", str(RUN_A), env={"REGDIAG_HOME": str(home)}).returncode == 0
    before = (home / "baselines" / "small.json").read_bytes()
    p = _popen(
        "baseline", "save", "small", str(RUN_B), "--force", env={"REGDIAG_HOME": str(home)}, fsize=len(before)
    )
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "previous version is kept" in _one_error_line(err)
    assert (home / "baselines" / "small.json").read_bytes() == before
    # A journal that fills up mid-bisect: every complete line kept, and the line names the journal.
    journal = tmp_path / "j.jsonl"
    p = _popen(*_bisect_args(journal), fsize=1500)
    _, err = p.communicate(timeout=300)
    line = _one_error_line(err)
    assert p.returncode == 2 and str(journal) in line and "kept" in line
    complete = journal.read_text().split("\n")[:-1]
    assert complete and all(json.loads(x)["type"] for x in complete)


def test_files_that_hold_environment_data_are_private_whatever_the_umask(tmp_path: Path) -> None:
    home = tmp_path / "home"
    old = os.umask(0)
    try:
        r = run_cli("baseline", "save", "b", str(RUN_A), env={"REGDIAG_HOME": str(home)})
        # A missing directory is made only inside REGDIAG_HOME (elsewhere -o refuses it).
        s = run_cli(
            "snapshot", "--json", "-o", str(home / "new" / "snap.json"), env={"REGDIAG_HOME": str(home)}
        )
    finally:
        os.umask(old)
    assert r.returncode == 0 and s.returncode == 0, r.stderr + s.stderr
    for p in (home / "baselines" / "b.json", home / "new" / "snap.json", home / "snapshot.key"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    for d in (home, home / "baselines", home / "new", home / "locks"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
