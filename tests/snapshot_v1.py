"""Two snapshots in the regdiag.snapshot/1 layout, where the packages group kept package versions
and package metadata (sources, count, hash, nccl, nccl_libraries, all, regdiag) in one mapping.

They are the H200 baselines (real /1 records) with a full --all-packages listing and a few
differences planted, so that every kind of packages field differs somewhere. The answers the /1
reader gave for them are in data/snapshot_v1_golden.json (written by the regdiag that wrote /1).
"""

from __future__ import annotations

import copy
import io
from typing import Any

from snapshot_helpers import BASELINES

from regdiag.records import load_record

GOLDEN = BASELINES.parent / "tests" / "data" / "snapshot_v1_golden.json"


def _ok(value: Any) -> dict[str, Any]:
    return {"status": "ok", "value": value}


def v1_pair() -> tuple[dict[str, Any], dict[str, Any]]:
    good = load_record(BASELINES / "h200-snapshot.json", expect="snapshot")
    bad = load_record(BASELINES / "h200x2-snapshot.json", expect="snapshot")
    assert good["schema"] == bad["schema"] == "regdiag.snapshot/1"
    for snap, numpy, extra in ((good, "2.3.1", {}), (bad, "2.3.2", {"einops": "0.8.1"})):
        fields = snap["groups"]["packages"]["fields"]
        metadata = ("regdiag", "sources", "count", "hash", "nccl", "nccl_libraries")
        listing = {
            n: f["value"] for n, f in fields.items() if isinstance(f["value"], str) and n not in metadata
        }
        listing.update({"numpy": numpy, "six": "1.17.0", "regdiag": "0.1.0", **extra})
        fields["all"] = _ok(dict(sorted(listing.items())))
    pb = bad["groups"]["packages"]["fields"]
    pb["torch"] = _ok("2.12.0")
    pb["transformers"] = _ok("5.18.0")
    pb["regdiag"] = _ok("0.2.0")
    pb["all"]["value"].update(torch="2.12.0", transformers="5.18.0", regdiag="0.2.0")
    pb["count"] = _ok(198)
    pb["hash"] = _ok("sha256:00000000deadbeef")
    pb["sources"] = _ok({"torch": {"url": "https://download.pytorch.org/whl/cu130"}})
    nccl = copy.deepcopy(pb["nccl"])
    nccl["value"]["version"] = "2.28.3"
    pb["nccl"] = nccl
    return good, bad


def packages_lines(text: str) -> list[str]:
    """The packages part of a rendered snapshot."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("packages"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
    return lines[start:end]


def answers(good: dict[str, Any], bad: dict[str, Any]) -> dict[str, Any]:
    """What every reader of the packages group makes of two snapshots: bisect's sides and factors,
    the snapshot diff (which compare's environment attribution shows) and the rendered packages."""
    from rich.console import Console

    from regdiag.bisect.factors import diff, spec_from_snapshot
    from regdiag.report.snapshot import render_snapshot
    from regdiag.snapshot.diff import diff_snapshots

    sg, sb = spec_from_snapshot(good, "good"), spec_from_snapshot(bad, "bad")
    d = diff(sg, sb)
    out: dict[str, Any] = {
        "packages_good": sg.packages,
        "packages_bad": sb.packages,
        "factors": [[f.kind, f.name, f.good, f.bad] for f in d.factors],
        "notes": d.notes,
        "same_packages": d.same_packages,
        "diff": diff_snapshots(good, bad),
    }
    for label, snap in (("good", good), ("bad", bad)):
        buf = io.StringIO()
        render_snapshot(snap, Console(file=buf, width=120, color_system=None, force_terminal=False))
        out[f"render_{label}"] = packages_lines(buf.getvalue())
    return out
