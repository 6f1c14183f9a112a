"""The engine checkout: commit, branch, dirty state (with a hash of the diff), describe, commit date;
for a running engine (--pid), the identity of the draft its command line names (`draft`).

Which checkout: --repo PATH; else the source tree behind an editable install of sglang or vllm
(PEP 610 direct_url.json); else the current directory when it is inside a git repository.

Two backends with the same fields (a test checks they agree): the git command line, the default,
and GitPython (backend="gitpython", or REGDIAG_GIT_BACKEND=gitpython). The command line is the
default because importing GitPython costs 0.13-0.15 s of the snapshot's 0.3 s budget while it runs
the same git binary underneath for status, diff and describe; and it is all a bare remote host
has. After `rev-parse`, the six git calls run in parallel. Every git call has a timeout, runs with
GIT_OPTIONAL_LOCKS=0 (a snapshot must not take the index lock from a user's running git) and never
prompts. Repositories git itself refuses to open (safe.directory) are reported, not overridden.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from regdiag.snapshot import draft
from regdiag.snapshot import fields as F
from regdiag.snapshot.redact import scrub_text

GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_PAGER": "cat"}
# The serving engines, named once: an editable install of one names the repository, and the snapshot
# diff ranks their packages first (snapshot/diff.py).
ENGINES = ("sglang", "vllm")


def resolve_repo(repo: str | None, dists: dict[str, Any] | None) -> tuple[str | None, str]:
    """(directory to look at, how it was chosen)."""
    if repo:
        return os.path.abspath(repo), "--repo"
    if dists:
        from regdiag.snapshot.packages import editable_path

        for name in ENGINES:
            d = dists.get(name)
            path = editable_path(d) if d is not None else None
            if path and os.path.isdir(path):
                return path, f"editable install of {name}"
    return os.getcwd(), "current directory"


def collect(
    repo: str | None = None,
    dists: dict[str, Any] | None = None,
    timeout_s: float = 5.0,
    backend: str = "auto",
    argv: list[str] | None = None,
) -> dict[str, Any]:
    group = _collect_checkout(repo, dists, timeout_s, backend)
    # The draft the running engine's command line names (--pid snapshots): a changed draft is an
    # engine difference (regdiag/snapshot/draft.py).
    found = draft.collect(argv) if argv else None
    if found is not None:
        group["fields"]["draft"] = F.ok(found)
    return group


def _collect_checkout(
    repo: str | None, dists: dict[str, Any] | None, timeout_s: float, backend: str
) -> dict[str, Any]:
    path, how = resolve_repo(repo, dists)
    if path is None or not os.path.isdir(path):
        return F.failed_group(F.ERROR, f"{path}: no such directory")
    use = os.environ.get("REGDIAG_GIT_BACKEND", "cli") if backend == "auto" else backend
    if use != "gitpython" or not _gitpython_available():
        use = "cli"
    if use == "gitpython":
        group = _collect_gitpython(path, timeout_s)
    else:
        group = _collect_cli(path, timeout_s)
    group["selected_by"] = how
    group["backend"] = use
    return group


def _gitpython_available() -> bool:
    try:
        import git  # noqa: F401 - GitPython raises ImportError here when no git executable exists
    except Exception:  # noqa: BLE001 - any failure to load it means: use the command line
        return False
    return True


def _not_a_repo(path: str, how: str) -> dict[str, Any]:
    return F.failed_group(F.UNSUPPORTED, f"{path} is not inside a git repository ({how})")


def _hash_state(diff: bytes, untracked: list[str]) -> str:
    h = hashlib.sha256(diff)
    for name in sorted(untracked):
        h.update(b"\0untracked\0" + name.encode("utf-8", "surrogateescape"))
    return "sha256:" + h.hexdigest()[:16]


@dataclass
class _Checkout:
    """What a git backend read of one checkout, field by field (a failed read is that field's status)."""

    path: str
    commit: F.Field
    date: F.Field
    subject: F.Field
    branch: F.Field  # ok: the branch name, None when HEAD is detached
    status: F.Field  # ok: (changed files, untracked files)
    describe: F.Field
    diff: F.Field  # ok: the bytes of `git diff HEAD --binary`
    remote: F.Field

    def group(self) -> dict[str, Any]:
        """The engine group."""
        commit, branch, status, diff = self.commit, self.branch, self.status, self.diff
        fields: dict[str, F.Field] = {
            "path": F.ok(self.path),
            "commit": commit,
            "commit_date": self.date,
            "subject": self.subject,
        }
        fields["branch"] = branch
        fields["detached"] = F.ok(branch["value"] is None) if branch["status"] == F.OK else branch
        if status["status"] == F.OK:
            changed, untracked = status["value"]
            fields["dirty"] = F.ok(bool(changed or untracked))
            fields["changed_files"] = F.ok(len(changed) + len(untracked))
            if diff["status"] == F.OK:
                fields["diff_hash"] = F.ok(
                    _hash_state(diff["value"], untracked) if (changed or untracked) else None
                )
            else:
                fields["diff_hash"] = diff
        else:
            fields["dirty"] = fields["changed_files"] = fields["diff_hash"] = status
        # Without a commit there is nothing to describe: that is the repository's state, not a failure.
        fields["describe"] = self.describe if commit["status"] != F.UNSUPPORTED else commit
        fields["remote"] = self.remote
        # Branch and tag names are free text people type; a token pasted into one must not reach the record.
        for name in ("subject", "branch", "describe", "remote"):
            f = fields[name]
            if f["status"] == F.OK and isinstance(f["value"], str):
                fields[name] = {**f, "value": scrub_text(f["value"])}
        return F.group(fields)


def _parse_porcelain(out: str) -> tuple[list[str], list[str]]:
    changed, untracked = [], []
    entries = out.split("\0")
    i = 0
    while i < len(entries):
        e = entries[i]
        i += 1
        if len(e) < 4:
            continue
        code, name = e[:2], e[3:]
        if code == "??":
            untracked.append(name)
        else:
            changed.append(name)
            if "R" in code or "C" in code:
                i += 1  # a rename carries its old name as the next entry
    return changed, untracked


# ---- the git command line ----------------------------------------------------------------------


def _git(top: str, args: list[str], timeout_s: float) -> F.CmdResult:
    argv = ["git", "-C", top, "-c", "core.fsmonitor=false", "-c", "color.ui=false"] + args
    return F.run_cmd(argv, timeout_s, env=GIT_ENV)


def _cli_field(res: F.CmdResult, parse: Any = None, ok_codes: tuple[int, ...] = (0,)) -> F.Field:
    if res.missing:
        return F.unsupported("git: not found")
    if res.timed_out:
        return F.timeout("git timed out")
    if res.returncode not in ok_codes:
        return F.error(res.why("git"))
    try:
        return F.ok(parse(res) if parse else res.stdout.strip())
    except Exception as e:  # noqa: BLE001
        return F.error(F.describe_exc(e))


def _collect_cli(path: str, timeout_s: float) -> dict[str, Any]:
    first = F.run_cmd(["git", "-C", path, "rev-parse", "--show-toplevel"], timeout_s, env=GIT_ENV)
    if first.missing:
        return F.failed_group(F.UNSUPPORTED, "git is not installed here")
    if first.timed_out:
        return F.failed_group(F.TIMEOUT, "git rev-parse timed out")
    if first.returncode != 0:
        if "dubious ownership" in first.stderr:
            return F.failed_group(
                F.ERROR, f"git refuses {path}: dubious ownership (see git config safe.directory)"
            )
        return _not_a_repo(path, "git rev-parse")
    top = first.stdout.strip()
    cmds = {
        "log": ["log", "-1", "--format=%H%n%cI%n%s"],
        "branch": ["symbolic-ref", "-q", "--short", "HEAD"],
        "status": ["status", "--porcelain=v1", "-z", "--untracked-files=normal"],
        "describe": ["describe", "--tags", "--always", "--dirty"],
        "diff": ["diff", "HEAD", "--binary", "--no-ext-diff", "--no-textconv"],
        "remote": ["config", "--get", "remote.origin.url"],
    }
    keys = list(cmds)
    answers = F.parallel_map(lambda k: _git(top, cmds[k], timeout_s), keys)
    res = {k: answers[i] for i, k in enumerate(keys)}
    log = _cli_field(res["log"], lambda r: r.stdout.split("\n", 2))
    if log["status"] == F.OK and len(log["value"]) >= 2:
        h, date, subject = (log["value"] + [""])[:3]
        commit, cdate, subj = F.ok(h.strip()), F.ok(date.strip()), F.ok(scrub_text(subject.strip()))
    else:
        if log["status"] == F.ERROR and "does not have any commits" in (log.get("error") or ""):
            log = F.unsupported("the repository has no commits yet")
        commit = cdate = subj = log
    branch = _cli_field(res["branch"], lambda r: r.stdout.strip() or None, ok_codes=(0, 1))
    status = _cli_field(res["status"], lambda r: _parse_porcelain(r.stdout))
    describe = _cli_field(res["describe"])
    diff_res = res["diff"]
    diff: F.Field = F.ok(diff_res.stdout_bytes) if diff_res.ok else _cli_field(diff_res)
    if commit["status"] != F.OK and diff["status"] != F.OK:
        diff = F.ok(b"")  # no commits: the "diff" is the untracked file list alone
    remote = _cli_field(res["remote"], lambda r: scrub_text(r.stdout.strip()) or None, ok_codes=(0, 1))
    return _Checkout(top, commit, cdate, subj, branch, status, describe, diff, remote).group()


# ---- GitPython ---------------------------------------------------------------------------------


def _collect_gitpython(path: str, timeout_s: float) -> dict[str, Any]:
    import git

    try:
        repo = git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return _not_a_repo(path, "GitPython")
    except Exception as e:  # noqa: BLE001
        return F.failed_group(F.ERROR, F.describe_exc(e))
    try:
        return _gitpython_checkout(repo, path, timeout_s).group()
    finally:
        repo.close()


def _gitpython_head(repo: Any) -> tuple[F.Field, F.Field, F.Field]:
    """(commit, commit date, subject) of HEAD; a repository without commits has none of them."""

    def head() -> tuple[str, str, str]:
        c = repo.head.commit
        return (
            c.hexsha,
            c.committed_datetime.isoformat(),
            scrub_text(c.summary if isinstance(c.summary, str) else ""),
        )

    h = F.guard(head)
    if h["status"] == F.OK:
        return F.ok(h["value"][0]), F.ok(h["value"][1]), F.ok(h["value"][2])
    if "does not exist" in (h.get("error") or "") or "ref HEAD" in (h.get("error") or ""):
        h = F.unsupported("the repository has no commits yet")
    return h, h, h


def _gitpython_checkout(repo: Any, path: str, timeout_s: float) -> _Checkout:
    top = str(repo.working_tree_dir or path)
    g = repo.git
    for k, v in GIT_ENV.items():
        g.update_environment(**{k: v})
    kw = {"kill_after_timeout": timeout_s}
    commit, cdate, subj = _gitpython_head(repo)
    branch = F.guard(lambda: None if repo.head.is_detached else repo.active_branch.name)
    porcelain = ("--porcelain=v1", "-z", "--untracked-files=normal")
    st = F.guard(lambda: _parse_porcelain(g.status(*porcelain, strip_newline_in_stdout=False, **kw)))
    describe = F.guard(lambda: g.describe("--tags", "--always", "--dirty", **kw))
    diff = F.ok(b"")  # no commits: the "diff" is the untracked file list alone
    if commit["status"] == F.OK:
        diff_args = ("HEAD", "--binary", "--no-ext-diff", "--no-textconv")
        diff = F.guard(
            lambda: g.diff(*diff_args, stdout_as_string=False, strip_newline_in_stdout=False, **kw)
        )
    return _Checkout(top, commit, cdate, subj, branch, st, describe, diff, F.guard(lambda: _origin_url(repo)))


def _origin_url(repo: Any) -> str | None:
    try:
        return scrub_text(repo.remotes["origin"].url)
    except (IndexError, KeyError, AttributeError):
        return None
