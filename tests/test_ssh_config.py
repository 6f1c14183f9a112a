"""--host specs and the OpenSSH client config, resolved without connecting (real config files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from regdiag.errors import BadInput
from regdiag.hosts.sshconfig import SSHConfigFile, expand_includes, parse_spec


@pytest.mark.parametrize(
    ("spec", "user", "host", "port"),
    [
        ("gpu-3", None, "gpu-3", None),
        ("root@10.1.230.174", "root", "10.1.230.174", None),
        ("root@10.1.230.174:2222", "root", "10.1.230.174", 2222),
        ("ssh://ubuntu@box.example.com:22/", "ubuntu", "box.example.com", 22),
        ("[::1]:2200", None, "::1", 2200),
        ("admin@[fe80::1]", "admin", "fe80::1", None),
        ("fe80::1", None, "fe80::1", None),
    ],
)
def test_parse_spec(spec: str, user: str | None, host: str, port: int | None) -> None:
    hs = parse_spec(spec)
    assert (hs.user, hs.host, hs.port) == (user, host, port)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("", "empty host"),
        ("root@", "empty host"),
        ("@box", "empty user"),
        ("box:0", "port '0'"),
        ("box:70000", "port '70000'"),
        ("box:ssh", "port 'ssh'"),
        ("-oProxyCommand=x", "not a host name"),
        ("a;b", "not a host name"),
        ("bo x", "not a host name"),
        ("[::1", "missing ']'"),
    ],
)
def test_parse_spec_rejects(spec: str, fragment: str) -> None:
    with pytest.raises(BadInput, match="--host") as ei:
        parse_spec(spec)
    assert fragment in str(ei.value)
    assert "\n" not in str(ei.value)


def test_config_alias_options_and_spec_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text(
        "Host gpu-*\n"
        "  HostName %h.lab.example\n"
        "  User ml\n"
        "  Port 2201\n"
        "  IdentityFile ~/.ssh/lab_key\n"
        "  IdentityFile /keys/second\n"
        "  ConnectTimeout 7\n"
        "  ServerAliveInterval 30\n"
        f"  UserKnownHostsFile {tmp_path}/kh1 ~/kh2\n"
        "  HashKnownHosts yes\n"
        "Host *\n"
        "  User fallback\n"
    )
    c = SSHConfigFile(cfg)
    t = c.target("gpu-3")
    assert t.hostname == "gpu-3.lab.example"
    assert (t.user, t.port) == ("ml", 2201)
    assert t.identity_files == (str(Path("~/.ssh/lab_key").expanduser()), "/keys/second")
    assert (t.connect_timeout, t.server_alive_interval) == (7.0, 30)
    assert t.known_hosts_files == (f"{tmp_path}/kh1", str(Path("~/kh2").expanduser()))
    assert t.hash_known_hosts
    assert t.known_hosts_name == "[gpu-3.lab.example]:2201"
    # the spec's user and port win over the config's
    t2 = c.target("root@gpu-3:22")
    assert (t2.user, t2.port, t2.known_hosts_name) == ("root", 22, "gpu-3.lab.example")
    # a host no block names gets the defaults and the catch-all
    t3 = c.target("other")
    assert (t3.hostname, t3.user, t3.port) == ("other", "fallback", 22)


def test_include_expanded_with_glob_relative_and_block_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    ssh = tmp_path / ".ssh"
    (ssh / "conf.d").mkdir(parents=True)
    (ssh / "conf.d" / "10-lab.conf").write_text("Host lab\n  HostName 10.0.0.5\n  User labuser\n")
    (ssh / "conf.d" / "20-edge.conf").write_text("Host edge\n  Port 2022\n")
    (ssh / "jump.conf").write_text("ProxyJump bastion\n")
    cfg = tmp_path / "main_config"
    cfg.write_text(
        "Include conf.d/*.conf\n"  # relative: resolved against ~/.ssh, as ssh does
        "Host box\n"
        "  Include ~/.ssh/jump.conf\n"  # inside a block: applies to that block only
        "  User boxuser\n"
        "Host bastion\n"
        "  HostName 192.0.2.1\n"
    )
    text = expand_includes(cfg)
    assert "10.0.0.5" in text and "2022" in text
    c = SSHConfigFile(cfg)
    assert (c.target("lab").hostname, c.target("lab").user) == ("10.0.0.5", "labuser")
    assert c.target("edge").port == 2022
    box = c.target("box")
    assert box.user == "boxuser"
    assert [j.hostname for j in box.jumps] == ["192.0.2.1"]
    assert c.target("lab").jumps == ()


def test_proxyjump_chain_resolves_each_hop(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text(
        "Host target\n  HostName 10.9.9.9\n  ProxyJump j1,ops@j2:2200\n"
        "Host j1\n  HostName 198.51.100.1\n  User jumper\n  ProxyJump j0\n"
        "Host j0\n  HostName 198.51.100.0\n"
        "Host j2\n  HostName 198.51.100.2\n  ProxyJump should-be-ignored\n"
    )
    t = SSHConfigFile(cfg).target("target")
    assert [(j.alias, j.hostname, j.user, j.port) for j in t.jumps] == [
        ("j1", "198.51.100.1", "jumper", 22),
        ("j2", "198.51.100.2", "ops", 2200),
    ]
    assert [j.hostname for j in t.jumps[0].jumps] == ["198.51.100.0"]  # the first hop keeps its own jump
    assert t.jumps[1].jumps == ()  # later hops are reached through the previous one


def test_proxyjump_loop_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text("Host a\n  ProxyJump b\nHost b\n  ProxyJump a\n")
    with pytest.raises(BadInput, match="ProxyJump chain longer"):
        SSHConfigFile(cfg).target("a")


def test_bad_config_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no such file"):
        SSHConfigFile(tmp_path / "missing")
    cfg = tmp_path / "config"
    cfg.write_text("Host x\n  Port notanumber\n")
    with pytest.raises(BadInput, match="port 'notanumber' is not a number"):
        SSHConfigFile(cfg).target("x")
    cfg.write_text("Host x\n  =broken\n")
    with pytest.raises(BadInput, match="ssh config"):
        SSHConfigFile(cfg)


def test_line_splitter_takes_out_the_wrapper_marker_across_chunks() -> None:
    from regdiag.hosts.ssh import _Lines

    got: list[str] = []
    lines = _Lines(got.append, True, marker=True)
    for chunk in [b"login noise\nregdiag-wr", b"apper sid=12 timeout=1\npar", b"tial", b" line\r\nlast"]:
        lines.feed(chunk)
    assert lines.finish() == b"login noise\npartial line\r\nlast"
    assert got == ["login noise", "partial line", "last"]
    assert (lines.sid, lines.remote_timeout) == (12, True)
    quiet = _Lines(None, True, marker=True)  # no callback: bytes kept in order around the marker
    for chunk in [b"regdiag-wrapper sid=3 timeout=0\nab", b"cd\nef"]:
        quiet.feed(chunk)
    assert quiet.finish() == b"abcd\nef" and quiet.sid == 3
