"""Record the environment of this host: engine checkout, packages, GPUs, env vars, host.

    collect(repo=None, all_packages=False, timeout_s=10.0, via="local", pid=None) -> regdiag.snapshot/2 record

With `pid`, the snapshot is of that running process (an engine server): its effective environment,
command line, loaded libraries, start-up files and children (groups env, process, libraries, startup)
and the packages on its interpreter's path; engine, gpu and host are the machine's as always.
Process.open raises ProcessError (one line) before anything runs when the pid cannot be read.

Each group runs in its own thread against one deadline; a group still running at the deadline is
recorded as `timeout` and the snapshot returns anyway. Nothing here imports torch, typer or rich:
this package (with regdiag/records.py) is what runs on a remote host with a bare python3 >= 3.9.
"""

from __future__ import annotations

import datetime as _dt
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from regdiag.records import SNAPSHOT_SCHEMA
from regdiag.snapshot import fields as F

GROUPS = ("engine", "packages", "gpu", "env", "startup", "host")
PROCESS_GROUPS = ("process", "libraries")
DEFAULT_TIMEOUT_S = 10.0


def _version() -> str:
    try:
        from regdiag.version import __version__
    except ImportError:
        return "unknown"
    return __version__


@dataclass
class _Taking:
    """One snapshot being taken: its options, its deadline, and what its collectors share."""

    repo: str | None
    all_packages: bool
    call_timeout: float  # for a collector's own sub-calls: room to report before the deadline
    deadline: F.Deadline
    gpu_source: str
    git_backend: str
    use_psutil: bool
    environ: dict[str, str] | None
    proc: Any  # regdiag.snapshot.process.Process, or None for this interpreter
    hasher: Any
    # The package list is needed by two groups (engine: which checkout; packages): read once, in the
    # packages thread; the engine thread waits for it only when no --repo was given.
    dists: Any = None  # packages.installed(...) once dists_ready is set
    dists_ready: threading.Event = field(default_factory=threading.Event)


def _gpu(t: _Taking) -> dict[str, Any]:
    from regdiag.snapshot import gpu

    return gpu.collect(timeout_s=t.call_timeout, source=t.gpu_source)


def _engine(t: _Taking) -> dict[str, Any]:
    from regdiag.snapshot import engine

    if not t.repo:
        t.dists_ready.wait(t.deadline.left())
    return engine.collect(
        repo=t.repo,
        dists=None if t.repo else t.dists,
        timeout_s=t.call_timeout,
        backend=t.git_backend,
        argv=t.proc.cmdline if t.proc is not None else None,
    )


def _packages(t: _Taking) -> dict[str, Any]:
    from regdiag.snapshot import packages

    note = None
    try:
        path = None
        if t.proc is not None:
            try:  # the process's own interpreter decides which packages it imports
                path = t.proc.search_path()
            except (RuntimeError, ValueError, KeyError) as e:
                note = f"packages of the snapshot's interpreter, not of pid {t.proc.pid}: {e}"
        t.dists = packages.installed(path)
    finally:
        t.dists_ready.set()
    group = packages.collect(all_packages=t.all_packages, timeout_s=t.call_timeout, dists=t.dists)
    if note:
        group["note"] = F.one_line(note)
    return group


def _env(t: _Taking) -> dict[str, Any]:
    from regdiag.snapshot import startup

    startup_group, env_group = startup.collect(t.hasher, t.proc, t.environ)
    return {"env": env_group, "startup": startup_group}


def _host(t: _Taking) -> dict[str, Any]:
    from regdiag.snapshot import host

    return host.collect(use_psutil=t.use_psutil)


def _process(t: _Taking) -> dict[str, Any]:
    from regdiag.snapshot import process

    def hide(name: str, value: str) -> str:
        return t.hasher.value(name, value)[0]

    return process.collect_process(t.proc, hide, t.hasher.key)


def _libraries(t: _Taking) -> dict[str, Any]:
    from regdiag.snapshot import process

    return process.collect_libraries(t.proc, timeout_s=t.call_timeout)


