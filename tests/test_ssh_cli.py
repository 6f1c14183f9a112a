"""`regdiag trust`, `regdiag snapshot --host` end to end, and the bundle that runs on the host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from sshd_helpers import Sshd, sshd  # noqa: F401 - sshd is a fixture

from regdiag.errors import HostError
from regdiag.hosts.bundle import build_bundle, bundle_files, make_zip
from regdiag.hosts.remote import bundle_path, run_bundle
from regdiag.hosts.resolve import open_host

pytestmark = pytest.mark.ssh


def _fingerprint(pub: Path) -> str:
    return subprocess.run(
        ["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True
    ).stdout.split()[1]


def _untrusted_config(sshd: Sshd, tmp_path: Path, extra: str = "") -> tuple[Path, Path]:  # noqa: F811
    known = tmp_path / "known_hosts"
    cfg = sshd.write_config(tmp_path / "config", known_hosts=known)
    if extra:
        cfg.write_text(cfg.read_text() + extra)
    return cfg, known


def test_trust_yes_adds_the_key_then_connecting_works(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    cfg, known = _untrusted_config(sshd, tmp_path)
    r = cli("trust", "regdiag-test", "--ssh-config", str(cfg), "--yes", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["status"] == "added"
    assert info["fingerprint"] == _fingerprint(sshd.dir / "ssh_host_ed25519_key.pub")
    assert known.read_text() == sshd.known_hosts_line() + "\n"
    assert stat_mode(known) == 0o600
    assert (
        cli("check-host", "regdiag-test", "--ssh-config", str(cfg), "--python", sys.executable).returncode
        == 0
    )
    # again: nothing to do, file untouched
    r = cli("trust", "regdiag-test", "--ssh-config", str(cfg), "--yes")
    assert r.returncode == 0 and "already trusted" in r.stdout
    assert known.read_text() == sshd.known_hosts_line() + "\n"


def stat_mode(p: Path) -> int:
    return p.stat().st_mode & 0o777


def test_trust_asks_and_shows_the_fingerprint(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    cfg, known = _untrusted_config(sshd, tmp_path)
    fp = _fingerprint(sshd.dir / "ssh_host_ed25519_key.pub")
    r = cli("trust", "regdiag-test", "--ssh-config", str(cfg), input="n\n")
    assert r.returncode == 4
    assert fp in r.stderr and "ssh-ed25519" in r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith("host key not added (not confirmed)")
    assert not known.exists()
    r = cli("trust", "regdiag-test", "--ssh-config", str(cfg), input="y\n")
    assert r.returncode == 0, r.stderr
    assert known.read_text() == sshd.known_hosts_line() + "\n"


def test_trust_refuses_a_changed_key_and_keeps_the_old_one(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    cfg, known = _untrusted_config(sshd, tmp_path)
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    old_line = f"[127.0.0.1]:{sshd.port} " + " ".join(Path(f"{other}.pub").read_text().split()[:2]) + "\n"
    known.write_text(old_line)
    r = cli("trust", "regdiag-test", "--ssh-config", str(cfg), "--yes")
    assert r.returncode == 4
    line = r.stderr.strip()
    assert "\n" not in line and "HOST KEY CHANGED" in line and "not replacing it" in line
    assert _fingerprint(Path(f"{other}.pub")) in line
    assert known.read_text() == old_line


def test_trust_hashes_names_when_the_config_says_so(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    cfg, known = _untrusted_config(sshd, tmp_path, "  HashKnownHosts yes\n")
    assert cli("trust", "regdiag-test", "--ssh-config", str(cfg), "--yes").returncode == 0
    text = known.read_text()
    assert text.startswith("|1|") and "127.0.0.1" not in text
    assert (
        cli("check-host", "regdiag-test", "--ssh-config", str(cfg), "--python", sys.executable).returncode
        == 0
    )


def test_snapshot_over_ssh_end_to_end(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    cfg = tmp_path / "config"
    cfg.write_text(
        f"Host 127.0.0.1\n  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {sshd.known_hosts}\n"
    )
    out = tmp_path / "snap.json"
    r = cli(
        "snapshot",
        "--host",
        f"{sshd.user}@127.0.0.1:{sshd.port}",
        "--ssh-config",
        str(cfg),
        "--python",
        sys.executable,
        "--json",
        "-o",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["schema"] == "regdiag.snapshot/2"
    assert rec["origin"]["via"] == "ssh"
    assert rec["origin"]["python"] == sys.executable
    assert rec["origin"]["target"] == f"127.0.0.1:{sshd.port}"
    assert set(rec["groups"]) >= {"packages", "env", "host"}
    assert json.loads(out.read_text())["origin"] == rec["origin"]


def test_snapshot_of_two_hosts_kept_apart(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    from regdiag.hosts.remote import collect_snapshots
    from regdiag.hosts.resolve import open_hosts

    cfg = sshd.write_config(
        tmp_path / "config",
        f"Host second\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {sshd.known_hosts}\n",
    )
    with pytest.raises(HostError, match=r"127\.0\.0\.1:1: connection refused"):
        open_hosts(["regdiag-test", f"{sshd.user}@127.0.0.1:1"], sys.executable, str(cfg))
    hosts = open_hosts(["regdiag-test", "second"], sys.executable, str(cfg))
    try:
        outcomes = collect_snapshots(hosts, timeout_s=20)
    finally:
        for h in hosts:
            h.close()
    assert [o.ok for o in outcomes] == [True, True]
    assert [o.value["origin"]["target"] for o in outcomes if o.value] == ["regdiag-test", "second"]


def test_bundle_is_reproducible_and_self_contained() -> None:
    files = bundle_files()
    assert make_zip(files) == make_zip(bundle_files())
    b = build_bundle()
    names = set(zipfile.ZipFile(__import__("io").BytesIO(b.data)).namelist())
    assert {
        "__main__.py",
        "regdiag/__init__.py",
        "regdiag/records.py",
        "regdiag/snapshot/__init__.py",
    } <= names
    assert not any(n.startswith(("regdiag/cli", "regdiag/hosts")) for n in names)
    assert any(n.startswith("regdiag/probes/") and not n.endswith("__init__.py") for n in names)


def test_bundle_uploaded_once_and_dispatches(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    with open_host("regdiag-test", sys.executable, str(sshd.ssh_config)) as h:
        p1 = bundle_path(h)
        p2 = bundle_path(h)
        assert p1 == p2 and p1.startswith(h.scratch_dir())  # type: ignore[attr-defined]
        assert Path(p1).read_bytes() == build_bundle().data  # the sshd is this machine: look at the file
        r = run_bundle(h, ["version"])
        assert json.loads(r.stdout)["executable"] == sys.executable
        r = run_bundle(h, ["probe", "no-such-probe"])
        assert r.returncode == 2 and b"no probe named 'no-such-probe'" in r.stderr
        # a probe runs from real files, with exactly the arguments given
        lines: list[str] = []
        r = run_bundle(h, ["probe", "spec-decode", "--help"], on_stdout_line=lines.append, timeout=120)
        assert r.returncode == 0, r.stderr
        assert any("--preset" in ln for ln in lines)
        r = run_bundle(h, ["snapshot", "--bogus-flag"])
        assert r.returncode == 2


def test_record_found_after_login_noise() -> None:
    from regdiag.hosts.remote import _json_record

    rec = {"schema": "regdiag.snapshot/1", "groups": {"a": {"b": [1, 2]}}}
    pretty = json.dumps(rec, indent=1)
    assert _json_record(pretty.encode()) == rec
    assert _json_record(b"Welcome to gpu-3!\n{not json\n" + pretty.encode() + b"\n") == rec
    assert _json_record(b"conda: activated\n") is None


def test_trust_through_a_jump_host(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    known = tmp_path / "behind_known_hosts"
    cfg = sshd.write_config(
        tmp_path / "config",
        f"Host behind\n  HostName 127.0.0.1\n  Port {sshd.port}\n  ProxyJump regdiag-test\n"
        f"  UserKnownHostsFile {known}\n",
    )
    r = cli("trust", "behind", "--ssh-config", str(cfg), "--yes", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "added"
    assert known.read_text() == sshd.known_hosts_line() + "\n"


@pytest.mark.ssh
def test_snapshot_of_a_running_process_over_ssh(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    # --pid travels to the host: the engine's own environment is read there, its secrets hashed.
    engine = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={**os.environ, "NCCL_PROTO": "LL", "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123456789"},
    )
    try:
        r = cli("snapshot", "--pid", str(engine.pid), "--host", "regdiag-test", "--ssh-config",
                str(sshd.ssh_config), "--python", sys.executable, "--json")  # fmt: skip
    finally:
        engine.kill()
        engine.wait()
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["origin"]["via"] == "ssh" and rec["groups"]["process"]["status"] == "ok"
    env = rec["groups"]["env"]["fields"]
    assert env["NCCL_PROTO"]["value"] == "LL"
    assert "hf_abcdefghij" not in r.stdout
