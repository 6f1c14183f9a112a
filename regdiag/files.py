"""Files regdiag writes, made so that a shared machine cannot turn them against the user (or root).

Every write goes to the target itself, never through a link another user planted:
  - an output target is checked before anything is made (check_output_path): no control characters
    in the name, no directory, device or pipe, no /dev, /proc or /sys, and missing directories made
    (0700) only inside REGDIAG_HOME;
  - a whole file is replaced atomically through one descriptor of its directory: a temporary file made
    with O_EXCL | O_NOFOLLOW, synced, renamed over the target (atomic_write_bytes), so a link at the
    target is replaced and one at a temporary name is never opened;
  - an appended file (a journal, a build log) is opened with O_NOFOLLOW and refused when it is not a
    regular file of one link (open_appending);
  - locks live in $REGDIAG_HOME/locks (0700, this user's), never beside the user's files (FileLock);
  - REGDIAG_HOME is checked like an ssh directory (check_home): it and each of its directories owned by
    this user (or root), writable by no one else (by its group only when it is a shared home), and every
    directory inside it opened from the home's descriptor without following links (open_home_dir), so a
    link planted or swapped in at runs/, baselines/ or bisect/ is refused, never written through.

Standard library only: it travels to remote hosts in the bundle with regdiag.records, which re-exports
what readers and writers of records use from here.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
from pathlib import Path


class RecordError(ValueError):
    """A record file that cannot be used, or a file that cannot be written safely. The message is one
    line naming the file and the problem. (Defined here, with the writes; regdiag.records exports it.)"""


def regdiag_home() -> Path:
    """$REGDIAG_HOME (default ~/.regdiag): regdiag's own files (runs, baselines, journals, locks, the key)."""
    return Path(os.environ.get("REGDIAG_HOME") or Path.home() / ".regdiag")


SHARED_HOME_VAR = "REGDIAG_SHARED_HOME"
_shared_home = False


def set_shared_home(shared: bool) -> None:
    """Allow a group-writable REGDIAG_HOME (--shared-home, REGDIAG_SHARED_HOME=1, config shared_home)."""
    global _shared_home
    _shared_home = shared


def shared_home() -> bool:
    return _shared_home or os.environ.get(SHARED_HOME_VAR, "") not in ("", "0", "no", "false")


def _check_home_dir(fd: int, path: str, home_gid: int | None) -> None:
    """One directory of REGDIAG_HOME (`home_gid` None: the home itself), through its descriptor: this
    user's or root's (in a shared home, one of the home's group's) and writable by no one else (in a shared
    home, by no one outside its group). RecordError in one line otherwise."""
    st = os.fstat(fd)
    shared = shared_home()
    ours = st.st_uid in (os.geteuid(), 0)
    if not ours and not (shared and home_gid is not None and st.st_gid == home_gid):
        raise RecordError(
            f"{path}: owned by another user (uid {st.st_uid}); regdiag keeps runs, baselines and journals "
            "only in directories of its own user (or root): use another REGDIAG_HOME"
        )
    if st.st_mode & 0o002 or (st.st_mode & 0o020 and not shared):
        who = "anyone" if st.st_mode & 0o002 else "its group"
        hint = "chmod o-w it" if st.st_mode & 0o002 else "chmod g-w it, or pass --shared-home for a team home"
        raise RecordError(f"{path}: writable by {who} (mode {stat.S_IMODE(st.st_mode):o}); {hint}")


