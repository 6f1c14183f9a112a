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
import time
from typing import Any

from regdiag.records import SNAPSHOT_SCHEMA
from regdiag.snapshot import fields as F

GROUPS = ("engine", "packages", "gpu", "env", "startup", "host")
PROCESS_GROUPS = ("process", "libraries")
DEFAULT_TIMEOUT_S = 10.0


def _version() -> str:
    try:
        from regdiag import __version__
    except ImportError:
        return "unknown"
    return __version__


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
    deadline = F.Deadline(timeout_s)
    # Sub-call timeouts leave room for the group to report before the snapshot's own deadline.
    call_timeout = max(timeout_s * 0.8, 0.1)

    from regdiag.snapshot import engine, env, gpu, host, packages, startup

    hasher = env.Hasher()

    # The package list is needed by two groups (engine: which checkout; packages): read it once, in
    # the packages thread, and let the engine thread wait for it only when no --repo was given.
    dists_box: dict[str, Any] = {}
    import threading

    dists_ready = threading.Event()

    def run_packages() -> dict[str, Any]:
        note = None
        try:
            path = None
            if proc is not None:
                try:  # the process's own interpreter decides which packages it imports
                    path = proc.search_path()
                except (RuntimeError, ValueError, KeyError) as e:
                    note = f"packages of the snapshot's interpreter, not of pid {proc.pid}: {e}"
            dists_box["d"] = packages.installed(path)
        finally:
            dists_ready.set()
        group = packages.collect(all_packages=all_packages, timeout_s=call_timeout, dists=dists_box["d"])
        if note:
            group["note"] = F.one_line(note)
        return group

    def run_env() -> dict[str, Any]:
        startup_group, env_group = startup.collect(hasher, proc, environ)
        return {"env": env_group, "startup": startup_group}

    def run_engine() -> dict[str, Any]:
        dists = None
        if not repo:
            dists_ready.wait(deadline.left())
            dists = dists_box.get("d")
        return engine.collect(repo=repo, dists=dists, timeout_s=call_timeout, backend=git_backend)

    jobs = {
        "gpu": lambda: gpu.collect(timeout_s=call_timeout, source=gpu_source),
        "engine": run_engine,
        "packages": run_packages,
        "env": run_env,
        "host": lambda: host.collect(use_psutil=use_psutil),
    }
    names = list(GROUPS)
    if proc is not None:
        from regdiag.snapshot import process

        key = hasher.key

        def hide(name: str, value: str) -> str:
            return hasher.value(name, value)[0]

        jobs["process"] = lambda: process.collect_process(proc, hide, key)
        jobs["libraries"] = lambda: process.collect_libraries(proc, timeout_s=call_timeout)
        names += list(PROCESS_GROUPS)
    took: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        def run() -> Any:
            t = time.monotonic()
            try:
                return fn()
            finally:
                took[name] = round(time.monotonic() - t, 3)

        return run

    results = F.run_threads({k: timed(k, fn) for k, fn in jobs.items()}, deadline)
    # One job makes two groups: the effective environment depends on the start-up files.
    env_status, env_value = results.pop("env")
    for name in ("env", "startup"):
        results[name] = (env_status, env_value[name] if env_status == F.OK else env_value)
        if env_status == F.OK and "env" in took:
            took[name] = took["env"]
    groups: dict[str, Any] = {}
    for name in names:
        status, value = results[name]
        if status == F.OK:
            groups[name] = value
            value["duration_s"] = took.get(name)
        elif status == F.TIMEOUT:
            groups[name] = F.failed_group(F.TIMEOUT, f"{name} did not answer within {timeout_s:g} s")
        else:
            groups[name] = F.failed_group(F.ERROR, f"{name} collector failed: {value}")
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
