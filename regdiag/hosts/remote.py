"""Run regdiag's own code on a host: the snapshot, the probes, on one host or several at once.

For this machine with this interpreter the snapshot is collected in-process. Everywhere else (an SSH
host, or a local interpreter given with --python) the bundle is run with the host's python: uploaded
once per connection into a private directory, then `python BUNDLE snapshot|probe ...`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from regdiag.errors import HostError, RegdiagError
from regdiag.hosts.base import CommandResult, Host, LineCallback
from regdiag.hosts.bundle import check_interpreter, local_bundle_path, upload_bundle
from regdiag.hosts.local import LocalHost

SNAPSHOT_TIMEOUT_S = 10.0  # the collector's own default deadline
COMMAND_SLACK_S = 30.0  # interpreter start, upload, and the collector finishing after its deadline

T = TypeVar("T")


def runs_in_process(host: Host) -> bool:
    """True when `host` is this machine and its python is the one running regdiag."""
    if not isinstance(host, LocalHost):
        return False
    try:
        return os.path.samefile(host.python, sys.executable)
    except OSError:
        return host.python == sys.executable


def bundle_path(host: Host) -> str:
    """Where the bundle is on `host` (uploading it on first use for this connection)."""
    if isinstance(host, LocalHost):
        return str(local_bundle_path())
    return upload_bundle(host)


def run_bundle(
    host: Host,
    argv_after_bundle: Sequence[str],
    on_stdout_line: LineCallback | None = None,
    on_stderr_line: LineCallback | None = None,
    timeout: float | None = None,
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    keep_output: bool = True,
) -> CommandResult:
    """Run `HOST_PYTHON BUNDLE *argv_after_bundle` on `host`, streaming lines to the callbacks.

    e.g. run_bundle(host, ["probe", "spec-decode", "--preset", "tiny"], on_line, on_err, timeout=600).
    Lines arrive as the remote prints them (the probe runner stores each one as it comes, so a dropped
    connection loses nothing that finished). Returns the CommandResult whatever the program's exit status
    (a failing probe is the caller's business); on `timeout` the remote process tree is killed and
    `timed_out` is set.

    Raises HostError (exit 4) when the host's python is missing or older than 3.9, and when the SSH
    connection is lost mid-run (after the callbacks got every line that arrived).
    """
    path = bundle_path(host)
    res = host.run(
        [host.python, path, *argv_after_bundle],
        env=env,
        cwd=cwd,
        timeout=timeout,
        on_stdout_line=on_stdout_line,
        on_stderr_line=on_stderr_line,
        keep_output=keep_output,
    )
    check_interpreter(host, res)
    return res


def collect_snapshot(
    host: Host,
    repo: str | None = None,
    all_packages: bool = False,
    timeout_s: float = SNAPSHOT_TIMEOUT_S,
    pid: int | None = None,
) -> dict[str, Any]:
    """A regdiag.snapshot/2 record of `host` (its interpreter is host.python; `repo` is a path there;
    `pid` a running engine's process there).

    `timeout_s` is the collector's own deadline (a slow source is recorded as timed out); the remote
    command as a whole gets COMMAND_SLACK_S more before it is stopped. Raises HostError when the host
    cannot produce a record (connection, python missing or too old, timeout, a crash).
    """
    if runs_in_process(host):
        from regdiag.snapshot import collect

        return collect(repo=repo, all_packages=all_packages, timeout_s=timeout_s, via="local", pid=pid)
    argv = ["snapshot", "--via", host.via, "--timeout", f"{timeout_s:g}"]
    if repo is not None:
        argv += ["--repo", repo]
    if all_packages:
        argv.append("--all-packages")
    if pid is not None:
        argv += ["--pid", str(pid)]
    limit = timeout_s + COMMAND_SLACK_S
    res = run_bundle(host, argv, timeout=limit)
    if res.timed_out:
        raise HostError(f"{host.name}: the snapshot did not finish within {limit:g} s (stopped it)")
    if res.returncode != 0:
        raise HostError(
            f"{host.name}: the snapshot failed: {res.stderr_tail() or f'exit status {res.returncode}'}"
        )
    from regdiag.records import UnusableJSON

    try:
        record = _json_record(res.stdout)
    except UnusableJSON as e:  # which of the two values counts would be the parser's choice
        raise HostError(f"{host.name}: the snapshot record: {e}") from None
    if record is None:
        raise HostError(f"{host.name}: the snapshot printed no record (stdout ends {res.stdout[-120:]!r})")
    from regdiag.records import RecordError, check_record

    try:
        check_record(record, f"snapshot from {host.name}", expect="snapshot")
    except RecordError as e:
        raise HostError(str(e)) from None
    origin = record.setdefault("origin", {})
    if isinstance(origin, dict):
        origin.setdefault("via", host.via)
        origin["target"] = host.name  # the name the user gave; origin.host is what the host calls itself
    return record


def _json_record(stdout: bytes) -> dict[str, Any] | None:
    from regdiag.records import loads_json

    # Login scripts on the host may print to stdout before the bundle runs: the record is the JSON
    # object that starts at the beginning of a line and runs to the end.
    text = stdout.decode("utf-8", "replace")
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n" and text[i + 1 : i + 2] == "{"]
    for start in starts:
        try:
            value = loads_json(text[start:])  # a key given twice: DuplicateKey
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


@dataclass
class HostOutcome(Generic[T]):
    """What one host gave: a value, or the one-line error that stopped it (never both)."""

    host: Host
    value: T | None = None
    error: RegdiagError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def for_each_host(
    hosts: Sequence[Host], fn: Callable[[Host], T], *, max_workers: int = 16
) -> list[HostOutcome[T]]:
    """Run fn(host) on every host at once (threads); outcomes in the order of `hosts`, kept apart.

    A RegdiagError on one host is recorded in its outcome and does not stop the others; any other
    exception propagates. On Ctrl-C the caller closes the hosts, which ends the remote work.
    """
    if len(hosts) == 1:
        try:
            return [HostOutcome(hosts[0], fn(hosts[0]))]
        except RegdiagError as e:
            return [HostOutcome(hosts[0], error=e)]

    def one(h: Host) -> HostOutcome[T]:
        try:
            return HostOutcome(h, fn(h))
        except RegdiagError as e:
            return HostOutcome(h, error=e)

    pool = ThreadPoolExecutor(max_workers=min(max_workers, len(hosts)), thread_name_prefix="regdiag-host")
    try:
        futures = [pool.submit(one, h) for h in hosts]
        return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def check_host(host: Host, timeout: float = 60.0) -> dict[str, Any]:
    """Can regdiag run on `host`? Runs the bundle's `version` there; HostError with the reason if not."""
    import time

    t0 = time.monotonic()
    res = run_bundle(host, ["version"], timeout=timeout)
    if res.timed_out:
        raise HostError(f"{host.name}: `{host.python}` did not answer within {timeout:g} s")
    info = _json_record(res.stdout)
    if res.returncode != 0 or info is None:
        raise HostError(
            f"{host.name}: the bundle failed: {res.stderr_tail() or f'exit status {res.returncode}'}"
        )
    out = {**host.describe(), "python_version": info.get("python"), "executable": info.get("executable")}
    out["regdiag"] = info.get("regdiag")
    out["round_trip_s"] = round(time.monotonic() - t0, 3)
    return out


def collect_snapshots(
    hosts: Sequence[Host],
    repo: str | None = None,
    all_packages: bool = False,
    timeout_s: float = SNAPSHOT_TIMEOUT_S,
    pid: int | None = None,
) -> list[HostOutcome[dict[str, Any]]]:
    """collect_snapshot on every host at once; one outcome per host, in order (for `--host a --host b`)."""
    return for_each_host(hosts, lambda h: collect_snapshot(h, repo, all_packages, timeout_s, pid))


@dataclass
class TargetOutcome(Generic[T]):
    """What one `--host` spec gave: a value, or the one-line error that stopped it (never both).

    Unlike HostOutcome the host is connected inside the worker, so a host that cannot be reached is
    one failed outcome and the others go on."""

    spec: str
    value: T | None = None
    error: RegdiagError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def for_each_target(
    specs: Sequence[str],
    python: str | None,
    ssh_config: str | os.PathLike[str] | None,
    fn: Callable[[Host], T],
    *,
    max_workers: int = 16,
) -> list[TargetOutcome[T]]:
    """Connect to each spec and run fn(host) there, every host in its own thread at once; outcomes in
    the order of `specs` (duplicates removed), each host closed when its fn returns.

    A RegdiagError while connecting or in fn is that host's outcome; any other exception propagates. On
    Ctrl-C every host still open is closed (which stops its remote work) before the interrupt goes on.
    """
    from regdiag.hosts.resolve import open_host

    unique = list(dict.fromkeys(specs))
    open_now: list[Host] = []
    lock = threading.Lock()

    def one(spec: str) -> TargetOutcome[T]:
        try:
            host = open_host(spec, python, ssh_config)
        except RegdiagError as e:
            return TargetOutcome(spec, error=e)
        with lock:
            open_now.append(host)
        try:
            return TargetOutcome(spec, fn(host))
        except RegdiagError as e:
            return TargetOutcome(spec, error=e)
        finally:
            with lock:
                open_now.remove(host)
            host.close()

    pool = ThreadPoolExecutor(max_workers=min(max_workers, len(unique)), thread_name_prefix="regdiag-host")
    try:
        futures = [pool.submit(one, s) for s in unique]
        return [f.result() for f in futures]
    except BaseException:
        with lock:
            hosts = list(open_now)
        for h in hosts:
            try:
                h.close()
            except Exception:  # noqa: BLE001 - closing is best effort; the interrupt goes on
                pass
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
