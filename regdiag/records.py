"""Record files: load with validation, save atomically.

This module imports nothing else of regdiag and only the standard library, so it can travel to a
remote host inside the bundle. Records are plain dicts (JSON objects); unknown fields are kept.

Every schema id regdiag writes is in SCHEMAS below, with its history (docs/records.md):
  regdiag.snapshot/1       2026-11-29  first version
  regdiag.snapshot/2       2026-11-30  the packages group keeps package versions in "fields" and the
                                       rest (regdiag's own version, sources, count, hash, nccl,
                                       nccl_libraries, all) in "metadata"; /1 is read as it was
                                       (regdiag.snapshot.packages.split)
  regdiag.run/1            2026-11-29  first version
  regdiag.journal/1        2026-11-29  first version (the first line of a bisect journal)
  regdiag.bisect-report/1  2026-11-29  first version (bisect --json)
  regdiag.comparison/1     2026-11-29  first version (compare --json)
  regdiag.explanation/1    2026-11-29  first version (explain --json)
  regdiag.<output>/1       2026-12-01  every other --json output (OUTPUT_KINDS; their JSON Schemas are
                                       docs/schemas/, made by `python -m regdiag.schemas`)
A reader accepts any minor change and unknown fields, and refuses a newer major version with
"upgrade regdiag"; an older major version would be upgraded step by step here.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

# Writes (atomic, never through a planted link) and locks live in regdiag.files; the error, the lock and
# the atomic write are exported here as well, where the readers and writers of records import them.
from regdiag.files import FileLock, RecordError, atomic_write_text, open_appending  # noqa: F401
from regdiag.json_bounds import MAX_DEPTH, MAX_RECORD_TEXT, depth_over, text_over

SNAPSHOT = "snapshot"
RUN = "run"
JOURNAL = "journal"
BISECT_REPORT = "bisect-report"
COMPARISON = "comparison"
EXPLANATION = "explanation"

# What the other `--json` outputs are (command -> kind): each is one object whose "schema" is its id.
OUTPUT_KINDS: dict[str, str] = {
    "snapshot (several hosts)": "snapshot-list",
    "snapshot --check": "check",
    "snapshot --check (several hosts)": "check-list",
    "diff": "diff",
    "runs": "run-list",
    "baseline list": "baseline-list",
    "check-host": "host-check-list",
    "trust": "trust",
    "clean": "clean",
    "ingest-log": "ingest",
    "probe spec-decode / collectives": "probe-summary",
    "probe (several hosts)": "probe-hosts",
    "probe server": "server-summary",
    "probe engine": "engine-summary",
    "demo": "demo",
    "any command under --json, when it fails": "error",
}
# The one table of schema ids: kind -> the major version this regdiag writes and reads.
SCHEMAS: dict[str, int] = {
    SNAPSHOT: 2,
    RUN: 1,
    JOURNAL: 1,
    BISECT_REPORT: 1,
    COMPARISON: 1,
    EXPLANATION: 1,
    **{kind: 1 for kind in OUTPUT_KINDS.values()},
}
# The kinds stored as record files (load_record); the others are a journal's head line or command output.
RECORD_KINDS = (SNAPSHOT, RUN)


def schema_id(kind: str) -> str:
    """'run' -> 'regdiag.run/1'."""
    return f"regdiag.{kind}/{SCHEMAS[kind]}"


def tagged(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """A --json output object with its schema id first (docs/schemas/)."""
    return {"schema": schema_id(kind), **{k: v for k, v in obj.items() if k != "schema"}}


def listed(kind: str, key: str, items: list[Any]) -> dict[str, Any]:
    """A --json list as one object, `{"schema": ..., key: items}`, so that an empty list has its id too."""
    return {"schema": schema_id(kind), key: items}


SNAPSHOT_SCHEMA = schema_id(SNAPSHOT)
RUN_SCHEMA = schema_id(RUN)


def parse_schema(value: Any) -> tuple[str, int]:
    """'regdiag.run/1' -> ('run', 1). Raises ValueError with a short reason."""
    if not isinstance(value, str) or not value.startswith("regdiag.") or "/" not in value:
        raise ValueError(f"schema {value!r} is not a regdiag schema")
    kind, _, major = value[len("regdiag.") :].partition("/")
    major = major.split(".")[0]
    if not kind or not major.isdigit():
        raise ValueError(f"schema {value!r} is malformed")
    return kind, int(major)


def check_schema(value: Any, source: str, kinds: tuple[str, ...] = RECORD_KINDS) -> tuple[str, int]:
    """The (kind, major) of a schema id that this regdiag reads, or RecordError in one line."""
    try:
        kind, major = parse_schema(value)
    except ValueError as e:
        raise RecordError(f"{source}: {e}") from None
    if kind not in kinds:
        raise RecordError(f"{source}: unknown record kind {kind!r} (schema {value})")
    if major > SCHEMAS[kind]:
        raise RecordError(
            f"{source}: written by a newer regdiag (schema {value}, this regdiag reads up to "
            f"{schema_id(kind)}); upgrade regdiag to read it"
        )
    if major < 1:
        raise RecordError(f"{source}: unsupported schema {value}")
    return kind, major


def check_record(
    record: Any, source: str, expect: str | tuple[str, ...] | None = None, values: bool = True
) -> dict[str, Any]:
    """Validate a decoded record; return it or raise RecordError naming `source`.

    `values=False` checks the shape only: a writer keeps what it measured (an odd value included) and
    the reader, which checks values too, names what it cannot use."""
    if not isinstance(record, dict):
        raise RecordError(
            f"{source}: not a regdiag record (top level is {type(record).__name__}, not an object)"
        )
    if "schema" not in record:
        raise RecordError(f'{source}: not a regdiag record (no "schema" field)')
    kind, _ = check_schema(record["schema"], source)
    if expect is not None:
        wanted = (expect,) if isinstance(expect, str) else expect
        if kind not in wanted:
            want = " or ".join(wanted)
            raise RecordError(f"{source}: is a {kind} record; a {want} record is needed here")
    if kind == RUN:
        _check_run(record, source, values)
    if kind == SNAPSHOT:
        _check_snapshot(record, source)
    return record


# Measured values are times (ms, us) or rates: finite and positive. Above this no clock measures, and
# below MIN_SAMPLE (a femtosecond in ms) neither: a subnormal such as 5e-324 overflowed compare's ratios.
MAX_SAMPLE = 1e12
MIN_SAMPLE = 1e-12
# Below float64's normal range (subnormals): refused in values and scalars too, where 0 is legal.
MIN_NORMAL = 2.2250738585072014e-308
# What a launch's and a run's status may be (docs/records.md); a launch counts as evidence unless it is
# "error" (regdiag/run_view.py), so a word outside these ("failed", "banana") is refused, not counted.
LAUNCH_STATUSES = ("ok", "error", "interrupted")
RUN_STATUSES = ("running", "complete", "partial", "interrupted", "failed")
DIRECTIONS = ("higher", "lower", "context")  # regdiag.direction's words (this module imports no regdiag)
SAMPLE_KEYS = ("samples", "naive_samples", "bare_samples")


def _check_samples(samples: Any, where: str, nonempty: bool = False) -> set[str]:
    """The metrics of one launch's samples, or RecordError: {metric: [finite positive numbers]}."""
    if not isinstance(samples, dict):
        raise RecordError(f"{where} is a {type(samples).__name__}, not an object of metric -> list")
    for metric, values in samples.items():
        if not isinstance(values, list):
            raise RecordError(f"{where}[{metric!r}] is a {type(values).__name__}, not a list of numbers")
        if nonempty and not values:
            raise RecordError(f"{where}[{metric!r}] has no values in a launch that says it succeeded")
        for j, x in enumerate(values):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise RecordError(f"{where}[{metric!r}][{j}] is {x!r}, not a number")
            if not math.isfinite(x):
                raise RecordError(f"{where}[{metric!r}][{j}] is {x}: measured values must be finite")
            if x <= 0:
                raise RecordError(f"{where}[{metric!r}][{j}] is {x}: measured values must be positive")
            if not MIN_SAMPLE <= x <= MAX_SAMPLE:
                raise RecordError(
                    f"{where}[{metric!r}][{j}] is {x:g}: out of range for a measurement "
                    f"({MIN_SAMPLE:g} to {MAX_SAMPLE:g})"
                )
    return set(samples)


