"""`regdiag ab`: parse, call regdiag.ab.run_ab then regdiag.compare, render. Progress on stderr."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from regdiag.cli.common import (
    LAUNCHES,
    AllowCodeOpt,
    AllowUnloadedOpt,
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
    console,
    err_console,
    format_opt,
    output_prefix,
    pick_format,
    print_json,
)
from regdiag.cli.target import TARGET, Target, target_options

if TYPE_CHECKING:
    from regdiag.ab import AbRequest, AbResult

HELP = (
    "Measure two environments in one run, launches interleaved A B B A A B B A, and compare them.\n\n"
    "Two runs measured one after the other differ by whatever the machine did in between (warming up, a "
    "neighbour starting); compare cannot tell that drift from a change. Here launch k of A and launch k "
    "of B run back to back, and the verdict is a paired comparison of those pairs (docs/statistics.md).\n\n"
    "--a/--b: a spec such as 'sgl-kernel==0.3.5 NCCL_PROTO=LL commit=bba2fc4' (-NAME: variable unset), "
    "or a snapshot / run record file; environments are built like bisect's (git worktree + --setup per "
    "commit, a venv per package set, cached under $REGDIAG_HOME/envs). Identical specs give an A/A run.\n\n"
    "Writes one run record per side to $REGDIAG_HOME/runs/ (and with -o PREFIX a copy of each to "
    "PREFIX-a.json and PREFIX-b.json), each launch as it finishes; `regdiag compare A.json B.json` re-reads "
    "them.\n\n"
    "Several --host (or --slurm N): the pairs are spread over the hosts, pair k on host k mod H, both "
    "halves of a pair on one host, and the verdict is paired within each host (docs/fleet.md).\n\n"
    "Exit status: like compare (0 unchanged or improved, 1 regressed, 3 inconclusive), 2 bad input, "
    "5 a launch failed (the launches before it are kept)."
)


@target_options(kinds=("slurm",))
def ab(
    ctx: typer.Context,
    a: str = typer.Option(..., "--a", help="Side A (the reference): a spec, a snapshot or run file."),
    b: str = typer.Option(..., "--b", help="Side B: a spec, a snapshot or run file."),
    probe: str | None = typer.Option(
        None,
        "--probe",
        help="What measures each side: spec-decode or collectives (synthetic), or engine (your engine, "
        "`regdiag probe engine`, with {python} in its --launch-cmd for the side's interpreter); its "
        "options go after --.",
    ),
    command: str | None = typer.Option(
        None,
        "--command",
        help="Instead of --probe: a command whose stdout follows the probe protocol (docs/probes.md); "
        "`python` (or {python}) is the side's interpreter. Split like a shell would, not run by one.",
    ),
    launches: int = typer.Option(
        8, "--launches", "-L", callback=bounded(2, LAUNCHES[1]), help="Launches per side (default 8)."
    ),
    margin: str = typer.Option(
        "2%", "--margin", "-m", help="Smallest change that matters, as 2% or 0.02 (default 2%)."
    ),
    output: Path | None = typer.Option(
        None,
        "-o",
        "--output",
        help="Also write the two records to PREFIX-a.json and PREFIX-b.json (each side is stored as well).",
        callback=output_prefix,
    ),
    repo: Path | None = RepoOpt,
    setup: str | None = SetupOpt,
    find_links: Path | None = FindLinksOpt,
    index_url: str | None = IndexUrlOpt,
    installer: str = InstallerOpt,
    launch_timeout: float = LaunchTimeoutOpt,
    no_snapshot: bool = typer.Option(False, "--no-snapshot", help="Skip the snapshots before and after."),
    cold: bool = typer.Option(
        False,
        "--cold",
        help="Start every launch as a fresh interpreter instead of forking a probe's launches from one warm "
        "interpreter per side; with --probe engine and --url, start the engine for every launch instead of "
        "sharing one among the side's launches (docs/engine.md, 'Reused starts'). Default: warm, shared.",
    ),
    allow_code_from_record: bool = AllowCodeOpt,
    allow_unloaded: bool = AllowUnloadedOpt,
    ignore: list[str] = IgnoreOpt,
    only: list[str] = OnlyOpt,
    json_out: bool = JsonOpt,
    fmt: str | None = format_opt("compare"),
    target: Target = TARGET,
) -> None:
    from regdiag.ab import AbRequest, precheck
    from regdiag.cli.common import build_fields, probe_args
    from regdiag.cli.compare_cmd import parse_margin
    from regdiag.measure.needs import gpu_need

    extra = probe_args(ctx, probe)
    build = build_fields(repo, setup, find_links, index_url, target.python, installer)
    m = parse_margin(margin)
    chosen = pick_format("compare", fmt, json_out)  # before any launch
    req = AbRequest(
        a=a,
        b=b,
        probe=probe,
        command=command,
        probe_args=extra,
        launches=launches,
        **build,
        launch_timeout=launch_timeout,
        output=str(output) if output else None,
        snapshot=not no_snapshot,
        allow_code_from_record=allow_code_from_record,
        allow_unloaded=allow_unloaded,
        ignore=list(ignore or []),
        only=list(only or []),
        cold=cold,
    )
    precheck(req)  # before a host is opened: bad input costs no allocation
    result = _run(req, target.open(gpus=gpu_need(probe, extra)))
    _show(result, m, chosen)


def _run(req: AbRequest, target: Any) -> AbResult:
    """run_ab on the target (this machine, --host or --slurm), with progress on stderr; the target is
    closed however it ends (a Slurm allocation is cancelled)."""
    from regdiag.ab import run_ab

    try:
        return run_ab(req, host=target, progress=_printer())
    finally:
        target.close()


def _show(result: AbResult, margin: float, out_fmt: str) -> None:
    """Compare the two records (pairs, as the records say), print the verdict, exit with compare's code."""
    from regdiag.compare import compare_runs

    c = compare_runs(result.runs["A"], result.runs["B"], margin=margin, old_label="A", new_label="B")
    ended = result.runs["A"].get("design", {}).get("ended")  # the allocation's end cut the run short
    if out_fmt == "json":
        out = c.to_dict()  # with the fleet's reading where the pairs ran on several nodes
        out["records"] = {k: str(p) for k, p in result.paths.items()}
        if ended:
            out["ended"] = ended
        print_json(out)
    elif out_fmt == "terminal":
        from regdiag.report import terminal

        terminal.render(c, console, str(result.paths["A"]), str(result.paths["B"]))
        if ended:
            console.print(f"note: {ended}: the result is from the pairs measured before it", highlight=False)
    else:  # markdown, html, csv: as compare writes them, on stdout
        from regdiag.report.registry import Out, render

        labels = (str(result.paths["A"]), str(result.paths["B"]))
        render(
            "compare",
            out_fmt,
            c,
            Out(console, labels, context={"runs": (result.runs["A"], result.runs["B"])}),
        )
    raise typer.Exit(c.exit_code)


