"""A bisect journal is a record: `--resume --journal J` alone takes no code from one that this user's
regdiag did not write (its start line's start_hash, keyed with this home's snapshot.key), and refuses
one that another user owns or may write, unless --allow-code-from-record.

Each planted journal is written by the real `regdiag bisect` under another REGDIAG_HOME (another
user's key), cut to its start line, and the marker its code writes removed before the resume."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from bisect_helpers import command, write_probe

pytestmark = [pytest.mark.cli, pytest.mark.launch]


def _planted(cli, tmp_path: Path, marker: Path, *args: str, home: Path | None = None) -> Path:
    """A journal that `regdiag bisect ARGS` wrote under `home` (default: another REGDIAG_HOME), cut to
    its start line; `marker` (written by its code) removed."""
    journal = tmp_path / "j.jsonl"
    other = home or tmp_path / "other-home"
    cli("bisect", *args, "-L", "2", "--max-launches", "2", "--journal", str(journal),
        env={"REGDIAG_HOME": str(other)})  # fmt: skip
    start = journal.read_text().splitlines()[0]
    assert json.loads(start)["type"] == "start"
    journal.write_text(start + "\n")
    marker.unlink(missing_ok=True)
    return journal


def test_a_journals_command_from_another_home_does_not_run(cli, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    planted = f"bash -c 'touch {marker}; exit 1'"
    journal = _planted(cli, tmp_path, marker, "--good", "A=1", "--bad", "A=2", "--command", planted)
    r = cli("bisect", "--resume", "--journal", str(journal))
    assert not marker.exists()
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [
        f"regdiag: error: {journal}: its start line does not match its start_hash (edited, or written under "
        "another REGDIAG_HOME); a journal does not choose code to run: give --command again, or pass "
        "--allow-code-from-record if you trust it"
    ]
    # A start line without start_hash (a journal written before it was kept) is read, and takes no code.
    head = json.loads(journal.read_text())
    del head["start_hash"]
    journal.write_text(json.dumps(head) + "\n")
    r = cli("bisect", "--resume", "--journal", str(journal))
    assert r.returncode == 2 and not marker.exists()
    assert "its start line has no start_hash" in r.stderr and r.stderr.count("\n") == 1
    # What kept the command out is the refusal: trusted, it runs.
    cli("bisect", "--resume", "--journal", str(journal), "--allow-code-from-record")
    assert marker.exists()


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build the preloaded library")
def test_a_journals_side_that_preloads_a_library_is_refused(cli, tmp_path: Path) -> None:
    marker = tmp_path / "preloaded"
    src = tmp_path / "evil.c"
    src.write_text(
        "#include <stdio.h>\n__attribute__((constructor)) static void ran(void) {\n"
        f'  FILE *f = fopen("{marker}", "w"); if (f) fclose(f);\n}}\n'
    )
    lib = tmp_path / "evil.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    probe = write_probe(tmp_path)
    journal = _planted(cli, tmp_path, marker, "--good", "OMP_NUM_THREADS=1",
                       "--bad", f"OMP_NUM_THREADS=2 LD_PRELOAD={lib}", "--command", command(probe))  # fmt: skip
    assert f"LD_PRELOAD={lib}" in json.loads(journal.read_text())["sides"]["bad"]
    # the resume gives its own --command: the journal's sides are still not its own to choose
    r = cli("bisect", "--resume", "--journal", str(journal), "--command", command(probe))
    assert not marker.exists()
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [
        f"regdiag: error: {journal}: its --bad: the record sets LD_PRELOAD for every launch, which are not "
        "known settings (a variable outside the NCCL_, CUDA_, TORCH_, VLLM_, ... families, or one naming a "
        "path, a plugin or a command); a record does not choose code to run: pass --allow-code-from-record "
        "if you trust it"
    ]
    cli(
        "bisect",
        "--resume",
        "--journal",
        str(journal),
        "--command",
        command(probe),
        "--allow-code-from-record",
    )
    assert marker.exists()


def test_a_journal_another_user_may_write_is_refused(cli, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    planted = f"bash -c 'touch {marker}; exit 1'"
    own = Path(os.environ["REGDIAG_HOME"])  # this user's own journal, start_hash and all
    journal = _planted(cli, tmp_path, marker, "--good", "A=1", "--bad", "A=2", "--command", planted, home=own)
    cases = [(0o660, "writable by its group (mode 660)")]
    if os.geteuid() == 0:
        cases.append((0o600, "owned by another user (uid 12345)"))
    for mode, why in cases:
        os.chmod(journal, mode)
        if mode == 0o600:
            os.chown(journal, 12345, 12345)
        r = cli("bisect", "--resume", "--journal", str(journal))
        assert not marker.exists()
        assert r.returncode == 2, r.stderr
        assert r.stderr.splitlines() == [
            f"regdiag: error: {journal}: {why}; a journal chooses what a resume runs (its command, setup, "
            "python and sides) and what it concludes: pass --allow-code-from-record if you trust it"
        ]
        # given every option again, the journal is still another user's to have written
        r = cli("bisect", "--resume", "--journal", str(journal), "--good", "A=1", "--bad", "A=2",
                "--command", planted, "-L", "2", "--max-launches", "2")  # fmt: skip
        assert r.returncode == 2 and why in r.stderr and not marker.exists()
    cli("bisect", "--resume", "--journal", str(journal), "--allow-code-from-record")
    assert marker.exists()
