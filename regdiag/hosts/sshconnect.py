"""Connecting over SSH with paramiko: sockets, ProxyJump / ProxyCommand, host keys, auth, errors.

Every failure becomes a HostError with one line that says what happened and what to do (see
docs/remote.md for the list). A host key is accepted only when a known_hosts file has it (or, with
StrictHostKeyChecking accept-new, when no file names the host at all: it is added, as ssh does); an
unknown one is reported with its fingerprint and the `regdiag trust` command, a changed one is refused.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any

from regdiag.errors import HostError, escape_controls
from regdiag.hosts.knownhosts import fingerprint
from regdiag.hosts.paramiko_import import paramiko
from regdiag.hosts.sshconfig import SSHTarget

# paramiko logs handshake failures with tracebacks at ERROR; without a handler Python's last-resort
# handler would print them on the user's screen. Our errors say what happened in one line instead.
# REGDIAG_SSH_LOG=FILE keeps paramiko's log for debugging.
_plog = logging.getLogger("paramiko")
_plog.propagate = False
if not _plog.handlers:
    if os.environ.get("REGDIAG_SSH_LOG"):
        _handler: logging.Handler = logging.FileHandler(os.environ["REGDIAG_SSH_LOG"])
        _plog.setLevel(logging.DEBUG)
    else:
        _handler = logging.NullHandler()
    _plog.addHandler(_handler)

AUTH_TIMEOUT = 30.0
CHANNEL_TIMEOUT = 15.0


class UnknownHostKey(paramiko.SSHException):
    def __init__(self, name: str, key: paramiko.PKey) -> None:
        super().__init__(f"host key for {name} is not known")
        self.name = name
        self.key = key


class _RejectUnknown(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise UnknownHostKey(hostname, key)


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """StrictHostKeyChecking accept-new, as ssh: a host no known_hosts file names at all has its key
    added to the first UserKnownHostsFile (hashed when HashKnownHosts says so) and one line on stderr
    says so; a host known under another key, or one whose key changed, is refused as always."""

    def __init__(self, t: SSHTarget) -> None:
        self.t = t

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        from regdiag.hosts.knownhosts import (
            append_known_host,
            known_hosts_line,
            known_keys_for,
            load_known_hosts,
        )

        t = self.t
        name = t.known_hosts_name
        known = known_keys_for(load_known_hosts((*t.known_hosts_files, *t.global_known_hosts_files)), name)
        if known or not t.known_hosts_files:
            raise UnknownHostKey(hostname, key)  # known under another key type, or nowhere to add it
        append_known_host(t.known_hosts_files[0], known_hosts_line(name, key, hashed=t.hash_known_hosts))
        _note(
            f"regdiag: StrictHostKeyChecking accept-new: added {name} ({key.get_name()} {fingerprint(key)}) "
            f"to {t.known_hosts_files[0]}"
        )


_noted: set[str] = set()


def _note(line: str) -> None:
    """One line on stderr, once per process (a note, not an error: the command goes on)."""
    if line not in _noted:
        _noted.add(line)
        sys.stderr.write(escape_controls(line) + "\n")
        sys.stderr.flush()


# ---------------------------------------------------------------------------------------------------
# Connecting


def _open_socket(t: SSHTarget, via: paramiko.SSHClient | None, via_name: str) -> Any:
    if via is not None:
        transport = via.get_transport()
        assert transport is not None
        try:
            return transport.open_channel(
                "direct-tcpip", (t.hostname, t.port), ("127.0.0.1", 0), timeout=t.connect_timeout
            )
        except paramiko.ChannelException as e:
            raise HostError(
                f"{t.display}: jump host {via_name} cannot reach {t.hostname} port {t.port} ({e.text})"
            ) from None
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise HostError(f"{t.display}: through jump host {via_name}: {one_line(e)}") from None
    if t.proxy_command:
        try:
            return paramiko.ProxyCommand(t.proxy_command)
        except Exception as e:
            raise HostError(f"{t.display}: ProxyCommand failed to start: {one_line(e)}") from None
    try:
        sock = socket.create_connection((t.hostname, t.port), timeout=t.connect_timeout)
        # Without it, each small request waits for a delayed ACK: ~40 ms per channel open.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    except socket.gaierror:
        raise HostError(f"{t.display}: cannot resolve host name {t.hostname!r}") from None
    except ConnectionRefusedError:
        raise HostError(
            f"{t.display}: connection refused by {t.hostname} port {t.port} (no sshd listening there?)"
        ) from None
    except TimeoutError:
        raise HostError(
            f"{t.display}: no answer from {t.hostname} port {t.port} within {t.connect_timeout:g} s "
            "(ConnectTimeout)"
        ) from None
    except OSError as e:
        raise HostError(
            f"{t.display}: cannot connect to {t.hostname} port {t.port}: {e.strerror or e}"
        ) from None


def _handshake_timeout(t: SSHTarget) -> float:
    return t.connect_timeout + max(5.0, t.connect_timeout)


def _host_key_client(t: SSHTarget) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    policy = _AcceptNew(t) if t.strict_host_key_checking == "accept-new" else _RejectUnknown()
    client.set_missing_host_key_policy(policy)
    if t.control_master:
        _note(
            f"regdiag: ssh config ControlMaster {t.control_master} for {t.display} is not used: regdiag "
            "opens its own connection and keeps it for the whole command"
        )
    for f in (*t.known_hosts_files, *t.global_known_hosts_files):
        if os.path.isfile(f):
            try:
                client.load_system_host_keys(f)
            except (OSError, UnicodeDecodeError):
                continue
    return client


def _connect_one(t: SSHTarget, via: paramiko.SSHClient | None, via_name: str) -> paramiko.SSHClient:
    sock = _open_socket(t, via, via_name)
    client = _host_key_client(t)
    key_files = [f for f in t.identity_files if os.path.isfile(f)]
    try:
        client.connect(
            t.host_key_alias or t.hostname,
            port=t.port,
            username=t.user,
            sock=sock,
            key_filename=key_files or None,
            allow_agent=not t.identities_only,
            look_for_keys=not t.identity_files,
            # The banner wait is ConnectTimeout; the key exchange after it gets its own allowance, so
            # that a silent server is reported as such and not as a generic handshake timeout.
            timeout=_handshake_timeout(t),
            banner_timeout=t.connect_timeout,
            auth_timeout=AUTH_TIMEOUT,
            channel_timeout=CHANNEL_TIMEOUT,
        )
    except BaseException as e:
        client.close()
        try:
            sock.close()
        except Exception:
            pass
        if isinstance(e, Exception):
            raise _connect_error(t, e, key_files) from None
        raise
    transport = client.get_transport()
    assert transport is not None
    if t.server_alive_interval > 0:
        transport.set_keepalive(t.server_alive_interval)
    return client


def _connect_error(t: SSHTarget, e: Exception, key_files: list[str]) -> HostError:
    name = t.display
    if isinstance(e, HostError):
        return e
    if isinstance(e, UnknownHostKey):
        unchecked = (
            " (the SSH config's host key checking 'no' is not followed: regdiag connects only to a host "
            "whose key it can check; 'accept-new' adds a new host's key)"
            if t.strict_host_key_checking == "no"
            else ""
        )
        return HostError(
            f"{name}: host key not known ({t.known_hosts_name} offers {e.key.get_name()} {fingerprint(e.key)}); "
            f"check that fingerprint with the host's owner, then run `regdiag trust {t.spec or t.alias}`"
            + unchecked
        )
    if isinstance(e, paramiko.BadHostKeyException):
        return HostError(
            f"{name}: HOST KEY CHANGED for {t.known_hosts_name}: known_hosts has {e.expected_key.get_name()} "
            f"{fingerprint(e.expected_key)}, the server offers {e.key.get_name()} {fingerprint(e.key)}; "
            "refusing to connect (someone may be intercepting); if the host was reinstalled, remove the old "
            f"key with `ssh-keygen -R '{t.known_hosts_name}'` and run `regdiag trust {t.spec or t.alias}`"
        )
    if isinstance(e, paramiko.PasswordRequiredException):
        return HostError(
            f"{name}: a private key is passphrase-protected ({', '.join(key_files) or 'in ~/.ssh'}); "
            "load it into ssh-agent with `ssh-add` first"
        )
    if isinstance(e, paramiko.AuthenticationException) or "No authentication methods" in str(e):
        tried = (
            ", ".join(key_files) if key_files else ("~/.ssh/id_*" if not t.identity_files else "none found")
        )
        agent = "no agent" if t.identities_only or not os.environ.get("SSH_AUTH_SOCK") else "ssh-agent"
        return HostError(
            f"{name}: authentication failed for user {t.user!r} (keys tried: {tried}; {agent}); "
            "check User and IdentityFile in the SSH config or `ssh-add` the key"
        )
    text = str(e)
    if "protocol banner" in text:
        return HostError(
            f"{name}: {t.hostname} port {t.port} sent no SSH banner within {t.connect_timeout:g} s "
            "(not an SSH server, or an overloaded one)"
        )
    if isinstance(e, TimeoutError) or "No existing session" in text or "Negotiation timed out" in text:
        # paramiko's start_client returns on its timeout without raising; the next call then finds
        # no session
        return HostError(
            f"{name}: the SSH handshake with {t.hostname} port {t.port} did not complete within "
            f"{_handshake_timeout(t):g} s"
        )
    if isinstance(e, (EOFError, ConnectionResetError)):
        return HostError(f"{name}: {t.hostname} port {t.port} closed the connection during the SSH handshake")
    return HostError(f"{name}: SSH connection failed: {one_line(e)}")


def connect_chain(
    t: SSHTarget, *, via: paramiko.SSHClient | None = None, via_name: str = ""
) -> list[paramiko.SSHClient]:
    """Authenticated clients, jump hosts first and the target last. The caller closes them in reverse."""
    clients: list[paramiko.SSHClient] = []
    try:
        if t.jumps:
            first, *rest = t.jumps
            clients.extend(connect_chain(first, via=via, via_name=via_name))
            prev_name = first.display
            for hop in rest:
                clients.append(_connect_one(hop, clients[-1], prev_name))
                prev_name = hop.display
            clients.append(_connect_one(t, clients[-1], prev_name))
        else:
            clients.append(_connect_one(t, via, via_name))
    except BaseException:
        for c in reversed(clients):
            c.close()
        raise
    return clients


def fetch_host_key(t: SSHTarget, known: Sequence[str] = ()) -> paramiko.PKey:
    """The key the server offers, without authenticating to it (jump hosts are authenticated).

    `known` lists key types already recorded for the host: asking for one of those first makes a changed
    key show as changed rather than as another, unknown, key type.
    """
    jumps: list[paramiko.SSHClient] = []
    via: paramiko.SSHClient | None = None
    via_name = ""
    if t.jumps:
        from dataclasses import replace

        last = t.jumps[-1]
        jumps = connect_chain(replace(last, jumps=t.jumps[:-1]) if len(t.jumps) > 1 else last)
        via, via_name = jumps[-1], last.display
    sock = None
    transport = None
    try:
        sock = _open_socket(t, via, via_name)
        transport = paramiko.Transport(sock)
        transport.banner_timeout = t.connect_timeout
        if known:
            opts = transport.get_security_options()
            wanted = [k for k in known if k in opts.key_types]
            if "ssh-rsa" in known:
                wanted = [k for k in ("rsa-sha2-512", "rsa-sha2-256") if k in opts.key_types] + wanted
            opts.key_types = tuple(dict.fromkeys([*wanted, *opts.key_types]))
        try:
            transport.start_client(timeout=_handshake_timeout(t))
        except Exception as e:
            raise _connect_error(t, e, []) from None
        return transport.get_remote_server_key()
    finally:
        if transport is not None:
            transport.close()
        elif sock is not None:
            sock.close()
        for c in reversed(jumps):
            c.close()


def one_line(e: BaseException) -> str:
    """An exception as one bounded, scrubbed line (regdiag.snapshot.fields.one_line); its type when silent."""
    from regdiag.snapshot.fields import one_line as line

    return line(e) or type(e).__name__
