"""Record files: load with validation, save atomically.

This module imports nothing else of regdiag and only the standard library, so it can travel to a
remote host inside the bundle. Records are plain dicts (JSON objects); unknown fields are kept.

Format history (docs/records.md):
  regdiag.snapshot/1  2026-11-29  first version
  regdiag.run/1       2026-11-29  first version
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

SNAPSHOT = "snapshot"
RUN = "run"
JOURNAL = "journal"
BASELINE = "baseline"

# The newest major version this regdiag reads, per kind.
SUPPORTED: dict[str, int] = {SNAPSHOT: 1, RUN: 1}

SNAPSHOT_SCHEMA = f"regdiag.{SNAPSHOT}/{SUPPORTED[SNAPSHOT]}"
RUN_SCHEMA = f"regdiag.{RUN}/{SUPPORTED[RUN]}"


class RecordError(ValueError):
    """A record file that cannot be used. The message is one line naming the file and the problem."""


def parse_schema(value: Any) -> tuple[str, int]:
    """'regdiag.run/1' -> ('run', 1). Raises ValueError with a short reason."""
    if not isinstance(value, str) or not value.startswith("regdiag.") or "/" not in value:
        raise ValueError(f"schema {value!r} is not a regdiag schema")
    kind, _, major = value[len("regdiag.") :].partition("/")
    major = major.split(".")[0]
    if not kind or not major.isdigit():
        raise ValueError(f"schema {value!r} is malformed")
    return kind, int(major)


def check_record(record: Any, source: str, expect: str | tuple[str, ...] | None = None) -> dict[str, Any]:
    """Validate a decoded record; return it or raise RecordError naming `source`."""
    if not isinstance(record, dict):
        raise RecordError(
            f"{source}: not a regdiag record (top level is {type(record).__name__}, not an object)"
        )
    if "schema" not in record:
        raise RecordError(f'{source}: not a regdiag record (no "schema" field)')
    try:
        kind, major = parse_schema(record["schema"])
    except ValueError as e:
        raise RecordError(f"{source}: {e}") from None
    if kind not in SUPPORTED:
        raise RecordError(f"{source}: unknown record kind {kind!r} (schema {record['schema']})")
    if major > SUPPORTED[kind]:
        raise RecordError(
            f"{source}: written by a newer regdiag (schema {record['schema']}, this regdiag reads up to "
            f"regdiag.{kind}/{SUPPORTED[kind]}); upgrade regdiag to read it"
        )
    if major < 1:
        raise RecordError(f"{source}: unsupported schema {record['schema']}")
    if expect is not None:
        wanted = (expect,) if isinstance(expect, str) else expect
        if kind not in wanted:
            want = " or ".join(wanted)
            raise RecordError(f"{source}: is a {kind} record; a {want} record is needed here")
    if kind == RUN:
        launches = record.get("launches")
        if not isinstance(launches, list):
            raise RecordError(f'{source}: run record without a "launches" list')
        for i, launch in enumerate(launches):
            if not isinstance(launch, dict) or not isinstance(launch.get("samples", {}), dict):
                raise RecordError(f"{source}: launch {i} is malformed")
    if kind == SNAPSHOT and not isinstance(record.get("groups"), dict):
        raise RecordError(f'{source}: snapshot record without a "groups" object')
    return record


def loads_record(text: str, source: str, expect: str | tuple[str, ...] | None = None) -> dict[str, Any]:
    if not text.strip():
        raise RecordError(f"{source}: file is empty")
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        # A cut-off file ends in the middle of a value: say "truncated" rather than a parser position.
        if e.pos >= len(text.rstrip()) - 1 or e.msg.startswith("Unterminated string"):
            raise RecordError(
                f"{source}: truncated JSON (file ends at line {e.lineno} column {e.colno})"
            ) from None
        raise RecordError(f"{source}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    return check_record(record, source, expect)


def load_record(path: str | os.PathLike[str], expect: str | tuple[str, ...] | None = None) -> dict[str, Any]:
    """Read and validate a record file. `expect` is a kind ('run', 'snapshot') or a tuple of kinds."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise RecordError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise RecordError(f"{p}: is a directory, not a record file") from None
    except OSError as e:
        raise RecordError(f"{p}: cannot read ({e.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordError(f"{p}: not a text file (not UTF-8)") from None
    return loads_record(text, str(p), expect)


def dumps_record(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=1, sort_keys=False, allow_nan=False, default=_json_default) + "\n"


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"cannot store {type(obj).__name__} in a record")


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write text to path so that readers see the old file or the new one, never a mix."""
    p = Path(path)
    directory = p.parent if str(p.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def save_record(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Validate then write atomically."""
    check_record(record, str(path))
    atomic_write_text(path, dumps_record(record))


def append_jsonl(path: str | os.PathLike[str], obj: dict[str, Any]) -> None:
    """Append one JSON line and fsync: an append-only journal survives kill -9 up to its last line."""
    line = json.dumps(obj, sort_keys=False, allow_nan=False, default=_json_default)
    # 0600 whatever the umask: journals hold environment data, like records (mkstemp makes those 0600).
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a JSON-lines file; a torn last line (kill -9 mid-write) is ignored, others must parse."""
    p = Path(path)
    if not p.exists():
        return []
    out: list[dict[str, Any]] = []
    try:
        lines = p.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError:
        raise RecordError(f"{p}: not a text file (not UTF-8)") from None
    except OSError as e:
        raise RecordError(f"{p}: cannot read ({e.strerror})") from None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i >= len(lines) - 2:  # the last, unterminated line
                break
            raise RecordError(f"{p}: line {i + 1} is not valid JSON") from None
    return out