def register(app: typer.Typer) -> None:
    app.command(
        "ab", help=HELP, context_settings={"allow_extra_args": True, "ignore_unknown_options": False}
    )(ab)


def _printer() -> Any:
    """Dim lines on a terminal; outside one the shared plain progress lines (with elapsed time)."""
    from rich.markup import escape

    plain = PlainProgress("ab")

    def say(text: str) -> None:
        if plain.enabled:
            plain.step(text)
        else:
            err_console.print(f"[dim]{escape(text)}[/]", soft_wrap=True, highlight=False)

    def on_event(ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "start":
            say(f"records: {ev['paths']['A']} {ev['paths']['B']}")
        elif kind == "build":
            say(f"environment of side {ev['side']}")
        elif kind == "note":
            say(str(ev["text"]))
        elif kind == "launch":
            on = f" on {ev['node']}" if ev.get("node") else ""
            say(f"launch {ev['order'] + 1}/{ev['of']}: {ev['side']} #{ev['index'] + 1}{on}")
        elif kind == "ended":
            err_console.print(f"regdiag: warning: {escape(ev['why'])}", soft_wrap=True, highlight=False)
        elif kind == "node_failed":
            err_console.print(
                f"regdiag: warning: node {escape(ev['node'])} failed: {escape(ev['why'])}; its pairs are left out",
                soft_wrap=True,
                highlight=False,
            )
        elif kind == "health" and not ev.get("fit"):
            say(f"node {ev['node']} left out: {ev['why']}")

    return on_event
