"""A real OpenSSH sshd on 127.0.0.1 for the SSH tests, started once per test session, stopped by PID.

Layout of its private directory (0755 so that the second test user can read its authorized_keys):
    sshd_config, ssh_host_ed25519_key[.pub], id_ed25519[.pub] (the client key), authorized_keys,
    known_hosts (the host key as `[127.0.0.1]:PORT ...`), ssh_config (Host alias `regdiag-test`), sshd.log

When running as root, two more users are created with useradd (and removed with userdel at the end): one
with bash and one with zsh as login shell (when zsh exists), both with empty homes, so that the quoting
tests run through each shell without the cost of root's own shell start-up files.
"""

from __future__ import annotations

import getpass
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass
class Sshd:
    dir: Path
    port: int
    pid: int
    user: str
    shell_users: dict[str, str]  # login shell name -> user name
    client_key: Path
    host_pub: str  # "ssh-ed25519 AAAA..."
    known_hosts: Path
    ssh_config: Path
    log: Path

    @property
    def spec(self) -> str:
        return f"{self.user}@127.0.0.1:{self.port}"

    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_pub}"

    def write_config(
        self, path: Path, body: str = "", *, known_hosts: Path | None = None, user: str | None = None
    ) -> Path:
        """An ssh_config with alias `regdiag-test` for this sshd, plus `body` (more Host blocks first)."""
        path.write_text(
            f"{body}\n"
            "Host regdiag-test\n"
            "  HostName 127.0.0.1\n"
            f"  Port {self.port}\n"
            f"  User {user or self.user}\n"
            f"  IdentityFile {self.client_key}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {known_hosts or self.known_hosts}\n"
            "  GlobalKnownHostsFile none\n"
            "  ConnectTimeout 5\n",
            encoding="utf-8",
        )
        return path

    def children(self) -> list[int]:
        """PIDs of the per-connection sshd processes (all descendants that are sshd)."""
        out = []
        for pid in _descendants(self.pid):
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                continue
            if "sshd" in os.path.basename(exe):
                out.append(pid)
        return out


def _descendants(root: int) -> list[int]:
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        parent[int(d)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found.extend(kids)
        frontier.extend(kids)
    return found


def session_pids(sid: int) -> list[int]:
    """Live processes of a session (to check that nothing regdiag started is left)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(d))
    return out


def pids_with_arg(marker: str) -> list[int]:
    """Live, non-zombie processes whose command line contains `marker`."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            out.append(int(d))
    return out


def wait_until(pred, timeout: float = 10.0, interval: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "regdiag-test", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def _make_user(shell: str | None, home: Path) -> str | None:
    if shell is None or os.geteuid() != 0 or shutil.which("useradd") is None:
        return None
    name = f"rd{Path(shell).name}{secrets.token_hex(3)}"
    # "-p *": no password, but not a locked account (sshd without PAM refuses locked ones).
    r = subprocess.run(
        ["useradd", "-M", "-p", "*", "-d", str(home), "-s", shell, name],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        return None
    home.mkdir(mode=0o700)
    shutil.chown(home, name, name)
    return name


def start_sshd() -> Sshd:
    if not os.path.isfile(SSHD):
        pytest.skip("OpenSSH server not installed (apt-get install openssh-server); the SSH tests need it")
    d = Path(tempfile.mkdtemp(prefix="regdiag-sshd-"))
    d.chmod(0o755)
    host_pub = _keygen(d / "ssh_host_ed25519_key")
    _keygen(d / "id_ed25519")
    (d / "id_ed25519.pub").chmod(0o644)
    auth = d / "authorized_keys"
    auth.write_text((d / "id_ed25519.pub").read_text())
    auth.chmod(0o644)
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    shell_users = {}
    for shell in ("bash", "zsh"):
        user = _make_user(shutil.which(shell), d / f"home-{shell}")
        if user is not None:
            shell_users[shell] = user
    log = d / "sshd.log"
    for _attempt in range(5):
        port = free_port()
        cfg = d / "sshd_config"
        cfg.write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'ssh_host_ed25519_key'}\n"
            f"PidFile {d / 'sshd.pid'}\nAuthorizedKeysFile {auth}\nStrictModes no\nUsePAM no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            "PermitRootLogin prohibit-password\nAllowTcpForwarding yes\nMaxSessions 64\nMaxStartups 64\n"
            "Subsystem sftp internal-sftp\nLogLevel VERBOSE\n"
        )
        logf = open(log, "ab")  # noqa: SIM115 - handed to the daemon
        proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(cfg)], stdout=logf, stderr=logf, stdin=subprocess.DEVNULL
        )
        logf.close()
        ok = wait_until(
            lambda p=proc: "Server listening" in log.read_text(errors="replace") or p.poll() is not None, 10
        )
        if ok and proc.poll() is None:
            known = d / "known_hosts"
            known.write_text(f"[127.0.0.1]:{port} {host_pub}\n")
            srv = Sshd(
                dir=d,
                port=port,
                pid=proc.pid,
                user=getpass.getuser(),
                shell_users=shell_users,
                client_key=d / "id_ed25519",
                host_pub=host_pub,
                known_hosts=known,
                ssh_config=d / "ssh_config",
                log=log,
            )
            srv.write_config(srv.ssh_config)
            srv._proc = proc  # type: ignore[attr-defined]
            return srv
        proc.wait()  # lost the port to someone else, or a config error: retry, then report
    for user in shell_users.values():
        subprocess.run(["userdel", user], capture_output=True, check=False)
    raise RuntimeError(f"sshd did not start: {log.read_text(errors='replace')[-2000:]}")


def stop_sshd(srv: Sshd) -> None:
    for pid in [*srv.children(), srv.pid]:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    proc: subprocess.Popen[bytes] = srv._proc  # type: ignore[attr-defined]
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for user in srv.shell_users.values():
        subprocess.run(["userdel", user], capture_output=True, check=False)
    shutil.rmtree(srv.dir, ignore_errors=True)


_shared: Sshd | None = None
_users = 0
_lock = threading.Lock()


@pytest.fixture(scope="session")
def sshd() -> Iterator[Sshd]:
    """One sshd for the whole session, shared by every test module that imports this fixture."""
    global _shared, _users
    with _lock:
        if _shared is None:
            _shared = start_sshd()
        _users += 1
    try:
        yield _shared
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _shared is not None:
                stop_sshd(_shared)
                _shared = None


def pids_holding_connection(server_port: int, client_port: int) -> list[int]:
    """PIDs (the per-connection sshd processes) holding the server side of one loopback TCP connection."""
    want_local = f"0100007F:{server_port:04X}"
    want_remote = f"0100007F:{client_port:04X}"
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[1] == want_local and f[2] == want_remote:
            inodes.add(f"socket:[{f[9]}]")
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{d}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{d}/fd/{fd}") in inodes:
                    out.append(int(d))
                    break
            except OSError:
                continue
    return out


class SilentListener:
    """A TCP server that accepts connections and never says a word (no SSH banner)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = int(self.sock.getsockname()[1])
        self.conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.conns.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for c in self.conns:
            c.close()
        self.sock.close()
