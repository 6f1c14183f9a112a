"""Keyed hashes of secret values: `diff` and `bisect` see "changed" without ever seeing a value.

A plain SHA-256 of a short secret (a PIN, a 6-word password) can be reversed by trying candidates;
an HMAC-SHA256 under a random key that never leaves this machine cannot. The key is 32 random bytes
in $REGDIAG_HOME/snapshot.key (default ~/.regdiag), created 0600 on first use with O_EXCL (two
snapshots starting at once agree on one key). A record holds the digest and `key_id`, a hash of the
key that tells whether two records' digests are comparable (same key) without revealing the key.

Standard library only (this runs on remote hosts too).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading

KEY_FILE = "snapshot.key"
PREFIX = "hmac-sha256:"
_DIGEST_CHARS = 16  # 64 bits: plenty to tell values apart, and short in a diff
_lock = threading.Lock()
_cache: dict[str, bytes] = {}


def regdiag_home() -> str:
    return os.environ.get("REGDIAG_HOME") or os.path.join(os.path.expanduser("~"), ".regdiag")


def key_path() -> str:
    return os.path.join(regdiag_home(), KEY_FILE)


def load_key() -> bytes:
    """The key, created on first use. Raises OSError when it can be neither read nor created."""
    path = key_path()
    with _lock:
        if path in _cache:
            return _cache[path]
        try:
            with open(path, "rb") as f:
                key = f.read()
        except FileNotFoundError:
            key = _create(path)
        if len(key) < 16:
            raise OSError(f"{path}: key file is too short ({len(key)} bytes); remove it to make a new one")
        _cache[path] = key
        return key


def _create(path: str) -> bytes:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    key = os.urandom(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another snapshot created it between our read and our create
        with open(path, "rb") as f:
            return f.read()
    try:
        os.write(fd, key)
    finally:
        os.close(fd)
    return key


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"regdiag key id\0" + key).hexdigest()[:8]


def keyed_hash(key: bytes, name: str, value: str) -> str:
    # The name is part of the message: equal secrets under two names do not look equal.
    mac = hmac.new(key, name.encode() + b"\0" + value.encode("utf-8", "surrogateescape"), hashlib.sha256)
    return PREFIX + mac.hexdigest()[:_DIGEST_CHARS]


def is_hashed(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)
