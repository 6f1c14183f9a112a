"""The command line: parse, call the library, render. Errors become one line and an exit code here."""

from __future__ import annotations

import importlib
import os
import sys
import traceback

import typer

from regdiag import interrupts
from regdiag.cli.common import reflow_help
from regdiag.cli.helpfmt import renamed, with_config_defaults
from regdiag.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT_CLOSED,
    GIT_STOP,
    RegdiagError,
    error_line,
    for_git_bisect,
)
from regdiag.records import RecordError
from regdiag.version import __version__

app = typer.Typer(
    name="regdiag",
    help=(
        "Find out why tokens per second dropped.\n\n"
        "snapshot the environment, probe per-phase timing (draft / verify / decode) with GPU-synchronized "
        "timers, compare two runs with statistics that do not cry wolf, explain physics vs regression, "
        "and bisect commits, package versions and env vars. Locally or over SSH (--host)."
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

GIT_BISECT_FLAG = "--git-bisect"

# Each module registers its commands on `app`; one module per command family.
COMMAND_MODULES = [
    "regdiag.cli.snapshot_cmd",
    "regdiag.cli.probe_cmd",
    "regdiag.cli.compare_cmd",
    "regdiag.cli.explain_cmd",
    "regdiag.cli.hosts_cmd",
    "regdiag.cli.bisect_cmd",
    "regdiag.cli.server_cmd",
    "regdiag.cli.demo_cmd",
    "regdiag.cli.ab_cmd",
    "regdiag.cli.engine_cmd",
    "regdiag.cli.clean_cmd",
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"regdiag {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
    shared_home: bool = typer.Option(
        False,
        "--shared-home",
        help="Accept a REGDIAG_HOME writable by its group (a team's, mode 2770), and directories in it "
        "of the group's other members; also REGDIAG_SHARED_HOME=1 or shared_home = true in config.toml's "
        "[defaults]. Without it such a home is refused (exit 2), as one writable by anyone always is.",
    ),
) -> None:
    """REGDIAG_HOME is checked before any command runs (files.check_home): a link planted in it, a
    directory of another user or one others may write is one line, exit 2."""
    if any(a in ("--help", "-h") for a in sys.argv[1:]):
        return
    from regdiag import config
    from regdiag.files import check_home, set_shared_home

    data, warning = (
        config.load_checked()
    )  # another user's config.toml neither accepts the home nor picks code
    if warning:
        sys.stderr.write(warning + "\n")
    set_shared_home(shared_home or config.shared_home_wanted(data))
    check_home()


for _name in COMMAND_MODULES:
    try:
        _mod = importlib.import_module(_name)
    except ModuleNotFoundError as _e:  # a command family not present in this build
        if _e.name != _name:
            raise
        continue
    _mod.register(app)

reflow_help(app)  # help re-flowed to the terminal's width, not hard-wrapped at the source's
with_config_defaults(app)  # --host and --python from $REGDIAG_HOME/config.toml where none was given


def command():  # type: ignore[no-untyped-def]
    """The click command tree of `app`, with click's plain help (cli/helpfmt.py)."""
    import typer.main

    from regdiag.cli.helpfmt import click_style

    return click_style(typer.main.get_command(app))


def click_exceptions():  # type: ignore[no-untyped-def]
    """The exceptions module of the click that typer uses: its own vendored copy in newer typer."""
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions  # type: ignore[no-redef]
    return exceptions


def _fail(message: str, code: int) -> None:
    err = sys.stderr
    line = error_line(message)
    err.write(line)
    err.flush()
    if _wants_json(sys.argv[1:]):
        # a script reading stdout gets an object, never nothing (docs/schemas/error.schema.json)
        import json

        from regdiag.records import schema_id

        try:
            sys.stdout.write(
                json.dumps(
                    {
                        "schema": schema_id("error"),
                        "error": line.strip().removeprefix("regdiag: error: "),
                        "exit_code": code,
                    }
                )
                + "\n"
            )
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
    sys.exit(code)


def _wants_json(args: list[str]) -> bool:
    """Whether the command line asks for JSON on stdout (--json, --format json), before any `--`."""
    mine = args[: args.index("--")] if "--" in args else args
    return (
        "--json" in mine
        or "--format=json" in mine
        or any(a == "--format" and b == "json" for a, b in zip(mine, mine[1:], strict=False))
    )


def _interrupted(exc: BaseException | None = None) -> None:
    _fail(
        f"{interrupts.describe(exc)}; everything finished before this point was kept",
        interrupts.exit_status(exc),
    )


def _output_closed() -> None:
    """The reader went away (`regdiag compare A B | head -1`). Not a verdict: exit 141, quietly, and
    point stdout/stderr at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass
    sys.exit(EXIT_OUTPUT_CLOSED)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: every user-facing error is one line on stderr with a documented exit code.

    With `--git-bisect` on the command line (before any `--`), every exit status, an error's included,
    is translated for `git bisect run` (errors.for_git_bisect); a crash of regdiag itself stops it."""
    args = sys.argv[1:] if argv is None else argv
    if GIT_BISECT_FLAG not in args[: args.index("--") if "--" in args else len(args)]:
        _main(argv)
        return
    try:
        _main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_BAD_INPUT)
        raise SystemExit(for_git_bisect(code)) from None
    except Exception:
        traceback.print_exc()
        raise SystemExit(GIT_STOP) from None


def _main(argv: list[str] | None) -> None:
    interrupts.install()  # SIGTERM and SIGHUP stop children and keep results, like Ctrl-C
    try:
        args = renamed(list(sys.argv[1:] if argv is None else argv))  # old spellings, for one release
        rv = command().main(args=args, prog_name="regdiag", standalone_mode=False)
    except RegdiagError as e:
        _fail(str(e), e.exit_code)
    except RecordError as e:
        _fail(str(e), EXIT_BAD_INPUT)
    except KeyboardInterrupt as e:
        _interrupted(e)
    except SystemExit as e:
        # click turns a broken pipe (EPIPE) into exit 1, REGRESSED's code, after wrapping the streams.
        if e.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
            _output_closed()
        raise
    except OSError as e:
        # A path the user gave that cannot be written or read (-o /proc/x, a journal in a missing dir).
        where = f"{e.filename}: " if e.filename else ""
        _fail(f"{where}{e.strerror or e}", EXIT_BAD_INPUT)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        if interrupts.last_signal() is not None:
            _interrupted()
        _fail("aborted", EXIT_INTERRUPTED)
    except Exception as e:  # click's usage errors (typer may vendor its own click)
        exc_mod = click_exceptions()
        if isinstance(e, exc_mod.NoArgsIsHelpError):
            # `regdiag` or `regdiag probe` alone: help was asked for. A command whose required
            # arguments are missing printed its help too, but that is a usage error for scripts.
            ctx = getattr(e, "ctx", None)
            if ctx is not None:
                typer.echo(ctx.get_help())
            is_group = ctx is not None and hasattr(ctx.command, "commands")
            sys.exit(0 if is_group else EXIT_BAD_INPUT)
        if isinstance(e, exc_mod.ClickException):
            # One line, like every other error: click's usage block is four lines on a CI log.
            ctx = getattr(e, "ctx", None)
            hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            # Under --git-bisect a command line that cannot be parsed stops the bisection (GIT_STOP):
            # it would fail at every commit alike, and git would read "bad input" as "bad commit".
            usage = (
                GIT_STOP if GIT_BISECT_FLAG in (argv if argv is not None else sys.argv) else EXIT_BAD_INPUT
            )
            _fail(" ".join(e.format_message().split()) + hint, usage)
        raise
    # In non-standalone mode click returns the code of a `typer.Exit(code)` instead of exiting; newer
    # typer also turns Ctrl-C inside a command into a returned 130 rather than KeyboardInterrupt.
    if rv == EXIT_INTERRUPTED:
        _interrupted()
    sys.exit(rv if isinstance(rv, int) else 0)