def _check_snapshot(record: dict[str, Any], source: str) -> None:
    groups = record.get("groups")
    if not isinstance(groups, dict):
        raise RecordError(f'{source}: snapshot record without a "groups" object')
    for name, group in groups.items():
        if not isinstance(group, dict):
            raise RecordError(f"{source}: snapshot group {name!r} is not an object")
        for key in ("fields", "metadata"):  # metadata: the packages group's, since snapshot/2
            fields = group.get(key)
            if fields is not None and not (
                isinstance(fields, dict) and all(isinstance(f, dict) for f in fields.values())
            ):
                raise RecordError(f"{source}: snapshot group {name!r} has malformed {key}")


def _check_numbers(launch: dict[str, Any], where: str) -> None:
    """Per-cycle values and per-launch scalars: objects, and every number in them finite and in range."""
    for key in ("values", "scalars"):
        obj = launch.get(key)
        if obj is None:
            continue
        if not isinstance(obj, dict):
            raise RecordError(f"{where} {key} is a {type(obj).__name__}, not an object")
        for name, v in obj.items():
            for x in v if isinstance(v, list) else [v]:
                if isinstance(x, (int, float)) and not isinstance(x, bool):
                    if not (math.isfinite(x) and abs(x) <= MAX_SAMPLE) or 0 < abs(x) < MIN_NORMAL:
                        raise RecordError(f"{where} {key}[{name!r}] holds {x!r}: not a finite measurement")


