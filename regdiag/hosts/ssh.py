"""A remote machine over SSH (paramiko), behind the same Host interface as this machine.

The rules, and why (each one is a failure seen with plain paramiko or fabric):
- Host keys: RejectPolicy against the user's known_hosts files (UserKnownHostsFile honoured); a key is
  added only by `regdiag trust`. A changed key stops the connection.
- Command lines: the remote login shell parses what we send, so we send only `shell_join` of tokens,
  and only to a fixed POSIX wrapper (`/bin/sh -c WRAPPER ...`); bulk data goes on stdin.
- Output: stdout and stderr are drained together in one loop; reading one to the end before the other
  deadlocks as soon as the other fills the SSH window.
- Processes: closing a channel does not kill the remote process. The wrapper reports the session id
  that sshd gave the command (every process regdiag starts there is in it), runs the program under
  `timeout -k 5` when the host has GNU timeout, and starts a watcher on the channel's stdin: when the
  channel closes for any reason (done, Ctrl-C, dropped connection), the watcher kills what is left of
  the session. On a timeout or Ctrl-C we also kill the session at once over a second channel.
"""

from __future__ import annotations

import math
import os
import re
import select
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from regdiag.errors import BadInput, HostError
from regdiag.hosts.base import CommandResult, LineCallback
from regdiag.hosts.bundle import BundleHost
from regdiag.hosts.paramiko_import import paramiko
from regdiag.hosts.sshconfig import SSHTarget
from regdiag.hosts.sshconnect import CHANNEL_TIMEOUT, connect_chain, one_line

KILL_GRACE_S = 5  # `timeout -k`: seconds between TERM and KILL on the remote side
EOF_GRACE_S = 2.0  # after the exit status, how long to wait for output that a leftover child holds open
_POLL_S = 0.2

# The killer: TERM, then (1 s later) KILL every process of session $1 except itself. With "watch" it
# first waits for EOF on stdin, i.e. for the channel to close. The session's processes come from one
# `cat` of /proc/*/stat filtered by sed (a shell loop reading each file costs ~1 ms per process);
# without /proc, the session leader's process group.
KILLER = (
    's=$1; if [ "$2" = watch ]; then cat >/dev/null 2>&1; fi; '
    "for g in TERM KILL; do q=; "
    "if [ -d /proc/self ]; then "
    "for x in $(cat /proc/[0-9]*/stat 2>/dev/null | "
    'sed -n "s/^\\([0-9][0-9]*\\) (.*) . [0-9]* [0-9]* $s .*/\\1/p"); do '
    '[ "$x" = $$ ] || { kill -0 "$x" 2>/dev/null && q="$q $x"; }; done; '
    '[ -n "$q" ] && kill -s $g $q 2>/dev/null; '
    'else kill -s $g -- -"$s" 2>/dev/null && q=1; fi; '
    '[ -z "$q" ] && break; [ $g = TERM ] && sleep 1; done; exit 0'
)

# The wrapper: $1 killer script, $2 timeout seconds (0: none), $3 cwd ("-": home), $4 stdin file
# ("-": /dev/null), then the argv. It prints one marker line on stderr before running anything.
WRAPPER = (
    "k=$1; t=$2; d=$3; i=$4; shift 4; s=$$; f() { s=$4; }; "
    "if [ -r /proc/$$/stat ]; then read -r l </proc/$$/stat; f ${l##*) }; fi; "
    'u=0; if [ "$t" != 0 ] && timeout -k 1 9 true >/dev/null 2>&1; then u=1; fi; '
    'exec 3<&0; /bin/sh -c "$k" regdiag-kill "$s" watch <&3 >/dev/null 2>&1 & '
    'echo "regdiag-wrapper sid=$s timeout=$u" >&2; '
    'if [ "$d" != - ]; then cd -- "$d" || exit 125; fi; if [ "$i" = - ]; then i=/dev/null; fi; '
    "if [ $u = 1 ]; then timeout -k " + str(KILL_GRACE_S) + ' "$t" "$@" <"$i" 3<&-; else "$@" <"$i" 3<&-; fi'
)

