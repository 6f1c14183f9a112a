"""Host keys: what the user's known_hosts files say, fingerprints as OpenSSH prints them, and adding one.

regdiag adds a key on its own only where the SSH config says `StrictHostKeyChecking accept-new` for
that host, and only for a host that no known_hosts file names (sshconnect._AcceptNew, as ssh does);
otherwise a key is added only by `regdiag trust`, after the user saw its fingerprint. A changed key is
never replaced.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import paramiko


def fingerprint(key: paramiko.PKey) -> str:
    """`SHA256:...` exactly as `ssh-keygen -l` and ssh's prompts show it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def load_known_hosts(files: Iterable[str]) -> paramiko.HostKeys:
    """All entries of the existing files, merged (hashed names included); missing files are skipped."""
    from regdiag.hosts.paramiko_import import paramiko

    keys = paramiko.HostKeys()
    for f in files:
        if os.path.isfile(f):
            try:
                keys.load(f)
            except (OSError, UnicodeDecodeError):
                continue  # an unreadable global file must not stop the user's own from counting
    return keys


def known_keys_for(keys: paramiko.HostKeys, name: str) -> dict[str, paramiko.PKey]:
    found = keys.lookup(name)
    return dict(found.items()) if found is not None else {}


def known_hosts_line(name: str, key: paramiko.PKey, *, hashed: bool = False) -> str:
    from regdiag.hosts.paramiko_import import paramiko

    shown = paramiko.HostKeys.hash_host(name) if hashed else name
    return f"{shown} {key.get_name()} {key.get_base64()}"


def append_known_host(path: str, line: str) -> None:
    """Append one line, creating ~/.ssh (0700) and the file (0600) when they do not exist yet."""
    p = Path(path)
    if not p.parent.exists():
        p.parent.mkdir(mode=0o700, parents=True)
    needs_newline = p.exists() and p.stat().st_size > 0 and not p.read_bytes().endswith(b"\n")
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (("\n" if needs_newline else "") + line + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