def _check_header(header: Any, where: str) -> None:
    """The probe's header (docs/probes.md): the objects readers descend into must be objects."""
    if header is None:
        return
    if not isinstance(header, dict):
        raise RecordError(f"{where} is a {type(header).__name__}, not an object")
    for key in ("config", "graphs", "env"):
        if header.get(key) is not None and not isinstance(header[key], dict):
            raise RecordError(f"{where}: {key!r} is a {type(header[key]).__name__}, not an object")
    model = header.get("model")  # the synthetic probe's shape (an object); a server's model name
    if model is not None and not isinstance(model, (dict, str)):
        raise RecordError(f"{where}: 'model' is a {type(model).__name__}, not an object or a name")
    shape = model.get("shape") if isinstance(model, dict) else None
    if shape is not None and not isinstance(shape, dict):
        raise RecordError(f"{where}: model shape is a {type(shape).__name__}, not an object")


def _name(x: Any, limit: int = 200) -> bool:
    """A name a record may use for a metric, phase or unit: short printable text."""
    return isinstance(x, str) and 0 < len(x) <= limit and x.isprintable() and bool(x.strip())


def _check_launch_fields(launch: dict[str, Any], where: str) -> None:
    """The fields that decide whether and where a launch counts: its status and its index."""
    status = launch.get("status")
    if status is not None and status not in LAUNCH_STATUSES:
        raise RecordError(f"{where} status is {status!r}: a launch is {', '.join(LAUNCH_STATUSES)}")
    index = launch.get("index")
    if index is not None and (
        isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 10**9
    ):
        raise RecordError(f"{where} index is {index!r}: a launch's index is a whole number from 0")


def _check_vocabulary(record: dict[str, Any], source: str) -> None:
    """`phases`, `units` and `better` (docs/records.md): names, unit names and the three directions."""
    status = record.get("status")
    if status is not None and status not in RUN_STATUSES:
        raise RecordError(f"{source}: run status is {status!r}: a run is {', '.join(RUN_STATUSES)}")
    phases = record.get("phases") or []
    for p in phases:
        if not _name(p):
            raise RecordError(f"{source}: phase name {p!r} is not a name (short printable text)")
    if len(set(phases)) != len(phases):
        raise RecordError(f"{source}: 'phases' names a phase twice: {phases}")
    for metric, unit in (record.get("units") or {}).items():
        if not _name(metric) or not _name(unit, 40):
            raise RecordError(
                f"{source}: units[{metric!r}] is {unit!r}: not a unit name (short printable text)"
            )
    units = record.get("units") or {}
    primary = record.get("primary")
    if record.get("phases_sum_to_primary") is not False and isinstance(primary, str) and primary in units:
        for p in phases:  # the phases add up to the primary (attribution): one unit for all of them
            if p in units and units[p] != units[primary]:
                raise RecordError(
                    f"{source}: phase {p!r} is in {units[p]!r} but the primary {primary!r} in "
                    f"{units[primary]!r}; phases add up to the primary, so they share its unit"
                )
    better = record.get("better")
    if better is not None and not isinstance(better, dict):
        raise RecordError(
            f"{source}: 'better' is a {type(better).__name__}, not an object of metric -> direction"
        )
    for metric, way in (better or {}).items():
        if way not in DIRECTIONS:
            raise RecordError(f"{source}: better[{metric!r}] is {way!r}: use {', '.join(DIRECTIONS)}")


