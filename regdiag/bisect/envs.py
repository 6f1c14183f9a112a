"""Environments made for real, cached by a hash of their content.

An environment is what one point of a bisect needs besides its env vars (those are set per
process): the engine at one commit and a set of pinned package versions.

- A commit becomes a git worktree (GitPython, `git worktree add --detach`), and the user's
  `--setup` command runs inside it (with the environment's venv first on PATH, so `pip install -e .`
  installs into that venv).
- Packages that differ from the user's interpreter (`--python`: a system python, a venv, a conda
  env, a uv venv) are installed, pinned and with --no-deps, into an overlay venv layered on *that
  interpreter*: the overlay's own site-packages comes first, then every site directory the user's
  interpreter has (its venv's, its base's when the venv sees them, its user site), added by a .pth
  file with `site.addsitedir` so that the user's own .pth files (editable installs) work as they do
  at home. A venv made with `--system-site-packages` would see the *base* interpreter's site only:
  a user's venv with torch and the engine would vanish. The pinned versions shadow the user's; the
  rest is the user's, torch included, and never upgraded (--no-deps; what a pin requires and the
  user's environment does not satisfy is written down as a note). docs/bisect.md has the limits.
  With uv when it is on PATH (`uv venv`, `uv pip install`), else `python -m venv --without-pip`
  and the user's pip (found through the layer) run by the overlay's python (0.2 s instead of 7 s for
  a venv that carries its own pip). Sources: the user's --find-links DIR (no index) or --index-url.

Each environment lives in ${REGDIAG_HOME:-~/.regdiag}/envs/<key>/ and counts as built only once
`ready.json` is written there (atomically, last): a build killed half-way is removed and redone. A
build that fails raises BuildFailed with one line; the bisect calls that point SKIP. A --setup
exit status of 125 asks for exactly that (git bisect's convention).
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from regdiag.files import FileLock, append_text, atomic_write_text, lease_of, make_private_dirs
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
    notes: tuple[str, ...] = ()  # what the build found worth saying (a pin's unmet requirement)

    def process_env(self, path: str | None = None) -> dict[str, str]:
        """What a process in this environment gets on top of the caller's environment; `path` is the
        PATH of the host it runs on (default: this process's)."""
        if not self.venv:
            return {}
        bin_dir = os.path.join(self.venv, "bin")
        base = os.environ.get("PATH", "") if path is None else path
        return {"VIRTUAL_ENV": self.venv, "PATH": os.pathsep.join([bin_dir, base])}

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "notes": list(self.notes)}

    @classmethod
    def cached_from(cls, info: Mapping[str, Any]) -> Built:
        """The environment a `ready.json` describes, found built."""
        return cls(**{**info, "cached": True, "build_s": 0.0, "notes": tuple(info.get("notes") or ())})


def envs_dir() -> Path:
    return regdiag_home() / "envs"


def last_line(text: str) -> str:
    """The last non-empty line of a tool's output (where pip, git and uv say what went wrong), as one line."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return one_line(lines[-1] if lines else "")


# Run by the user's interpreter: its site directories in sys.path order (a venv's, the base's when the
# venv sees them, the user site), as one JSON line.
SITE_DIRS_SCRIPT = (
    "import json, site, sys\n"
    "known = set(site.getsitepackages())\n"
    "if site.ENABLE_USER_SITE: known.add(site.getusersitepackages())\n"
    "print(json.dumps([p for p in sys.path if p in known]))\n"
)
# Run by the overlay's interpreter with that JSON as argv[1]: writes the .pth that layers the user's
# site directories behind the overlay's own, and prints the overlay's site directory.
LAYER_PTH = "regdiag-layer.pth"
LAYER_SCRIPT = (
    "import json, os, sys, sysconfig\n"
    "dirs = json.loads(sys.argv[1])\n"
    "site_dir = sysconfig.get_paths()['purelib']\n"
    "os.makedirs(site_dir, exist_ok=True)\n"
    "line = 'import site; ' + '; '.join('site.addsitedir(%r)' % d for d in dirs)\n"
    f"with open(os.path.join(site_dir, {LAYER_PTH!r}), 'w') as f: f.write(line + '\\n')\n"
    "print(site_dir)\n"
)
# Run by the overlay's interpreter with the pinned names: what each pin requires that the layered
# environment does not satisfy (a pin installed --no-deps may need a torch the user does not have).
UNMET_SCRIPT = (
    "import json, sys\n"
    "from importlib import metadata\n"
    "out = []\n"
    "try:\n"
    "    from packaging.requirements import Requirement\n"
    "except ImportError:\n"
    "    Requirement = None\n"
    "for name in sys.argv[1:]:\n"
    "    if Requirement is None: break\n"
    "    for r in metadata.requires(name) or []:\n"
    "        req = Requirement(r)\n"
    "        if req.marker is not None and not req.marker.evaluate({'extra': ''}): continue\n"
    "        try: have = metadata.version(req.name)\n"
    "        except metadata.PackageNotFoundError: have = None\n"
    "        if have is None or (req.specifier and not req.specifier.contains(have, prereleases=True)):\n"
    "            out.append(f'{name} requires {req.name}{req.specifier}, the environment has {have or \"none\"}')\n"
    "print(json.dumps(out))\n"
)


def venv_argv(installer: str, base_python: str, path: str) -> list[str]:
    """The command that makes the overlay venv at `path` on `base_python`'s interpreter (here or on a
    remote host). No system site packages: the layer (LAYER_SCRIPT) adds exactly the user's."""
    if installer == "uv":
        return ["uv", "venv", "--quiet", "--python", base_python, path]
    return [base_python, "-m", "venv", "--without-pip", path]


