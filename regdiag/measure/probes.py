"""The probe table, read from the probe scripts themselves: a probe is a file in probes/ that declares
`NAME`, `PRIMARY` and `PHASES` as literals at its top. Nothing here is kept by hand, so a new probe is its
script (plus its CLI command); the SSH bundle is sent the script's file name.

The literals are read with `ast`, not by importing the script: a probe imports torch (1.9 s) and
sits beside helper modules that only its own interpreter may load.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

from regdiag.errors import BadInput, ProbeError
from regdiag.hosts.bundle import probes_dir


def _declared(path: Path) -> dict[str, Any] | None:
    """NAME, PRIMARY and PHASES of one script, or None when it declares no probe."""
    found: dict[str, Any] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        value: ast.expr | None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("NAME", "PRIMARY", "PHASES") and value is not None:
            try:
                found[target.id] = ast.literal_eval(value)
            except ValueError:
                pass
    if not {"NAME", "PRIMARY", "PHASES"} <= set(found):
        return None
    return {
        "script": path.name,
        "primary": found["PRIMARY"],
        "phases": list(found["PHASES"]),
        "name": found["NAME"],
    }


@functools.lru_cache(maxsize=1)
def probe_table() -> dict[str, dict[str, Any]]:
    """name -> {"script", "primary", "phases"}: what a run record says before the first header arrives
    (the header's own values replace these)."""
    d = probes_dir()
    table: dict[str, dict[str, Any]] = {}
    for path in sorted(d.glob("*.py")) if d else []:
        if not path.name.startswith("_") and (info := _declared(path)) is not None:
            table[info.pop("name")] = info
    return table


def presets() -> tuple[str, ...]:
    """The --preset choices of the synthetic probes: 'auto' and the model shapes of probes/_presets.py."""
    from regdiag.probe_modules import load

    return ("auto", *load("_presets").PRESETS)


def probe_script(name: str) -> Path:
    """The probe file that belongs with this regdiag."""
    table = probe_table()
    if name not in table:
        raise BadInput(f"unknown probe {name!r}; choose from {', '.join(table)}")
    d = probes_dir()
    if d is None or not (d / table[name]["script"]).is_file():
        raise ProbeError(
            f"probe script {table[name]['script']} not found (neither in regdiag.probes nor in the repository)"
        )
    return d / table[name]["script"]