def _check_run(record: dict[str, Any], source: str, values: bool = True) -> None:
    """Types and values of a run, checked once here so that every reader can trust them."""
    launches = record.get("launches")
    if not isinstance(launches, list):
        raise RecordError(f'{source}: run record without a "launches" list')
    metrics: set[str] = set()
    for i, launch in enumerate(launches):
        if not isinstance(launch, dict):
            raise RecordError(f"{source}: launch {i} is malformed (a {type(launch).__name__}, not an object)")
        if values:
            _check_launch_fields(launch, f"{source}: launch {i}")
        if not values and not isinstance(launch.get("samples", {}), dict):
            raise RecordError(f"{source}: launch {i} is malformed (samples is not an object)")
        if values:
            _check_header(launch.get("header"), f"{source}: launch {i} header")
            for key in ("footer", "clocks"):  # readers descend into these: an object and a list
                want = dict if key == "footer" else list
                if launch.get(key) is not None and not isinstance(launch[key], want):
                    raise RecordError(f"{source}: launch {i} {key} is a {type(launch[key]).__name__}")
            _check_numbers(launch, f"{source}: launch {i}")
        for key in SAMPLE_KEYS if values else ():
            if key in launch and not (key != "samples" and launch[key] is None):
                ok = key == "samples" and launch.get("status", "ok") == "ok"
                found = _check_samples(launch[key], f"{source}: launch {i} {key}", nonempty=ok)
                if key == "samples":
                    metrics |= found
    for key in ("probe", "units", "host", "design"):  # an ab run's design: compare reads its fields
        if record.get(key) is not None and not isinstance(record[key], dict):
            raise RecordError(f"{source}: {key!r} is a {type(record[key]).__name__}, not an object")
    for key, label in (("probe", "probe name"), ("host", "host name")):
        name = (record.get(key) or {}).get("name")
        if name is not None and not isinstance(name, str):
            raise RecordError(f"{source}: the {label} is a {type(name).__name__}, not text")
    diffs = (record.get("design") or {}).get("differences")
    if diffs is not None and not (isinstance(diffs, list) and all(isinstance(d, dict) for d in diffs)):
        raise RecordError(f"{source}: the design's differences are not a list of objects")
    config = (record.get("probe") or {}).get("config")
    if config is not None and not isinstance(config, dict):
        raise RecordError(f"{source}: the probe config is a {type(config).__name__}, not an object")
    for key in ("snapshot_before", "snapshot_after"):
        if record.get(key) is not None:
            check_record(record[key], f"{source}: {key}", SNAPSHOT)
    units = record.get("units") or {}
    if not all(isinstance(u, str) for u in units.values()):
        raise RecordError(f"{source}: 'units' maps metrics to something other than unit names")
    phases = record.get("phases")
    if phases is not None and not (isinstance(phases, list) and all(isinstance(x, str) for x in phases)):
        raise RecordError(f"{source}: 'phases' is not a list of phase names")
    if values:
        _check_vocabulary(record, source)
    primary = record.get("primary")
    if primary is not None:
        if not isinstance(primary, str):
            raise RecordError(f"{source}: 'primary' is a {type(primary).__name__}, not a metric name")
        if values and metrics and primary not in metrics:
            have = ", ".join(sorted(metrics))
            raise RecordError(f"{source}: primary metric {primary!r} is in no launch's samples (has {have})")


class UnusableJSON(ValueError):
    """JSON that parses but cannot be used as it stands; the message says why, in one line."""


class DuplicateKey(UnusableJSON):
    """One JSON object names a key twice: which value counts would be the parser's choice, not the writer's."""


class NumberOutOfRange(UnusableJSON):
    """An integer that no float64 holds (10**400, 5000 digits): every reader would fail on it later."""


# The one safe conversion of a JSON number: a literal of more digits than any float64 needs is refused
# from its text, before int() (which refuses 4300 digits with a traceback) or float() (OverflowError).
_MAX_INT_DIGITS = 309


