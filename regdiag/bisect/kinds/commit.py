"""The engine commit: a git worktree per commit (plus the user's --setup); ordered by first-parent
history between the two."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from regdiag.bisect import ranges
from regdiag.bisect.kinds.base import BuildPlan, Difference, Kind, Where
from regdiag.errors import BadInput

if TYPE_CHECKING:
    from regdiag.bisect.factor_base import Factor, Spec


COMMIT = "commit"


def short(commit: str | None) -> str:
    return (commit or "?")[:10]


class CommitKind(Kind):
    name = COMMIT
    ordered = True

    def differences(self, good: Spec, bad: Spec, notes: list[str]) -> list[Difference]:
        if good.commit == bad.commit:
            return []
        if good.commit is None or bad.commit is None:
            missing = "--good" if good.commit is None else "--bad"
            notes.append(f"the engine commit is known on one side only (missing on {missing}); not bisected")
            return []
        for spec in (good, bad):
            if spec.dirty:
                notes.append(
                    f"{spec.source}: the engine checkout had uncommitted changes; a worktree of "
                    f"{short(spec.commit)} does not include them"
                )
        return [("commit", good.commit, bad.commit)]

    def check(self, factors: list[Factor], where: Where) -> list[Factor]:
        if not factors:
            return factors
        if not where.repo:
            raise BadInput("the engine commit differs; give --repo PATH (the engine's git checkout)")
        if where.host is not None:
            host, repo = where.host, where.repo
            return [
                dataclasses.replace(
                    f,
                    good=ranges.resolve_commit_on(host, repo, f.good or ""),
                    bad=ranges.resolve_commit_on(host, repo, f.bad or ""),
                )
                for f in factors
            ]
        if not Path(where.repo).is_dir():
            raise BadInput(f"--repo {where.repo}: no such directory")
        repo = where.repo
        return [
            dataclasses.replace(
                f,
                good=ranges.resolve_commit(repo, f.good or ""),
                bad=ranges.resolve_commit(repo, f.bad or ""),
            )
            for f in factors
        ]

    def show(self, f: Factor, value: str | None) -> str:
        return f"commit {short(value)}"

    def label(self, f: Factor) -> str:
        return f"commit {short(f.good)} -> {short(f.bad)}"

    def values_between(self, f: Factor, where: Where) -> list[str | None]:
        if not where.repo:
            return [f.good, f.bad]
        if where.host is not None:
            return list[str | None](
                ranges.commits_between_on(where.host, where.repo, f.good or "", f.bad or "")
            )
        return list(ranges.commits_between(where.repo, f.good or "", f.bad or ""))

    def prepare(self, f: Factor, value: str | None, plan: BuildPlan) -> None:
        plan.commit = value

    def annotate(self, f: dict[str, Any], where: Where) -> None:
        """Name the culprit commit the way people know it: its subject line."""
        import git

        if not where.repo or not f.get("bad"):
            return
        if where.host is not None:
            if (subject := ranges.subject_on(where.host, where.repo, f["bad"])) is not None:
                f["subject"] = subject
            return
        try:
            f["subject"] = git.Repo(where.repo).commit(f["bad"]).summary
        except (git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError, git.BadName):
            pass
