"""What changed between the two sides' environments: the snapshot diff, the differences an A/B run's
spec names, the variables the probe's ranks saw, and, for runs from two hosts, the machine part of it.
"""

from __future__ import annotations

from typing import Any

from regdiag.compare.result import SideInfo


def env_diff_of(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, str]:
    """The snapshot diff, most likely culprits first (regdiag.snapshot.diff), when both sides have one;
    plus the variables the probe's ranks saw (its header's `env`) where they differ and the snapshots do
    not say so: an A/B run's sides, or a variable set for the probe only, differ there alone."""
    from regdiag.snapshot.diff import diff_engine_config, diff_env, diff_snapshots

    spec = diff_engine_config(old, new) + _spec_differences(old, new)
    named = {it["field"] for it in spec}
    ranks = spec + [
        it
        for it in diff_env(_launch_env(old), _launch_env(new), "the probe's ranks (launch header)")
        if it["field"] not in named
    ]
    so, sn = old.get("snapshot_before"), new.get("snapshot_before")
    if not isinstance(so, dict) or not isinstance(sn, dict):
        missing = [lbl for lbl, s in (("old", so), ("new", sn)) if not isinstance(s, dict)]
        if ranks:
            return (
                ranks,
                f"{_differences(ranks)} in {_seen_by(ranks)} "
                f"(no environment snapshot in the {' and '.join(missing)} run)",
            )
        return None, f"no environment snapshot in the {' and '.join(missing)} run"
    items = list(diff_snapshots(so, sn))
    seen = {(it["group"], it["field"]) for it in items}
    items += [it for it in ranks if (it["group"], it["field"]) not in seen]
    if not items:
        return [], "environments identical (as far as the snapshots and the probe's ranks see)"
    return items, _differences(items)


def _spec_differences(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """The differences between the two sides' specs that an A/B run's records name (design.differences,
    every kind: env vars, packages, commits, GPU clocks): set per launch, so no snapshot sees them."""
    do, dn = old.get("design") or {}, new.get("design") or {}
    if not do.get("pair_id") or do.get("pair_id") != dn.get("pair_id"):
        return []
    sides = (do.get("side"), dn.get("side"))
    return [_spec_item(d, *sides) for d in do.get("differences") or [] if isinstance(d, dict)]


def _spec_item(d: dict[str, Any], old_side: Any, new_side: Any) -> dict[str, Any]:
    """One of design.differences (its value on each side keyed by the side's name) as a difference."""
    return {
        "group": "spec",
        "field": str(d.get("name")),
        "old": d.get(old_side),
        "new": d.get(new_side),
        "change": "changed",
        "rank": 0,
        "why": f"the A/B run's sides differ here ({d.get('kind')})",
    }


def _seen_by(items: list[dict[str, Any]]) -> str:
    if any(it["group"] == "engine_config" for it in items):
        return "the engines' configuration in effect and what the probe's ranks saw"
    return "what the probe's ranks saw"


def _differences(items: list[dict[str, Any]]) -> str:
    return f"{len(items)} environment difference{'s' if len(items) != 1 else ''}"


def _launch_env(run: dict[str, Any]) -> dict[str, str]:
    """The variables the first launch's ranks saw, as its header recorded them (already redacted)."""
    for la in run.get("launches") or []:
        env = (la.get("header") or {}).get("env") if isinstance(la, dict) else None
        if isinstance(env, dict):
            return {str(k): str(v) for k, v in env.items()}
    return {}


def _is_machine_item(item: dict[str, Any]) -> bool:
    group, name = str(item.get("group")), str(item.get("field"))
    if group in ("gpu", "host"):
        return True
    if group == "env":
        return name.startswith("NCCL_")
    if group == "startup":
        return name == "nccl_conf"
    return group in ("packages", "libraries") and "nccl" in name.lower()


def machine_diff_of(
    side_o: SideInfo,
    side_n: SideInfo,
    snap_o: dict[str, Any] | None,
    snap_n: dict[str, Any] | None,
    env: list[dict[str, Any]] | None,
) -> list[dict[str, Any]] | None:
    """The machine part of the environment diff, when the runs come from two hosts (by the name the
    user gave, or what the hosts call themselves); None otherwise."""
    from regdiag.snapshot.fields import value_of

    names = {side_o.host, side_n.host} - {None}
    hostnames = {value_of(snap_o, "host", "hostname"), value_of(snap_n, "host", "hostname")} - {None}
    if len(names) < 2 and len(hostnames) < 2:
        return None
    return [it for it in env or [] if _is_machine_item(it)]
