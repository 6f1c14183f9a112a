"""bisect over engine commits: a real git history made here, worktrees, a --setup run in each, a
commit that does not build (SKIP, and the range it hides), and two culprit commits."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from bisect_helpers import git, make_repo, write_probe

from regdiag.bisect import Request, run_bisect

pytestmark = pytest.mark.slow


def _run(tmp_path: Path, repo: Path, good: str, bad: str, **kw) -> dict:
    probe = write_probe(tmp_path)
    req = Request(
        good=good,
        bad=bad,
        command=f"python {probe}",
        repo=str(repo),
        setup="sh build.sh",
        journal=str(tmp_path / "journal.jsonl"),
        launches=2,
        max_launches=6,
        **kw,
    )
    return run_bisect(req)


def test_the_commit_that_slows_verify_among_16(tmp_path) -> None:
    repo, shas = make_repo(tmp_path, 16, slow={11: {"verify": 4.0}})
    r = _run(tmp_path, repo, f"commit={shas[0][:9]} NCCL_PROTO=LL", f"commit={shas[15]} NCCL_PROTO=Simple")
    assert r["verdict"] == "CULPRIT", r["statement"]
    [c] = r["culprits"]
    [f] = c["factors"]
    assert (f["kind"], f["good"], f["bad"]) == ("commit", shas[10], shas[11])
    assert c["within"].startswith("commit ") and c["exact"]
    assert c["ms"]["verify"] == pytest.approx(4.0, abs=0.4) and abs(c["ms"]["draft"]) < 0.3
    # 2 factors, then 15 commits: ceil(log2 15) = 4 range points, plus endpoints and the factor step
    assert r["cost"]["points_measured"] <= 2 + 1 + 4 + 1
    # every point that was built got a worktree at its commit and ran the setup there
    built = [json.loads(x) for x in (tmp_path / "journal.jsonl").read_text().splitlines()]
    envs = [e for e in built if e["type"] == "env" and e["status"] == "ok"]
    assert envs and all(e["env"] != "base" for e in envs)
    home = Path(os.environ["REGDIAG_HOME"])
    for e in envs:
        src = home / "envs" / e["env"] / "src"
        assert (src / "built.txt").read_text() == "built\n"
        assert git(src, "rev-parse", "HEAD") == e["values"]["commit:commit"]["value"]
    wt = git(repo, "worktree", "list", "--porcelain")
    assert wt.count("worktree ") >= 1 + r["cost"]["environments_built"]


def test_a_commit_that_does_not_build_is_skip_and_the_hidden_range_reported(tmp_path) -> None:
    # commit 6 slows verify; commit 5 does not build: between 4 (fast) and 6 (slow) nothing can be
    # tested, so the culprit is "5 or 6", with 5's failure given as the reason.
    repo, shas = make_repo(tmp_path, 9, slow={6: {"verify": 4.0}}, broken={5})
    r = _run(tmp_path, repo, f"commit={shas[0]}", f"commit={shas[8]} OMP_NUM_THREADS=3")
    assert r["verdict"] == "CULPRIT"
    [c] = r["culprits"]
    [f] = c["factors"]
    assert (f["good"], f["bad"]) == (shas[4], shas[6])
    assert not c["exact"]
    assert c["skipped"] == [{"point": f"commit {shas[5][:10]}", "reason": "setup exited 1"}]


def test_two_culprit_commits_in_one_range(tmp_path) -> None:
    repo, shas = make_repo(tmp_path, 12, slow={3: {"draft": 2.5}, 8: {"verify": 4.0}})
    r = _run(tmp_path, repo, f"commit={shas[0]}", f"commit={shas[11]}")
    assert r["verdict"] == "CULPRIT", r["statement"]
    pairs = sorted((c["factors"][0]["good"], c["factors"][0]["bad"]) for c in r["culprits"])
    assert sorted([(shas[2], shas[3]), (shas[7], shas[8])]) == pairs
    by_bad = {c["factors"][0]["bad"]: c for c in r["culprits"]}
    assert by_bad[shas[3]]["ms"]["draft"] == pytest.approx(2.5, abs=0.4)
    assert by_bad[shas[8]]["ms"]["verify"] == pytest.approx(4.0, abs=0.4)
    assert sum(c["share"] for c in r["culprits"]) == pytest.approx(1.0, abs=0.1)
