"""Environments made for real, cached by a hash of their content.

An environment is what one point of a bisect needs besides its env vars (those are set per
process): the engine at one commit and a set of pinned package versions.

- A commit becomes a git worktree (GitPython, `git worktree add --detach`), and the user's
  `--setup` command runs inside it (with the environment's venv first on PATH, so `pip install -e .`
  installs into that venv).
- Packages that differ from the base interpreter are installed, pinned and with --no-deps, into a
  venv layered on the base interpreter (`--system-site-packages`): everything else is the base's.
  With uv when it is on PATH (`uv venv`, `uv pip install`), else `python -m venv --without-pip`
  and the base interpreter's own pip run through the venv's python (0.2 s instead of 7 s for a venv
  that carries its own pip). Sources: the user's --find-links DIR (no index) or --index-url URL.

Each environment lives in ${REGDIAG_HOME:-~/.regdiag}/envs/<key>/ and counts as built only once
`ready.json` is written there (atomically, last): a build killed half-way is removed and redone. A
build that fails raises BuildFailed with one line; the bisect calls that point SKIP. A --setup
exit status of 125 asks for exactly that (git bisect's convention).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from regdiag.bisect.failures import BuildFailed
from regdiag.files import FileLock, append_text, atomic_write_text, make_private_dirs
from regdiag.runs import regdiag_home
from regdiag.snapshot.fields import one_line
from regdiag.snapshot.redact import redact_argv, scrub_text

READY = "ready.json"
SKIP_EXIT = 125
BASE_PACKAGES_SCRIPT = (
    "import importlib.metadata as m, json, re\n"
    "out = {}\n"
    "for d in m.distributions():\n"
    "    n = d.metadata['Name']\n"
    "    if n: out.setdefault(re.sub(r'[-_.]+', '-', n).lower(), d.version)\n"
    "print(json.dumps(out))\n"
)


@dataclass(frozen=True)
class Built:
    key: str
    python: str
    root: str | None  # the environment's directory (None: the base interpreter as it is)
    venv: str | None
    worktree: str | None
    cached: bool
    build_s: float

    def process_env(self, path: str | None = None) -> dict[str, str]:
        """What a process in this environment gets on top of the caller's environment; `path` is the
        PATH of the host it runs on (default: this process's)."""
        if not self.venv:
            return {}
        bin_dir = os.path.join(self.venv, "bin")
        base = os.environ.get("PATH", "") if path is None else path
        return {"VIRTUAL_ENV": self.venv, "PATH": os.pathsep.join([bin_dir, base])}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def envs_dir() -> Path:
    return regdiag_home() / "envs"


def _last_line(text: str) -> str:
    """The last non-empty line of a tool's output (where pip, git and uv say what went wrong), as one line."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return one_line(lines[-1] if lines else "")


def venv_argv(installer: str, base_python: str, path: str) -> list[str]:
    """The command that makes a venv at `path` layered on `base_python` (here or on a remote host)."""
    if installer == "uv":
        return ["uv", "venv", "--quiet", "--system-site-packages", "--python", base_python, path]
    return [base_python, "-m", "venv", "--without-pip", "--system-site-packages", path]


def install_argv(
    installer: str, python: str, reqs: Sequence[str], find_links: str | None, index_url: str | None
) -> list[str]:
    """The command that installs the pinned `reqs` (NAME==VERSION) into the venv of `python`, --no-deps."""
    src: list[str] = []
    if find_links:
        src += ["--find-links", find_links]
        if not index_url:
            src.append("--no-index")
    if index_url:
        src += ["--index-url", index_url]
    if installer == "uv":
        return ["uv", "pip", "install", "--quiet", "--python", python, "--no-deps", *src, *reqs]
    # The venv has no pip of its own: the base's pip, found through system site-packages and run by
    # the venv's python, installs into the venv (sys.prefix is the venv).
    return [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-input", "--disable-pip-version-check",
            *src, *reqs]  # fmt: skip


def env_key(
    pins: Mapping[str, str],
    commit: str | None,
    *,
    python: str,
    repo: str | None,
    setup: str | None,
    find_links: str | None,
    index_url: str | None,
    host: str | None = None,
) -> str | None:
    """The content hash that names a built environment (its directory), here or on a host; None when
    nothing is installed over the base interpreter. Only what shapes the environment goes in: the repo
    and setup only with a commit, the package sources only with pins."""
    if not pins and commit is None:
        return None
    content: dict[str, object] = {
        "python": python,
        "pins": dict(pins),
        "commit": commit,
        "repo": repo if commit else None,
        "setup": setup if commit else None,
        "find_links": find_links if pins else None,
        "index_url": index_url if pins else None,
    }
    if host is not None:
        content["host"] = host
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


class Builder:
    def __init__(
        self,
        *,
        base_python: str | None = None,
        repo: str | None = None,
        setup: str | None = None,
        find_links: str | None = None,
        index_url: str | None = None,
        installer: str = "auto",
        root: Path | None = None,
        setup_timeout: float = 3600.0,
    ) -> None:
        self.base_python = base_python or sys.executable
        self.repo = repo
        self.setup = setup
        self.find_links = find_links
        self.index_url = index_url
        self.root = root or envs_dir()
        self.setup_timeout = setup_timeout
        if installer == "auto":
            installer = "uv" if shutil.which("uv") else "pip"
        if installer not in ("uv", "pip"):
            raise ValueError(f"installer must be auto, uv or pip (got {installer!r})")
        self.installer = installer
        self._base_versions: dict[str, str] | None = None
        self.built_now = 0

    # -- what the base has --------------------------------------------------------------------

    def base_versions(self) -> dict[str, str]:
        if self._base_versions is None:
            res = subprocess.run(
                [self.base_python, "-c", BASE_PACKAGES_SCRIPT], capture_output=True, text=True, timeout=120
            )
            if res.returncode != 0:
                raise BuildFailed(f"{self.base_python}: cannot list its packages: {_last_line(res.stderr)}")
            self._base_versions = {str(k): str(v) for k, v in json.loads(res.stdout).items()}
        return self._base_versions

    def installs(self, packages: Mapping[str, str]) -> dict[str, str]:
        """The pins that differ from the base interpreter: only those are installed."""
        base = self.base_versions()
        return {n: v for n, v in sorted(packages.items()) if base.get(n) != v}

    def key(self, packages: Mapping[str, str], commit: str | None) -> str | None:
        """Content hash of an environment; None when it is the base interpreter as it is."""
        return env_key(
            self.installs(packages),
            commit,
            python=os.path.realpath(self.base_python),
            repo=os.path.realpath(self.repo) if self.repo else None,
            setup=self.setup,
            find_links=os.path.realpath(self.find_links) if self.find_links else None,
            index_url=self.index_url,
        )

    # -- building ------------------------------------------------------------------------------

    def build(self, packages: Mapping[str, str], commit: str | None) -> Built:
        key = self.key(packages, commit)
        if key is None:
            return Built("base", self.base_python, None, None, None, True, 0.0)
        make_private_dirs(self.root)
        with self._lock(key):
            d = self.root / key
            ready = d / READY
            if ready.exists():
                try:
                    info = json.loads(ready.read_text(encoding="utf-8"))
                    return Built(**{**info, "cached": True, "build_s": 0.0})
                except (ValueError, TypeError):
                    pass  # an unreadable marker: build again
            self._remove(d)
            t0 = time.monotonic()
            try:
                built = self._build(key, d, self.installs(packages), commit)
            except BuildFailed:
                self._remove(d)
                raise
            built = Built(**{**asdict(built), "build_s": round(time.monotonic() - t0, 3)})
            atomic_write_text(ready, json.dumps({**built.to_dict(), "cached": False}, indent=1))
            self.built_now += 1
            return built

    def _build(self, key: str, d: Path, pins: dict[str, str], commit: str | None) -> Built:
        d.mkdir(mode=0o700)  # private: nobody else can plant a name in it (build.log, venv)
        log = d / "build.log"
        worktree = venv = None
        if commit is not None:
            worktree = str(d / "src")
            self._worktree(worktree, commit, log)
        python = self.base_python
        if pins or (commit is not None and self.setup):
            venv = str(d / "venv")
            self._venv(venv, log)
            python = os.path.join(venv, "bin", "python")
            if pins:
                self._install(python, pins, log)
        built = Built(key, python, str(d), venv, worktree, False, 0.0)
        if commit is not None and self.setup:
            self._setup(built, log)
        return built

    def _run(self, argv: Sequence[str], log: Path, what: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        try:
            res = subprocess.run(list(argv), capture_output=True, text=True, **kw)
        except subprocess.TimeoutExpired:
            raise BuildFailed(f"{what}: timed out") from None
        except OSError as e:
            raise BuildFailed(f"{what}: {e.strerror or e}") from None
        line = f"$ {' '.join(redact_argv(list(argv)))}\n{res.stdout}{res.stderr}[exit {res.returncode}]\n"
        append_text(log, scrub_text(line))
        return res

    def _worktree(self, path: str, commit: str, log: Path) -> None:
        import git

        if not self.repo:
            raise BuildFailed("the engine commit differs but no --repo was given")
        try:
            repo = git.Repo(self.repo)
            repo.git.worktree("add", "--detach", "--force", path, commit)
        except git.GitCommandError as e:
            raise BuildFailed(f"git worktree add {commit[:10]}: {_last_line(str(e.stderr or e))}") from None
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise BuildFailed(f"{self.repo}: not a git repository") from None
        append_text(log, f"worktree {path} at {commit}\n")

    def _venv(self, path: str, log: Path) -> None:
        argv = venv_argv(self.installer, self.base_python, path)
        res = self._run(argv, log, "venv", timeout=300)
        if res.returncode != 0:
            raise BuildFailed(f"creating the venv failed: {_last_line(res.stderr or res.stdout)}")

    def _install(self, python: str, pins: dict[str, str], log: Path) -> None:
        reqs = [f"{n}=={v}" for n, v in pins.items()]
        argv = install_argv(self.installer, python, reqs, self.find_links, self.index_url)
        res = self._run(argv, log, "install", timeout=1800)
        if res.returncode != 0:
            raise BuildFailed(f"installing {' '.join(reqs)} failed: {_last_line(res.stderr or res.stdout)}")

    def _setup(self, built: Built, log: Path) -> None:
        env = dict(os.environ)
        env.update(built.process_env())
        assert self.setup is not None and built.worktree is not None
        res = self._run(
            ["/bin/sh", "-c", self.setup],
            log,
            "setup",
            cwd=built.worktree,
            env=env,
            timeout=self.setup_timeout,
        )
        if res.returncode == SKIP_EXIT:
            raise BuildFailed("setup exited 125 (this commit cannot be tested)")
        if res.returncode != 0:
            tail = _last_line(res.stderr or res.stdout)
            raise BuildFailed(f"setup exited {res.returncode}" + (f": {tail}" if tail else ""))

    # -- housekeeping --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        # Two bisects sharing REGDIAG_HOME must not build the same environment at once: the second waits.
        with FileLock(self.root / key, "this environment", wait=True):
            yield

    def _remove(self, d: Path) -> None:
        if not d.exists():
            return
        src = d / "src"
        if src.exists() and self.repo:
            try:
                import git

                git.Repo(self.repo).git.worktree("remove", "--force", str(src))
            except Exception:  # noqa: BLE001 - a half-made worktree is removed by hand below
                pass
        shutil.rmtree(d, ignore_errors=True)
        if self.repo:
            try:
                import git

                git.Repo(self.repo).git.worktree("prune")
            except Exception:  # noqa: BLE001 - pruning is housekeeping; never fail a build on it
                pass
