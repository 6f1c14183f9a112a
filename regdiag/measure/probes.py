"""The probe table, read from the probe scripts themselves: a probe is a file in probes/ that declares
`NAME`, `PRIMARY` and `PHASES` (and, where it knows them, `LOADS`: what it imports) as literals at its
top. Nothing here is kept by hand, so a new probe is its script (plus its CLI command); the SSH bundle
is sent the script's file name.

The literals are read with `ast`, without running the script. A probe's options are read from the
script's own argparse parser (`probe_parser`), loaded with its sibling modules but without torch, which
a probe imports inside its run only; `check_probe_args` holds options to that parser and the probe's
`validate` before anything is launched.
"""

from __future__ import annotations

import argparse
import ast
import functools
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from regdiag.errors import BadInput, ProbeError
from regdiag.probe_modules import load_script, probes_dir


def _declared(path: Path) -> dict[str, Any] | None:
    """NAME, PRIMARY, PHASES and LOADS of one script, or None when it declares no probe."""
    found: dict[str, Any] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        value: ast.expr | None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if (
            isinstance(target, ast.Name)
            and target.id in ("NAME", "PRIMARY", "PHASES", "LOADS")
            and value is not None
        ):
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
        "loads": tuple(found["LOADS"]) if "LOADS" in found else None,
    }


@functools.lru_cache(maxsize=1)
def probe_table() -> dict[str, dict[str, Any]]:
    """name -> {"script", "primary", "phases", "loads"}: what a run record says before the first header
    arrives (the header's own values replace these)."""
    d = probes_dir()
    table: dict[str, dict[str, Any]] = {}
    for path in sorted(d.glob("*.py")) if d else []:
        if not path.name.startswith("_") and (info := _declared(path)) is not None:
            table[info.pop("name")] = info
    return table


def probe_loads(name: str | None) -> tuple[str, ...] | None:
    """The modules probe `name` imports (its LOADS); None for a name that is no synthetic probe (an
    engine, a --command) or a probe that does not say."""
    info = probe_table().get(str(name))
    return info["loads"] if info else None


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
        where = "neither in regdiag.probes nor in the repository"
        raise ProbeError(f"probe script {table[name]['script']} not found ({where})")
    return d / table[name]["script"]


def probe_module(name: str) -> ModuleType:
    """The probe script as a module, for its declarations (`build_parser`, `validate`); torch is not
    imported (a probe imports it inside its run)."""
    return load_script(probe_script(name))


def probe_parser(name: str) -> argparse.ArgumentParser:
    """The probe's own argparse parser: the one declaration of its options, which `regdiag probe NAME`,
    docs/cli.md and the probe options after bisect's and ab's `--` are read from."""
    parser: argparse.ArgumentParser = probe_module(name).build_parser()
    return parser


def check_probe_args(name: str, argv: Sequence[str]) -> None:
    """The probe's options checked here, before anything runs, by the probe's own parser and its
    torch-free `validate`; a bad one is refused in one line (BadInput, exit 2), as the probe says it."""
    mod = probe_module(name)
    parser = mod.build_parser()

    def refuse(message: str) -> NoReturn:
        raise BadInput(f"probe {name}: {message}")

    parser.error = refuse  # type: ignore[method-assign]  # argparse exits; here it is one line
    if {"-h", "--help"} & set(argv):
        refuse("--help is regdiag's: see regdiag probe " + name + " --help")
    args = parser.parse_args(list(argv))
    validate = getattr(mod, "validate", None)
    if validate is not None:
        try:
            validate(args)
        except mod.UsageError as e:
            refuse(str(e))