_MKTEMP = 'umask 077 && d=$(mktemp -d "${TMPDIR:-/tmp}/regdiag.XXXXXXXXXX")'
_MARKER = re.compile(rb"^regdiag-wrapper sid=(\d+) timeout=([01])\r?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def shell_join(tokens: Sequence[str]) -> str:
    """shlex.join, plus quotes around a word that starts with `=`: shlex leaves `=0` bare, and zsh (a
    common login shell on GPU boxes) expands `=word` to the path of the command `word` (EQUALS)."""
    return " ".join("'" + t + "'" if t.startswith("=") and "'" not in t else shlex.quote(t) for t in tokens)


# ---------------------------------------------------------------------------------------------------
# Running


class _Lines:
    """Splits a byte stream into lines for a callback, keeping (optionally) every byte.

    On stderr it also takes out the wrapper's marker line (the first line that matches it).
    """

    def __init__(self, callback: LineCallback | None, keep: bool, marker: bool = False) -> None:
        self.callback = callback
        self.keep: list[bytes] | None = [] if keep else None
        self.pending: list[bytes] = []  # the start of a line not finished yet (a list: lines can be long)
        self.want_marker = marker
        self.sid: int | None = None
        self.remote_timeout = False

    def feed(self, data: bytes) -> None:
        if self.callback is None and not self.want_marker:
            if self.keep is not None:
                self.keep.extend(self.pending)
                self.keep.append(data)
            self.pending = []
            return
        parts = data.split(b"\n")
        if len(parts) == 1:
            self.pending.append(data)
            return
        self._line(b"".join(self.pending) + parts[0] + b"\n")
        for raw in parts[1:-1]:
            self._line(raw + b"\n")
        self.pending = [parts[-1]] if parts[-1] else []

    def _line(self, raw: bytes) -> None:
        if self.want_marker:
            m = _MARKER.match(raw.rstrip(b"\n"))
            if m:
                self.want_marker = False
                self.sid = int(m.group(1))
                self.remote_timeout = m.group(2) == b"1"
                return
        if self.keep is not None:
            self.keep.append(raw)
        if self.callback is not None:
            self.callback(raw.decode("utf-8", "replace").rstrip("\n").rstrip("\r"))

    def finish(self) -> bytes:
        """Deliver a last line without a newline; return everything kept."""
        if self.pending:
            last = b"".join(self.pending)
            self.pending = []
            if self.keep is not None:
                self.keep.append(last)
            if self.callback is not None:
                self.callback(last.decode("utf-8", "replace").rstrip("\r"))
        return b"".join(self.keep or [])


def _env_argv(argv: list[str], env: Mapping[str, str] | None, cwd: str | None) -> list[str]:
    """argv behind `env NAME=VALUE ...` for the variables `env` sets; refuses (BadInput) what the
    remote side cannot receive as given."""
    if not argv:
        raise BadInput("nothing to run (empty command)")
    prefix: list[str] = []
    if env:
        for k, v in env.items():
            if not _ENV_NAME.match(k):
                raise BadInput(f"environment variable name {k!r} is not valid")
            prefix.append(f"{k}={v}")
        if "=" in argv[0]:
            raise BadInput(f"program name {argv[0]!r} contains '=' and cannot be run with env")
        prefix.insert(0, "env")
    full = prefix + argv
    for a in [*full, cwd or ""]:
        if "\0" in a:
            raise BadInput("a command argument contains a NUL byte, which no program can receive")
    return full


class _Deadline:
    """When we stop waiting for a command with a timeout. With GNU timeout on the host the remote side
    stops the program itself (and reports 124 or 137); we step in only if that did not happen."""

    def __init__(self, t0: float, timeout: float | None, err: _Lines) -> None:
        self.t0 = t0
        self.timeout = timeout
        self.err = err  # its marker line says whether the host has GNU timeout

    def __call__(self) -> float:
        if self.timeout is None:
            return math.inf
        return self.t0 + self.timeout + (KILL_GRACE_S + 3 if self.err.remote_timeout else 0)

    def remote_timeout_hit(self, rc: int) -> bool:
        """Whether exit status `rc` is the host's `timeout` stopping the program at our timeout."""
        return self.timeout is not None and rc in (124, 137) and time.monotonic() - self.t0 >= self.timeout


class SSHHost(BundleHost):
    """A connected remote host. Connects in the constructor; errors are HostError with one line."""

    via = "ssh"

    def __init__(self, target: SSHTarget, python: str | None = None) -> None:
        self.target = target
        self.name = target.display
        self.python = python or "python3"
        self._clients = connect_chain(target)
        self._lock = threading.Lock()
        self._scratch: str | None = None
        self._uploads: dict[str, str] = {}
        self._closed = False

    # -- plumbing ---------------------------------------------------------------------------------

    @property
    def transport(self) -> paramiko.Transport:
        t = self._clients[-1].get_transport()
        if t is None or not t.is_active():
            raise HostError(f"{self.name}: the SSH connection is closed (lost or shut down)")
        return t

    def _channel(self) -> paramiko.Channel:
        try:
            return self.transport.open_session(timeout=CHANNEL_TIMEOUT)
        except HostError:
            raise
        except (paramiko.SSHException, EOFError, OSError) as e:
            if not self._alive():
                raise HostError(f"{self.name}: the SSH connection was lost") from None
            raise HostError(f"{self.name}: cannot open an SSH channel: {one_line(e)}") from None

    def _alive(self) -> bool:
        t = self._clients[-1].get_transport() if self._clients else None
        return t is not None and t.is_active()

    def unavailable(self) -> str | None:
        """The connection is gone (a bisect's lane takes no more launches: it does not come back)."""
        return None if self._closed or self._alive() else "its SSH connection was lost"

    def exec_simple(
        self, argv: Sequence[str], data: bytes = b"", timeout: float = 60.0
    ) -> tuple[int, bytes, bytes]:
        """Run argv without the wrapper, `data` on stdin then EOF; for regdiag's own short commands."""
        chan = self._channel()
        try:
            chan.settimeout(timeout)
            chan.exec_command(shell_join(argv))
            if data:
                chan.sendall(data)
            chan.shutdown_write()
            out, err = _Lines(None, True), _Lines(None, True)
            rc, _ = _pump(chan, out, err, time.monotonic() + timeout, self._alive)
            if rc is None:
                raise HostError(f"{self.name}: `{shlex.join(argv)[:60]}` did not finish within {timeout:g} s")
            return rc, out.finish(), err.finish()
        except (paramiko.SSHException, EOFError, OSError) as e:
            if not self._alive():
                raise HostError(f"{self.name}: the SSH connection was lost") from None
            raise HostError(f"{self.name}: {one_line(e)}") from None
        finally:
            chan.close()

    def kill_session(self, sid: int, timeout: float = 5.0) -> None:
        """TERM then KILL every process of the remote session `sid` (best effort, never raises)."""
        try:
            self.exec_simple(["/bin/sh", "-c", KILLER, "regdiag-kill", str(sid)], timeout=timeout)
        except Exception:
            pass

    # -- Host interface ---------------------------------------------------------------------------

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
        argv = [str(a) for a in argv]
        full = _env_argv(argv, env, cwd)
        stdin_path = "-"
        if stdin is not None:
            stdin_path = f"{self.scratch_dir()}/stdin-{os.urandom(6).hex()}"
            self.put_bytes(stdin, stdin_path)
        secs = 0 if timeout is None else max(1, math.ceil(timeout))
        cmdline = shell_join(
            ["/bin/sh", "-c", WRAPPER, "regdiag-run", KILLER, str(secs), cwd or "-", stdin_path, *full]
        )
        out = _Lines(on_stdout_line, keep_output)
        err = _Lines(on_stderr_line, True, marker=True)
        t0 = time.monotonic()
        chan = self._channel()
        try:
            rc, timed_out = self._wait(chan, cmdline, argv[0], out, err, _Deadline(t0, timeout, err))
        finally:
            chan.close()
        stdout = out.finish()
        stderr = err.finish()
        return CommandResult(argv, rc, stdout, stderr, time.monotonic() - t0, timed_out)

    def _wait(
        self,
        chan: paramiko.Channel,
        cmdline: str,
        program: str,
        out: _Lines,
        err: _Lines,
        deadline: _Deadline,
    ) -> tuple[int, bool]:
        """Start the wrapped command on `chan` and drain it to the end: (exit status, timed out).

        Past the deadline the remote session is killed; on Ctrl-C or an error of ours too, so that the
        remote program never outlives this call. A lost connection is a HostError.
        """
        try:
            chan.exec_command(cmdline)
            rc, lost = _pump(chan, out, err, deadline, self._alive)
            if lost:
                out.finish()
                err.finish()
                raise HostError(
                    f"{self.name}: the SSH connection was lost while running {program!r}; "
                    "results received before that are kept"
                )
            if rc is None:  # our deadline passed
                if err.sid is not None:
                    self.kill_session(err.sid)
                return -9, True
            return rc, deadline.remote_timeout_hit(rc)
        except BaseException as e:
            # Ctrl-C or an error of ours: the remote program must not outlive it.
            if err.sid is not None and self._alive():
                self.kill_session(err.sid)
            if isinstance(e, (paramiko.SSHException, EOFError, OSError)):
                if not self._alive():
                    raise HostError(
                        f"{self.name}: the SSH connection was lost while running {program!r}"
                    ) from None
                raise HostError(f"{self.name}: running {program!r} failed: {one_line(e)}") from None
            raise

    def make_tempdir(self) -> str:
        rc, out, err = self.exec_simple(["/bin/sh", "-c", _MKTEMP + ' && printf "%s\\n" "$d"'], timeout=30)
        path = out.decode("utf-8", "replace").strip().splitlines()[-1:] if rc == 0 else []
        if not path or not path[0].startswith("/"):
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
            raise HostError(f"{self.name}: cannot create a private temporary directory: {tail[0]}")
        return path[0]

    def remove_tree(self, path: str) -> None:
        if not path.startswith("/") or path.rstrip("/") == "":
            raise BadInput(f"refusing to remove {path!r} on {self.name}")
        self.exec_simple(["rm", "-rf", "--", path], timeout=60)

    def put_file(self, local: Path, remote: str) -> None:
        self.put_bytes(Path(local).read_bytes(), remote)

    def put_bytes(self, data: bytes, remote: str) -> None:
        """Write `data` to `remote` (mode 0600) through `cat` on stdin: no SFTP subsystem needed."""
        rc, _, err = self.exec_simple(
            ["/bin/sh", "-c", 'umask 077 && cat > "$1" && chmod 600 "$1"', "regdiag-put", remote],
            data,
            timeout=max(60.0, len(data) / 1e6),
        )
        if rc != 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {rc}"]
            raise HostError(f"{self.name}: cannot write {remote}: {tail[0]}")

    # -- regdiag's own files on the host ----------------------------------------------------------

    def scratch_dir(self) -> str:
        """A private directory for this connection, created on first use, removed by close()."""
        with self._lock:
            if self._scratch is None:
                self._scratch = self.make_tempdir()
            return self._scratch

    def upload_once(self, key: str, data: Callable[[], bytes], name: str) -> str:
        """Upload a file into scratch_dir() the first time `key` is asked for; return its remote path.

        The first upload of a connection also creates the scratch directory, in the same command: every
        command pays the login shell's start-up files, which on a GPU box (conda, pyenv) cost 0.1-0.5 s.
        """
        if "/" in name or name in ("", ".", ".."):
            raise BadInput(f"bad file name {name!r}")
        with self._lock:
            if key in self._uploads:
                return self._uploads[key]
            if self._scratch is None:
                rc, out, err = self.exec_simple(
                    [
                        "/bin/sh",
                        "-c",
                        _MKTEMP + ' && cat > "$d/$1" && printf "%s\\n" "$d"',
                        "regdiag-put",
                        name,
                    ],
                    data(),
                    timeout=120,
                )
                d = out.decode("utf-8", "replace").strip().splitlines()[-1:] if rc == 0 else []
                if not d or not d[0].startswith("/"):
                    tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {rc}"]
                    raise HostError(f"{self.name}: cannot upload to a private temporary directory: {tail[0]}")
                self._scratch = d[0]
                path = f"{d[0]}/{name}"
            else:
                path = f"{self._scratch}/{name}"
                self.put_bytes(data(), path)
            self._uploads[key] = path
            return path

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._scratch is not None and self._alive():
                # Started, not waited for: `rm` runs on after the connection closes (no terminal, so no
                # hangup), and waiting would add the login shell's start-up time to every command.
                chan = self._channel()
                chan.exec_command(shell_join(["rm", "-rf", "--", self._scratch]))
                chan.close()
        except Exception:
            pass  # the connection may be gone; the directory is private and in the host's tmp
        finally:
            for c in reversed(self._clients):
                c.close()

    def describe(self) -> dict[str, str]:
        d = super().describe()
        d["address"] = f"{self.target.user}@{self.target.hostname}:{self.target.port}"
        return d


def _drain(chan: paramiko.Channel, out: _Lines, err: _Lines) -> bool:
    """Feed whatever the channel holds now into `out` and `err`: True when there was something."""
    busy = False
    while chan.recv_ready():
        out.feed(chan.recv(65536))
        busy = True
    while chan.recv_stderr_ready():
        err.feed(chan.recv_stderr(65536))
        busy = True
    return busy


def _pump(
    chan: paramiko.Channel,
    out: _Lines,
    err: _Lines,
    deadline: float | Callable[[], float],
    alive: Callable[[], bool],
) -> tuple[int | None, bool]:
    """Drain stdout and stderr together until the exit status and EOF.

    Returns (exit status, False); (None, False) when the deadline passed; (None, True) when the
    connection was lost before the command finished.
    """
    status_at: float | None = None
    while True:
        if _drain(chan, out, err):
            continue
        now = time.monotonic()
        # paramiko sets status_event on close too, with exit_status left at -1: only a real status counts.
        if chan.exit_status != -1:
            if status_at is None:
                status_at = now
            if chan.eof_received or chan.closed or now - status_at > EOF_GRACE_S:
                # The transport thread may have buffered the last data, then EOF, after the drain above
                # looked (seen on a loaded 2-core machine: `ls` over SSH came back empty, exit 0).
                # Data precedes EOF on the channel, so one more drain now gets all of it.
                _drain(chan, out, err)
                return chan.exit_status, False
        elif chan.closed or not alive():
            _drain(chan, out, err)
            return (None, True) if not alive() else (-1, False)
        limit = deadline() if callable(deadline) else deadline
        if now >= limit:
            return None, False
        wait = min(_POLL_S, max(0.0, limit - now))
        if chan.eof_received:
            time.sleep(min(wait, 0.02))  # the channel's pipe stays readable after EOF: select would spin
        else:
            select.select([chan], [], [], wait)


def open_ssh(spec: str, python: str | None, options: Mapping[str, Any]) -> SSHHost:
    """`--host SPEC`: an alias of the SSH config (options["ssh_config"] replaces ~/.ssh/config) or
    [user@]host[:port], connected."""
    from regdiag.hosts.sshconfig import SSHConfigFile

    return SSHHost(SSHConfigFile(options.get("ssh_config")).target(spec), python)
