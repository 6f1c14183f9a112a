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
import stat
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
    """Add one line, creating ~/.ssh (0700) and the file (0600) when they do not exist yet. The file is
    replaced whole (a new file with the old lines and this one, synced, renamed over it; through a link,
    the file it names), so a full disk leaves the old known_hosts as it was, never a cut or empty one:
    RecordError in one line naming the file."""
    from regdiag.files import RecordError, atomic_write_bytes

    p = Path(path)
    if not p.parent.exists():
        p.parent.mkdir(mode=0o700, parents=True)
    real = Path(os.path.realpath(p))
    try:
        old = real.read_bytes() if real.exists() else b""
        mode = stat.S_IMODE(real.stat().st_mode) if real.exists() else 0o600
    except OSError as e:
        raise RecordError(f"{real}: cannot read ({e.strerror or e}); nothing was written") from None
    new = old + (b"\n" if old and not old.endswith(b"\n") else b"") + line.encode("ascii") + b"\n"
    atomic_write_bytes(real, new)
    os.chmod(real, mode)
