"""What `ssh NAME` would connect to: the host spec and the OpenSSH client config, resolved.

paramiko.SSHConfig does the Host/Match matching and %-token expansion; this module adds what it
lacks (Include, the system config, known-hosts file lists) and turns the result into one frozen
SSHTarget that the connection code uses. Nothing here opens a socket.
"""

from __future__ import annotations

import getpass
import glob
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from regdiag.errors import BadInput

DEFAULT_USER_CONFIG = "~/.ssh/config"
SYSTEM_CONFIG = "/etc/ssh/ssh_config"
DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")

# Timeouts (seconds) used when the config says nothing. OpenSSH waits for the kernel's TCP timeout
# (minutes); a diagnostic tool should fail fast and say so.
DEFAULT_CONNECT_TIMEOUT = 15.0
MAX_INCLUDE_DEPTH = 16
MAX_JUMPS = 8

_KEYWORD = re.compile(r"^\s*(\w+)(?:\s*=\s*|\s+)(.*?)\s*$")
_SAFE_NAME = re.compile(r"^[^\s/@'\"`$;&|<>\\]+$")


@dataclass(frozen=True)
class SSHTarget:
    """One hop: where to connect, as whom, with which keys, checked against which known_hosts."""

    alias: str  # the name the user typed (or a ProxyJump entry)
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    server_alive_interval: int = 0
    known_hosts_files: tuple[str, ...] = DEFAULT_KNOWN_HOSTS
    global_known_hosts_files: tuple[str, ...] = DEFAULT_GLOBAL_KNOWN_HOSTS
    host_key_alias: str | None = None
    hash_known_hosts: bool = False
    proxy_command: str | None = None
    jumps: tuple[SSHTarget, ...] = field(default=())  # connected in order, the first one directly
    spec: str = ""  # exactly what the user typed, for messages that suggest a command
    # StrictHostKeyChecking: "accept-new" adds an unknown key (never a changed one) as ssh does; "ask"
    # and "yes" refuse it (regdiag trust adds it); "no" / "off" are refused when they would matter.
    strict_host_key_checking: str = "ask"
    control_master: str | None = None  # ControlMaster as configured: regdiag says in one line it is not used

    @property
    def display(self) -> str:
        """How records and messages name this host: the alias, plus the port when it matters."""
        return self.alias if self.port == 22 or self.alias != self.hostname else f"{self.alias}:{self.port}"

    @property
    def known_hosts_name(self) -> str:
        """The name known_hosts lists this host under: `host`, or `[host]:port` off port 22."""
        name = self.host_key_alias or self.hostname
        return name if self.port == 22 else f"[{name}]:{self.port}"


@dataclass(frozen=True)
class HostSpec:
    user: str | None
    host: str
    port: int | None


def _shown(spec: str) -> str:
    """The spec as an error quotes it: what stands before the last '@' is a user name, and after a ':' in
    it a password (`alice:pw@h`), which is never shown, whatever its shape."""
    scheme = "ssh://" if spec.startswith("ssh://") else ""
    user, at, rest = spec[len(scheme) :].rpartition("@")
    name, colon, pw = user.partition(":")
    if at and colon:
        spec = f"{scheme}{name}:<redacted len={len(pw)}>@{rest}"
    return repr(spec)


def parse_spec(spec: str) -> HostSpec:
    """`[user@]host[:port]`, `ssh://[user@]host[:port]`, `[v6addr]:port`, or a config alias."""
    shown = _shown(spec)
    text = spec.strip()
    if text.startswith("ssh://"):
        text = text[len("ssh://") :].rstrip("/")
    if not text:
        raise BadInput(f"--host {shown}: empty host name")
    user: str | None = None
    if "@" in text:
        user, _, text = text.rpartition("@")
        if not user:
            raise BadInput(f"--host {shown}: empty user name before '@'")
        if ":" in user:  # a user name holds no ':' (/etc/passwd's separator): `user:password@host`
            raise BadInput(
                f"--host {shown}: a password in --host is not used (public keys or ssh-agent only, "
                "docs/remote.md); give user@host"
            )
    port: int | None = None
    if text.startswith("["):  # [v6addr]:port or [name]:port
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise BadInput(f"--host {shown}: missing ']'")
        if rest:
            if not rest.startswith(":"):
                raise BadInput(f"--host {shown}: expected ':PORT' after ']'")
            port = _parse_port(rest[1:], shown)
    elif text.count(":") == 1:
        host, _, p = text.partition(":")
        port = _parse_port(p, shown)
    else:  # a bare name, or a bare IPv6 address (several colons, no port)
        host = text
    if not host:
        raise BadInput(f"--host {shown}: empty host name")
    if host.startswith("-") or (":" not in host and not _SAFE_NAME.match(host)):
        raise BadInput(f"--host {shown}: {host!r} is not a host name")
    if user is not None and (user.startswith("-") or not _SAFE_NAME.match(user)):
        raise BadInput(f"--host {shown}: {user!r} is not a user name")
    return HostSpec(user, host, port)


