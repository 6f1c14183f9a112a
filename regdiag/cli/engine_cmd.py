"""`regdiag probe engine`: per-phase timing inside the user's own engine (docs/engine.md)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from regdiag.cli.common import (
    COUNT,
    LAUNCHES,
    SECONDS,
    JsonOpt,
    OutputOpt,
    bounded,
    console,
    err_console,
    format_opt,
    pick_format,
    print_json,
    probe_group,
    show,
)
from regdiag.cli.target import TARGET, Target, target_options
from regdiag.errors import BadInput, ProbeError
from regdiag.measure.session import Session
from regdiag.records import tagged
from regdiag.runs import RunWriter

if TYPE_CHECKING:
    from regdiag.engine.plan import EngineRequest

PROFILE_CYCLES = 5
ENGINE_HELP = (
    "Time the phases (draft / verify / extend) inside your own engine, unchanged: --launch-cmd starts it "
    "with a hook that wraps the engine's phase functions (CUDA events, one synchronize per cycle) and "
    "writes per-cycle lines regdiag reads. With --url regdiag sends requests; without, the command runs "
    "to its end (a script). The record compares, explains and bisects like a probe's."
)


def preset_help() -> str:
    """The --preset help, from the table of presets: every preset, with the release it was read from."""
    from regdiag.engine.presets import PRESETS, VERSIONS

    names = ", ".join(f"{name} ({VERSIONS[name][1]})" for name in PRESETS)
    return f"Phase targets of a released engine: {names}; docs/engine.md. Default: only --phase."


@target_options(one="probe engine")
def probe_engine(
    launch_cmd: str = typer.Option(
        ..., "--launch-cmd", help="The engine's command line (NAME=VALUE words first set its environment)."
    ),
    preset: str | None = typer.Option(
        None,
        "--preset",
        help=preset_help(),
    ),
    phase: list[str] = typer.Option(
        [],
        "--phase",
        help="NAME=module:Qualified.name; repeat; replaces the preset's phase of that name or adds one (in order: the first opens a cycle).",
    ),
    sync: str | None = typer.Option(
        None,
        "--sync",
        help="module:Qualified.name after which the engine has synchronised: the cycle ends there (default: the preset's; '' for none: the next start of the first phase ends it).",
    ),
    cycle: str | None = typer.Option(
        None,
        "--cycle",
        help="module:Qualified.name whose one call is one cycle (default: the preset's; '' for none).",
    ),
    accept: str | None = typer.Option(
        None,
        "--accept",
        help="module:Qualified.name=ARG: accepted draft tokens per cycle from that argument (accept length = ARG + 1).",
    ),
    url: str | None = typer.Option(
        None,
        "--url",
        help="Send requests here once the engine is healthy; without it the command runs to its end.",
    ),
    api: str = typer.Option("sglang", "--api", help="With --url: sglang, openai or openai-chat."),
    requests: int = typer.Option(
        8, "--requests", "-R", callback=bounded(*COUNT), help="With --url: requests per launch."
    ),
    max_tokens: int = typer.Option(
        128, "--max-tokens", callback=bounded(*COUNT), help="With --url: tokens per request."
    ),
    launches_opt: int | None = typer.Option(
        None,
        "--launches",
        "-L",
        callback=bounded(*LAUNCHES),
        help="Engine starts (the unit of evidence); default 3, 1 with --protocol.",
    ),
    warmup: int = typer.Option(
        2, "--warmup", callback=bounded(0, COUNT[1]), help="Cycles dropped at the start of each process."
    ),
    block: int = typer.Option(
        1,
        "--block",
        callback=bounded(0, COUNT[1]),
        help="Bare cycles (hook off but the cycle's two marks) interleave in ABBA blocks of this size, for the overhead; 0: none.",
    ),
    timeout: float = typer.Option(
        1800.0,
        "--timeout",
        callback=bounded(*SECONDS, unit="seconds"),
        help="Seconds for the engine to become healthy, or (without --url) to finish.",
    ),
    check: bool = typer.Option(
        True,
        "--check/--no-check",
        help="Check every target in the installed engine's source first (no import).",
    ),
    snapshot: bool = typer.Option(
        True, "--snapshot/--no-snapshot", help="Snapshot the host before and after."
    ),
    output: Path | None = OutputOpt,
    json_out: bool = JsonOpt,
    fmt: str | None = format_opt("probe"),
    protocol: bool = typer.Option(
        False,
        "--protocol",
        help="Print the launch as probe-protocol lines on stdout instead of the summary (a header, its "
        "cycles, a footer; an error line on failure), for `regdiag bisect --command`. Needs -L 1.",
    ),
    cold: bool = typer.Option(
        False,
        "--cold",
        help="With --url: start the engine for every launch. Default: launches share engine starts, a "
        'fresh start at the first and third (docs/engine.md, "Reused starts").',
    ),
    profile: bool = typer.Option(
        False,
        "--profile",
        help="Run --profile-cycles cycles after each warm-up under torch.profiler, in every process of "
        "the engine, read per phase: GPU work, GPU idle, host dispatch, syncs, copies, collectives, "
        'top kernels (docs/engine.md, "Profile"). They are dropped as the warm-up is: the measured '
        "cycles are not profiled.",
    ),
    profile_cycles: int = typer.Option(
        PROFILE_CYCLES,
        "--profile-cycles",
        callback=bounded(2, 1000),
        help=f"Cycles profiled with --profile (default {PROFILE_CYCLES}; 2 or more: their spread is the reading's noise).",
    ),
    serve_launches: str | None = typer.Option(None, "--serve-launches", hidden=True),
    target: Target = TARGET,
) -> None:
    launches = launches_opt if launches_opt is not None else (1 if protocol else 3)
    chosen = pick_format("probe", fmt, json_out)  # json: the engine's own summary; terminal, csv: a probe's
    if protocol and launches != 1:
        raise BadInput("--protocol prints one launch: give -L 1 (bisect makes the launches)")
    from regdiag.engine.plan import EngineRequest

    request = EngineRequest(
        launch_cmd=launch_cmd,
        preset=preset,
        phase=tuple(phase),
        sync=sync,
        cycle=cycle,
        accept=accept,
        url=url,
        api=api,
        requests=requests,
        max_tokens=max_tokens,
        launches=launches,
        warmup=warmup,
        block=block,
        timeout=timeout,
        check=check,
        cold=cold,
        profile_cycles=profile_cycles if profile else 0,
    )
    if serve_launches:  # bisect's and ab's keeper of this environment's engine (engine/keeper.py)
        _serve(request, target, snapshot, serve_launches)
        return
    try:
        quiet = chosen != "terminal" or protocol
        path, run, phases = _measure(request, target, snapshot, quiet=quiet, output=output)
        _render(run, path, phases, protocol=protocol, out_fmt=chosen)
    except (BadInput, ProbeError) as e:
        if protocol:
            kind = "usage" if isinstance(e, BadInput) else "error"
            print_json_line({"type": "error", "kind": kind, "message": str(e)})
        raise


def _measure(
    request: EngineRequest,
    where: Target,
    snapshot: bool,
    *,
    quiet: bool,
    output: Path | None = None,
) -> tuple[Path, dict[str, Any], list[str]]:
    """Plan, open the host, run the launches into a record; (record path, run, phases)."""
    from regdiag.engine.plan import plan_engine
    from regdiag.engine.reuse import run_launches

    plan = plan_engine(request)
    target = where.open()
    try:
        run = plan.run_record(target)
        # -o is kept current with the stored run: an interrupted or failed engine run leaves it too
        with RunWriter(None, run, also=output) as writer, Session(target, [writer], snapshot):
            if not quiet:
                err_console.print(
                    f"regdiag: timing {', '.join(plan.phases)} in the engine; record {writer.path}",
                    soft_wrap=True,
                )

            def on_event(kind: str, data: dict[str, Any]) -> None:
                if kind == "launch_end" and not quiet:
                    err_console.print(_launch_line(data["record"], request.launches), soft_wrap=True)

            try:
                run_launches(plan.probe(target), writer, on_event)
            except (BadInput, ProbeError) as e:
                raise type(e)(f"{e}; record: {writer.path}") from None
    finally:
        target.close()
    return writer.path, writer.run, plan.phases


def _serve(request: EngineRequest, where: Target, snapshot: bool, sock: str) -> None:
    """The engine's keeper: launches asked over `sock`, each a window of a shared engine start."""
    from regdiag.engine.keeper import Launches, serve
    from regdiag.engine.plan import plan_engine
    from regdiag.engine.reuse import finish_reused

    try:
        plan = plan_engine(request)
        target = where.open()
    except (BadInput, ProbeError) as e:
        print_json_line(
            {"type": "error", "kind": "usage" if isinstance(e, BadInput) else "error", "message": str(e)}
        )
        raise
    try:
        run = plan.run_record(target)
        with RunWriter(None, run) as writer, Session(target, [writer], snapshot):
            launches = Launches(plan.probe(target), writer)
            try:
                serve(sock, launches.measure, launches.stop)
            finally:
                finish_reused(writer, [])
    finally:
        target.close()


