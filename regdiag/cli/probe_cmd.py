"""`regdiag probe spec-decode`, `regdiag probe collectives`, `regdiag runs`: parse, call
regdiag.measure.probe, render (progress bar on stderr, summary table on stdout)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.progress import Progress

from regdiag import interrupts
from regdiag.cli.common import (
    LAUNCHES,
    SECONDS,
    JsonOpt,
    PlainProgress,
    bounded,
    console,
    err_console,
    format_opt,
    output_file,
    pick_format,
    print_json,
    probe_group,
    progress_bar,
    show,
)
from regdiag.cli.probe_options import PROBE_ARGS, probe_options
from regdiag.cli.target import TARGET, Target, target_options
from regdiag.errors import BadInput, RegdiagError
from regdiag.measure import needs
from regdiag.records import listed, tagged

SPEC_HELP = """Synchronized per-phase timing of a speculative-decoding cycle on a synthetic MoE.

Random weights with the layer shapes of a real model (--preset): MLA attention over a KV cache of
--context tokens, dense then MoE layers (routed + shared experts, only the routed ones read), an
EAGLE-3 draft. --mode eagle times draft -> verify -> extend; --mode baseline times a one-token decode.
Phases are timed with CUDA events between phases and one synchronize per cycle (perf_counter on CPU),
each phase the slowest TP rank's. Accept length is SIMULATED (--accept-mean), and labelled so.

Runs --launches fresh processes of --cycles cycles each (plus as many bare cycles to measure the
probe's own overhead), with a snapshot before and after. The record is written after every launch to
$REGDIAG_HOME/runs/<id>.json (default ~/.regdiag/runs) or to -o. Exit 0 when every launch succeeded,
5 when a launch failed, hung or found its GPUs busy (earlier launches kept), 2 for bad input, 130 / 143 /
129 on Ctrl-C / SIGTERM / SIGHUP (every probe process stopped, finished launches kept). At --tp > 1 every
launch also times each phase with its collectives left out: the summary shows the communication share.

Without a GPU the defaults run the tiny preset: regdiag probe spec-decode --tp 2
"""

COLL_HELP = """All-reduce (or all-gather, reduce-scatter, all-to-all) latency and bus bandwidth per message
size, as nccl-tests.

Per size, the loop of --iters calls timed eager (host launch cost included) and, on CUDA, the same
loop captured in a CUDA graph (what decode and verify pay). On CUDA NCCL is called directly on the
current stream, as SGLang and vLLM call it inside graphs (--api torch: through torch.distributed, which
adds its own stream, events and bookkeeping per call). --sizes model:kimi-k2 sweeps the messages that
preset's forwards send (hidden all-reduce, logits all-gather, and the all-to-all of an expert-parallel
dispatch, at 1, 3, 4, 8 tokens).
busbw = algbw * 2(n-1)/n (all-reduce), (n-1)/n (the others). NCCL on GPUs, gloo on CPU (eager only);
the NCCL_* variables each rank saw are recorded. Each size and mode is one metric of the run record
(ar_1KiB eager, arg_1KiB graph; ag_, rs_, aa_ for the other ops, in microseconds; algbw_/busbw_ values in
GB/s), each with its direction, so `regdiag compare` calls a bandwidth drop REGRESSED.
"""

RUNS_HELP = (
    "List the stored run records ($REGDIAG_HOME/runs, default ~/.regdiag/runs), newest first, with the "
    "profile traces beside each (`probe spec-decode --profile`: how many, their size), and the traces "
    "whose record is gone (`regdiag clean` removes those)."
)


RecordOpt = typer.Option(
    None,
    "-o",
    "--output",
    help="Also write the run record to this file (atomically), beside $REGDIAG_HOME/runs/<id>.json; "
    "with several --host, one file each: NAME.HOST.json.",
    callback=output_file,
)
LaunchesOpt = typer.Option(
    8,
    "--launches",
    "-L",
    callback=bounded(*LAUNCHES),
    help="Fresh probe processes, the unit of evidence. 8 per side gives >= 95 % power to call a 5 % change "
    "at 2 % launch-to-launch noise (docs/statistics.md).",
)
TimeoutOpt = typer.Option(
    None,
    "--timeout",
    callback=bounded(*SECONDS, unit="seconds"),
    help="Seconds one launch may take before it is stopped. Default: 1800 for the first launch, then 4x "
    "its duration (at least 120); a rank that stops making progress is caught sooner (--hang-timeout).",
)
NoSnapOpt = typer.Option(False, "--no-snapshot", help="Skip the environment snapshots before and after.")
FormatOpt = format_opt("probe")


ColdOpt = typer.Option(
    False,
    "--cold",
    help="Start every launch as a fresh interpreter (import torch, CUDA init) instead of forking it from "
    'one warm interpreter per run (docs/probes.md, "Warm launches"). Default: warm.',
)


@target_options(kinds=("slurm",))
@probe_options("spec-decode")
def spec_decode(
    launches: int = LaunchesOpt,
    timeout: float = TimeoutOpt,
    no_snapshot: bool = NoSnapOpt,
    output: Path = RecordOpt,
    json_out: bool = JsonOpt,
    fmt: str = FormatOpt,
    cold: bool = ColdOpt,
    target: Target = TARGET,
    probe_args: list[str] = PROBE_ARGS,
) -> None:
    out_fmt = pick_format("probe", fmt, json_out)
    _run(Asked("spec-decode", probe_args, launches, timeout, no_snapshot, output, out_fmt, cold), target)


@target_options(kinds=("slurm",))
@probe_options("collectives")
def collectives(
    launches: int = LaunchesOpt,
    timeout: float = TimeoutOpt,
    no_snapshot: bool = NoSnapOpt,
    output: Path = RecordOpt,
    json_out: bool = JsonOpt,
    fmt: str = FormatOpt,
    cold: bool = ColdOpt,
    target: Target = TARGET,
    probe_args: list[str] = PROBE_ARGS,
) -> None:
    out_fmt = pick_format("probe", fmt, json_out)
    _run(Asked("collectives", probe_args, launches, timeout, no_snapshot, output, out_fmt, cold), target)


@dataclass(frozen=True)
class Asked:
    """What `regdiag probe NAME` was asked: the probe, its argv, and regdiag's own options of the run."""

    name: str
    args: list[str]
    launches: int
    timeout: float | None
    no_snapshot: bool
    output: Path | None
    out_fmt: str
    cold: bool

    def run(self, host: Any, also: Path | None, on_event: Any) -> Any:
        """The run on `host` (measure.probe.run_probe), its record also written to `also`."""
        from regdiag.measure.probe import run_probe

        opts = {"launches": self.launches, "timeout": self.timeout, "on_event": on_event}
        return run_probe(
            host, self.name, self.args, also=also, snapshot=not self.no_snapshot, warm=not self.cold, **opts
        )