def _parse_port(text: str, shown: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise BadInput(f"--host {shown}: port {text!r} is not a number from 1 to 65535")
    return int(text)


def expand_includes(path: Path, *, user_config: bool = True, depth: int = 0) -> str:
    """The config text with every `Include` replaced by the files it names (globs, ~, relative paths).

    OpenSSH resolves relative Include paths against ~/.ssh for user configs and /etc/ssh for the system
    one, and restores the enclosing Host/Match block after an included file; both are kept here.
    """
    if depth > MAX_INCLUDE_DEPTH:
        raise BadInput(f"ssh config {path}: Include nested deeper than {MAX_INCLUDE_DEPTH} levels")
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise BadInput(f"ssh config {path}: cannot read ({e.strerror})") from None
    base = Path("~/.ssh").expanduser() if user_config else Path("/etc/ssh")
    out: list[str] = []
    header: str | None = None
    for line in lines:
        m = _KEYWORD.match(line)
        key = m.group(1).lower() if m else ""
        if key in ("host", "match"):
            header = line.strip()
        if key != "include":
            out.append(line)
            continue
        assert m is not None
        for pattern in m.group(2).split():
            pattern = os.path.expanduser(pattern.strip('"'))
            if not os.path.isabs(pattern):
                pattern = str(base / pattern)
            for inc in sorted(glob.glob(pattern)):
                if os.path.isfile(inc):
                    out.append(f"# Include {inc}")
                    out.append(expand_includes(Path(inc), user_config=user_config, depth=depth + 1))
        if header is not None:
            out.append(header)  # the enclosing block continues after the included lines
        else:
            out.append("Host *")
    return "\n".join(out) + "\n"


class SSHConfigFile:
    """The parsed client config: `--ssh-config F` alone (as `ssh -F`), else ~/.ssh/config + the system one."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        from regdiag.hosts.paramiko_import import enable_match_exec, paramiko

        texts: list[str] = []
        if path is not None:
            p = Path(path).expanduser()
            if not p.is_file():
                raise BadInput(f"--ssh-config {path}: no such file")
            texts.append(expand_includes(p, user_config=True))
            self.source = str(p)
        else:
            user = Path(DEFAULT_USER_CONFIG).expanduser()
            if user.is_file():
                texts.append(expand_includes(user, user_config=True))
            system = Path(SYSTEM_CONFIG)
            if system.is_file():
                # Appended after the user's: for each option the first value found wins, as in ssh.
                texts.append("Host *\n" + expand_includes(system, user_config=False))
            self.source = str(user)
        text = "\n".join(texts)
        if re.search(r"(?im)^\s*match\s.*\bexec\b", text):
            enable_match_exec()
        try:
            self._config = paramiko.SSHConfig.from_text(text)
        except Exception as e:  # paramiko's ConfigParseError and friends
            raise BadInput(f"ssh config {self.source}: {e}") from None

    def lookup(self, name: str) -> dict[str, object]:
        try:
            return dict(self._config.lookup(name))
        except Exception as e:  # CouldNotCanonicalize, a failing Match exec, ...
            raise BadInput(f"ssh config {self.source}: cannot resolve {name!r}: {e}") from None

    def target(self, spec: str, *, depth: int = 0) -> SSHTarget:
        """Resolve a --host value (or a ProxyJump entry) into a target, jump hosts included."""
        if depth > MAX_JUMPS:
            raise BadInput(
                f"ssh config {self.source}: ProxyJump chain longer than {MAX_JUMPS} hops (a loop?)"
            )
        hs = parse_spec(spec)
        opts = self.lookup(hs.host)
        hostname = str(opts.get("hostname") or hs.host)
        port = hs.port if hs.port is not None else _int_opt(opts, "port", 22, self.source)
        user = hs.user or str(opts.get("user") or _local_user())
        ids_raw = opts.get("identityfile") or []
        identity_files = tuple(
            os.path.expanduser(str(p)) for p in (ids_raw if isinstance(ids_raw, list) else [ids_raw])
        )
        jumps: tuple[SSHTarget, ...] = ()
        proxy_jump = str(opts.get("proxyjump") or "").strip()
        proxy_command = opts.get("proxycommand")
        if proxy_jump and proxy_jump.lower() != "none":
            hops = [h.strip() for h in proxy_jump.split(",") if h.strip()]
            first = self.target(hops[0], depth=depth + 1)
            rest = [_without_jumps(self.target(h, depth=depth + 1)) for h in hops[1:]]
            jumps = (first, *rest)
            proxy_command = None  # ssh: ProxyJump and ProxyCommand exclude each other; ProxyJump wins
        return SSHTarget(
            alias=hs.host,
            hostname=hostname,
            port=port,
            user=user,
            identity_files=identity_files,
            identities_only=_bool_opt(opts, "identitiesonly"),
            connect_timeout=float(
                _int_opt(opts, "connecttimeout", int(DEFAULT_CONNECT_TIMEOUT), self.source)
            ),
            server_alive_interval=_int_opt(opts, "serveraliveinterval", 0, self.source),
            known_hosts_files=_file_list(opts.get("userknownhostsfile"), DEFAULT_KNOWN_HOSTS, hostname, user),
            global_known_hosts_files=_file_list(
                opts.get("globalknownhostsfile"), DEFAULT_GLOBAL_KNOWN_HOSTS, hostname, user
            ),
            host_key_alias=str(opts["hostkeyalias"]) if opts.get("hostkeyalias") else None,
            hash_known_hosts=_bool_opt(opts, "hashknownhosts"),
            proxy_command=str(proxy_command) if proxy_command else None,
            jumps=jumps,
            spec=spec.strip(),
            strict_host_key_checking=_strict(opts, self.source),
            control_master=_control_master(opts),
        )


STRICT_VALUES = {"yes": "yes", "ask": "ask", "accept-new": "accept-new", "no": "no", "off": "no"}


def _strict(opts: dict[str, object], source: str) -> str:
    raw = str(opts.get("stricthostkeychecking") or "ask").strip().lower()
    if raw not in STRICT_VALUES:
        raise BadInput(f"ssh config {source}: StrictHostKeyChecking {raw!r}: use yes, ask, accept-new or no")
    return STRICT_VALUES[raw]


def _control_master(opts: dict[str, object]) -> str | None:
    raw = str(opts.get("controlmaster") or "no").strip().lower()
    return None if raw in ("no", "") else raw


def _without_jumps(t: SSHTarget) -> SSHTarget:
    # Later hops of a ProxyJump list are reached through the previous hop, not through their own jumps.
    from dataclasses import replace

    return replace(t, jumps=(), proxy_command=None)


def _local_user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "root"


def _int_opt(opts: dict[str, object], key: str, default: int, source: str) -> int:
    raw = opts.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(str(raw))
    except ValueError:
        raise BadInput(f"ssh config {source}: {key} {raw!r} is not a number") from None


def _bool_opt(opts: dict[str, object], key: str) -> bool:
    return str(opts.get(key, "no")).lower() in ("yes", "true", "1")


def _file_list(raw: object, default: Sequence[str], host: str, user: str) -> tuple[str, ...]:
    if raw is None or str(raw).strip() == "":
        names = list(default)
    else:
        names = str(raw).split()
    home = str(Path.home())
    out = []
    for n in names:
        if n.lower() == "none":
            continue
        n = n.replace("%%", "\0").replace("%d", home).replace("%u", _local_user())
        n = n.replace("%h", host).replace("%r", user).replace("\0", "%")
        out.append(os.path.expanduser(n))
    return tuple(out)
