"""Every way a remote host fails: one line, exit code 4, no traceback (real sshd, real sockets)."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sshd_helpers import (  # noqa: F401 - sshd is a fixture
    SilentListener,
    Sshd,
    free_port,
    pids_holding_connection,
    pids_with_arg,
    sshd,
    wait_until,
)

from regdiag.errors import EXIT_HOST, HostError
from regdiag.hosts.remote import run_bundle
from regdiag.hosts.resolve import open_host
from regdiag.hosts.ssh import SSHHost

pytestmark = pytest.mark.ssh


def _one_line_failure(r: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert r.returncode == EXIT_HOST, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Exception" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("regdiag: error: ")
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def _check(cli, cfg: Path, *extra: str, alias: str = "regdiag-test"):  # type: ignore[no-untyped-def]
    return cli("check-host", alias, "--ssh-config", str(cfg), "--python", sys.executable, *extra, timeout=120)


def test_check_host_works(cli, sshd: Sshd) -> None:  # noqa: F811
    r = _check(cli, sshd.ssh_config, "--json")
    assert r.returncode == 0, r.stderr
    import json

    (info,) = json.loads(r.stdout)["hosts"]
    assert info["name"] == "regdiag-test" and info["via"] == "ssh"
    assert info["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert info["address"] == f"{sshd.user}@127.0.0.1:{sshd.port}"


def test_unknown_host_key(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    cfg = sshd.write_config(tmp_path / "config", known_hosts=empty)
    fp = subprocess.run(
        ["ssh-keygen", "-lf", str(sshd.dir / "ssh_host_ed25519_key.pub")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[1]
    _one_line_failure(_check(cli, cfg), "host key not known", f"[127.0.0.1]:{sshd.port}", fp, "regdiag trust")


def test_changed_host_key(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known = tmp_path / "known_hosts"
    known.write_text(
        f"[127.0.0.1]:{sshd.port} " + " ".join(Path(f"{other}.pub").read_text().split()[:2]) + "\n"
    )
    cfg = sshd.write_config(tmp_path / "config", known_hosts=known)
    _one_line_failure(_check(cli, cfg), "HOST KEY CHANGED", "refusing to connect", "ssh-keygen -R")


def test_authentication_failure(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    cfg = tmp_path / "config"
    cfg.write_text(sshd.ssh_config.read_text().replace(str(sshd.client_key), str(stranger)))
    _one_line_failure(_check(cli, cfg), "authentication failed", repr(sshd.user), str(stranger))


def test_passphrase_protected_key_says_use_the_agent(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    locked = tmp_path / "locked"
    shutil.copy(sshd.client_key, locked)
    locked.chmod(0o600)
    subprocess.run(["ssh-keygen", "-q", "-p", "-N", "secret phrase", "-f", str(locked)], check=True)
    cfg = tmp_path / "config"
    cfg.write_text(sshd.ssh_config.read_text().replace(str(sshd.client_key), str(locked)))
    line = _one_line_failure(_check(cli, cfg), "passphrase-protected", "ssh-add")
    assert "secret phrase" not in line


def test_connection_refused(cli, tmp_path: Path) -> None:
    port = free_port()
    r = cli("check-host", f"root@127.0.0.1:{port}", "--ssh-config", str(_empty_config(tmp_path)))
    _one_line_failure(r, "connection refused", f"127.0.0.1 port {port}")


def test_unresolvable_name(cli, tmp_path: Path) -> None:
    r = cli("check-host", "root@no-such-host.invalid", "--ssh-config", str(_empty_config(tmp_path)))
    _one_line_failure(r, "cannot resolve host name 'no-such-host.invalid'")


def test_server_that_never_sends_a_banner(cli, tmp_path: Path) -> None:
    silent = SilentListener()
    try:
        cfg = tmp_path / "config"
        cfg.write_text(f"Host mute\n  HostName 127.0.0.1\n  Port {silent.port}\n  ConnectTimeout 1\n")
        t0 = time.monotonic()
        r = cli("check-host", "mute", "--ssh-config", str(cfg))
        _one_line_failure(r, "sent no SSH banner within 1 s")
        assert time.monotonic() - t0 < 15
    finally:
        silent.close()


def test_remote_python_missing(cli, sshd: Sshd) -> None:  # noqa: F811
    r = cli(
        "check-host",
        "regdiag-test",
        "--ssh-config",
        str(sshd.ssh_config),
        "--python",
        "/opt/none/bin/python3",
    )
    _one_line_failure(r, "'/opt/none/bin/python3' was not found", "--python")


def _python_where(pred: str) -> str | None:
    """A real interpreter on this machine for which `pred` (a python expression) is true."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = sorted(glob.glob(f"{root}/versions/*/bin/python[23].[0-9]")) + [
        p for v in ("python3.9", "python3.8", "python3.7", "python3.6", "python2.7") if (p := shutil.which(v))
    ]
    for c in candidates:
        r = subprocess.run(
            [c, "-c", f"import sys; print({pred})"], capture_output=True, text=True, check=False
        )
        if r.stdout.strip() == "True":
            return c
    return None


def test_remote_python_too_old(cli, sshd: Sshd) -> None:  # noqa: F811
    old = _python_where("sys.version_info < (3, 9)")
    if old is None:
        pytest.skip("no python older than 3.9 on this machine to play the old remote interpreter")
    r = cli("check-host", "regdiag-test", "--ssh-config", str(sshd.ssh_config), "--python", old)
    _one_line_failure(r, "is too old", "python >= 3.9", old)


def test_bundle_runs_on_python_3_9(sshd: Sshd) -> None:  # noqa: F811
    py39 = _python_where("sys.version_info[:2] == (3, 9)")
    if py39 is None:
        pytest.skip("no python 3.9 here; the bundle's oldest supported interpreter")
    with open_host("regdiag-test", py39, str(sshd.ssh_config)) as h:
        r = run_bundle(h, ["version"])
        assert r.returncode == 0 and b'"python": "3.9' in r.stdout, r.stderr


@pytest.mark.slow
def test_connection_dropped_mid_run_keeps_what_arrived(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    marker = f"regdiag-drop-{os.getpid()}"
    got = tmp_path / "lines.jsonl"
    h = open_host("regdiag-test", sys.executable, str(sshd.ssh_config))
    assert isinstance(h, SSHHost)
    client_port = h.transport.sock.getsockname()[1]  # type: ignore[union-attr]
    prog = (
        "import time\nfor i in range(1000):\n    print('{\"launch\": %d}' % i, flush=True); time.sleep(0.1)\n"
    )

    def store(line: str) -> None:  # what a run writer does: every line on disk as it arrives
        with open(got, "a") as f:
            f.write(line + "\n")
        if line == '{"launch": 5}':
            for pid in pids_holding_connection(sshd.port, client_port):
                os.kill(pid, signal.SIGKILL)

    try:
        with pytest.raises(HostError, match="connection was lost") as ei:
            h.run([h.python, "-c", prog, marker], on_stdout_line=store, timeout=120)
        assert ei.value.exit_code == EXIT_HOST
    finally:
        h.close()
    lines = got.read_text().splitlines()
    assert lines[:6] == [f'{{"launch": {i}}}' for i in range(6)]
    # the remote program noticed the closed channel and is gone, not left running for 100 s
    assert wait_until(lambda: not pids_with_arg(marker), 10), pids_with_arg(marker)


def _empty_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "empty_config"
    cfg.write_text(f"Host *\n  UserKnownHostsFile {tmp_path}/kh\n  ConnectTimeout 3\n")
    return cfg


def test_jump_host_cannot_reach_the_target(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    port = free_port()
    cfg = sshd.write_config(
        tmp_path / "config",
        f"Host behind\n  HostName 127.0.0.1\n  Port {port}\n  ProxyJump regdiag-test\n  ConnectTimeout 5\n",
    )
    _one_line_failure(_check(cli, cfg, alias="behind"), "jump host regdiag-test cannot reach 127.0.0.1 port")