def _run(asked: Asked, target: Target) -> None:
    name, launches, output = asked.name, asked.launches, asked.output
    if launches < 1:
        raise BadInput("--launches must be >= 1")
    target = target.checked()
    if len(dict.fromkeys(target.hosts)) > 1:
        _run_many(asked, target)
        return
    host = target.open(gpus=needs.gpu_need(asked.name, asked.args))  # --slurm asks for the GPUs they need
    progress = _progress()
    task = progress.add_task(f"{name}: starting", total=None)
    plain = PlainProgress(f"probe {name}")

    where: dict[str, str] = {}
    medians: list[float] = []

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "start":
            where["path"] = data["path"]
        elif kind == "warm":
            progress.update(
                task, description=f"{name}: starting the warm interpreter", total=None, completed=0
            )
            plain.step("starting the warm interpreter (torch imported once for every launch)")
        elif kind == "snapshot":
            progress.update(task, description=f"{name}: snapshot {data['when']}", total=None, completed=0)
            plain.step(f"snapshot {data['when']}")
        elif kind == "launch_start":
            progress.update(
                task, description=f"{name}: launch {data['index'] + 1}/{data['of']}", total=None, completed=0
            )
            plain.step(f"launch {data['index'] + 1}/{data['of']} started")
        elif kind == "progress":
            where_now = f"launch {data['index'] + 1}/{launches} {data.get('stage', '')}"
            progress.update(
                task,
                description=f"{name}: {where_now}",
                total=data.get("total"),
                completed=data.get("done", 0),
            )
            count = f" {data.get('done', 0)}/{data['total']}" if data.get("total") else ""
            plain.tick(where_now + count)
        elif kind == "launch_end":
            la = data["launch"]
            what = _launch_line(la, medians)
            if err_console.is_terminal:
                progress.console.print(f"  launch {la['index'] + 1}: {la['status']}, {what}", highlight=False)
            plain.step(f"launch {la['index'] + 1}/{launches}: {la['status']}, {what}")

    try:
        with progress:
            result = asked.run(host, output, on_event)
    except KeyboardInterrupt as e:
        # Said here, in one line: typer turns a KeyboardInterrupt into a silent exit 130.
        kept = f"; finished launches kept in {where['path']}" if "path" in where else ""
        kept += f" and {output}" if kept and output is not None else ""
        raise RegdiagError(f"{interrupts.describe(e)}{kept}", interrupts.exit_status(e)) from None
    finally:
        host.close()
    show("probe", asked.out_fmt, _summary(result, output))


