"""Options shared by several commands, defined once, and small rendering helpers."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from regdiag.errors import BadInput

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


def format_opt(what: str) -> Any:
    """`--format`, offering what the renderer registry has for `what` (regdiag.report.registry)."""
    from regdiag.report.registry import formats

    names = formats(what)
    return typer.Option(
        None, "--format", help=f"Output format: {', '.join(names)} (default {names[0]}).", show_default=False
    )


def pick_format(what: str, fmt: str | None, json_out: bool = False, markdown: bool = False) -> str:
    """--format wins; --json and --markdown are its short forms; two different asks are refused."""
    from regdiag.errors import BadInput
    from regdiag.report.registry import formats, renderer

    asked = {f for f, on in (("json", json_out), ("markdown", markdown)) if on} | ({fmt} if fmt else set())
    if len(asked) > 1:
        raise BadInput(f"choose one output format (asked for {', '.join(sorted(asked))})")
    chosen = asked.pop() if asked else formats(what)[0]
    renderer(what, chosen)  # refuses a format this result has no renderer for, in one line
    return chosen


def show(
    what: str, fmt: str, data: Any, labels: tuple[str, str] = ("", ""), to: Console | None = None
) -> None:
    """Render `data` through the registry on stdout (or `to`)."""
    from regdiag.report.registry import Out, render

    render(what, fmt, data, Out(to or console, labels))


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


# Path checks as option callbacks: a bad path is one `regdiag: error:` line (exit 2), where click's own
# exists=/dir_okay= checks print a usage block. Nothing here opens the path, so a FIFO cannot block.


def _flag(param: typer.CallbackParam) -> str:
    opts = getattr(param, "opts", None) or []
    return opts[0] if param.param_type_name == "option" and opts else str(param.name or "").upper()


def check_input_file(path: Path, flag: str) -> Path:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise BadInput(f"{flag} {path}: no such file") from None
    except OSError as e:
        raise BadInput(f"{flag} {path}: cannot read ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{flag} {path}: is a directory; a file is needed here")
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{flag} {path}: not a regular file (a FIFO, socket or device)")
    return path


def check_output_file(path: Path, flag: str) -> Path:
    if path.is_dir():
        raise BadInput(f"{flag} {path}: is a directory; give a file name to write")
    if path.exists() and not path.is_file():
        raise BadInput(f"{flag} {path}: not a regular file; give a file name to write")
    return path


def check_input_dir(path: Path, flag: str) -> Path:
    # A missing directory is left to the command (it may say more); a file where one is needed is not.
    if path.exists() and not path.is_dir():
        raise BadInput(f"{flag} {path}: not a directory")
    return path


def _callback(check):  # type: ignore[no-untyped-def]
    def cb(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
        if value is None or ctx.resilient_parsing:
            return value
        if isinstance(value, (list, tuple)):
            return [check(Path(v), _flag(param)) for v in value]
        return check(Path(value), _flag(param))

    return cb


input_file = _callback(check_input_file)
output_file = _callback(check_output_file)
input_dir = _callback(check_input_dir)
