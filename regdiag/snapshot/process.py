"""A running process as the snapshot sees it: `regdiag snapshot --pid PID`.

    Process.open(pid)  -> reads /proc/PID/{environ,cmdline,cwd,exe,status}; ProcessError if it cannot
    proc.interpreter() -> sys.path (before site), site directories, user site of its python
    collect_process(proc, hasher), collect_libraries(proc), collect_startup(...)

The environment is the one the process was started with (/proc/PID/environ): what a process sets
later with setenv, as a sitecustomize.py does, is not visible there, which is why the start-up files
are parsed (regdiag.snapshot.startup) and their settings added, each with the file it came from.
Children (an SGLang server's TP workers are separate processes) are listed with the variables in
which they differ from the parent, and variables that differ between workers of the same program
are flagged. To learn the interpreter's path its python is started once with -S -E-like settings
(no site.py, so nothing of the user's runs), 5 s timeout. Standard library only.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from regdiag.snapshot import fields as F
from regdiag.snapshot.redact import redact_argv, scrub_text

# Asked of the target's interpreter under -S: site.py does not run, so neither does any user code.
_PATH_PROBE = (
    "import json, site, sys; print(json.dumps({'path': sys.path[1:], 'site': site.getsitepackages(), "
    "'user_site': site.getusersitepackages(), 'version': sys.version.split()[0], 'prefix': sys.prefix}))"
)
# Python options that change start-up: -I isolates (no user site, no PYTHON* variables), -E ignores
# PYTHON* variables, -s no user site, -S no site.py at all (no .pth, no sitecustomize).
_NO_VALUE_FLAGS = frozenset("bBdEhiIOPqsSuvVx")
MAX_CHILDREN = 64
MAX_ARG = 2000


class ProcessError(ValueError):
    """The process cannot be snapshotted (gone, or another user's): one line for the user."""


def _read_nul(path: str) -> list[str]:
    with open(path, "rb") as f:
        data = f.read()
    return [x.decode("utf-8", "surrogateescape") for x in data.split(b"\0") if x]


def _environ_of(pid: int) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in _read_nul(f"/proc/{pid}/environ"):
        k, sep, v = item.partition("=")
        if sep and k:
            env.setdefault(k, v)
    return env


def _status(pid: int) -> dict[str, str]:
    out = {}
    with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def python_flags(cmdline: list[str]) -> set[str]:
    """The single-letter options given to a python before its script, -m or -c."""
    flags: set[str] = set()
    for arg in cmdline[1:]:
        if not arg.startswith("-") or arg == "-" or arg.startswith("--"):
            break
        letters = arg[1:]
        for i, c in enumerate(letters):
            if c in ("m", "c", "W", "X"):
                return flags if c in ("m", "c") else flags | set(letters[:i])
            if c in _NO_VALUE_FLAGS:
                flags.add(c)
    return flags


def redact_cmdline(args: list[str], hasher_key: bytes | None) -> list[str]:
    """Arguments as the snapshot keeps them: regdiag.snapshot.redact.redact_argv (default-deny, token by
    token; a hidden value is a keyed hash with its length), each bounded to MAX_ARG characters."""
    return [a[:MAX_ARG] for a in redact_argv(args, hasher_key or b"")]


@dataclass
class Process:
    pid: int
    environ: dict[str, str]
    cmdline: list[str]
    exe: str | None
    cwd: str | None
    uid: int | None
    ppid: int | None
    root: str = ""  # prefix for paths when the process lives in another mount namespace
    _interp: dict[str, Any] | None = field(default=None, repr=False)
    # Three groups ask for the interpreter at once (packages, startup, process): start it once.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def open(cls, pid: int) -> Process:
        if pid <= 0:
            raise ProcessError(f"--pid {pid}: not a process id")
        if not os.path.isdir("/proc/self"):
            raise ProcessError("--pid needs /proc (Linux)")
        if not os.path.exists(f"/proc/{pid}"):
            raise ProcessError(f"--pid {pid}: no such process")
        try:
            st = _status(pid)
            uid = int(st.get("Uid", "").split()[0]) if st.get("Uid") else None
        except (OSError, ValueError, IndexError):
            raise ProcessError(f"--pid {pid}: no such process") from None
        try:
            environ = _environ_of(pid)
            cmdline = _read_nul(f"/proc/{pid}/cmdline")
        except FileNotFoundError:
            raise ProcessError(f"--pid {pid}: no such process (it exited)") from None
        except PermissionError:
            if uid is not None and uid == os.geteuid():
                raise ProcessError(
                    f"--pid {pid}: cannot read its environment: permission denied by the kernel "
                    "(a protected or sandboxed process)"
                ) from None
            raise ProcessError(
                f"--pid {pid}: cannot read its environment: the process belongs to uid {uid}, you are uid "
                f"{os.geteuid()}; run regdiag as that user (or root)"
            ) from None
        if not cmdline and not environ:
            raise ProcessError(f"--pid {pid}: a kernel thread or a zombie has no environment to snapshot")

        def link(name: str) -> str | None:
            try:
                return os.readlink(f"/proc/{pid}/{name}")
            except OSError:
                return None

        root = link("root")
        ppid = st.get("PPid")
        return cls(
            pid=pid,
            environ=environ,
            cmdline=cmdline,
            exe=link("exe"),
            cwd=link("cwd"),
            uid=uid,
            ppid=int(ppid) if ppid and ppid.isdigit() else None,
            root="" if root in (None, "/") else f"/proc/{pid}/root",
        )

    # ------------------------------------------------------------------------------ interpreter

    @property
    def is_python(self) -> bool:
        name = os.path.basename((self.exe or "").removesuffix(" (deleted)"))
        return name.startswith("python") or name.startswith("pypy")

    def interpreter(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """{'path', 'site', 'user_site' (None when disabled), 'no_site', 'version', 'prefix'}.

        Raises RuntimeError with one line when it cannot be learned."""
        with self._lock:
            if self._interp is None:
                self._interp = self._ask_interpreter(timeout_s)
            return self._interp

    def _ask_interpreter(self, timeout_s: float) -> dict[str, Any]:
        if not self.is_python or not self.exe:
            raise RuntimeError(f"not a Python interpreter ({self.exe or 'executable unknown'})")
        if self.root:
            raise RuntimeError("the process runs in another mount namespace (a container): run regdiag there")
        flags = python_flags(self.cmdline)
        ignore_env = bool(flags & {"E", "I"})
        # run_cmd starts from our environment: blank our PYTHON* variables (Python treats an empty
        # one as unset) and give the target's own, so the path is the target's, not ours.
        env = {k: "" for k in os.environ if k.startswith("PYTHON")}
        env["LC_ALL"] = "C.UTF-8"
        for k in ("HOME", "PYTHONUSERBASE") + (() if ignore_env else ("PYTHONPATH", "PYTHONHOME")):
            if k in self.environ:
                env[k] = self.environ[k]
        cwd = self.cwd if self.cwd and os.path.isdir(self.cwd) else None  # relative PYTHONPATH entries
        res = F.run_cmd([self.exe, "-S", "-c", _PATH_PROBE], timeout_s, cwd=cwd, env=env)
        if not res.ok:
            raise RuntimeError(res.why(f"{os.path.basename(self.exe)} -S"))
        info = json.loads(res.stdout)
        no_user = bool(flags & {"s", "I"}) or (not ignore_env and bool(self.environ.get("PYTHONNOUSERSITE")))
        if no_user:
            info["user_site"] = None
        info["no_site"] = "S" in flags
        info["flags"] = "".join(sorted(flags))
        return info

    def search_path(self) -> list[str]:
        """Where its imports (and its packages' metadata) are found, as site.py would leave sys.path."""
        info = self.interpreter()
        from regdiag.snapshot.startup import pth_paths

        out = [p for p in info["path"] if p]
        if info["no_site"]:
            return out
        for d in ([info["user_site"]] if info["user_site"] else []) + list(info["site"]):
            if os.path.isdir(d):
                out.append(d)
                out.extend(pth_paths(d)[1])
        return out


# ------------------------------------------------------------------------------------ children


def children_of(pid: int) -> list[int]:
    """Descendants of pid (breadth first), by each process's parent in /proc/N/stat."""
    parent: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parent.setdefault(ppid, []).append(int(name))
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < MAX_CHILDREN:
        nxt = []
        for p in todo:
            kids = sorted(parent.get(p, []))
            out.extend(kids)
            nxt.extend(kids)
        todo = nxt
    return out[:MAX_CHILDREN]


def _env_delta(parent: dict[str, str], child: dict[str, str]) -> dict[str, str | None]:
    return {k: child.get(k) for k in sorted(set(parent) | set(child)) if parent.get(k) != child.get(k)}


def collect_children(proc: Process, hide: Any, key: bytes | None) -> F.Field:
    kids: list[dict[str, Any]] = []
    envs: dict[int, dict[str, str]] = {}
    for pid in children_of(proc.pid):
        try:
            env = _environ_of(pid)
            cmd = _read_nul(f"/proc/{pid}/cmdline")
        except OSError:
            continue  # exited meanwhile, or not ours
        envs[pid] = env
        delta = _env_delta(proc.environ, env)
        kids.append(
            {
                "pid": pid,
                "cmdline": redact_cmdline(cmd, key),
                "env_differs": {k: (None if v is None else hide(k, v)) for k, v in delta.items()},
            }
        )
    # Workers of one program (same command line) that differ in a variable: a rank set up unlike
    # the others. Per-rank variables (RANK, LOCAL_RANK, CUDA_VISIBLE_DEVICES per GPU) show up here too.
    by_cmd: dict[tuple[str, ...], list[int]] = {}
    for k in kids:
        by_cmd.setdefault(tuple(k["cmdline"]), []).append(k["pid"])
    flagged: dict[str, dict[str, str | None]] = {}
    for pids in by_cmd.values():
        if len(pids) < 2:
            continue
        names = set().union(*(envs[p] for p in pids))
        for n in sorted(names):
            vals = {p: envs[p].get(n) for p in pids}
            if len(set(vals.values())) > 1:
                flagged[n] = {str(p): (None if v is None else hide(n, v)) for p, v in vals.items()}
    return F.ok({"processes": kids, "differ_between_workers": flagged})


# ------------------------------------------------------------------------------------ groups


def collect_process(proc: Process, hide: Any, key: bytes | None) -> dict[str, Any]:
    fields: dict[str, F.Field] = {
        "pid": F.ok(proc.pid),
        "ppid": F.ok(proc.ppid),
        "uid": F.ok(proc.uid),
        "exe": F.ok(proc.exe),
        "cmdline": F.ok(redact_cmdline(proc.cmdline, key)),
        "cwd": F.ok(scrub_text(proc.cwd) if proc.cwd else None),
        "container": F.ok(bool(proc.root)),
    }

    def interp() -> Any:
        info = proc.interpreter()
        return {
            "version": info.get("version"),
            "prefix": info.get("prefix"),
            "flags": info.get("flags") or None,
        }

    fields["python"] = F.guard(interp) if proc.is_python else F.unsupported("not a Python interpreter")
    fields["children"] = F.guard(lambda: collect_children(proc, hide, key))
    return F.group(fields, status=F.OK)


def collect_libraries(proc: Process, timeout_s: float = 5.0) -> dict[str, Any]:
    from regdiag.snapshot import libs, nccl

    try:
        paths = libs.mapped(proc.pid)
    except OSError as e:
        return F.failed_group(F.ERROR, f"cannot read /proc/{proc.pid}/maps: {e.strerror or e}")
    described = libs.describe(paths, proc.root)
    # The NCCL version as the library itself reports it (ncclGetVersion in a short child process).
    nccl_libs = [
        {"path": proc.root + v["path"], "source": "mapped"}
        for v in described.values()
        if v.get("role") == "nccl" and not v.get("deleted")
    ]
    if nccl_libs:
        _, answers = nccl.versions(nccl_libs, timeout_s=timeout_s)
        by_path = {a["path"]: a for a in answers.get("value") or []}
        for v in described.values():
            a = by_path.get(proc.root + v["path"])
            if a and a.get("version") and not a.get("error"):
                v["nccl_version"] = a["version"]
    fields = {name: F.ok(v) for name, v in described.items()}
    group = F.group(fields, status=F.OK)
    group["count"] = len(fields)
    return group