def not_own_file(st: os.stat_result) -> str | None:
    """Why a file (a journal, config.toml) may hold what another user wrote, or None when it is this
    user's own (or root's) and writable by no one else."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"owned by another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        who = "anyone" if st.st_mode & 0o002 else "its group"
        return f"writable by {who} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _open_child(dfd: int, name: str, path: str, make: bool) -> int:
    """`name` in the directory `dfd`, made (0700; 0770 in a shared home) when missing and `make`, opened
    without following a link."""
    if make:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o770 if shared_home() else 0o700, dir_fd=dfd)
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            what = "a symbolic link" if os.path.islink(path) else "not a directory"
            raise RecordError(
                f"{path}: {what} inside REGDIAG_HOME; regdiag never writes through one (remove it)"
            ) from None
        raise


def open_home_dir(directory: str | os.PathLike[str], make: bool = True) -> int:
    """A descriptor of a directory inside REGDIAG_HOME, reached from the home's descriptor one name at a
    time (O_NOFOLLOW | O_DIRECTORY) and each checked (_check_home_dir): a link swapped in at any step
    while regdiag runs is refused, never followed. Missing directories are made when `make`."""
    home = os.path.abspath(regdiag_home())
    rel = os.path.relpath(os.path.abspath(directory), home)
    if make:
        make_private_dirs(Path(home))
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _check_home_dir(fd, home, None)
        gid = os.fstat(fd).st_gid
        path = home
        for name in [] if rel == "." else rel.split(os.sep):
            path = os.path.join(path, name)
            child = _open_child(fd, name, path, make)
            os.close(fd)
            fd = child
            _check_home_dir(fd, path, gid)
        return fd
    except BaseException:
        os.close(fd)
        raise


HOME_DIRS = ("runs", "baselines", "bisect", "envs", "locks", "cache", "demo")


def check_home() -> None:
    """At start: REGDIAG_HOME and those of its directories that exist are regdiag's own (open_home_dir).
    Nothing is made. RecordError in one line (exit 2) naming the first that is not."""
    home = regdiag_home()
    if not home.exists():
        return
    for name in ("", *HOME_DIRS):
        if name and not os.path.lexists(home / name):
            continue
        try:
            os.close(open_home_dir(home / name if name else home, make=False))
        except FileNotFoundError:
            continue
        except OSError as e:
            raise RecordError(f"{home / name}: cannot open ({e.strerror or e})") from None


def inside_home(directory: str | os.PathLike[str]) -> bool:
    """Whether a directory is REGDIAG_HOME or below it: the only place regdiag makes missing directories."""
    home = os.path.abspath(regdiag_home())
    d = os.path.abspath(directory)
    return d == home or d.startswith(home.rstrip(os.sep) + os.sep)


def _kernel_dir(directory: Path) -> bool:
    """A directory on the file system of /dev, /proc or /sys (device nodes and kernel files; /dev/shm is
    a mount of its own and is not one), where a record has no business."""
    try:
        here, root = os.stat(directory).st_dev, os.stat("/").st_dev
        return any(here == os.stat(d).st_dev and here != root for d in ("/dev", "/proc", "/sys"))
    except OSError:
        return False


def check_output_path(path: str | os.PathLike[str]) -> Path:
    """An output target regdiag may write, checked before anything is created (RecordError in one line).

    The name has no control characters (a newline in it breaks every line that shows it); the target is
    absent, a regular file, or a link to one (replaced by the write, never written through); its
    directory exists and is not one of /dev, /proc, /sys. Missing directories are made (0700) only inside
    REGDIAG_HOME: `--html /nonexistent/d/x.html` run as root must not make /nonexistent/d."""
    p = Path(path)
    if not str(p).isprintable():
        raise RecordError(f"{str(p)!r}: the file name has a control character; give a plain name")
    try:
        st: os.stat_result | None = p.stat()
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise RecordError(f"{p}: cannot write ({e.strerror or e}); nothing was written") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise RecordError(f"{p}: is a directory; give a file name to write")
    if st is not None and not stat.S_ISREG(st.st_mode):
        # /dev/null, a named pipe: renaming over it would replace the node itself (as root, /dev/null for
        # every program on the machine); writing into it could wait forever for a pipe's reader.
        raise RecordError(f"{p}: not a regular file (a device or a pipe); give a file name to write")
    directory = p.parent
    if not directory.is_dir() and not inside_home(directory):
        what = "is not a directory" if directory.exists() else "does not exist"
        raise RecordError(
            f"{p}: {directory} {what}; make the directory first "
            "(regdiag makes missing directories only inside REGDIAG_HOME)"
        )
    if _kernel_dir(directory):
        raise RecordError(f"{p}: {directory} holds devices or kernel files, not records; write elsewhere")
    return p


def make_private_dirs(directory: Path) -> None:
    """mkdir -p, each directory made here 0700: records and journals hold environment data."""
    missing = []
    d = directory
    while not d.exists() and d != d.parent:
        missing.append(d)
        d = d.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another regdiag made it meanwhile
            d.mkdir(mode=0o700)


def _open_dir(directory: Path) -> int:
    """A descriptor of the directory an output goes to (made first when it is inside REGDIAG_HOME): every
    step of one write then happens in that one directory, whatever its path is changed into meanwhile."""
    if inside_home(directory):
        return open_home_dir(directory)
    return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _new_temp(dfd: int, name: str) -> tuple[str, int]:
    """A new file beside `name`, 0600, made here: O_EXCL | O_NOFOLLOW never opens a name planted there."""
    for _ in range(100):
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            return tmp, os.open(tmp, flags, 0o600, dir_fd=dfd)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write data to path so that readers see the old file or the new one, never a mix.

    The temporary file is made in the target's directory (through one descriptor of it, _new_temp) and
    renamed over the target: a link planted at the target is replaced, never written through, and one
    planted at a temporary name is never opened. Nothing outside the target changes."""
    p = check_output_path(path)
    try:
        dfd = _open_dir(p.parent)
    except OSError as e:  # the directory cannot be made or opened: name the user's path
        raise RecordError(f"{p}: cannot write ({e.strerror or e}); nothing was written") from None
    tmp = None
    try:
        tmp, fd = _new_temp(dfd, p.name)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p.name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
        if isinstance(e, OSError):
            kept = "its previous version is kept" if p.exists() else "nothing was written"
            raise RecordError(f"{p}: cannot write ({e.strerror or e}); {kept}") from None
        raise
    finally:
        os.close(dfd)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """atomic_write_bytes of the text as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def open_appending(path: str | os.PathLike[str]) -> int:
    """A read-write descriptor appending to `path` (a journal, a build log), the file made 0600 if missing.

    Refused in one line (RecordError): a symbolic link (never written through: O_NOFOLLOW), a FIFO or a
    device, and a file with other hard links (one planted to make root append to another file)."""
    p = check_output_path(path)
    link = f"{p}: is a symbolic link; regdiag never appends through a link"
    if p.is_symlink():  # said plainly; O_NOFOLLOW below holds it if one is planted after this look
        raise RecordError(link)
    try:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        if inside_home(p.parent):  # reached from the home's descriptor, never through a planted link
            dfd = open_home_dir(p.parent)
            try:
                fd = os.open(p.name, flags, 0o600, dir_fd=dfd)
            finally:
                os.close(dfd)
        else:
            fd = os.open(p, flags, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RecordError(link) from None
        raise RecordError(f"{p}: cannot write ({e.strerror or e}); nothing was written") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        why = (
            "has other hard links" if stat.S_ISREG(st.st_mode) else "is not a regular file (a device, a pipe)"
        )
        raise RecordError(f"{p}: {why}; regdiag appends only to a file of its own")
    return fd


def append_text(path: str | os.PathLike[str], text: str) -> None:
    """Append text to a log (open_appending: never through a link, 0600 when made)."""
    with os.fdopen(open_appending(path), "a", encoding="utf-8") as f:
        f.write(text)


LOCKS_DIR = "locks"


def lock_path(target: str | os.PathLike[str]) -> Path:
    """Where the lock of `target` lives: $REGDIAG_HOME/locks/<SHA-256 of its real path>.lock, never beside
    it (two names of one file, through a link or `..`, share one lock)."""
    t = Path(target)
    real = os.path.join(os.path.realpath(t.parent), t.name)
    return regdiag_home() / LOCKS_DIR / f"{hashlib.sha256(os.fsencode(real)).hexdigest()[:32]}.lock"


def _own_dir_fd(d: Path) -> int:
    """A descriptor of a directory of regdiag's own (made 0700 when missing). Refused: a link, another
    user's directory, or one others may write to (they could plant names in it)."""
    if inside_home(d):
        fd = open_home_dir(d)
    else:
        make_private_dirs(d)
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise RecordError(
            f"{d}: another user's directory, or writable by others; regdiag keeps its locks only in a "
            "directory of its own (remove it and it is made again, 0700)"
        )
    return fd


