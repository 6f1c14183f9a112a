"""`regdiag bisect`: parse, call regdiag.bisect.run_bisect, render. Progress on stderr."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from regdiag.cli.common import (
    AllowUnloadedOpt,
    BisectAllowCodeOpt,
    FindLinksOpt,
    IgnoreOpt,
    IndexUrlOpt,
    InstallerOpt,
    JsonOpt,
    LaunchTimeoutOpt,
    OnlyOpt,
    PlainProgress,
    RepoOpt,
    SetupOpt,
    bounded,
    build_fields,
    err_console,
    format_opt,
    output_file,
    pick_format,
    probe_args,
    show,
)
from regdiag.cli.target import TARGET, Target, target_options
from regdiag.errors import EXIT_INCONCLUSIVE, EXIT_OK, BadInput, HostError

if TYPE_CHECKING:
    from regdiag.bisect.run import Request

HELP = (
    "Find which change makes the bad environment slower: the engine commit, a package version, an env "
    "var, or several acting together, with the milliseconds of each phase it costs.\n\n"
    "--good/--bad: a snapshot or run record file (its snapshot_before), or a spec such as "
    "'sgl-kernel==0.3.5 flashinfer-python==0.2.11 NCCL_PROTO=LL commit=bba2fc4' (-NAME: variable unset; "
    "gpu0.sm_lock=1410 or gpu0.app_clocks=MEM,SM: GPU clocks, set through NVML around each launch, which "
    "needs a GPU and root, else exit 2). Every difference is a factor. The endpoints are measured first (no reproducible regression: it says "
    "so and stops); then the factors are bisected (ddmin finds causes that act only together), then the "
    "commits (git rev-list) or package versions between a culprit's two values. Each step is classified "
    "against its endpoints with a confidence interval (BAD / GOOD / more launches; PARTIAL or "
    "INCONCLUSIVE at --max-launches, never a guess). Environments are built for real: git worktrees "
    "(+ --setup), venvs layered on the interpreter with the differing packages pinned (uv if installed, "
    "else pip), env vars per process; cached under $REGDIAG_HOME/envs. An environment that fails to "
    "build or run is SKIP (a --setup or command exit status of 125 asks for it).\n\n"
    "Every launch and decision goes to the journal as it happens; --resume continues an interrupted "
    "bisect without measuring anything twice.\n\n"
    "--host H: everything is built and measured on H over SSH (env vars per process, venvs on H's --python, "
    "worktrees of --repo, a path on H; --find-links is a directory on H), cached in ~/.cache/regdiag on H "
    "(removed by `regdiag clean --host H`); the journal stays here. A lost connection ends the bisect with "
    "exit 4 and every finished launch journalled: --resume continues. --host A --host B: each host is a "
    "lane (launches at once, paired within a host, every environment built on each host); a host whose "
    "connection is lost is dropped and its launch runs again on another.\n\n"
    "Exit status: 0 culprit(s) named, 3 none named (not reproduced or inconclusive), 2 bad input, "
    "5 an endpoint cannot be measured."
)


def _progress_printer(quiet: bool) -> tuple[Any, Any]:
    """A rich status line on a terminal; plain decision lines otherwise (CI logs)."""
    from rich.markup import escape as e

    # "preparing": before the first step, when the check that the measurement loads the factor builds
    state = {"what": "preparing", "label": "", "launches": 0}
    live = err_console.is_terminal and not quiet
    status = err_console.status("starting") if live else None
    plain = PlainProgress("bisect", enabled=not err_console.is_terminal and not quiet)

    def show() -> None:
        if status is not None:
            status.update(
                f"[bold]{e(str(state['what']))}[/] · {e(str(state['label']))} · launches run {state['launches']}"
            )

    def on_event(ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "start":
            on_event.journal = str(ev["journal"])  # type: ignore[attr-defined]
            resumed = " (resumed)" if ev.get("resumed") else ""
            err_console.print(f"[dim]journal{resumed}: {e(ev['journal'])}[/]")
            err_console.print(f"[dim]{len(ev['factors'])} factors: " + e("; ".join(ev["factors"])) + "[/]")
        elif kind == "step":
            state["what"] = str(ev.get("what", ""))
            if ev.get("label"):
                state["label"] = str(ev["label"])
            elif ev.get("bad"):
                state["label"] = f"{ev.get('good')} .. {ev.get('bad')}"
        elif kind == "build":
            state["label"] = f"building {ev['label']}"
            plain.step(f"{state['what']}: building {ev['label']}")
        elif kind == "launch":
            on = f" on {ev['lane']}" if ev.get("lane") else ""
            state["label"] = f"{ev['label']} #{ev['index'] + 1}{on}"
            state["launches"] = int(ev["started"])
            plain.step(f"{state['what']}: {state['label']} (launch {state['launches']})")
        elif kind == "skip":
            err_console.print(f"[yellow]SKIP[/] {e(ev['label'])}: {e(str(ev.get('reason')))}")
        elif kind == "note":
            err_console.print(f"[yellow]note[/] {e(str(ev['text']))}")
        elif kind == "lanes":
            err_console.print(f"[dim]lanes: {e(str(ev['text']))}[/]", soft_wrap=True)
        elif kind == "decision":
            theta = ev.get("theta")
            tail = f" (theta {theta:.2f})" if isinstance(theta, (int, float)) else ""
            err_console.print(f"[dim]{e(ev['what'])}: [/]{ev['verdict']}{tail}")
        show()

    return on_event, status


@target_options(kinds=("slurm",), verb="Build and measure")
def bisect(
    ctx: typer.Context,
    good: str | None = typer.Option(
        None,
        "--good",
        help="The fast side: snapshot / run record file, or a spec (with --resume: the journal's).",
    ),
    bad: str | None = typer.Option(
        None,
        "--bad",
        help="The slow side: snapshot / run record file, or a spec (with --resume: the journal's).",
    ),
    ignore: list[str] = IgnoreOpt,
    only: list[str] = OnlyOpt,
    probe: str | None = typer.Option(
        None,
        "--probe",
        help="What measures each environment: spec-decode or collectives (synthetic), or engine (your "
        "engine, `regdiag probe engine`, with {python} in its --launch-cmd for the environment's "
        "interpreter); its options go after --.",
    ),
    command: str | None = typer.Option(
        None,
        "--command",
        help="Instead of --probe: a command whose stdout follows the probe protocol (docs/probes.md). "
        "`python` (or {python}) is the environment's interpreter; it runs in the commit's worktree. "
        "It is split into words like a shell would (shlex) but not run by a shell: for pipes or &&, "
        "give `sh -c '...'`.",
    ),
    metric: str = typer.Option(
        "cycle", "--metric", help="What is bisected: cycle or a phase (default cycle)."
    ),
    repo: Path | None = RepoOpt,
    setup: str | None = SetupOpt,
    find_links: Path | None = FindLinksOpt,
    index_url: str | None = IndexUrlOpt,
    installer: str = InstallerOpt,
    launches: int = typer.Option(
        3,
        "--launches",
        "-L",
        callback=bounded(1, 1000),
        help="Launches per point before the first look; then one more at a time until decided (default 3).",
    ),
    max_launches: int = typer.Option(
        9,
        "--max-launches",
        callback=bounded(1, 1000),
        help="Cap per point; then PARTIAL or INCONCLUSIVE (default 9).",
    ),
    margin: str = typer.Option(
        "2%",
        "--margin",
        "-m",
        help="The endpoints must differ by more than this, as 2% or 0.02 (default 2%).",
    ),
    min_share: float = typer.Option(
        0.1,
        "--min-share",
        min=0.0,
        max=1.0,
        help="Search for further culprits down to this share of the regression (default 0.1).",
    ),
    launch_timeout: float = LaunchTimeoutOpt,
    journal: Path | None = typer.Option(
        None,
        "--journal",
        help="Journal file (default: $REGDIAG_HOME/bisect/<time>.jsonl).",
        callback=output_file,
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue the bisect recorded in --journal."),
    allow_unloaded: bool = AllowUnloadedOpt,
    allow_code_from_record: bool = BisectAllowCodeOpt,
    cold: bool = typer.Option(
        False,
        "--cold",
        help="Start every launch as a fresh interpreter instead of forking a probe's launches from one warm "
        "interpreter per point; with --probe engine and --url, start the engine for every launch instead of "
        "sharing one among the point's launches (docs/engine.md, 'Reused starts'). Default: warm, shared.",
    ),
    lanes: str = typer.Option(
        "auto",
        "--lanes",
        help="Where a round's launches run at once, each lane a block of the statistics (docs/bisect.md, "
        '"Lanes"): auto (the nodes of --slurm N; this machine or an SSH host: one lane), serial (the same '
        "lanes, one launch at a time), gpu (this machine's GPUs in groups of the probe's --tp, each launch "
        "pinned with CUDA_VISIBLE_DEVICES).",
    ),
    json_out: bool = JsonOpt,
    markdown: bool = typer.Option(False, "--markdown", help="Print the report as Markdown on stdout."),
    fmt: str = format_opt("bisect"),
    target: Target = TARGET,
) -> None:
    o = dict(locals())
    chosen = pick_format("bisect", fmt, json_out, markdown)
    req, where = _request(ctx, o)
    report = _run(req, where)
    show("bisect", chosen, report)
    raise typer.Exit(EXIT_OK if report["verdict"] == "CULPRIT" else EXIT_INCONCLUSIVE)


# What a journal's start line holds of the options (Request.inputs): `--resume --journal J` takes them
# from there unless given again.
JOURNAL_OPTIONS = (
    *("command", "probe", "metric", "repo", "setup", "find_links", "index_url", "python"),
    *("launches", "max_launches", "margin", "min_share", "lanes"),
)


def _request(ctx: typer.Context, o: dict[str, Any]) -> tuple[Request, Target]:
    """The bisect's Request from its options (with --resume and no --good/--bad: from the journal),
    and the Target it runs on (--python is the environments' interpreter as well as the host's)."""
    from regdiag.bisect.run import Request
    from regdiag.cli.compare_cmd import parse_margin

    o["python"] = o["target"].python
    if o["resume"] and o["journal"] is None:
        raise BadInput("--resume needs --journal FILE (the journal of the bisect to continue)")
    journal_args: list[str] = []
    if o["resume"] and (o["good"] is None or o["bad"] is None):
        o, journal_args = _from_journal(ctx, o)
    elif o["good"] is None or o["bad"] is None:
        raise BadInput(
            "give --good and --bad (or --resume --journal FILE, which reads them from the journal)"
        )
    extra = probe_args(ctx, o["probe"]) or journal_args
    build = build_fields(o["repo"], o["setup"], o["find_links"], o["index_url"], o["python"], o["installer"])
    same = "good bad command probe metric launches max_launches min_share launch_timeout resume".split()
    same += [
        "allow_code_from_record",
        "allow_unloaded",
        "cold",
        "lanes",
    ]  # the options that are the request's fields as given
    req = Request(
        **{k: o[k] for k in same},
        **build,
        probe_args=extra,
        margin=parse_margin(o["margin"]),
        journal=str(o["journal"]) if o["journal"] else None,
        ignore=list(o["ignore"] or []),
        only=list(o["only"] or []),
    )
    return req, replace(o["target"], python=o["python"])


def _from_journal(ctx: typer.Context, o: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """--resume --journal J alone: the sides and every option the journal was started with, except
    those given again on this command line (or by REGDIAG_* variables); and its probe options."""
    from regdiag.bisect.journal import read_start, unverified

    allow = bool(o["allow_code_from_record"])
    head = read_start(o["journal"], allow)  # refused when another user may have written it
    sides, inputs = head.get("sides") or {}, head.get("inputs") or {}
    where = o["journal"]
    why = None if allow else unverified(head)
    if not sides.get("good") or not sides.get("bad"):
        raise BadInput(
            f"{where}: the journal does not hold --good and --bad (an older one); give them with --resume"
        )
    hidden = [
        k for k in ("good", "bad") if o[k] is None and ("<redacted" in sides[k] or "<hashed" in sides[k])
    ]
    if hidden:
        raise BadInput(
            f"{where}: the journal's --{hidden[0]} holds a redacted secret; give --good and --bad again"
        )
    out = dict(o)
    out["good"] = o["good"] if o["good"] is not None else sides["good"]
    out["bad"] = o["bad"] if o["bad"] is not None else sides["bad"]
    out["ignore"] = o["ignore"] or list(sides.get("ignore") or [])
    out["only"] = o["only"] or list(sides.get("only") or [])
    taken = [n for n in JOURNAL_OPTIONS if n in inputs and _defaulted(ctx, n)]
    extra = [] if ctx.args else [str(a) for a in inputs.get("probe_args") or []]  # after --: given again
    if why:
        taken_sides = {k: str(sides[k]) for k in ("good", "bad") if o[k] is None}
        _refuse_code_from(where, why, inputs, [*taken, *(["probe_args"] if extra else [])], taken_sides)
    for name in taken:
        value = inputs[name]
        out[name] = str(value) if name == "margin" else value
    out["target"] = _target_from_journal(ctx, o["target"], inputs, where)
    return out, extra


def _defaulted(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is None or source.name == "DEFAULT"


def _refuse_code_from(
    where: Any, why: str, inputs: dict[str, Any], taken: list[str], sides: dict[str, str]
) -> None:
    """A journal not known to be this user's own (journal.unverified says `why`) chooses no code: the
    options of CODE_INPUTS it would give are given again, and the sides it gives are held to the rule of
    records (factors.check_recorded_side)."""
    from regdiag.bisect.factors import check_recorded_side
    from regdiag.bisect.journal import CODE_INPUTS

    code = [n for n in CODE_INPUTS if n in taken and inputs.get(n) not in (None, "", [])]
    if code:
        named = ", ".join(
            "the probe's options after --" if n == "probe_args" else "--" + n.replace("_", "-") for n in code
        )
        raise BadInput(
            f"{where}: {why}; a journal does not choose code to run: give {named} again, or pass "
            "--allow-code-from-record if you trust it"
        )
    for side, text in sides.items():
        check_recorded_side(text, f"{where}: its --{side}")


def _target_from_journal(ctx: typer.Context, given: Target, inputs: dict[str, Any], where: Any) -> Target:
    """Where the journal's bisect ran (`target`: this machine, an SSH host, or a Slurm allocation
    reopened as a new one of the same shape), unless --host or --slurm is given again."""
    on_line = {
        n
        for n in ("host", "slurm")
        if (s := ctx.get_parameter_source(n)) is not None and s.name == "COMMANDLINE"
    }
    raw = inputs.get("target")
    if isinstance(raw, dict):
        return Target.from_record(raw).overridden_by(given, on_line)
    if inputs.get("host") == "slurm" and not on_line:
        raise BadInput(
            f"{where}: the journal is of a Slurm bisect written before it kept --slurm N; give --slurm N "
            "(and --slurm-args) again with --resume"
        )
    if isinstance(inputs.get("host"), str) and not on_line:  # a journal from before `target`: SSH by name
        return replace(given, hosts=(inputs["host"],), host_defaulted=False)
    return given


def _run(req: Request, target: Target) -> dict[str, Any]:
    """run_bisect here, on --host or on --slurm N nodes, with progress on stderr; a connection lost on
    the way says how to continue from the journal."""
    from regdiag.bisect.run import run_bisect
    from regdiag.measure.needs import gpu_need

    if req.lanes == "gpu" and target.checked().remote:  # before salloc or a connection
        raise BadInput("--lanes gpu: this machine's GPUs only (under --slurm the lanes are its nodes)")
    on_event, status = _progress_printer(quiet=False)
    where = target.open(gpus=gpu_need(req.probe, req.probe_args)) if target.checked().remote else None
    try:
        with status if status is not None else contextlib.nullcontext():
            return run_bisect(req, progress=on_event, host=where)
    except HostError as e:
        if where is None or not getattr(on_event, "journal", None):
            raise
        raise HostError(
            f"{e}; every finished launch is in the journal: continue with --resume --journal {on_event.journal}"
        ) from None
    finally:
        if where is not None:
            where.close()


def register(app: typer.Typer) -> None:
    app.command(
        "bisect",
        help=HELP,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": False},
    )(bisect)
