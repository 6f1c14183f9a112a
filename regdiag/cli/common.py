"""Options shared by several commands, defined once, and small rendering helpers."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import typer
from rich.console import Console
from rich.text import Text

from regdiag.errors import BadInput
from regdiag.files import RecordError, check_output_path


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich exits 1 here, which is compare's code for REGRESSED; main() gives "output closed" its own.
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "output closed")

    def print(self, *objects: Any, **kwargs: Any) -> None:
        # Lines wrap between words only: a word longer than the width (a path, a hash, an id) is kept
        # whole past the edge rather than folded or cropped (80 columns in a CI log, 40 in a pane).
        # A sentence the width breaks goes on indented (report.layout.hanging), so it reads as one item.
        kwargs.setdefault("crop", False)
        if len(objects) == 1 and isinstance(objects[0], (str, Text)) and not kwargs.get("soft_wrap"):
            from regdiag.report.layout import hanging

            obj = objects[0]
            if isinstance(obj, str):
                obj = self.render_str(
                    obj,
                    markup=kwargs.get("markup"),
                    highlight=kwargs.get("highlight"),
                    emoji=kwargs.get("emoji"),
                )
            objects = (hanging(obj, self.width),)
            kwargs.update(no_wrap=True, overflow="ignore")
        super().print(*objects, **kwargs)


# Human output goes to stdout; progress and warnings to stderr, so `--json > file` stays clean.
console = _Console(highlight=False)
err_console = _Console(stderr=True, highlight=False)

JsonOpt = typer.Option(False, "--json", help="Print the result as JSON on stdout (nothing else on stdout).")
PythonOpt = typer.Option(
    None,
    "--python",
    envvar="REGDIAG_PYTHON",
    help="Interpreter on the target host, e.g. /root/ml-env/bin/python3. Default: $REGDIAG_PYTHON, else "
    "config.toml's [hosts.HOST] or [defaults] python, else this interpreter locally, python3 remotely.",
)
SshConfigOpt = typer.Option(
    None, "--ssh-config", help="SSH config file, as `ssh -F` (default: ~/.ssh/config).", dir_okay=False
)
SlurmOpt = typer.Option(
    None,
    "--slurm",
    metavar="N",
    help="Run on N nodes of one Slurm allocation (salloc), each launch a step pinned to a node that "
    "regdiag chooses; A/B pairs on one node (docs/fleet.md). Default: no Slurm.",
)
SlurmArgsOpt = typer.Option(
    None,
    "--slurm-args",
    help="Options for salloc, e.g. '--partition=gpu --time=60' (default: none; SLURM_* and SALLOC_* "
    "variables hold). Without a GPU request here regdiag asks for the GPUs the probe needs (its --tp, "
    "unless --device cpu or --preset tiny): --gpus-per-node=TP.",
)


EnvDirOpt = typer.Option(
    None,
    "--env-dir",
    metavar="DIR",
    help="With --slurm: build environments (packages, commits) in DIR, a directory every node shares "
    "(checked at the start, one step per node). Default: ~/.cache/regdiag as the nodes see it; where "
    "a node's is its own (node-local), each environment is built on every node.",
)


PROGRESS_EVERY_ENV = "REGDIAG_PROGRESS_EVERY"
PROGRESS_EVERY_S = 10.0


class PlainProgress:
    """Progress for a stderr that is not a terminal (CI logs, nohup, `ssh box 'regdiag ...' | tee`),
    where a live bar prints nothing: plain lines, no ANSI, each `[ elapsed] command: what`.

    `step` is one line per launch, stage or bisect step, printed as it starts or ends; `tick` (a count
    inside a stage) prints at most once every REGDIAG_PROGRESS_EVERY seconds (default 10), so minutes
    of one stage still show life without flooding the log. On a terminal both do nothing: the caller's
    rich display is the progress there."""

    def __init__(self, name: str, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.name = name
        self.stream = stream
        self.enabled = (not err_console.is_terminal) if enabled is None else enabled
        self.every = _progress_every()
        self.t0 = time.monotonic()
        self._last = self.t0  # a tick waits a full interval after the last line

    def step(self, text: str) -> None:
        if self.enabled:
            self._emit(text)

    def tick(self, text: str) -> None:
        if self.enabled and time.monotonic() - self._last >= self.every:
            self._emit(text)

    def _emit(self, text: str) -> None:
        now = time.monotonic()
        self._last = now
        out = self.stream or sys.stderr
        out.write(f"[{now - self.t0:5.0f}s] {self.name}: {text}\n")
        out.flush()


def _progress_every() -> float:
    raw = os.environ.get(PROGRESS_EVERY_ENV, "")
    try:
        return max(0.0, float(raw)) if raw else PROGRESS_EVERY_S
    except ValueError:
        return PROGRESS_EVERY_S


def fitted_table(
    columns: list[str],
    rows: list[list[str]],
    keep: str,
    drop_order: list[str] | None = None,
    width: int | None = None,
) -> Any:
    """A borderless table when `width` (default the console's; 80 in a CI log) holds every cell whole,
    else one block per row (report.layout): column `keep` (the id users copy into the next command)
    on a line of its own, the other columns as "name value" items under it. No column is dropped and
    no cell cut; `drop_order` is accepted for callers of the old form and unused."""
    from regdiag.report import layout as L

    k = columns.index(keep)
    order = [k, *(i for i in range(len(columns)) if i != k)]
    cols = [L.Col(columns[i]) for i in order]
    cells: list[list[L.Cell]] = [[r[i] for i in order] for r in rows]
    return L.fit(cols, cells, width or console.width, gap=2)


def reflow(text: str) -> str:
    """Help text as paragraphs, each one line, so the terminal wraps it at its own width (80 columns in
    a CI log) instead of at the width of the source. List items ("- ...") and indented lines stay."""
    paragraphs = []
    for para in text.strip().split("\n\n"):
        lines: list[str] = []
        for ln in para.splitlines():
            if lines and ln.strip() and not ln.startswith((" ", "- ", "* ")) and not lines[-1].endswith(":"):
                lines[-1] = f"{lines[-1].rstrip()} {ln.strip()}"
            else:
                lines.append(ln.rstrip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def reflow_help(app: typer.Typer) -> None:
    """Re-flow the help of every command and group of `app` (see reflow)."""
    import inspect

    for cmd in app.registered_commands:
        text = cmd.help or (inspect.getdoc(cmd.callback) if cmd.callback else None)
        if text:
            cmd.help = reflow(text)
    for group in app.registered_groups:
        if group.help:
            group.help = reflow(group.help)
        if group.typer_instance is not None:
            reflow_help(group.typer_instance)


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
    """records.check_output_path, at the option: a name with control characters, a directory, a device, a
    missing directory outside REGDIAG_HOME are refused before anything is made or measured."""
    try:
        check_output_path(path)
    except RecordError as e:
        raise BadInput(f"{flag} {e}") from None
    return path


def check_output_prefix(path: Path, flag: str) -> Path:
    """An output PREFIX (ab's -o): the files PREFIX-a.json and PREFIX-b.json are checked, and the prefix
    itself must not be a device (`-o /dev/full` would write /dev/full-a.json)."""
    check_output_file(path, flag)
    for side in ("a", "b"):
        check_output_file(path.with_name(f"{path.name}-{side}.json"), flag)
    return path


def refuse_input_as_output(output: Path | None, inputs: list[str], flag: str) -> None:
    """An output file that is one of the command's own inputs would be replaced by what is written
    (`compare A B --html A`, `ingest-log LOG -o LOG`): what was measured would be lost."""
    if output is None:
        return
    for i in inputs:
        try:
            same = os.path.samefile(output, i)
        except OSError:  # one of them does not exist (yet): not the same file
            continue
        if same:
            raise BadInput(f"{flag} {output}: is an input of this command; writing it would replace it")


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


# Numbers as option callbacks: every count, size and time has a range, named in the one error line
# (`--launches 1000000000000: out of range, use 1 to 10000`); NaN and infinities are outside any range.
LAUNCHES = (1, 10_000)
CYCLES = (1, 1_000_000)
COUNT = (1, 1_000_000)  # requests, tokens, iterations, repetitions
SECONDS = (0.001, 7 * 86400.0)  # timeouts and waits: a millisecond to a week


def bounded(lo: float, hi: float, unit: str = "", none_ok: bool = True):  # type: ignore[no-untyped-def]
    """A typer callback holding a number option to lo..hi (inclusive, in `unit`), or BadInput (exit 2)."""

    def cb(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
        if ctx.resilient_parsing or (value is None and none_ok):
            return value
        if not lo <= value <= hi:  # False for NaN
            raise BadInput(
                f"{_flag(param)} {_number(value)}: out of range, use {_number(lo)} to {_number(hi)}"
                + (f" {unit}" if unit else "")
            )
        return value

    return cb


def _number(x: float) -> str:
    """1000000, 0.001, 1e+308, nan: whole numbers in full, others as %g."""
    return (
        str(int(x))
        if isinstance(x, int) or (math.isfinite(x) and x == int(x) and abs(x) < 1e15)
        else f"{x:g}"
    )


input_file = _callback(check_input_file)
output_file = _callback(check_output_file)
output_prefix = _callback(check_output_prefix)
OutputOpt = typer.Option(
    None, "-o", "--output", help="Also write the record to this file (atomically).", callback=output_file
)
input_dir = _callback(check_input_dir)

# How bisect and ab build an environment (regdiag.bisect.lab.builder_for): declared once for both.
RepoOpt = typer.Option(
    None,
    "--repo",
    help="The engine's git checkout, for a commit that differs (never taken from a record: one naming its "
    "checkout is refused, naming the path to give here).",
    callback=input_dir,
)
SetupOpt = typer.Option(
    None, "--setup", help="Shell command run in each commit's worktree after checkout (default: none)."
)
AllowUnloadedOpt = typer.Option(
    False,
    "--allow-unloaded",
    help="Measure package factors the measurement never loads (by default they are cleared without a "
    "launch, a change there cannot show; exit 2 when no other factor is left; docs/bisect.md, "
    '"Does the measurement see the factor?").',
)
_ALLOW_CODE_HELP = (
    "Let a snapshot or run record given as a side set variables that are not known settings "
    "(anything outside the NCCL_, CUDA_, TORCH_, VLLM_, SGLANG_, OMP_, ... families, one that loads a "
    "library, plugin or package whatever its value, a name holding a path, a value that is a path or a "
    "shell expansion: PYTHONPATH, LD_PRELOAD, OPENSSL_CONF, PS4, OMP_TOOL_LIBRARIES, ...) to values this "
    "shell does not have; refused by default (exit 2, naming them)."
)
AllowCodeOpt = typer.Option(False, "--allow-code-from-record", help=_ALLOW_CODE_HELP)
# bisect's: a journal is a record too (regdiag/bisect/journal.py)
BisectAllowCodeOpt = typer.Option(
    False,
    "--allow-code-from-record",
    help=_ALLOW_CODE_HELP
    + " With --resume: also take the command, setup, python, repo, package sources, probe options and sides "
    "from a journal this user's regdiag did not write (its start_hash does not verify), and resume one "
    "that another user owns or others may write; each refused by default (exit 2).",
)
IgnoreOpt = typer.Option(
    None,
    "--ignore",
    metavar="VAR|GLOB",
    help="Leave out the differences whose name matches (a shell glob: TERM, 'SSH_*', 'nvidia-*', "
    "'package:*'); a variable left out is set as the first side (--good, --a) has it. Repeatable.",
)
OnlyOpt = typer.Option(
    None,
    "--only",
    metavar="VAR|GLOB",
    help="Work only on the differences whose name matches (as --ignore); the others are left out as "
    "--ignore leaves them. Repeatable.",
)
FindLinksOpt = typer.Option(
    None,
    "--find-links",
    help="Install packages from this directory of wheels only (no index).",
    callback=input_dir,
)
IndexUrlOpt = typer.Option(None, "--index-url", help="Package index (default: pip's own).")
InstallerOpt = typer.Option("auto", "--installer", help="auto (uv if on PATH, else pip), uv or pip.")
LaunchTimeoutOpt = typer.Option(
    600.0,
    "--launch-timeout",
    callback=bounded(*SECONDS, unit="seconds"),
    help="Seconds per launch (default 600).",
)


def progress_bar(disable: bool) -> Any:
    """The rich bar of every command that shows one (description, bar, n/m, elapsed) on stderr, gone
    when done; `disable` where PlainProgress prints its lines instead."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=disable,
    )


def probe_args(ctx: typer.Context, probe: str | None) -> list[str]:
    """What came after --: the probe's own options, refused without a --probe to take them, and held
    to a synthetic probe's own parser and checks before anything is built or run."""
    from regdiag.measure.probes import check_probe_args, probe_table

    extra = list(ctx.args)
    if extra and not probe:
        raise BadInput(f"unexpected arguments {' '.join(extra)!r} (probe options after -- need --probe)")
    if probe in probe_table():
        check_probe_args(probe, extra)
    return extra


def build_fields(
    repo: Path | None,
    setup: str | None,
    find_links: Path | None,
    index_url: str | None,
    python: str | None,
    installer: str,
) -> dict[str, Any]:
    """The options that say how environments are built (bisect's and ab's) as a request's fields
    (regdiag.bisect.lab.BuildInputs, plus the checkout); an unknown --installer is refused."""
    if installer not in ("auto", "uv", "pip"):
        raise BadInput(f"--installer {installer}: use auto, uv or pip")
    return {
        "repo": str(repo) if repo else None,
        "setup": setup,
        "find_links": str(find_links) if find_links else None,
        "index_url": index_url,
        "python": python,
        "installer": installer,
    }