def _summary(result: Any, copy: Path | None) -> dict[str, Any]:
    """The probe summary of a finished run: where it is stored, and the -o copy when there is one."""
    from regdiag.measure.summary import summarize_run

    summary = summarize_run(result.run)
    summary["path"] = str(result.path)
    if copy is not None:
        summary["copy"] = str(copy)
    return summary


def _run_many(asked: Asked, target: Target) -> None:
    """The same probe on several hosts at once, one thread and one run record per host. A host that
    fails (cannot connect, a launch fails) does not stop the others; the exit status is the worst."""
    launches, output, out_fmt = asked.launches, asked.output, asked.out_fmt
    progress = _progress()

    def one(host: Any) -> dict[str, Any]:
        task = progress.add_task(f"{host.name}: starting", total=None)

        def on_event(kind: str, data: dict[str, Any]) -> None:
            if kind == "launch_start":
                desc = f"{host.name}: launch {data['index'] + 1}/{data['of']}"
                progress.update(task, description=desc, total=None, completed=0)
            elif kind == "progress":
                desc = f"{host.name}: launch {data['index'] + 1}/{launches} {data.get('stage', '')}"
                progress.update(
                    task, description=desc, total=data.get("total"), completed=data.get("done", 0)
                )

        out = output and output.with_name(f"{output.stem}.{_file_part(host.name)}{output.suffix}")
        result = asked.run(host, out, on_event)
        return _summary(result, out)

    try:
        with progress:
            outcomes = target.for_each(one)
    except KeyboardInterrupt as e:
        raise RegdiagError(
            f"{interrupts.describe(e)}; finished launches kept", interrupts.exit_status(e)
        ) from None
    if out_fmt == "json":
        each = [
            {"host": o.spec, "ok": True, "summary": tagged("probe-summary", o.value or {})}
            if o.ok
            else {"host": o.spec, "ok": False, "error": str(o.error), "exit_code": _code(o.error)}
            for o in outcomes
        ]
        print_json(listed("probe-hosts", "hosts", each))
    else:
        for o in outcomes:
            if o.ok:
                if out_fmt == "terminal":
                    console.print(f"[bold]{o.spec}[/bold]", highlight=False)
                show("probe", out_fmt, o.value)
    failed = [o for o in outcomes if not o.ok]
    for o in outcomes:
        state = f"ok, {o.value['path']}" if o.ok and o.value else f"FAILED: {o.error}"
        err_console.print(f"{o.spec}: {state}", highlight=False, soft_wrap=True)
    if failed:
        err_console.print(
            f"{len(failed)} of {len(outcomes)} hosts failed: {', '.join(o.spec for o in failed)}",
            highlight=False,
        )
        raise typer.Exit(max(_code(o.error) for o in failed))


def _progress() -> Progress:
    return progress_bar(disable=not err_console.is_terminal)


def _code(e: RegdiagError | None) -> int:
    return e.exit_code if e is not None else 0


def _file_part(name: str) -> str:
    """A host name as part of a file name (`root@10.1.2.3:22` -> `root_10.1.2.3_22`)."""
    return "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in name)


def _launch_line(launch: dict[str, Any], medians: list[float]) -> str:
    """What a finished launch says: its median and the run's number so far (stats.run_value, as the
    summary shows it), or why it has none; `medians` collects the launches' medians."""
    from regdiag.stats import run_value

    med = _launch_median(launch)
    if med is None:
        return str(launch.get("error") or launch["status"])
    medians.append(med)
    return f"primary median {med:.4g}, run {run_value(medians):.4g}"


def _launch_median(launch: dict[str, Any]) -> float | None:
    header = launch.get("header") or {}
    vals = launch.get("samples", {}).get(header.get("primary", "cycle"))
    if not vals:
        return None
    return float(statistics.median(vals))  # as compare reduces a launch (the mean of the middle two)


def runs_cmd(json_out: bool = JsonOpt, fmt: str | None = format_opt("runs")) -> None:
    from regdiag.runs import list_runs, orphan_traces, runs_dir, trace_files

    chosen = pick_format("runs", fmt, json_out)
    items = list_runs()
    orphans = trace_files(orphan_traces())
    if chosen == "json":
        print_json({**listed("run-list", "runs", items), "orphan_traces": orphans})
        return
    # ids never cut (report/lists.py)
    show("runs", chosen, {"dir": str(runs_dir()), "runs": items, "orphan_traces": orphans})


def register(app: typer.Typer) -> None:
    group = probe_group(app)
    group.command("spec-decode", help=SPEC_HELP)(spec_decode)
    group.command("collectives", help=COLL_HELP)(collectives)
    app.command("runs", help=RUNS_HELP)(runs_cmd)
