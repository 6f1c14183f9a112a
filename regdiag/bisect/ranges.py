"""The values an ordered factor takes between its good and its bad value.

- A commit: `git rev-list --reverse --first-parent --ancestry-path GOOD..BAD` (the commits on the
  first-parent line from good to bad; a merge is one step, as `git bisect --first-parent` does).
- A package: the versions between the two that the user's source offers, ordered with
  packaging.version: the files of --find-links DIR, or `pip index versions` against --index-url
  (or pip's configured index). Pre-releases only when an endpoint is one.

An env var has no order: it is a factor only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from regdiag.errors import BadInput
from regdiag.measure.launch import command
from regdiag.snapshot.packages import normalize

if TYPE_CHECKING:
    from regdiag.hosts.base import Host

_SDIST = (".tar.gz", ".zip", ".tar.bz2", ".tgz")


def resolve_commit(repo: str, rev: str) -> str:
    """Full sha of a revision, or one clear line."""
    import git

    # git's own answer first: for a full sha GitPython asks a long-lived `git cat-file`, which exits at
    # once on a checkout git refuses for its owner, and GitPython then says only "broken pipe"
    try:
        check = subprocess.run(
            ["git", "-C", repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if _DUBIOUS in check.stderr:
            raise BadInput(_refused_by_git(repo, _owner(repo)))
    except (OSError, subprocess.TimeoutExpired):
        pass  # no git to ask: GitPython says what it can below
    try:
        return git.Repo(repo).commit(rev).hexsha
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise BadInput(f"--repo {repo}: not a git repository") from None
    except (git.BadName, ValueError, git.GitCommandError, BrokenPipeError) as e:
        if _DUBIOUS in str(e):
            raise BadInput(_refused_by_git(repo, _owner(repo))) from None
        raise BadInput(f"commit {rev!r} is not in {repo}") from None


# git (2.35.2 on) reads no checkout that another user owns unless safe.directory names it; it then
# answers as if the commit did not exist, which is not the cause to report.
_DUBIOUS = "dubious ownership"


def _owner(path: str) -> str:
    import pwd

    try:
        uid = os.stat(path).st_uid
    except OSError:
        return "another user"
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _refused_by_git(repo: str, owner: str, where: str = "") -> str:
    return (
        f"--repo {repo}{where}: git refuses to read this checkout: it is owned by {owner}, not by the user "
        "running regdiag (git's safe.directory check: 'detected dubious ownership'); build from a checkout "
        f"of your own, or run `git config --global --add safe.directory {repo}` if you trust its owner"
    )


def commits_between(repo: str, good: str, bad: str) -> list[str]:
    """[good, c1, ..., bad]; just [good, bad] when bad does not descend from good on one line."""
    import git

    out = git.Repo(repo).git.rev_list("--reverse", "--first-parent", "--ancestry-path", f"{good}..{bad}")
    shas = [s for s in out.split() if s]
    if not shas or shas[-1] != bad:
        return [good, bad]
    return [good, *shas]


def _versions_in_dir(name: str, directory: Path) -> set[str]:
    return _versions_in_names(name, [p.name for p in directory.iterdir()])


def _versions_in_names(name: str, names: list[str]) -> set[str]:
    want = normalize(name)
    found: set[str] = set()
    for fn in names:
        if fn.endswith(".whl"):
            parts = fn[:-4].split("-")
            if len(parts) >= 5 and normalize(parts[0]) == want:
                found.add(parts[1])
            continue
        for ext in _SDIST:
            if fn.endswith(ext):
                stem, _, version = fn[: -len(ext)].rpartition("-")
                if stem and normalize(stem) == want:
                    found.add(version)
    return found


def _versions_from_index(name: str, index_url: str | None, python: str) -> set[str]:
    argv = [python, "-m", "pip", "index", "versions", name, "--disable-pip-version-check", "--no-input"]
    if index_url:
        argv += ["--index-url", index_url]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    m = re.search(r"^Available versions:\s*(.+)$", res.stdout, re.M)
    return {v.strip() for v in m.group(1).split(",")} if m else set()


def versions_between(
    name: str,
    good: str,
    bad: str,
    *,
    find_links: str | None,
    index_url: str | None,
    python: str | None = None,
    host: Host | None = None,
) -> list[str]:
    """[good, v1, ..., bad] ordered from good towards bad (either direction), endpoints included.
    With `host`, the --find-links directory and the index are read on that host."""
    try:
        vg, vb = Version(good), Version(bad)
    except InvalidVersion:
        return [good, bad]
    found: set[str] = set()
    if host is not None:
        found = _versions_on(host, name, find_links, index_url, python or host.python)
    elif find_links and Path(find_links).is_dir():
        found |= _versions_in_dir(name, Path(find_links))
    if host is None and (index_url or not find_links):
        found |= _versions_from_index(name, index_url, python or sys.executable)
    allow_pre = vg.is_prerelease or vb.is_prerelease
    lo, hi = min(vg, vb), max(vg, vb)
    inner: dict[Version, str] = {}
    for s in found:
        try:
            v = Version(s)
        except InvalidVersion:
            continue
        if lo < v < hi and (allow_pre or not v.is_prerelease):
            inner.setdefault(v, s)
    ordered = [inner[v] for v in sorted(inner, reverse=vg > vb)]
    return [good, *ordered, bad]


# -- the same on a remote host (bisect --host): git and pip run there, as argv of our tokens ----------


def _pip_index_argv(python: str, name: str, index_url: str | None) -> list[str]:
    argv = [python, "-m", "pip", "index", "versions", name, "--disable-pip-version-check", "--no-input"]
    return argv + (["--index-url", index_url] if index_url else [])


def _versions_on(
    host: Host, name: str, find_links: str | None, index_url: str | None, python: str
) -> set[str]:
    found: set[str] = set()
    if find_links:
        res = command(host, ["ls", "-1", "--", find_links], timeout=60)
        if not res.ok:  # once more: one lost channel or a stalled login must not end the bisect
            res = command(host, ["ls", "-1", "--", find_links], timeout=120)
        if not res.ok:
            why = res.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [
                f"exit status {res.returncode}"
            ]
            raise BadInput(f"--find-links {find_links}: cannot list it on {host.name}: {why[0]}")
        found |= _versions_in_names(name, res.stdout.decode("utf-8", "replace").splitlines())
    if index_url or not find_links:
        res = command(host, _pip_index_argv(python, name, index_url), timeout=120)
        m = re.search(r"^Available versions:\s*(.+)$", res.stdout.decode("utf-8", "replace"), re.M)
        if m:
            found |= {v.strip() for v in m.group(1).split(",")}
    return found


def _git_on(host: Host, repo: str, *args: str) -> tuple[bool, str]:
    res = command(host, ["git", "-C", repo, *args], timeout=120)
    return res.ok, res.stdout.decode("utf-8", "replace").strip()


def resolve_commit_on(host: Host, repo: str, rev: str) -> str:
    """Full sha of a revision in the checkout `repo` on `host`, or one clear line."""
    argv = ["git", "-C", repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"]
    res = command(host, argv, timeout=120)
    out = res.stdout.decode("utf-8", "replace").strip()
    sha = out.splitlines()[-1] if res.ok and out else ""
    if not re.fullmatch(r"[0-9a-f]{40,64}", sha):
        if _DUBIOUS in res.stderr.decode("utf-8", "replace"):
            raise BadInput(_refused_by_git(repo, "another user", f" on {host.name}"))
        raise BadInput(f"commit {rev!r} is not in {repo} on {host.name}")
    return sha


def commits_between_on(host: Host, repo: str, good: str, bad: str) -> list[str]:
    ok, out = _git_on(
        host, repo, "rev-list", "--reverse", "--first-parent", "--ancestry-path", f"{good}..{bad}"
    )
    shas = [s for s in out.split() if s] if ok else []
    if not shas or shas[-1] != bad:
        return [good, bad]
    return [good, *shas]


def subject_on(host: Host, repo: str, sha: str) -> str | None:
    ok, out = _git_on(host, repo, "log", "-1", "--format=%s", sha)
    return out.splitlines()[-1] if ok and out else None
