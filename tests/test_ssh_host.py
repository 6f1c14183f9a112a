"""SSHHost against a real OpenSSH sshd on 127.0.0.1: arguments, output, stdin, env, processes, files."""

from __future__ import annotations

import json
import math
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sshd_helpers import Sshd, pids_with_arg, sshd, wait_until  # noqa: F401 - sshd is a fixture

from regdiag.errors import BadInput
from regdiag.hosts.resolve import open_host, open_hosts
from regdiag.hosts.ssh import KILL_GRACE_S, SSHHost, _Deadline, _env_argv, _Lines

pytestmark = pytest.mark.ssh

ECHO_ARGV = "import json,sys; sys.stdout.write(json.dumps(sys.argv[1:]))"
SYSTEM_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else "python3"


@pytest.fixture(scope="module")
def host(sshd: Sshd) -> Iterator[SSHHost]:  # noqa: F811
    h = open_host("regdiag-test", sys.executable, str(sshd.ssh_config))
    assert isinstance(h, SSHHost)
    yield h
    h.close()


def _shell_host(sshd: Sshd, shell: str, tmp: Path) -> SSHHost:  # noqa: F811
    user = sshd.shell_users.get(shell)
    if user is None:
        pytest.skip(f"no test user with {shell} as login shell ({shell} missing, or not running as root)")
    cfg = sshd.write_config(tmp / f"config-{shell}", user=user)
    h = open_host("regdiag-test", SYSTEM_PYTHON, str(cfg))
    assert isinstance(h, SSHHost)
    return h


@pytest.fixture(scope="module")
def bash_host(sshd: Sshd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHHost]:  # noqa: F811
    # The test user with bash as login shell; without one (not root), this user's own login shell.
    if "bash" in sshd.shell_users:
        h = _shell_host(sshd, "bash", tmp_path_factory.mktemp("bash"))
    else:
        h = open_host("regdiag-test", sys.executable, str(sshd.ssh_config))  # type: ignore[assignment]
    yield h
    h.close()


@pytest.fixture(scope="module")
def zsh_host(sshd: Sshd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHHost]:  # noqa: F811
    h = _shell_host(sshd, "zsh", tmp_path_factory.mktemp("zsh"))
    yield h
    h.close()


# Arguments that broke hand-written quoting, then anything at all (no NUL: no argv can hold one).
NASTY = [
    "",
    "'",
    '"',
    "'\"'\"'",
    "$HOME",
    "${PATH}",
    "$(id)",
    "`id`",
    ";",
    "a; rm -rf /tmp/nothing",
    "&&",
    "|",
    ">out",
    "<in",
    "*",
    "~",
    "~root",
    "!",
    "!!",
    "#",
    "\\",
    "\\'",
    "\n",
    "two\nlines",
    "\t",
    " ",
    "  lead and trail  ",
    "-c",
    "--",
    "%s%n",
    "ünïcødé ✓ 日本語 🚀",
    "=",
    "a=b",
    "{a,b}",
    "[abc]",
    "^",
    "\x01\x7f",
    "import sgl_kernel; print(sgl_kernel.__version__)",
]
ARG = st.one_of(
    st.sampled_from(NASTY),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40),
)
ARGV = st.lists(ARG, max_size=6)