def site_dirs_argv(base_python: str) -> list[str]:
    return [base_python, "-c", SITE_DIRS_SCRIPT]


def layer_argv(venv_python: str, site_dirs_json: str) -> list[str]:
    return [venv_python, "-c", LAYER_SCRIPT, site_dirs_json]


def unmet_argv(venv_python: str, names: Sequence[str]) -> list[str]:
    return [venv_python, "-c", UNMET_SCRIPT, *names]


def json_line(text: str) -> Any:
    """The last line of a helper script's output that parses as JSON (a sitecustomize may print)."""
    for line in reversed(text.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    raise ValueError("no JSON line in the output")


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
    # The venv has no pip of its own: the user's pip, found through the layer and run by the venv's
    # python, installs into the venv (sys.prefix is the venv; the user's copies are left alone).
    quiet = ["--quiet", "--no-deps", "--no-input", "--disable-pip-version-check"]
    return [python, "-m", "pip", "install", *quiet, *src, *reqs]


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
        # 2: overlays layered on the user's interpreter's site dirs (1: --system-site-packages venvs,
        # which lost a user's venv): an environment of the old layout is never reused.
        "layout": 2,
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
        # A shared lease on every environment this bisect uses, held until it ends: `regdiag clean`
        # beside it skips them instead of removing a worktree mid-run.
        self._leases: dict[str, FileLock] = {}

    # -- what the base has --------------------------------------------------------------------

    def base_versions(self) -> dict[str, str]:
        if self._base_versions is None:
            res = subprocess.run(
                [self.base_python, "-c", BASE_PACKAGES_SCRIPT], capture_output=True, text=True, timeout=120
            )
            if res.returncode != 0:
                raise BuildFailed(f"{self.base_python}: cannot list its packages: {last_line(res.stderr)}")
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
            # The interpreter as given, links not followed: every venv's python links to the same base
            # binary, and an overlay is layered on one venv's site directories, not on the base's.
            python=os.path.abspath(self.base_python),
            repo=os.path.realpath(self.repo) if self.repo else None,
            setup=self.setup,
            find_links=os.path.realpath(self.find_links) if self.find_links else None,
            index_url=self.index_url,
        )

    # -- building ------------------------------------------------------------------------------

    def present(self, python: str) -> bool:
        """An environment's interpreter is still there (nothing removed it since it was built)."""
        return os.path.exists(python)

    def build(self, packages: Mapping[str, str], commit: str | None) -> Built:
        key = self.key(packages, commit)
        if key is None:
            return Built("base", self.base_python, None, None, None, True, 0.0)
        make_private_dirs(self.root)
        if key not in self._leases:  # waits while a `clean` removes it; then it is built again
            self._leases[key] = FileLock(
                lease_of(self.root / key), "this environment", wait=True, shared=True
            )
        with self._lock(key):
            d = self.root / key
            ready = d / READY
            if ready.exists():
                try:
                    info = json.loads(ready.read_text(encoding="utf-8"))
                    if self.present(info["python"]):  # (a venv removed under its marker: build again)
                        return Built.cached_from(info)
                except (ValueError, TypeError, KeyError):
                    pass  # an unreadable marker: build again
            self._remove(d)
            t0 = time.monotonic()
            try:
                built = self._build(key, d, self.installs(packages), commit)
            except BuildFailed:
                self._remove(d)
                raise
            built = dataclasses.replace(built, build_s=round(time.monotonic() - t0, 3))
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
        notes = self._unmet(python, pins, log) if pins else ()
        built = Built(key, python, str(d), venv, worktree, False, 0.0, notes)
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
            raise BuildFailed(f"git worktree add {commit[:10]}: {last_line(str(e.stderr or e))}") from None
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise BuildFailed(f"{self.repo}: not a git repository") from None
        append_text(log, f"worktree {path} at {commit}\n")

    def _venv(self, path: str, log: Path) -> None:
        argv = venv_argv(self.installer, self.base_python, path)
        res = self._run(argv, log, "venv", timeout=300)
        if res.returncode != 0:
            raise BuildFailed(f"creating the venv failed: {last_line(res.stderr or res.stdout)}")
        res = self._run(site_dirs_argv(self.base_python), log, "site directories", timeout=120)
        if res.returncode == 0:
            try:
                dirs = json.dumps(json_line(res.stdout))
            except ValueError:
                raise BuildFailed(f"{self.base_python}: cannot list its site directories") from None
            res = self._run(layer_argv(os.path.join(path, "bin", "python"), dirs), log, "layer", timeout=120)
        if res.returncode != 0:
            raise BuildFailed(f"layering the venv on {self.base_python} failed: {last_line(res.stderr)}")

    def _unmet(self, python: str, pins: Mapping[str, str], log: Path) -> tuple[str, ...]:
        res = self._run(unmet_argv(python, list(pins)), log, "requirements", timeout=120)
        try:
            return tuple(str(x) for x in json_line(res.stdout)) if res.returncode == 0 else ()
        except ValueError:
            return ()

    def _install(self, python: str, pins: dict[str, str], log: Path) -> None:
        reqs = [f"{n}=={v}" for n, v in pins.items()]
        argv = install_argv(self.installer, python, reqs, self.find_links, self.index_url)
        res = self._run(argv, log, "install", timeout=1800)
        if res.returncode != 0:
            raise BuildFailed(f"installing {' '.join(reqs)} failed: {last_line(res.stderr or res.stdout)}")

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
            tail = last_line(res.stderr or res.stdout)
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