class FileLock:
    """An exclusive lock on a file regdiag writes (a run, a baseline, a journal, an environment), held
    until released or until the process ends.

    flock on $REGDIAG_HOME/locks/<hash>.lock (lock_path), holding the holder's pid: a second regdiag that
    would write the same file gets RecordError naming that pid instead of silently replacing its work
    (`wait=True`: it waits its turn instead). Nothing is made beside the user's file; the lock file is
    opened through a descriptor of the locks directory with O_NOFOLLOW, and anything there that is not
    this user's own regular file with one link is refused, never followed or truncated. The kernel drops
    the lock when the holder exits, kill -9 included; the lock file stays (removing it would let two
    processes lock two different files of the same name).
    """

    def __init__(
        self, target: str | os.PathLike[str], what: str, wait: bool = False, shared: bool = False
    ) -> None:
        import fcntl

        self.target = Path(target)
        self.path = lock_path(self.target)
        try:
            dfd = _own_dir_fd(self.path.parent)
            try:
                flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                fd = os.open(self.path.name, flags, 0o600, dir_fd=dfd)
            finally:
                os.close(dfd)
        except OSError as e:  # name the user's file, and where its lock could not be made
            raise RecordError(
                f"{self.target}: cannot take its lock in {self.path.parent} ({e.strerror or e}); "
                "nothing was written"
            ) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            os.close(fd)
            raise RecordError(f"{self.path}: not a lock file of this user's own; remove it")
        try:
            mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX  # shared: a lease many may hold (lease_of)
            fcntl.flock(fd, mode if wait else mode | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise RecordError(
                f"{self.target}: {what} is being written by another regdiag (pid {holder}); "
                "wait for it to finish, or write to another file"
            ) from None
        with contextlib.suppress(OSError):  # a full disk: the lock holds, only the pid is not shown
            if not shared:
                os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lease_of(d: str | os.PathLike[str]) -> Path:
    """What a lease on a directory is taken on (a FileLock of its own, never the directory's build lock):
    a bisect holds it shared while it uses an environment, `clean` takes it exclusively to remove one."""
    p = Path(d)
    return p.parent / f".{p.name}.lease"
