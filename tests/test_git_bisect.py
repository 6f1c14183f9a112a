"""`regdiag compare --git-bisect` under a real `git bisect run`: exit codes git reads as good, bad,
skip and stop (regdiag.errors.for_git_bisect), and the worked example of docs/compare.md run on a
real repository whose commits measure themselves with hyperfine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

from regdiag.errors import for_git_bisect

ROOT = Path(__file__).resolve().parent.parent
# The step script of docs/compare.md ("Under git bisect run"), with the measuring command of this test.
STEP = """#!/bin/sh
# one bisect step: measure this commit, compare with the baseline, let regdiag's exit status decide
hyperfine -N --style none --runs "$(cat runs)" --export-json "$OUT/new.json" "$(cat cmd)" >/dev/null || exit 125
exec {regdiag} compare "$OUT/base.json" "$OUT/new.json" --margin 50% --git-bisect
"""


def test_exit_codes_as_git_reads_them() -> None:
    assert [for_git_bisect(c) for c in (0, 1, 2, 3, 4, 5)] == [0, 1, 125, 125, 125, 125]
    assert [for_git_bisect(c) for c in (130, 141, 143)] == [130, 141, 143]  # stop the bisection
    assert for_git_bisect(7) == 128  # a code regdiag does not document: stop, never "bad"


@pytest.mark.tool
def test_compare_exit_status_under_git_bisect(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.json")
    p = run_cli("compare", missing, missing, "--git-bisect")
    assert p.returncode == 125 and "no such file" in p.stderr  # unusable input: skip this commit
    p = run_cli("compare", missing, missing, "--git-bisekt", "--git-bisect")
    assert p.returncode == 128 and "No such option" in p.stderr  # a broken command line: stop
    assert run_cli("compare", missing, missing).returncode == 2  # without the switch: regdiag's codes


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    p = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.mark.launch
@pytest.mark.tool
@pytest.mark.skipif(shutil.which("hyperfine") is None, reason="hyperfine not installed")
def test_git_bisect_run_skips_inconclusive_steps_and_finds_the_planted_commit(tmp_path: Path) -> None:
    repo, out = tmp_path / "repo", tmp_path / "out"
    repo.mkdir()
    out.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    # c0..c6: each commit's `cmd` is what it costs; c5 plants a 5x slowdown; c3 (the first commit git
    # tests) measures one run only, so compare cannot decide (INCONCLUSIVE: skip, not "bad")
    commits = []
    for i in range(7):
        (repo / "cmd").write_text("sleep 0.05\n" if i >= 5 else "sleep 0.01\n")
        (repo / "runs").write_text("1\n" if i == 3 else "15\n")
        (repo / "version").write_text(f"{i}\n")
        _git(repo, "add", "cmd", "runs", "version")
        _git(repo, "commit", "-q", "-m", f"c{i}")
        commits.append(_git(repo, "rev-parse", "HEAD").strip())
    subprocess.run(
        [
            "hyperfine",
            "-N",
            "--style",
            "none",
            "--runs",
            "15",
            "--export-json",
            str(out / "base.json"),
            "sleep 0.01",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    step = tmp_path / "step.sh"
    step.write_text(STEP.format(regdiag=f"{sys.executable} -m regdiag"))
    step.chmod(0o755)
    _git(repo, "bisect", "start", commits[6], commits[0])
    env = {**os.environ, "OUT": str(out), "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        ["git", "bisect", "run", str(step)], cwd=repo, env=env, capture_output=True, text=True, timeout=600
    )
    log = _git(repo, "bisect", "log")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{commits[5]} is the first bad commit" in p.stdout, p.stdout
    assert f"git bisect skip {commits[3]}" in log  # the INCONCLUSIVE step was skipped, not judged
