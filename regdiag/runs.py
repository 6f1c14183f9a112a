"""Run records on disk: written as launches finish, listed, found by id.

A RunWriter rewrites the whole record atomically after every launch (the records are small: a few
thousand cycles), so a crash, Ctrl-C or kill -9 at any moment leaves the last complete state on disk.

A record may have profile traces beside it (`probe spec-decode --profile`: `<record>.profile-<launch>.json.gz`,
trace_path): listed with their record, removed with it (RunWriter.discard), and a trace whose record is
gone is an orphan that `regdiag clean` removes (orphan_traces).
"""

from __future__ import annotations

import datetime as _dt
import glob
import os
import re
import secrets
from pathlib import Path
from typing import Any

from regdiag.files import regdiag_home
from regdiag.records import RUN, RUN_SCHEMA, FileLock, RecordError, load_record, save_record
from regdiag.run_view import RunView
from regdiag.snapshot.redact import scrub_record
from regdiag.version import __version__


def runs_dir() -> Path:
    return regdiag_home() / "runs"


_TRACE = re.compile(r"(.+)\.profile-\d+\.json\.gz")


# Where a run on an SSH host keeps its profile trace, on that host (probe --profile; `clean --host`
# counts what is there).
HOST_TRACES = "~/.regdiag/traces"


def trace_path(record: Path, index: int) -> Path:
    """Where launch `index` of the run recorded at `record` keeps its profile trace (probe --profile)."""
    return record.with_name(f"{record.name.removesuffix('.json')}.profile-{index}.json.gz")


def _record_of(trace: Path) -> Path | None:
    m = _TRACE.fullmatch(trace.name)
    return trace.with_name(f"{m.group(1)}.json") if m else None


def traces_of(record: Path) -> list[Path]:
    """The profile traces beside a record, by launch."""
    pattern = glob.escape(record.name.removesuffix(".json")) + ".profile-*.json.gz"
    return sorted(t for t in record.parent.glob(pattern) if _record_of(t) == record)


def orphan_traces(directory: Path | None = None) -> list[Path]:
    """The profile traces in the runs directory whose record is gone."""
    d = directory or runs_dir()
    if not d.is_dir():
        return []
    return sorted(t for t in d.glob("*.profile-*.json.gz") if (r := _record_of(t)) and not r.exists())


def trace_files(traces: list[Path]) -> list[dict[str, Any]]:
    """Each trace's path and size in bytes (None when it vanished meanwhile)."""
    out: list[dict[str, Any]] = []
    for t in traces:
        try:
            size: int | None = t.lstat().st_size
        except OSError:
            size = None
        out.append({"path": str(t), "bytes": size})
    return out


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id(label: str) -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{label}-{secrets.token_hex(2)}"


def new_run(
    *,
    kind: str,
    probe_name: str,
    probe_version: str,
    config: dict[str, Any],
    primary: str,
    phases: list[str],
    host: dict[str, str] | None = None,
    units: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "schema": RUN_SCHEMA,
        "id": new_run_id(probe_name),
        "created": now_iso(),
        "regdiag_version": __version__,
        "status": "running",
        "kind": kind,
        "probe": {"name": probe_name, "version": probe_version, "config": config},
        "primary": primary,
        "phases": list(phases),
        "units": units or {},
        "host": host or {},
        "snapshot_before": None,
        "snapshot_after": None,
        "launches": [],
    }


class RunWriter:
    """Holds a run record and keeps its file current. Use as a context manager:

    with RunWriter(path, run) as w:
        w.add_launch(launch)   # written to disk before this returns
    # on leaving: status "complete", or "interrupted" / "failed" if an exception escaped
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        run: dict[str, Any],
        also: str | os.PathLike[str] | None = None,
    ) -> None:
        # Every string of the record through the one scrubber (header config and labels, footer,
        # teardown, commands, labels): in place, so what the caller shows on screen is what is written.
        _scrub_in_place(run)
        self.run = run
        self.path = Path(path) if path is not None else runs_dir() / f"{run['id']}.json"
        # `also`: a copy the user asked for (probe server -o, probe engine -o), kept as current as the
        # stored run, so an interrupted or failed run leaves its launches there too, not only the stored one.
        self.also = Path(also) if also is not None else None
        # Two regdiag processes given the same -o would each replace the other's launches: one refuses.
        self._lock = FileLock(self.path, "this run")
        self._also_lock = FileLock(self.also, "this run") if self.also is not None else None
        self.flush()

    def flush(self) -> None:
        save_record(self.path, self.run)
        if self.also is not None:
            save_record(self.also, self.run)

    def discard(self) -> None:
        """Nothing was measured: leave no record behind, the stored one nor the copy, nor a trace."""
        for trace in traces_of(self.path):
            trace.unlink(missing_ok=True)
        self.path.unlink(missing_ok=True)
        if self.also is not None:
            self.also.unlink(missing_ok=True)

    def set(self, key: str, value: Any) -> None:
        self.run[key] = scrub_record(value, key)
        self.flush()

    def add_launch(self, launch: dict[str, Any]) -> None:
        _scrub_in_place(launch)
        launch.setdefault("index", len(self.run["launches"]))
        self.run["launches"].append(launch)
        self.flush()

    def finish(self, status: str | None = None) -> None:
        if status is None:
            launches = self.run["launches"]
            bad = [la for la in launches if la.get("status") != "ok"]
            status = (
                "complete" if launches and not bad else ("partial" if len(bad) < len(launches) else "failed")
            )
        self.run["status"] = status
        self.run["finished"] = now_iso()
        try:
            self.flush()
        finally:
            self._lock.release()
            if self._also_lock is not None:
                self._also_lock.release()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            self.finish()
        elif issubclass(exc_type, KeyboardInterrupt):
            self.finish("interrupted")
        else:
            self.finish("failed" if not self.run["launches"] else "partial")


def _scrub_in_place(d: dict[str, Any]) -> None:
    clean = scrub_record(d)
    d.clear()
    d.update(clean)


def list_runs(directory: Path | None = None) -> list[dict[str, Any]]:
    """Summaries of the stored runs, newest first; unreadable files are listed with their problem."""
    d = directory or runs_dir()
    out: list[dict[str, Any]] = []
    if not d.is_dir():
        return out
    for p in sorted(d.glob("*.json"), key=lambda q: (q.stat().st_mtime_ns, q.name), reverse=True):
        traces = trace_files(traces_of(p))
        try:
            r = load_record(p, RUN)
        except RecordError as e:
            out.append({"path": str(p), "problem": str(e), "traces": traces})
            continue
        launches = r.get("launches", [])
        out.append(
            {
                "id": r.get("id", p.stem),
                "path": str(p),
                "created": r.get("created"),
                "probe": r.get("probe", {}).get("name"),
                "config": r.get("probe", {}).get("config", {}),
                "status": r.get("status"),
                "launches": len(launches),
                "ok_launches": len(RunView.of(r).usable),
                "host": r.get("host", {}).get("name"),
                "traces": traces,
            }
        )
    return out


def resolve_run(ref: str, directory: Path | None = None) -> Path:
    """A path, or the id (or unique id prefix) of a stored run."""
    p = Path(ref)
    if p.exists():
        return p
    d = directory or runs_dir()
    matches = sorted(d.glob(f"{ref}*.json")) if d.is_dir() and "/" not in ref else []
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise RecordError(f"{ref}: matches {len(matches)} stored runs; give more of the id")
    raise RecordError(f"{ref}: no such file or stored run")
