"""Does every target exist in the installed engine? Read from the source with `ast`, never imported
(importing SGLang or vLLM takes tens of seconds and may touch the GPUs). Runs on the target host.

A method that a class does not define itself but may inherit from a base is "unknown" here: the hook
resolves it at run time and reports it missing there. Everything else is decided here. A role given
several targets (a phase in each of an engine's model runners) needs one of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Concatenate, ParamSpec

from regdiag.errors import BadInput
from regdiag.hosts.base import Host
from regdiag.measure.launch import command

SCRIPT = (Path(__file__).parent / "source_check.py").read_text(encoding="utf-8")


Found = list[dict[str, Any]]
P = ParamSpec("P")


def inspect(
    host: Host,
    targets: list[tuple[str, str]],
    argv: list[str],
    env: dict[str, str] | None = None,
    readers: list[tuple[str, dict[str, Any]]] | None = None,
) -> Found:
    """What the source says of each target and reader (source_check.py on the host), refusing nothing."""
    req = {"targets": targets, "scripts": [a for a in argv if a.endswith(".py")], "readers": readers or []}
    res = command(
        host, [host.python, "-c", SCRIPT], stdin=json.dumps(req).encode(), env=env or {}, timeout=120
    )
    if not res.ok:
        raise BadInput(
            f"cannot check the phase targets with {host.python}: {res.stderr_tail() or 'no output'}"
        )
    found: Found = json.loads(res.stdout.decode())
    return found


def _refusing(look: Callable[Concatenate[Host, P], Found]) -> Callable[Concatenate[Host, P], Found]:
    """`check`: what `look` (inspect) finds, with its arguments (one signature for both), then refused
    where a target is absent."""

    def check(host: Host, /, *args: P.args, **kwargs: P.kwargs) -> Found:
        """One entry per target (and per reader: does the function return that field, take that
        argument); raises BadInput (exit 2) naming the first target that does not exist. A reader's field
        the source lacks is recorded, not refused: that engine version gives no value there."""
        found = look(host, *args, **kwargs)
        _refuse_absent(host, found)
        return found

    return check


check = _refusing(inspect)


def _refuse_absent(host: Host, found: Found) -> None:
    by_role: dict[str, Found] = {}
    for f in found:
        if "field" not in f:
            by_role.setdefault(f["role"], []).append(f)
    for role, fs in by_role.items():
        present = [f for f in fs if f["state"] not in ("missing", "no-module")]
        # One of several targets is enough (a phase in each of two model runners: the engine runs
        # one); a graph-flag source is optional (without it the cycle has no flag, not a wrong one).
        if role == "graph" or (len(fs) > 1 and present):
            for f in fs:
                if f not in present:
                    f["optional"] = True
            continue
        absent = [f for f in fs if f not in present]
        if absent:
            _refuse(host, absent[0])


def _refuse(host: Host, f: dict[str, Any]) -> None:
    if f["state"] == "missing":
        raise BadInput(f"{f['role']}: {f['target']} does not exist in the installed {f['version']}")
    mod = f["target"].split(":")[0]
    raise BadInput(
        f"{f['role']}: module {mod} is not installed for {host.python} "
        f"({f['version']}); pass --python with the engine's interpreter"
    )
