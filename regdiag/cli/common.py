"""Options shared by several commands, defined once, and small rendering helpers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

# Human output goes to stdout; progress and warnings to stderr, so `--json > file` stays clean.
console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

JsonOpt = typer.Option(False, "--json", help="Print the result as JSON on stdout (nothing else on stdout).")
OutputOpt = typer.Option(None, "-o", "--output", help="Also write the record to this file (atomically).")
HostOpt = typer.Option(
    None,
    "--host",
    help="Run on this host over SSH: \\[user@]host\\[:port] or a Host alias from the SSH config. "
    "Repeat for several hosts. Default: this machine.",
)
PythonOpt = typer.Option(
    None,
    "--python",
    help="Interpreter on the target host, e.g. /root/ml-env/bin/python3. "
    "Default: this interpreter locally, python3 remotely.",
)
SshConfigOpt = typer.Option(
    None, "--ssh-config", help="SSH config file, as `ssh -F` (default: ~/.ssh/config).", dir_okay=False
)


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=1, default=str) + "\n")
    sys.stdout.flush()


def ensure_parent(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)


PROBE_HELP = "Measure: synthetic probes on the GPU, or a live inference server."


def probe_group(app: typer.Typer) -> typer.Typer:
    """The `probe` group: `probe spec-decode` / `collectives` and `probe server` live in two modules;
    whichever registers first makes the group, the other adds to it."""
    for info in app.registered_groups:
        if info.name == "probe" and info.typer_instance is not None:
            return info.typer_instance
    group = typer.Typer(help=PROBE_HELP, no_args_is_help=True)
    app.add_typer(group, name="probe")
    return group
