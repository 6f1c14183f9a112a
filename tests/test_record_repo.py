"""A record does not pick the repository: the checkout a record names (its engine.path) is built from
only when the user names it with --repo, and a checkout git refuses for its owner is reported as that."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from bisect_helpers import git

from regdiag.bisect import Request
from regdiag.bisect.run import make_plan
from regdiag.errors import BadInput

NOBODY = 65534


def _planted(tmp_path: Path) -> tuple[Path, list[str], Path]:
    """A checkout of two commits holding what would run in its worktree: a json.py that shadows the
    stdlib module for a command started there, and the bench.sh a --command names. Each leaves a mark."""
    mark = tmp_path / "ran"
    repo = tmp_path / "theirs"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "json.py").write_text(f"open({str(mark)!r}, 'a').write('json.py\\n')\n")
    (repo / "bench.sh").write_text(f"echo bench.sh >> {mark}\npython3 -c 'import json'\n")
    for n in ("one", "two"):
        (repo / "README").write_text(n)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", n)
    shas = git(repo, "rev-list", "--reverse", "HEAD").split()
    return repo, shas, mark


def _record(path: Path, repo: Path, sha: str) -> str:
    engine = {
        "fields": {"commit": {"status": "ok", "value": sha}, "path": {"status": "ok", "value": str(repo)}}
    }
    path.write_text(json.dumps({"schema": "regdiag.snapshot/2", "groups": {"engine": engine}}))
    return str(path)


@pytest.mark.cli
@pytest.mark.tool
def test_ab_does_not_build_the_checkout_two_records_name(cli, tmp_path: Path) -> None:
    repo, (one, two), mark = _planted(tmp_path)
    a, b = _record(tmp_path / "a.json", repo, one), _record(tmp_path / "b.json", repo, two)
    r = cli(
        "ab", "--a", a, "--b", b, "--command", "bash bench.sh", "--launches", "2", "--no-snapshot",
        env={"REGDIAG_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("regdiag: error: the engine commit differs") and f"--repo {repo}" in line, line
    assert not mark.exists() and not (tmp_path / "home" / "envs").exists()


@pytest.mark.tool
def test_bisect_takes_a_records_checkout_only_when_named_with_repo(tmp_path: Path) -> None:
    repo, (one, two), _ = _planted(tmp_path)
    good, bad = _record(tmp_path / "g.json", repo, one), _record(tmp_path / "b.json", repo, two)
    with pytest.raises(BadInput) as e:
        make_plan(Request(good=good, bad=bad, command="bash bench.sh"))
    assert "a record does not choose the repository" in str(e.value) and "\n" not in str(e.value)
    plan = make_plan(Request(good=good, bad=bad, command="bash bench.sh", repo=str(repo)))
    assert plan.where.repo == str(repo) and [(f.good, f.bad) for f in plan.factors] == [(one, two)]


@pytest.mark.tool
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the checkout to another user")
def test_a_checkout_git_refuses_for_its_owner_says_so_not_commit_missing(tmp_path: Path) -> None:
    repo, (one, two), _ = _planted(tmp_path)
    for p in [repo, *repo.rglob("*")]:
        os.lchown(p, NOBODY, NOBODY)
    good, bad = _record(tmp_path / "g.json", repo, one), _record(tmp_path / "b.json", repo, two)
    with pytest.raises(BadInput) as e:
        make_plan(Request(good=good, bad=bad, command="true", repo=str(repo)))
    line = str(e.value)
    assert "is not in" not in line and "dubious ownership" in line and "safe.directory" in line, line
    assert "owned by nobody" in line or f"uid {NOBODY}" in line