_FLOAT_MAX = int(1.7976931348623157e308)


def _safe_int(text: str) -> int:
    digits = len(text) - (text[:1] == "-")
    n = int(text) if digits <= _MAX_INT_DIGITS else None
    if n is None or abs(n) > _FLOAT_MAX:
        shown = text if len(text) <= 24 else f"{text[:12]}... ({digits} digits)"
        raise NumberOutOfRange(f"the number {shown} does not fit in a float64")
    return n


def _safe_float(text: str) -> float:
    x = float(text)
    if math.isinf(x):  # a literal such as 1e400: no float64 holds it (NaN and Infinity are named later)
        shown = text if len(text) <= 24 else f"{text[:12]}... ({len(text)} characters)"
        raise NumberOutOfRange(f"the number {shown} does not fit in a float64")
    return x


def _text_problem(obj: Any, where: str = "") -> str | None:
    """Where a string of `obj` (a key too) holds a lone surrogate (a "\\ud800" escape): not text."""
    if isinstance(obj, str):
        return where or "a value" if any("\ud800" <= c <= "\udfff" for c in obj) else None
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        at = f"{where}[{k!r}]" if isinstance(k, str) else f"{where}[{k}]"
        if isinstance(k, str) and _text_problem(k):
            return f"a key of {where or 'the top level'}"
        found = _text_problem(v, at)
        if found:
            return found
    return None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # rare, so found only then
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise DuplicateKey(f"key {k!r} appears twice in one object (a record names each field once)")
            seen.add(k)
    return obj


def loads_json(text: str) -> Any:
    """json.loads for what regdiag reads from disk or a host: a key given twice is DuplicateKey, not the
    last one; an integer no float64 holds, a lone surrogate in a string and nesting deeper than
    MAX_DEPTH are refused too."""
    obj = json.loads(text, object_pairs_hook=_unique_keys, parse_int=_safe_int, parse_float=_safe_float)
    if depth_over(obj, MAX_DEPTH) is not None:
        raise UnusableJSON(f"JSON nested more than {MAX_DEPTH} levels deep (a regdiag record nests a few)")
    # Only an escape makes a surrogate (strict UTF-8 decoding refuses them), so most texts skip the walk.
    if ("\\ud" in text or "\\uD" in text) and (where := _text_problem(obj)):
        raise UnusableJSON(f"{where} holds a lone surrogate escape: not valid text (UTF-8)")
    return obj


