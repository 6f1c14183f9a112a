"""`regdiag ingest-log`: engine log files into one run record of kind "log", one launch per file.

No typer here: the CLI passes the paths and the reading options; bad input raises BadInput (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from regdiag.errors import BadInput
from regdiag.server.logparse import MAX_LOG_BYTES, parse_file
from regdiag.server.record import log_launch, log_run


def _launch(path: str, index: int, idle_gap_s: float, rank: str | None) -> dict[str, Any]:
    try:
        size = os.stat(path).st_size
        if size > MAX_LOG_BYTES:
            raise BadInput(
                f"{path}: {size / 2**20:.0f} MiB is more than ingest-log reads "
                f"({MAX_LOG_BYTES >> 20} MiB); cut the log to the interval you measured (tail -c, split)"
            )
        parse = parse_file(path, idle_gap_s=idle_gap_s, rank=rank)
    except OSError as e:
        raise BadInput(f"{path}: cannot read ({e.strerror})") from None
    if not parse.intervals:
        raise BadInput(
            f"{path}: no SGLang 'Decode batch' or vLLM metrics lines among {parse.lines} lines"
            + (f" ({parse.malformed} malformed)" if parse.malformed else "")
        )
    return log_launch(parse, path, index)


def _one_engine(launches: list[dict[str, Any]]) -> None:
    """Launches of one run are repeats of one measurement; two engines are two runs to compare."""
    by_engine: dict[str, list[str]] = {}
    for la in launches:
        by_engine.setdefault(str(la["header"]["engine"]), []).append(str(la["header"]["file"]))
    if len(by_engine) > 1:
        parts = "; ".join(f"{eng}: {', '.join(fs)}" for eng, fs in sorted(by_engine.items()))
        raise BadInput(f"the logs come from different engines ({parts}): ingest each into its own run")


def ingest_logs(paths: Sequence[str], *, idle_gap_s: float, rank: str | None) -> dict[str, Any]:
    """The run record of these logs (not yet saved): BadInput for an unreadable file, a file with no
    line regdiag reads, or logs of different engines."""
    # The config holds how the log was read, not which file: two logs of one setup compare as they are.
    _no_file_twice(paths)
    run = log_run({"idle_gap_s": idle_gap_s, "rank": rank})
    run["provenance"] = {"files": [os.path.abspath(p) for p in paths]}
    launches = [_launch(p, i, idle_gap_s, rank) for i, p in enumerate(paths)]
    _one_engine(launches)
    if any("cycle" in la["samples"] for la in launches):
        run["phases"] = ["itl", "cycle"]
    run["launches"] = launches
    run["status"] = "complete" if all(la["status"] == "ok" for la in launches) else "partial"
    return run


def _no_file_twice(paths: Sequence[str]) -> None:
    """Each file is one launch: the same log twice (`logs/*.log logs/a.log`) would count its evidence twice."""
    seen: dict[tuple[int, int], str] = {}
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue  # named as unreadable when read
        first = seen.get((st.st_dev, st.st_ino))
        seen.setdefault((st.st_dev, st.st_ino), p)
        if first is not None:
            same = "given twice" if first == p else f"is the same file as {first}"
            raise BadInput(
                f"{p}: {same}; each log is one launch, and one launch counted twice would overstate the evidence"
            )


def ingest_summary(run: dict[str, Any], path: str) -> dict[str, Any]:
    """What `ingest-log` shows: per file its status, scalars, line counts, engine and line forms."""
    return {
        "id": run["id"],
        "path": path,
        "status": run["status"],
        "launches": [
            {
                "file": la["header"]["file"],
                "status": la["status"],
                "error": la["error"],
                "scalars": la["scalars"],
                "counts": la["footer"],
                "engine": la["header"]["engine"],
                "formats": la["header"]["formats"],
            }
            for la in run["launches"]
        ],
    }
