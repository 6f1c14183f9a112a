"""Keyed hashes of secret values: `diff` and `bisect` see "changed" without ever seeing a value.

A plain SHA-256 of a short secret (a PIN, a 6-word password) can be reversed by trying candidates;
an HMAC-SHA256 under a random key that never leaves this machine cannot. The key is 32 random bytes
in $REGDIAG_HOME/snapshot.key (default ~/.regdiag). A record holds the digest and `key_id`, a hash of
the key that tells whether two records' digests are comparable (same key) without revealing the key.

The key is trusted only when it is this user's own: a regular file (opened with O_NOFOLLOW and
O_NONBLOCK, so a link or a FIFO planted there is neither followed nor waited on), owned by the user,
readable by nobody else, and exactly 32 bytes (never more is read). Anything else is refused in one
line (KeyFileError, exit 2): a key another user planted would let them confirm guesses of short
secrets from the hashes. It is made on first use whole or not at all: written to a new file (O_EXCL,
O_NOFOLLOW, 0600), synced, then linked into place, which never replaces a key that is there (two
snapshots starting at once agree on one key). A write that fails (a full disk) is an error, never
a short key that turns hashing off.

Standard library only, and regdiag.files (this runs on remote hosts too).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import secrets
import stat
import threading
from pathlib import Path

from regdiag.files import RecordError, make_private_dirs
from regdiag.files import regdiag_home as _home

KEY_FILE = "snapshot.key"
KEY_BYTES = 32
PREFIX = "hmac-sha256:"
_DIGEST_CHARS = 16  # 64 bits: plenty to tell values apart, and short in a diff
_lock = threading.Lock()
_cache: dict[str, bytes] = {}
_FIX = "remove it and regdiag makes a new one (values hashed under the old key then no longer compare)"


class KeyFileError(RecordError):
    """The hash key cannot be used or made: one line naming the file (exit 2, as any bad input)."""


def regdiag_home() -> str:
    return str(_home())


def key_path() -> str:
    return os.path.join(regdiag_home(), KEY_FILE)


def load_key() -> bytes:
    """The key, made on first use. Raises KeyFileError when it can be neither read nor made."""
    path = key_path()
    with _lock:
        if path in _cache:
            return _cache[path]
        key = _read(path)
        if key is None:
            key = _create(path)
        _cache[path] = key
        return key


def _problem(st: os.stat_result) -> str | None:
    """Why a key file is not to be trusted, or None."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a FIFO, socket, device or directory)"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & 0o077:
        return f"mode {stat.S_IMODE(st.st_mode):04o}: other users may read or replace it (0600 is needed)"
    if st.st_size != KEY_BYTES:
        return f"{st.st_size} bytes, not {KEY_BYTES}"
    return None


def _read(path: str) -> bytes | None:
    """The key in `path`, None when there is none, KeyFileError when it is not one to trust."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise KeyFileError(f"{path}: hash key refused: a symbolic link, not a file; {_FIX}") from None
        raise KeyFileError(f"{path}: cannot read the hash key ({e.strerror or e})") from None
    try:
        problem = _problem(os.fstat(fd))
        if problem:
            raise KeyFileError(f"{path}: hash key refused: {problem}; {_FIX}")
        key = os.read(fd, KEY_BYTES + 1)  # a regular file of KEY_BYTES: one read has it all
    except OSError as e:
        raise KeyFileError(f"{path}: cannot read the hash key ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:  # it changed size between the fstat and the read
        raise KeyFileError(f"{path}: hash key refused: {len(key)} bytes, not {KEY_BYTES}; {_FIX}")
    return key


def _create(path: str) -> bytes:
    """A new key, linked into place whole; the key that is there if another process was first."""
    tmp = f"{path}.{secrets.token_hex(4)}.tmp"
    try:
        make_private_dirs(Path(path).parent)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise KeyFileError(f"{path}: cannot make the hash key ({e.strerror or e})") from None
    try:
        try:
            os.fchmod(fd, 0o600)  # whatever the umask: readable by this user, by nobody else
            left = memoryview(os.urandom(KEY_BYTES))
            while left:  # a short write is followed by one that says why (ENOSPC, EFBIG)
                left = left[os.write(fd, left) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # fails if a key is there: never replaces one
        except FileExistsError:
            pass
    except OSError as e:
        raise KeyFileError(
            f"{path}: cannot write the hash key ({e.strerror or e}); nothing was kept"
        ) from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    key = _read(path)
    if key is None:
        raise KeyFileError(f"{path}: the hash key was made but is gone")
    return key


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"regdiag key id\0" + key).hexdigest()[:8]


def keyed_hash(key: bytes, name: str, value: str) -> str:
    # The name is part of the message: equal secrets under two names do not look equal.
    mac = hmac.new(key, name.encode() + b"\0" + value.encode("utf-8", "surrogateescape"), hashlib.sha256)
    return PREFIX + mac.hexdigest()[:_DIGEST_CHARS]


def signature(key: bytes, purpose: str, data: bytes) -> str:
    """An HMAC-SHA256 of `data` under a key derived from the hash key for `purpose` alone: no value
    hashed for a record (keyed_hash) can be made to match it."""
    sub = hmac.new(key, b"regdiag signature\0" + purpose.encode(), hashlib.sha256).digest()
    return hmac.new(sub, data, hashlib.sha256).hexdigest()


def is_hashed(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)