def loads_record(text: str, source: str, expect: str | tuple[str, ...] | None = None) -> dict[str, Any]:
    if not text.strip():
        raise RecordError(f"{source}: file is empty")
    try:
        record = loads_json(text)
    except UnusableJSON as e:
        raise RecordError(f"{source}: {e}") from None
    except RecursionError:
        raise RecordError(f"{source}: JSON nested too deeply to be a regdiag record") from None
    except json.JSONDecodeError as e:
        # A cut-off file ends in the middle of a value: say "truncated" rather than a parser position.
        if e.pos >= len(text.rstrip()) - 1 or e.msg.startswith("Unterminated string"):
            raise RecordError(
                f"{source}: truncated JSON (file ends at line {e.lineno} column {e.colno})"
            ) from None
        raise RecordError(f"{source}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    if (longest := text_over(record, MAX_RECORD_TEXT)) is not None:
        raise RecordError(
            f"{source}: its strings hold more than {MAX_RECORD_TEXT >> 20} MiB of text (the longest, at "
            f"{longest[0]}, {longest[1]:,} characters); a regdiag record holds far less"
        )
    return check_record(record, source, expect)


def load_record(path: str | os.PathLike[str], expect: str | tuple[str, ...] | None = None) -> dict[str, Any]:
    """Read and validate a record file. `expect` is a kind ('run', 'snapshot') or a tuple of kinds."""
    p = Path(path)
    raw = read_regular(p, MAX_RECORD_BYTES, "record file")
    head = raw[:65536].lstrip()
    if head[:1] != b"{" and len(raw) > (1 << 20):
        # A large file that is not a JSON object: refuse from its first bytes, not after decoding it all.
        try:
            head.decode("utf-8", errors="strict" if len(head) < 65000 else "ignore")
        except UnicodeDecodeError:
            raise RecordError(f"{p}: not a text file (not UTF-8)") from None
        raise RecordError(
            f"{p}: not a regdiag record (a record is a JSON object; this file starts otherwise)"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordError(f"{p}: not a text file (not UTF-8)") from None
    return loads_record(text, str(p), expect)


# A run of 100 launches x 10000 cycles x 8 phases is ~60 MB of JSON; four times that is not a record.
MAX_RECORD_BYTES = 256 << 20


def read_regular(p: Path, limit: int, what: str) -> bytes:
    """The bytes of a regular file, or RecordError in one line: never blocks on a FIFO or a device."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise RecordError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise RecordError(f"{p}: is a directory, not a {what}") from None
    except OSError as e:
        raise RecordError(f"{p}: cannot read ({e.strerror})") from None
    st = os.fstat(fd)
    kind = "" if stat.S_ISREG(st.st_mode) else "directory" if stat.S_ISDIR(st.st_mode) else "other"
    if kind or st.st_size > limit:
        os.close(fd)
    if kind == "directory":
        raise RecordError(f"{p}: is a directory, not a {what}")
    if kind:
        raise RecordError(f"{p}: not a regular file (a FIFO, socket or device), not a {what}")
    if st.st_size > limit:
        raise RecordError(f"{p}: {st.st_size / 2**20:.0f} MiB is too large for a {what}")
    with os.fdopen(fd, "rb") as f:
        try:
            return f.read(limit + 1)
        except OSError as e:
            raise RecordError(f"{p}: cannot read ({e.strerror})") from None


def dumps_record(record: dict[str, Any]) -> str:
    try:
        return json.dumps(record, indent=1, sort_keys=False, allow_nan=False, default=_json_default) + "\n"
    except ValueError:
        # NaN or infinity measured somewhere: bare NaN is not JSON, and refusing to write would lose the
        # rest of the record. Such values are written as null; readers then name the sample.
        return json.dumps(finite(record), indent=1, allow_nan=False, default=_json_default) + "\n"


def finite(obj: Any) -> Any:
    """A copy with NaN and infinities as None, so that the JSON is strict."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"cannot store {type(obj).__name__} in a record")


def save_record(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Validate (the shape) then write atomically."""
    check_record(record, str(path), values=False)
    atomic_write_text(path, dumps_record(record))


def json_line(obj: dict[str, Any]) -> str:
    """`obj` as append_jsonl writes it: strict JSON (NaN and infinities as null), one line."""
    try:
        return json.dumps(obj, sort_keys=False, allow_nan=False, default=_json_default)
    except ValueError:
        return json.dumps(finite(obj), sort_keys=False, allow_nan=False, default=_json_default)


def append_jsonl(path: str | os.PathLike[str], obj: dict[str, Any]) -> None:
    """Append one JSON line and fsync: an append-only journal survives kill -9 up to its last line."""
    line = json_line(obj)
    # 0600 whatever the umask: journals hold environment data, like records.
    fd = open_appending(path)
    try:
        with os.fdopen(fd, "ab") as f:
            f.write((line + "\n").encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        kept = "every line before this one is kept"
        with contextlib.suppress(OSError):
            if os.path.getsize(path) == 0:  # created here and nothing fits: leave no empty journal
                os.unlink(path)
                kept = "nothing was written"
        raise RecordError(f"{path}: cannot write ({e.strerror or e}); {kept}") from None


def read_jsonl_numbered(path: str | os.PathLike[str]) -> list[tuple[int, dict[str, Any]]]:
    """A JSON-lines file's objects with each one's line number (from 1), for errors that name the line;
    a torn last line (kill -9 mid-write) is ignored, others must parse."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return []
    out: list[tuple[int, dict[str, Any]]] = []
    try:
        lines = read_regular(p, MAX_RECORD_BYTES, "journal").decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise RecordError(f"{p}: not a text file (not UTF-8)") from None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = loads_json(line)
        except UnusableJSON as e:
            raise RecordError(f"{p}: line {i + 1}: {e}") from None
        except (json.JSONDecodeError, RecursionError):
            if i >= len(lines) - 2:  # the last, unterminated line
                break
            raise RecordError(f"{p}: line {i + 1} is not valid JSON") from None
        if not isinstance(obj, dict):
            raise RecordError(f"{p}: line {i + 1} is a {type(obj).__name__}, not a JSON object")
        out.append((i + 1, obj))
    return out