def _render(run: dict[str, Any], path: Path, phases: list[str], *, protocol: bool, out_fmt: str) -> None:
    from regdiag.engine.plan import run_summary
    from regdiag.engine.run import protocol_lines
    from regdiag.measure.summary import summarize_run

    summary: dict[str, Any] = {"path": str(path), **run_summary(run, phases)}
    if protocol:
        for line in protocol_lines(run):
            print_json_line(line)
    elif out_fmt == "json":
        print_json(tagged("engine-summary", summary))
    else:  # as a probe's run: one number per metric (stats.run_value), the launch medians behind it
        show("probe", out_fmt, {**summarize_run(run), "path": str(path)})
        if out_fmt == "terminal":
            console.print(
                f"accept len {summary['accept_len_mean']}; hook overhead {summary['overhead_pct']} %",
                highlight=False,
            )


def print_json_line(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def _launch_line(la: dict[str, Any], total: int) -> str:
    cyc = la.get("samples", {}).get("cycle") or []
    med = f"{statistics.median(cyc):.3f} ms" if cyc else "-"
    return f"launch {la['index'] + 1}/{total}: {la['status']}, {len(cyc)} cycles, median cycle {med}" + (
        f" ({la['error']})" if la.get("error") else ""
    )


def register(app: typer.Typer) -> None:
    probe_group(app).command("engine", help=ENGINE_HELP, no_args_is_help=True)(probe_engine)
