"""Environments built on a remote host (`regdiag bisect --host H`), cached there by hash.

The same environments as regdiag.bisect.envs, made with the host's own tools over SSH: a venv
layered on H's interpreter (`python -m venv --without-pip --system-site-packages`, or `uv venv` when
uv is on H's PATH), the differing packages pinned and installed `--no-deps` from an index or a
`--find-links` directory *on H*; a `git worktree add --detach` of H's checkout (--repo, a path on H)
with `--setup` run there. Everything lives under H's cache directory,
`$XDG_CACHE_HOME/regdiag` or `~/.cache/regdiag` (`envs/<key>/`); `regdiag clean --host H` removes it.
regdiag writes to two other places on H: the private temporary directory of each connection, and
~/.regdiag/traces, where `probe --profile` keeps a run's trace (a result, which `clean` counts and
leaves).

Every command is an argv of our own tokens (the Host interface joins them with shlex); the user's
--setup travels as an uploaded file run by `/bin/sh`, never inside a quoted string. An environment
counts as built once `ready.json` is in its directory (written last, by rename); one cut off half-way
(a dropped connection) is removed and built again by the next session. A build that fails is
BuildFailed (the point is SKIP); a lost connection is HostError and ends the bisect, the journal
keeping every launch that finished.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections.abc import Mapping, Sequence

from regdiag.bisect.envs import (
    BASE_PACKAGES_SCRIPT,
    READY,
    SKIP_EXIT,
    Built,
    env_key,
    install_argv,
    json_line,
    last_line,
    layer_argv,
    site_dirs_argv,
    unmet_argv,
    venv_argv,
)
from regdiag.bisect.failures import BuildFailed
from regdiag.errors import BadInput, HostError
from regdiag.hosts.base import CommandResult, Host
from regdiag.measure.launch import command
from regdiag.runs import HOST_TRACES

# The cache directory on the host, found by the host's shell (no user data in this line).
CACHE_DIR_SCRIPT = 'printf "%s\\n" "${XDG_CACHE_HOME:-$HOME/.cache}/regdiag"'


def remote_cache_dir(host: Host, timeout: float = 60.0) -> str:
    """regdiag's cache directory on `host` (not created): the one it was given (Slurm's --env-dir), else
    as its shell finds it."""
    chosen = host.cache_dir()
    if chosen:
        return chosen
    res = command(host, ["/bin/sh", "-c", CACHE_DIR_SCRIPT], timeout=timeout)
    lines = [ln for ln in res.stdout.decode("utf-8", "replace").splitlines() if ln.startswith("/")]
    if not res.ok or not lines:
        raise HostError(f"{host.name}: cannot find the home directory ({res.stderr_tail() or 'no output'})")
    return lines[-1]


# The profile traces `probe --profile` kept on the host (regdiag.measure.probe.trace_args): how many
# files and KiB, or nothing when there is no such directory.
TRACES_SCRIPT = (
    f'd="{HOST_TRACES.replace("~", "$HOME", 1)}"; [ -d "$d" ] || exit 0; '
    'printf "%s %s\\n" "$(ls -A "$d" | wc -l)" "$(du -sk "$d" | cut -f1)"'
)


def traces_kept(host: Host) -> dict[str, object] | None:
    """The profile traces on `host` (results, not cache: their run records here name them, so `clean`
    leaves them): {"path", "files", "kib"}, or None when there are none."""
    res = command(host, ["/bin/sh", "-c", TRACES_SCRIPT], timeout=60)
    words = res.stdout.decode("utf-8", "replace").split()
    if not res.ok or len(words) != 2 or not all(w.isdigit() for w in words) or words[0] == "0":
        return None
    return {"path": HOST_TRACES, "files": int(words[0]), "kib": int(words[1])}


def clean_remote(host: Host) -> dict[str, object]:
    """Remove regdiag's cache directory on `host` (environments and worktrees) and prune the worktrees
    it registered in the checkouts it used. Returns what was removed, and the profile traces kept."""
    root = remote_cache_dir(host)
    repos: list[str] = []
    res = command(host, ["/bin/sh", "-c", 'cat "$1"/envs/*/repo 2>/dev/null || true', "regdiag-clean", root])
    for line in res.stdout.decode("utf-8", "replace").splitlines():
        if line.startswith("/") and line not in repos:
            repos.append(line)
    du = command(host, ["du", "-sk", "--", root], timeout=120)
    kib = du.stdout.decode("utf-8", "replace").split()[:1] if du.ok else []
    existed = command(host, ["test", "-d", root]).returncode == 0
    if existed:
        host.remove_tree(root)
    for repo in repos:
        command(host, ["git", "-C", repo, "worktree", "prune"], timeout=120)
    return {
        "host": host.name,
        "path": root,
        "existed": existed,
        "kib": int(kib[0]) if kib and kib[0].isdigit() else None,
        "pruned": repos,
        "traces_kept": traces_kept(host),
    }


class RemoteBuilder:
    """regdiag.bisect.envs.Builder's interface, building on `host`."""

    def __init__(
        self,
        host: Host,
        *,
        repo: str | None = None,
        setup: str | None = None,
        find_links: str | None = None,
        index_url: str | None = None,
        installer: str = "auto",
        setup_timeout: float = 3600.0,
    ) -> None:
        self.host = host
        self.base_python = host.python
        self.repo = repo
        self.setup = setup
        self.find_links = find_links
        self.index_url = index_url
        self.setup_timeout = setup_timeout
        if installer not in ("auto", "uv", "pip"):
            raise ValueError(f"installer must be auto, uv or pip (got {installer!r})")
        self._installer = installer
        self._base_versions: dict[str, str] | None = None
        self._root: str | None = None
        self._path: str | None = None
        self.built_now = 0
        self.key_host = host.name  # the host its environments' keys name (a node's: its allocation)

    def on(self, node: Host) -> RemoteBuilder:
        """The same builder on `node` (one of this host's nodes), its environments keyed as this one's;
        what it learnt of this host (versions, paths) is asked again there."""
        other = copy.copy(self)
        other.host, other.base_python, other.built_now = node, node.python, 0
        other._base_versions = other._root = other._path = None
        return other

    # -- the host ------------------------------------------------------------------------------

    def identity(self) -> str:
        """What names the base interpreter in point keys: the host and its python."""
        return f"{self.host.name}:{self.base_python}"

    def base_path(self) -> str:
        """The host's PATH as a login sees it (a venv's bin/ is put in front of it)."""
        if self._path is None:
            res = self._run(["printenv", "PATH"], 60)
            lines = res.stdout.decode("utf-8", "replace").splitlines()
            self._path = lines[-1] if res.ok and lines else "/usr/local/bin:/usr/bin:/bin"
        return self._path

    def root(self) -> str:
        if self._root is None:
            self._root = remote_cache_dir(self.host) + "/envs"
        return self._root

    @property
    def installer(self) -> str:
        if self._installer == "auto":
            self._installer = "uv" if self._run(["uv", "--version"], 60).ok else "pip"
        return self._installer

    def check(self) -> None:
        """Refuse, before anything is measured, what cannot work on the host (exit 2)."""
        if self.find_links and self._run(["test", "-d", self.find_links], 60).returncode != 0:
            raise BadInput(f"--find-links {self.find_links}: no such directory on {self.host.name}")
        if self.repo and self._run(["git", "-C", self.repo, "rev-parse", "--git-dir"], 60).returncode != 0:
            raise BadInput(f"--repo {self.repo}: not a git checkout on {self.host.name}")

    def _run(
        self,
        argv: Sequence[str],
        timeout: float,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        log: list[str] | None = None,
    ) -> CommandResult:
        res = command(self.host, list(argv), cwd=cwd, env=env, timeout=timeout)
        if log is not None:
            out = res.stdout.decode("utf-8", "replace") + res.stderr.decode("utf-8", "replace")
            log.append(f"$ {' '.join(argv)}\n{out}[exit {res.returncode}]\n")
        return res

    # -- what the base has ---------------------------------------------------------------------

    def base_versions(self) -> dict[str, str]:
        if self._base_versions is None:
            res = self._run([self.base_python, "-c", BASE_PACKAGES_SCRIPT], 120)
            lines = [ln for ln in res.stdout.decode("utf-8", "replace").splitlines() if ln.startswith("{")]
            if not res.ok or not lines:
                why = last_line(res.stderr.decode("utf-8", "replace"))
                raise BuildFailed(f"{self.host.name}: {self.base_python}: cannot list its packages: {why}")
            self._base_versions = {str(k): str(v) for k, v in json.loads(lines[-1]).items()}
        return self._base_versions

    def installs(self, packages: Mapping[str, str]) -> dict[str, str]:
        base = self.base_versions() if packages else {}
        return {n: v for n, v in sorted(packages.items()) if base.get(n) != v}

    def key(self, packages: Mapping[str, str], commit: str | None) -> str | None:
        return env_key(
            self.installs(packages),
            commit,
            python=self.base_python,
            repo=self.repo,
            setup=self.setup,
            find_links=self.find_links,
            index_url=self.index_url,
            host=self.key_host,
        )

    # -- building ------------------------------------------------------------------------------

    def present(self, python: str) -> bool:
        """An environment's interpreter is still there on the host (nothing removed it since)."""
        return self._run(["test", "-e", python], 60).ok

    def build(self, packages: Mapping[str, str], commit: str | None) -> Built:
        key = self.key(packages, commit)
        if key is None:
            return Built("base", self.base_python, None, None, None, True, 0.0)
        d = f"{self.root()}/{key}"
        ready = self._run(["cat", "--", f"{d}/{READY}"], 60)
        if ready.ok:
            try:
                info = json.loads(ready.stdout.decode("utf-8", "replace"))
                if self.present(str(info["python"])):  # (not removed under its marker)
                    return Built.cached_from(info)
            except (ValueError, TypeError, KeyError):
                pass  # an unreadable marker: build again
        self._remove(d)
        t0 = time.monotonic()
        log: list[str] = []
        try:
            built = self._build(key, d, self.installs(packages), commit, log)
        except BuildFailed:
            self._keep_log(d, log)
            self._remove(d, keep_log=True)
            raise
        built = dataclasses.replace(built, build_s=round(time.monotonic() - t0, 3))
        self._keep_log(d, log)
        blob = json.dumps({**built.to_dict(), "cached": False}, indent=1).encode()
        self._put(blob, f"{d}/{READY}.tmp")
        if not self._run(["mv", "-f", "--", f"{d}/{READY}.tmp", f"{d}/{READY}"], 60).ok:
            raise BuildFailed(f"{self.host.name}: cannot write {d}/{READY}")
        self.built_now += 1
        return built

    def _put(self, data: bytes, path: str) -> None:
        put_bytes = getattr(self.host, "put_bytes", None)
        if put_bytes is not None:
            put_bytes(data, path)
            return
        import tempfile
        from pathlib import Path

        with tempfile.NamedTemporaryFile() as f:
            f.write(data)
            f.flush()
            self.host.put_file(Path(f.name), path)

    def _keep_log(self, d: str, log: list[str]) -> None:
        try:
            self._put("".join(log).encode(), f"{d}/build.log")
        except HostError:
            raise
        except Exception:  # noqa: BLE001 - the log is for the user's eyes; never fail a build on it
            pass

    def _build(self, key: str, d: str, pins: dict[str, str], commit: str | None, log: list[str]) -> Built:
        if not self._run(["mkdir", "-p", "-m", "700", "--", d], 60, log=log).ok:
            raise BuildFailed(f"{self.host.name}: cannot create {d}")
        worktree = venv = None
        if commit is not None:
            worktree = f"{d}/src"
            self._worktree(d, worktree, commit, log)
        python = self.base_python
        if pins or (commit is not None and self.setup):
            venv = f"{d}/venv"
            self._venv(venv, log)
            python = f"{venv}/bin/python"
            if pins:
                self._install(python, pins, log)
        notes = self._unmet(python, pins, log) if pins else ()
        built = Built(key, python, d, venv, worktree, False, 0.0, notes)
        if commit is not None and self.setup:
            self._setup(d, built, log)
        return built

    def _worktree(self, d: str, path: str, commit: str, log: list[str]) -> None:
        if not self.repo:
            raise BuildFailed("the engine commit differs but no --repo was given")
        # Which checkout this worktree belongs to, so that `regdiag clean --host` can prune it there.
        self._put((self.repo + "\n").encode(), f"{d}/repo")
        res = self._run(
            ["git", "-C", self.repo, "worktree", "add", "--detach", "--force", path, commit], 600, log=log
        )
        if not res.ok:
            why = last_line(res.stderr.decode("utf-8", "replace"))
            raise BuildFailed(f"git worktree add {commit[:10]}: {why}")

    def _venv(self, path: str, log: list[str]) -> None:
        res = self._run(venv_argv(self.installer, self.base_python, path), 300, log=log)
        if not res.ok:
            why = last_line((res.stderr or res.stdout).decode("utf-8", "replace"))
            raise BuildFailed(f"creating the venv failed: {why}")
        # Layered on the host's interpreter as a local overlay is (regdiag.bisect.envs).
        res = self._run(site_dirs_argv(self.base_python), 120, log=log)
        if res.ok:
            try:
                dirs = json.dumps(json_line(res.stdout.decode("utf-8", "replace")))
            except ValueError:
                raise BuildFailed(
                    f"{self.host.name}: {self.base_python}: cannot list its site directories"
                ) from None
            res = self._run(layer_argv(f"{path}/bin/python", dirs), 120, log=log)
        if not res.ok:
            why = last_line(res.stderr.decode("utf-8", "replace"))
            raise BuildFailed(f"layering the venv on {self.base_python} failed: {why}")

    def _unmet(self, python: str, pins: Mapping[str, str], log: list[str]) -> tuple[str, ...]:
        res = self._run(unmet_argv(python, list(pins)), 120, log=log)
        try:
            return tuple(str(x) for x in json_line(res.stdout.decode("utf-8", "replace"))) if res.ok else ()
        except ValueError:
            return ()

    def _install(self, python: str, pins: dict[str, str], log: list[str]) -> None:
        reqs = [f"{n}=={v}" for n, v in pins.items()]
        argv = install_argv(self.installer, python, reqs, self.find_links, self.index_url)
        res = self._run(argv, 1800, log=log)
        if not res.ok:
            why = last_line((res.stderr or res.stdout).decode("utf-8", "replace"))
            raise BuildFailed(f"installing {' '.join(reqs)} failed: {why}")

    def _setup(self, d: str, built: Built, log: list[str]) -> None:
        assert self.setup is not None and built.worktree is not None
        script = f"{d}/setup.sh"
        self._put(self.setup.encode() + b"\n", script)  # user data: a file, never a quoted string
        env = {}
        if built.venv:
            env = {"VIRTUAL_ENV": built.venv, "PATH": f"{built.venv}/bin:{self.base_path()}"}
        res = self._run(["/bin/sh", script], self.setup_timeout, cwd=built.worktree, env=env, log=log)
        if res.returncode == SKIP_EXIT and not res.timed_out:
            raise BuildFailed("setup exited 125 (this commit cannot be tested)")
        if not res.ok:
            tail = last_line((res.stderr or res.stdout).decode("utf-8", "replace"))
            what = "timed out" if res.timed_out else f"exited {res.returncode}"
            raise BuildFailed(f"setup {what}" + (f": {tail}" if tail else ""))

    def _remove(self, d: str, keep_log: bool = False) -> None:
        if self.repo:
            self._run(["git", "-C", self.repo, "worktree", "remove", "--force", f"{d}/src"], 120)
        if keep_log:
            # A failed build leaves its log (and nothing else) for the user to read.
            each = ["-mindepth", "1", "-maxdepth", "1", "!", "-name", "build.log"]
            self._run(["find", d, *each, "-exec", "rm", "-rf", "--", "{}", "+"], 300)
        else:
            self._run(["rm", "-rf", "--", d], 300)
        if self.repo:
            self._run(["git", "-C", self.repo, "worktree", "prune"], 120)
