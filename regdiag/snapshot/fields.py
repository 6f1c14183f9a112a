"""Field and group values of a snapshot, and the guarded calls that produce them.

Every value in a snapshot is a field: {"status": "ok", "value": ...}, or a status of `unsupported`
(the source does not exist here), `error` (the source failed; "error" holds one line) or `timeout`.
A collector never raises: a failing source becomes a field, never a failed snapshot.

Standard library only (this package runs on remote hosts with a bare python3 >= 3.9).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

OK = "ok"
UNSUPPORTED = "unsupported"
ERROR = "error"
TIMEOUT = "timeout"
STATUSES = (OK, UNSUPPORTED, ERROR, TIMEOUT)

Field = dict[str, Any]


def ok(value: Any) -> Field:
    return {"status": OK, "value": value}


def unsupported(why: str) -> Field:
    return {"status": UNSUPPORTED, "value": None, "error": one_line(why)}


def error(why: str) -> Field:
    return {"status": ERROR, "value": None, "error": one_line(why)}


def timeout(why: str) -> Field:
    return {"status": TIMEOUT, "value": None, "error": one_line(why)}


def value_of(record: Any, group: str, name: str) -> Any:
    """The value of field `name` of `group` in a snapshot record when it was read (status ok), else None.

    The one reader of snapshot fields (field_value is the same, given the group)."""
    groups = record.get("groups") if isinstance(record, dict) else None
    return field_value(groups.get(group) if isinstance(groups, dict) else None, name)


def field_value(group: Any, name: str) -> Any:
    fields = group.get("fields") if isinstance(group, dict) else None
    f = fields.get(name) if isinstance(fields, dict) else None
    return f.get("value") if isinstance(f, dict) and f.get("status") == OK else None


def one_line(text: Any, limit: int = 300) -> str:
    """Error text as stored: one line, bounded, and scrubbed (a failing command may echo a URL)."""
    from regdiag.snapshot.redact import scrub_text

    s = scrub_text(" ".join(str(text).split()))
    return s if len(s) <= limit else s[: limit - 1] + "…"


def describe_exc(e: BaseException) -> str:
    msg = one_line(e)
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def guard(fn: Callable[[], Any]) -> Field:
    """Call fn; its return value becomes an ok field (a returned field is passed through)."""
    try:
        v = fn()
    except Exception as e:  # noqa: BLE001 - any failure of one source becomes that field's error
        return error(describe_exc(e))
    if isinstance(v, dict) and v.get("status") in STATUSES and "value" in v:
        return v
    return ok(v)


def group(fields: dict[str, Field], status: str | None = None, note: str | None = None) -> dict[str, Any]:
    """A group is ok when any of its fields is; otherwise it takes its fields' common failure."""
    if status is None:
        seen = {f.get("status") for f in fields.values()}
        if not fields or OK in seen:
            status = OK
        elif seen == {UNSUPPORTED}:
            status = UNSUPPORTED
        elif TIMEOUT in seen:
            status = TIMEOUT
        else:
            status = ERROR
    out: dict[str, Any] = {"status": status, "fields": fields}
    if note:
        out["note"] = one_line(note)
    return out


def failed_group(status: str, why: str) -> dict[str, Any]:
    return {"status": status, "fields": {}, "note": one_line(why)}


class CmdResult:
    __slots__ = ("returncode", "stdout", "stdout_bytes", "stderr", "timed_out", "missing")

    def __init__(
        self,
        returncode: int,
        stdout: bytes,
        stderr: str,
        timed_out: bool = False,
        missing: bool = False,
    ):
        self.returncode = returncode
        self.stdout_bytes = stdout
        self.stdout = _text(stdout)
        self.stderr = stderr
        self.timed_out = timed_out
        self.missing = missing

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.missing

    def why(self, argv0: str) -> str:
        if self.missing:
            return f"{argv0}: not found"
        if self.timed_out:
            return f"{argv0}: timed out"
        tail = [ln for ln in self.stderr.splitlines() if ln.strip()]
        return f"{argv0} exited {self.returncode}" + (f": {tail[-1].strip()}" if tail else "")


def run_cmd(
    argv: list[str], timeout_s: float, cwd: str | None = None, env: dict[str, str] | None = None
) -> CmdResult:
    """Run a command with a hard timeout; never raises for a missing program or a timeout."""
    full_env = None
    if env is not None:
        full_env = dict(os.environ)
        full_env.update(env)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=full_env,
            start_new_session=True,
        )
    except (FileNotFoundError, NotADirectoryError, PermissionError) as e:
        return CmdResult(127, b"", str(e), missing=True)
    try:
        out, err = proc.communicate(timeout=max(timeout_s, 0.01))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return CmdResult(-9, out or b"", _text(err), timed_out=True)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return CmdResult(proc.returncode, out or b"", _text(err))


def _text(b: bytes | None) -> str:
    return (b or b"").decode("utf-8", "replace")


def read_text(path: str, limit: int = 1 << 20) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read(limit)


def read_sys(path: str) -> Field:
    """One small /proc or /sys file as a stripped string; a missing file is `unsupported`."""
    try:
        return ok(read_text(path).strip())
    except FileNotFoundError:
        return unsupported(f"{path} does not exist here")
    except PermissionError:
        return error(f"{path}: permission denied")
    except OSError as e:
        return error(f"{path}: {e.strerror}")


class Deadline:
    """Wall-clock budget shared by the collectors of one snapshot."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self, floor: float = 0.05) -> float:
        return max(self.end - time.monotonic(), floor)


def run_threads(jobs: dict[str, Callable[[], Any]], deadline: Deadline) -> dict[str, tuple[str, Any]]:
    """Run each job in a daemon thread; wait until the deadline.

    Returns name -> ("ok", result) | ("error", one line) | ("timeout", None). A job still running at
    the deadline is abandoned (daemon thread): the snapshot reports it as timed out instead of waiting
    on a wedged driver or a hung filesystem.
    """
    results: dict[str, tuple[str, Any]] = {}
    lock = threading.Lock()

    def runner(name: str, fn: Callable[[], Any]) -> None:
        try:
            r: tuple[str, Any] = (OK, fn())
        except Exception as e:  # noqa: BLE001
            r = (ERROR, describe_exc(e))
        with lock:
            results[name] = r

    threads = []
    for name, fn in jobs.items():
        t = threading.Thread(target=runner, args=(name, fn), name=f"regdiag-{name}", daemon=True)
        t.start()
        threads.append((name, t))
    for _name, t in threads:
        t.join(timeout=deadline.left(floor=0.0))
    with lock:
        out = dict(results)
    for name, _t in threads:
        out.setdefault(name, (TIMEOUT, None))
    return out


def parallel_map(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """fn over items, one thread each (for calls that wait: subprocesses, NVML). Exceptions propagate.

    Plain threads rather than concurrent.futures: importing that costs 10 ms of a 300 ms budget.
    """
    results: list[Any] = [None] * len(items)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            results[i] = fn(items[i])
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