def _roundtrip_python(h: SSHHost, args: list[str]) -> None:
    r = h.run([h.python, "-I", "-S", "-c", ECHO_ARGV, *args], timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == args


def _roundtrip_printf(h: SSHHost, args: list[str]) -> None:
    # The same check with a program that starts in a millisecond (the shell's printf builtin; NUL
    # separates the arguments since no argument can contain one), so 500 examples take seconds.
    r = h.run(["/bin/sh", "-c", 'for a; do printf "%s\\0" "$a"; done', "sh", *args])
    assert r.returncode == 0, r.stderr
    got = r.stdout.decode("utf-8").split("\0")
    assert got[-1] == ""
    assert got[:-1] == args


@pytest.mark.parametrize("which", ["host", "bash_host", "zsh_host"])
def test_fixed_nasty_arguments_reach_python_exactly(which: str, request: pytest.FixtureRequest) -> None:
    # root's own login shell (with its real start-up files), then bash and zsh
    h = request.getfixturevalue(which)
    _roundtrip_python(h, NASTY)
    _roundtrip_python(h, [])


@pytest.mark.slow
@settings(max_examples=500, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(args=ARGV)
def test_property_arguments_exact_through_bash(bash_host: SSHHost, args: list[str]) -> None:
    _roundtrip_printf(bash_host, args)


@pytest.mark.slow
@settings(max_examples=500, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(args=ARGV)
def test_property_arguments_exact_through_zsh(zsh_host: SSHHost, args: list[str]) -> None:
    _roundtrip_printf(zsh_host, args)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(args=ARGV)
def test_property_arguments_exact_into_python_sys_argv(zsh_host: SSHHost, args: list[str]) -> None:
    _roundtrip_python(zsh_host, args)


@pytest.mark.parametrize(
    ("argv", "env", "cwd", "needle"),
    [
        ([], None, None, "nothing to run"),
        (["true"], {"A-B": "1"}, None, "'A-B' is not valid"),
        (["X=1"], {"A": "1"}, None, "contains '='"),
        (["echo", "a\0b"], None, None, "NUL byte"),
        (["true"], None, "/tmp/a\0b", "NUL byte"),
    ],
)
def test_what_no_remote_program_can_receive_is_refused_before_sending(
    host: SSHHost, argv: list[str], env: dict[str, str] | None, cwd: str | None, needle: str
) -> None:
    with pytest.raises(BadInput, match=needle):
        host.run(argv, env=env, cwd=cwd)


def test_env_goes_in_front_of_the_program_through_env() -> None:
    assert _env_argv(["python3", "-c", "x"], {"A": "1 2", "B": ""}, None) == [
        "env", "A=1 2", "B=", "python3", "-c", "x",
    ]  # fmt: skip
    assert _env_argv(["X=1"], None, None) == ["X=1"]  # no variables: nothing in front, nothing refused


def test_deadline_leaves_a_timeout_to_the_host_when_it_has_gnu_timeout() -> None:
    err = _Lines(None, True, marker=True)
    deadline = _Deadline(100.0, 10.0, err)
    assert deadline() == 110.0
    err.feed(b"regdiag-wrapper sid=42 timeout=1\n")
    assert err.sid == 42 and deadline() == 110.0 + KILL_GRACE_S + 3
    assert _Deadline(100.0, None, err)() == math.inf
    # 124 (timeout's TERM) or 137 (its KILL) is our timeout only once that time has passed
    past = time.monotonic() - 11
    assert _Deadline(past, 10.0, err).remote_timeout_hit(124)
    assert _Deadline(past, 10.0, err).remote_timeout_hit(137)
    assert not _Deadline(past, 10.0, err).remote_timeout_hit(1)
    assert not _Deadline(time.monotonic(), 10.0, err).remote_timeout_hit(124)
    assert not _Deadline(past, None, err).remote_timeout_hit(124)


def test_stdout_and_stderr_drained_together_without_deadlock(host: SSHHost) -> None:
    # 4 MiB on each stream, interleaved: more than the SSH window and any pipe buffer.
    prog = (
        "import sys\n"
        "line = 'x' * 1023 + '\\n'\n"
        "for i in range(4096):\n"
        "    sys.stdout.write(line); sys.stderr.write(line)\n"
    )
    err_lines: list[str] = []
    r = host.run([host.python, "-c", prog], timeout=120, on_stderr_line=err_lines.append)
    assert r.returncode == 0
    assert len(r.stdout) == 4096 * 1024
    assert len(err_lines) == 4096 and all(len(ln) == 1023 for ln in err_lines)


class _LateChannel:
    """A channel whose last data, EOF and exit status land together just after the reader looked.

    paramiko's transport thread fills the channel's buffers while the reader polls them; on a loaded
    machine the last packet, EOF and exit-status can all arrive between its recv_ready() and its EOF
    check. No sshd can be made to hit that moment on demand, so this one is scripted."""

    def __init__(self) -> None:
        self.looked = 0
        self.buf = b""
        self.eof_received = False
        self.closed = False
        self.exit_status = -1

    def recv_ready(self) -> bool:
        self.looked += 1
        ready = bool(self.buf)
        if self.looked == 1:  # the first look sees nothing; then everything arrives at once
            self.buf, self.eof_received, self.exit_status = b"slowpkg-1.1-py3-none-any.whl\n", True, 0
        return ready

    def recv(self, n: int) -> bytes:
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def recv_stderr_ready(self) -> bool:
        return False


def test_output_that_arrives_with_eof_is_not_lost() -> None:
    from regdiag.hosts.ssh import _pump

    out, err = _Lines(None, True), _Lines(None, True, marker=True)
    rc, lost = _pump(_LateChannel(), out, err, time.monotonic() + 5, lambda: True)  # type: ignore[arg-type]
    assert (rc, lost) == (0, False)
    assert out.finish() == b"slowpkg-1.1-py3-none-any.whl\n"


def test_many_short_commands_keep_all_their_output(host: SSHHost) -> None:
    # What a bisect does to list a --find-links directory: one short command, its output read to the end.
    for i in range(40):
        r = host.run(["printf", "%s\\n", f"line-{i}", "last"], timeout=60)
        assert (r.returncode, r.stdout) == (0, f"line-{i}\nlast\n".encode()), i


def test_lines_stream_to_callbacks_as_they_come(host: SSHHost) -> None:
    prog = "import sys, time\nfor i in range(3):\n    print(i, flush=True); time.sleep(0.3)\nsys.stdout.write('tail')"
    seen: list[tuple[str, float]] = []
    import time

    t0 = time.monotonic()
    r = host.run(
        [host.python, "-c", prog], on_stdout_line=lambda ln: seen.append((ln, time.monotonic() - t0))
    )
    assert [s for s, _ in seen] == ["0", "1", "2", "tail"]
    assert seen[1][1] - seen[0][1] > 0.2  # delivered while running, not at the end
    assert r.stdout == b"0\n1\n2\ntail"


def test_stdin_env_cwd(host: SSHHost) -> None:
    data = bytes(range(256)) * 100 + b"'$(id)`\n"
    r = host.run(["cat"], stdin=data)
    assert r.returncode == 0 and r.stdout == data
    r = host.run(
        [
            host.python,
            "-c",
            "import os; print(os.getcwd()); print(os.environ['RD_X']); print(os.environ['RD_Y'])",
        ],
        env={"RD_X": "a b'c\"$HOME", "RD_Y": ""},
        cwd="/usr",
    )
    assert r.stdout.decode().splitlines() == ["/usr", "a b'c\"$HOME", ""]
    r = host.run(["true"], cwd="/no/such/dir")
    assert r.returncode == 125


def test_exit_status_and_signal(host: SSHHost) -> None:
    assert host.run(["sh", "-c", "exit 7"]).returncode == 7
    r = host.run(["sh", "-c", "kill -9 $$"])
    assert r.returncode == 128 + 9 and not r.timed_out


def test_private_tempdir_and_upload(host: SSHHost, tmp_path: Path) -> None:
    d = host.make_tempdir()
    try:
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
        src = tmp_path / "f.bin"
        src.write_bytes(b"\x00\x01 payload")
        host.put_file(src, f"{d}/f.bin")
        assert Path(d, "f.bin").read_bytes() == b"\x00\x01 payload"
        assert stat.S_IMODE(os.stat(f"{d}/f.bin").st_mode) == 0o600
    finally:
        host.remove_tree(d)
    assert not os.path.exists(d)


def test_scratch_dir_removed_on_close(sshd: Sshd) -> None:  # noqa: F811
    h = open_host("regdiag-test", sys.executable, str(sshd.ssh_config))
    d = h.scratch_dir()  # type: ignore[attr-defined]
    assert os.path.isdir(d)
    h.close()
    assert wait_until(lambda: not os.path.exists(d), 10)


@pytest.mark.slow
def test_timeout_kills_the_remote_tree(host: SSHHost) -> None:
    marker = f"regdiag-timeout-{os.getpid()}"
    # a child that ignores SIGTERM, under a shell: `timeout -k` has to escalate to SIGKILL
    prog = f"trap '' TERM; {host.python} -c 'import time; time.sleep(300)' {marker} & wait"
    r = host.run(["sh", "-c", prog, "sh"], timeout=2)
    assert r.timed_out
    assert r.duration_s < 20
    assert wait_until(lambda: not pids_with_arg(marker), 10), pids_with_arg(marker)


def test_ctrl_c_kills_the_remote_process(host: SSHHost) -> None:
    marker = f"regdiag-ctrlc-{os.getpid()}"
    started = threading.Event()

    def on_line(line: str) -> None:
        started.set()

    def interrupt_when_started() -> None:
        started.wait(30)
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered to the main thread

    timer = threading.Thread(target=interrupt_when_started, daemon=True)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        host.run(
            [host.python, "-c", "import time; print('up', flush=True); time.sleep(300)", marker],
            on_stdout_line=on_line,
        )
    timer.join(5)
    assert wait_until(lambda: not pids_with_arg(marker), 10), pids_with_arg(marker)
    assert host.run(["true"]).returncode == 0  # the connection is still usable


def test_no_orphans_after_a_normal_run(host: SSHHost) -> None:
    marker = f"regdiag-orphan-{os.getpid()}"
    # the program leaves a background child behind and exits
    r = host.run(["sh", "-c", f"{host.python} -c 'import time; time.sleep(300)' {marker} >/dev/null 2>&1 &"])
    assert r.returncode == 0
    assert wait_until(lambda: not pids_with_arg(marker), 10), pids_with_arg(marker)


def test_agent_auth(sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        assert wait_until(sock.exists, 10)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", "-q", str(sshd.client_key)], env=env, check=True, capture_output=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/id_* to fall back on
        cfg = tmp_path / "config"
        cfg.write_text(
            f"Host agent-test\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
            f"  UserKnownHostsFile {sshd.known_hosts}\n"
        )
        with open_host("agent-test", sys.executable, str(cfg)) as h:
            assert h.run(["true"]).returncode == 0
    finally:
        agent.terminate()
        agent.wait(5)


def test_proxyjump_through_a_jump_host(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    cfg = sshd.write_config(
        tmp_path / "config",
        f"Host behind\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {sshd.known_hosts}\n"
        "  ProxyJump regdiag-test\n",
    )
    before = sshd.log.read_text(errors="replace").count("Accepted publickey")
    with open_host("behind", sys.executable, str(cfg)) as h:
        r = h.run(["sh", "-c", "echo $SSH_CONNECTION"])
        assert r.returncode == 0
    # two logins: the jump host, then the target through the jump host's direct-tcpip channel
    assert wait_until(
        lambda: sshd.log.read_text(errors="replace").count("Accepted publickey") == before + 2, 5
    )


def test_several_hosts_at_once_results_kept_apart(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    from regdiag.hosts.remote import for_each_host

    cfg = sshd.write_config(
        tmp_path / "config",
        f"Host second\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {sshd.known_hosts}\n",
    )
    hosts = open_hosts(["regdiag-test", "second"], sys.executable, str(cfg))
    try:
        assert [h.name for h in hosts] == ["regdiag-test", "second"]

        def job(h):  # type: ignore[no-untyped-def]
            r = h.run(["sh", "-c", 'sleep 0.5; echo "$1"', "sh", h.name])
            return r.stdout.decode().strip()

        import time

        t0 = time.monotonic()
        outcomes = for_each_host(hosts, job)
        assert [o.value for o in outcomes] == ["regdiag-test", "second"]
        assert time.monotonic() - t0 < 2.0  # in parallel, not one after the other
    finally:
        for h in hosts:
            h.close()
