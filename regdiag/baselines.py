"""Named baselines: a run record kept under ${REGDIAG_HOME:-~/.regdiag}/baselines/NAME.json.

`regdiag baseline save NAME RUN` copies the run (validated) there with a "baseline" field saying
when and from where; `regdiag compare NAME RUN` reads it when NAME is not a file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from regdiag import importers
from regdiag.errors import BadInput
from regdiag.records import RUN, FileLock, RecordError, load_record, save_record
from regdiag.run_view import RunView
from regdiag.runs import now_iso, regdiag_home, resolve_run
from regdiag.stats import run_value

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")  # \Z: "$" let a trailing newline in


def baselines_dir() -> Path:
    return regdiag_home() / "baselines"


def check_name(name: str) -> str:
    if not NAME_RE.match(name) or name.endswith(".json"):
        raise BadInput(
            f"baseline name {name!r} is not valid: use letters, digits, '.', '_' or '-' (up to 100), "
            "starting with a letter or digit, without .json"
        )
    return name


def path_of(name: str) -> Path:
    return baselines_dir() / f"{check_name(name)}.json"


def save(name: str, run_path: str, force: bool = False) -> Path:
    """Store the run as baseline NAME; refuses to overwrite unless `force`."""
    target = path_of(name)
    run, _label = resolve(run_path)
    if not RunView.of(run).usable:
        raise BadInput(f"{run_path}: the run has no launch with samples; nothing to keep as a baseline")
    run["baseline"] = {"name": name, "saved": now_iso(), "source": str(Path(run_path))}
    # The check for an existing baseline and the write happen under one lock: of two concurrent saves
    # of one name, one stores its run and the other is refused, never both "saved" with one lost.
    with FileLock(target, f"baseline {name!r}"):
        if target.exists() and not force:
            raise BadInput(f"baseline {name!r} exists ({target}); --force to replace it")
        save_record(target, run)
    return target


def list_baselines() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    d = baselines_dir()
    if not d.is_dir():
        return out
    for p in sorted(d.glob("*.json")):
        try:
            r = load_record(p, RUN)
        except RecordError as e:
            out.append({"name": p.stem, "path": str(p), "problem": str(e)})
            continue
        probe = r.get("probe") or {}
        view = RunView.of(r)
        launches = view.usable
        primary = view.primary
        centre = None
        if primary:
            meds = [float(np.median(la.samples[primary])) for la in launches if la.samples.get(primary)]
            centre = run_value(meds)  # the run's one number, as compare and the probe summary show it
        out.append(
            {
                "name": p.stem,
                "path": str(p),
                "saved": (r.get("baseline") or {}).get("saved"),
                "created": r.get("created"),
                "probe": probe.get("name"),
                "config": probe.get("config") or {},
                "launches": len(launches),
                "primary": primary,
                "primary_median": centre,
                "unit": (r.get("units") or {}).get(primary or "", "ms"),
            }
        )
    return out


def remove(name: str) -> Path:
    p = path_of(name)
    if not p.exists():
        raise BadInput(f"no baseline named {name!r} (regdiag baseline list)")
    p.unlink()
    return p


def resolve(ref: str) -> tuple[dict[str, Any], str]:
    """A file path, a baseline name, or a stored run id -> (record, label).

    A file may be another tool's result file (regdiag/importers/); FILE#NAME picks one result of a
    file that holds several (a hyperfine export of two commands)."""
    path, select = importers.split_selector(ref)
    p = Path(path)
    if p.exists():
        return _load(p, select), ref
    if NAME_RE.match(ref) and not ref.endswith(".json"):
        b = baselines_dir() / f"{ref}.json"
        if b.exists():
            return _load(b), f"baseline {ref}"
    try:
        found = resolve_run(ref)
    except RecordError:
        raise BadInput(f"{ref}: no such file, baseline (regdiag baseline list) or stored run") from None
    return _load(found), str(found)


def _load(p: Path, select: str | None = None) -> dict[str, Any]:
    try:
        return importers.load_run(p, select=select)
    except BadInput as e:
        msg = str(e)
        if "snapshot record" in msg:
            msg += " (compare takes runs: `regdiag probe ... -o FILE`; for environments use `regdiag diff`)"
        raise BadInput(msg) from None