Collector = Callable[[_Taking], dict[str, Any]]
# Each collector runs in its own thread (in this order: the slow ones first) and makes the groups named
# with it; one that makes several returns {group: group}. The effective environment depends on the
# start-up files, so one collector makes both.
COLLECTORS: dict[str, tuple[Collector, tuple[str, ...]]] = {
    "gpu": (_gpu, ("gpu",)),
    "engine": (_engine, ("engine",)),
    "packages": (_packages, ("packages",)),
    "env": (_env, ("env", "startup")),
    "host": (_host, ("host",)),
}
# Added for a snapshot of a running process (--pid).
PROCESS_COLLECTORS: dict[str, tuple[Collector, tuple[str, ...]]] = {
    "process": (_process, ("process",)),
    "libraries": (_libraries, ("libraries",)),
}


def _run_collectors(
    taking: _Taking, collectors: dict[str, tuple[Collector, tuple[str, ...]]]
) -> dict[str, tuple[str, Any, float | None]]:
    """Group name -> (status, the group or why it failed, seconds its collector took)."""
    took: dict[str, float] = {}

    def timed(name: str, fn: Collector) -> Callable[[], Any]:
        def run() -> Any:
            t = time.monotonic()
            try:
                return fn(taking)
            finally:
                took[name] = round(time.monotonic() - t, 3)

        return run

    jobs = {name: timed(name, fn) for name, (fn, _) in collectors.items()}
    results = F.run_threads(jobs, taking.deadline)
    out: dict[str, tuple[str, Any, float | None]] = {}
    for name, (_, groups) in collectors.items():
        status, value = results[name]
        for group in groups:
            one = value[group] if status == F.OK and len(groups) > 1 else value
            out[group] = (status, one, took.get(name))
    return out


def _group(name: str, status: str, value: Any, took: float | None, timeout_s: float) -> dict[str, Any]:
    if status == F.OK:
        value["duration_s"] = took
        return value
    if status == F.TIMEOUT:
        return F.failed_group(F.TIMEOUT, f"{name} did not answer within {timeout_s:g} s")
    return F.failed_group(F.ERROR, f"{name} collector failed: {value}")


def collect(
    repo: str | None = None,
    all_packages: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    via: str = "local",
    *,
    gpu_source: str = "auto",
    git_backend: str = "auto",
    use_psutil: bool = True,
    environ: dict[str, str] | None = None,
    pid: int | None = None,
) -> dict[str, Any]:
    """A regdiag.snapshot record (records.SNAPSHOT_SCHEMA). Never raises for a failing source: see
    each field's status.

    gpu_source / git_backend / use_psutil choose the backends (tests and the remote side use them);
    environ replaces os.environ for the env group only.
    """
    proc = None
    if pid is not None:
        from regdiag.snapshot.process import Process

        proc = Process.open(pid)
    t0 = time.monotonic()
    created = _dt.datetime.now(_dt.timezone.utc).isoformat()
    # Imported here, before the threads start, rather than by each thread as it first runs.
    from regdiag.snapshot import engine, env, gpu, host, packages, startup  # noqa: F401

    taking = _Taking(
        repo=repo,
        all_packages=all_packages,
        call_timeout=max(timeout_s * 0.8, 0.1),
        deadline=F.Deadline(timeout_s),
        gpu_source=gpu_source,
        git_backend=git_backend,
        use_psutil=use_psutil,
        environ=environ,
        proc=proc,
        hasher=env.Hasher(),
    )
    collectors = dict(COLLECTORS)
    if proc is not None:
        from regdiag.snapshot import process  # noqa: F401

        collectors.update(PROCESS_COLLECTORS)
    results = _run_collectors(taking, collectors)
    names = list(GROUPS) if proc is None else [*GROUPS, *PROCESS_GROUPS]
    groups = {name: _group(name, *results[name], timeout_s) for name in names}
    origin: dict[str, Any] = {"host": socket.gethostname(), "python": sys.executable, "via": via}
    if proc is not None:
        origin["pid"] = proc.pid
    return {
        "schema": SNAPSHOT_SCHEMA,
        "created": created,
        "regdiag_version": _version(),
        "duration_s": round(time.monotonic() - t0, 3),
        "origin": origin,
        "groups": groups,
    }


def snapshot_of(record: dict[str, Any]) -> dict[str, Any]:
    """The snapshot in a record: the record itself, or a run's snapshot_before."""
    schema = str(record.get("schema", ""))
    if schema.startswith("regdiag.run/"):
        snap = record.get("snapshot_before")
        if not isinstance(snap, dict):
            raise ValueError("run record has no snapshot_before")
        return snap
    return record


__all__ = ["DEFAULT_TIMEOUT_S", "GROUPS", "PROCESS_GROUPS", "collect", "snapshot_of"]
