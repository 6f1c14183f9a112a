"""This machine, through subprocess."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from regdiag.hosts.base import CommandResult, Host, LineCallback
from regdiag.interrupts import deferred


def _pump(stream: IO[bytes], sink: list[bytes] | None, callback: LineCallback | None) -> None:
    for raw in iter(stream.readline, b""):
        if sink is not None:
            sink.append(raw)
        if callback is not None:
            callback(raw.decode("utf-8", "replace").rstrip("\n"))
    stream.close()


def kill_tree(proc: subprocess.Popen[bytes], grace_s: float = 2.0, gone_s: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL what is left after the grace period, and return only once the
    group is gone (up to `gone_s`): a killed process holding GPU memory frees it when it has exited, not
    when the signal was sent, and on a loaded machine that can take a while."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    # The leader is gone; make sure nothing of its group is left either, and wait until it has left.
    deadline = time.monotonic() + gone_s
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if not _live_members(proc.pid):
            return
        time.sleep(0.05)


def _live_members(pgid: int) -> bool:
    """Whether a process of group `pgid` is still running: zombies (dead, waiting for init to reap them)
    do not count. Without /proc, any member counts."""
    if not os.path.isdir("/proc/self"):
        return True
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                rest = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(rest) > 2 and int(rest[2]) == pgid and rest[0] != b"Z":
            return True
    return False


def _spawn(
    argv: Sequence[str], stdin: bytes | None, env: Mapping[str, str] | None, cwd: str | None
) -> subprocess.Popen[bytes] | CommandResult:
    """Start argv in its own process group (so that a timeout kills the whole tree), `env` added to this
    process's environment; a program that cannot be started is a result with the shell's status for it
    (127 not found, 126 not executable)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc: subprocess.Popen[bytes] | None = None
    try:
        with deferred():  # a Ctrl-C here would orphan a child that was already started
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=full_env,
                cwd=cwd,
                start_new_session=True,  # its own process group, so a timeout kills the whole tree
            )
    except FileNotFoundError:
        return CommandResult(list(argv), 127, b"", f"{argv[0]}: not found\n".encode(), 0.0)
    except PermissionError:
        return CommandResult(list(argv), 126, b"", f"{argv[0]}: permission denied\n".encode(), 0.0)
    except KeyboardInterrupt:  # held back until the child existed: stop it, then go
        if proc is not None:
            kill_tree(proc)
        raise
    return proc


def _wait(proc: subprocess.Popen[bytes], stdin: bytes | None, timeout: float | None) -> bool:
    """Feed `stdin`, wait for the process; whether it ran past `timeout` (then its tree is killed, as on
    Ctrl-C or any error here)."""
    timed_out = False
    try:
        if stdin is not None:
            assert proc.stdin is not None
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(proc)
    except BaseException:
        kill_tree(proc)
        raise
    return timed_out


class LocalHost(Host):
    via = "local"
    builds_here = True

    def regdiag_argv(self, entry: Sequence[str], python: str | None = None) -> list[str]:
        """A probe runs from this regdiag's own probes/ (no bundle needed here); anything else from the
        bundle's local copy."""
        return local_regdiag_argv(entry, python or self.python)

    def check_regdiag(self, res: CommandResult) -> None:
        pass  # a probe that cannot start here is the launch's own failure (its exit status)

    def __init__(self, python: str | None = None) -> None:
        self.name = socket.gethostname()
        self.python = python or sys.executable
        self._running: set[subprocess.Popen[bytes]] = set()  # what run() started and waits for

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        on_stdout_line: LineCallback | None = None,
        on_stderr_line: LineCallback | None = None,
        keep_output: bool = True,
    ) -> CommandResult:
        t0 = time.monotonic()
        proc = _spawn(argv, stdin, env, cwd)
        if isinstance(proc, CommandResult):
            return proc
        self._running.add(proc)
        out: list[bytes] | None = [] if keep_output else None
        err: list[bytes] = []
        assert proc.stdout is not None and proc.stderr is not None
        threads = [
            threading.Thread(target=_pump, args=(proc.stdout, out, on_stdout_line), daemon=True),
            threading.Thread(target=_pump, args=(proc.stderr, err, on_stderr_line), daemon=True),
        ]
        for t in threads:
            t.start()
        try:
            timed_out = _wait(proc, stdin, timeout)
        finally:
            self._running.discard(proc)
            for t in threads:
                t.join(timeout=5.0)
        return CommandResult(
            list(argv),
            proc.returncode if proc.returncode is not None else -9,
            b"".join(out or []),
            b"".join(err),
            time.monotonic() - t0,
            timed_out,
        )

    def kill_running(self) -> None:
        """End every process run() started and still waits for (run in other threads: bisect's lanes)."""
        for proc in list(self._running):
            kill_tree(proc)

    def make_tempdir(self) -> str:
        return tempfile.mkdtemp(prefix="regdiag-")  # mkdtemp creates it 0700

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def put_file(self, local: Path, remote: str) -> None:
        shutil.copyfile(local, remote)
        os.chmod(remote, 0o600)


def local_regdiag_argv(entry: Sequence[str], python: str) -> list[str]:
    """regdiag's own code on this machine's filesystem: `probe SCRIPT ...` runs the script from probes/,
    other entries the bundle's local copy (also for nodes that share this filesystem)."""
    from regdiag.hosts.bundle import local_bundle_path
    from regdiag.probe_modules import probes_dir

    d = probes_dir()
    if entry and entry[0] == "probe" and len(entry) > 1 and d is not None and (d / entry[1]).is_file():
        return [python, str(d / entry[1]), *entry[2:]]
    if entry and entry[0] == "warm" and d is not None and (d / "_warm.py").is_file():
        # a launch's client is stdlib only: without site-packages it starts in half the time
        fast = ["-S"] if entry[1:2] == ["launch"] else []
        return [python, *fast, str(d / "_warm.py"), *entry[1:]]
    return [python, str(local_bundle_path()), *entry]
