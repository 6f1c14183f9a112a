"""`regdiag probe spec-decode`, `regdiag probe collectives`, `regdiag runs`: parse, call
regdiag.measure.probe, render (progress bar on stderr, summary table on stdout)."""

from __future__ import annotations

import math
import statistics
from enum import Enum
from pathlib import Path
from typing import Any

import typer
from rich.progress import Progress

from regdiag import interrupts
from regdiag.cli.common import (
    COUNT,
    CYCLES,
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
loop captured in a CUDA graph (what decode and verify pay). On CUDA NCCL is called directly on the current stream, as SGLang and
vLLM call it inside graphs (--api torch: through torch.distributed, which adds its own stream, events
and bookkeeping per call). --sizes model:kimi-k2 sweeps the messages
that preset's forwards send (hidden all-reduce, logits all-gather, and the all-to-all of an
expert-parallel dispatch, at 1, 3, 4, 8 tokens).
busbw = algbw * 2(n-1)/n (all-reduce), (n-1)/n (the others). NCCL on GPUs, gloo on CPU (eager only);
the NCCL_* variables each rank saw are recorded. Each size and mode is one metric of the run record
(ar_1KiB eager, arg_1KiB graph; ag_, rs_, aa_ for the other ops, in microseconds; algbw_/busbw_ values in
GB/s), each with its direction, so `regdiag compare` calls a bandwidth drop REGRESSED.
"""

RUNS_HELP = "List the stored run records ($REGDIAG_HOME/runs, default ~/.regdiag/runs), newest first."


class Mode(str, Enum):
    eagle = "eagle"
    baseline = "baseline"


class OnOff(str, Enum):
    on = "on"
    off = "off"


class Device(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class DType(str, Enum):
    auto = "auto"
    bfloat16 = "bfloat16"
    float32 = "float32"


class CollApi(str, Enum):
    auto = "auto"
    nccl = "nccl"
    torch = "torch"


class CollMode(str, Enum):
    auto = "auto"
    eager = "eager"
    graph = "graph"
    both = "both"


class CollOp(str, Enum):
    all_reduce = "all_reduce"
    all_gather = "all_gather"
    reduce_scatter = "reduce_scatter"
    all_to_all = "all_to_all"


class MoEImpl(str, Enum):
    auto = "auto"
    grouped_mm = "grouped_mm"
    loop = "loop"


class Weights(str, Enum):
    bf16 = "bf16"
    preset = "preset"
    fp8 = "fp8"
    int4 = "int4"


class Draft(str, Enum):
    eagle3 = "eagle3"
    mtp = "mtp"


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
HangOpt = typer.Option(
    None,
    "--hang-timeout",
    callback=bounded(*SECONDS, unit="seconds"),
    help="Seconds a rank may go without progress before the launch ends as hung, naming the rank and "
    "where it was stuck. Default 180 while starting and building, 60 once measuring.",
)
BusyOpt = typer.Option(
    False, "--allow-busy-gpu", help="Run even when other processes hold memory on the GPUs the probe uses."
)
NoSnapOpt = typer.Option(False, "--no-snapshot", help="Skip the environment snapshots before and after.")
FormatOpt = format_opt("probe")


def _slow_ms(ctx: typer.Context, param: typer.CallbackParam, value: list[str] | None) -> list[str] | None:
    """--slow-phase PHASE:MS with MS a number of milliseconds in 0..10000, before any launch (the probe
    checks the phase name; NaN failed a launch writing its record)."""
    for spec in value or []:
        ms = _float(spec.rpartition(":")[2])
        if ms is None or not 0 <= ms <= 10_000:
            raise BadInput(f"--slow-phase {spec!r}: expected PHASE:MS with MS within 0..10000")
    return value


def _sizes(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """--sizes: every size a number (K, M, G) of at most 64G bytes, before any launch (the probe parses
    the sweep; 1e400 and 1e27 failed it with exit 5)."""
    if value is None or value.startswith("model:"):
        return value
    for item in value.replace(":", ",").split(",")[:2] if ":" in value else value.split(","):
        t = item.strip().upper().removesuffix("IB").removesuffix("B")
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
        x = _float(t[:-1] if mult > 1 else t)
        if t and (x is None or not 0 < x * mult <= 64 << 30):
            raise BadInput(f"--sizes {value!r}: size {item.strip()!r} is not a number of bytes up to 64G")
    return value


def _float(text: str) -> float | None:
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


ColdOpt = typer.Option(
    False,
    "--cold",
    help="Start every launch as a fresh interpreter (import torch, CUDA init) instead of forking it from "
    'one warm interpreter per run (docs/probes.md, "Warm launches"). Default: warm.',
)


@target_options(kinds=("slurm",))
def spec_decode(
    preset: str = typer.Option("auto", "--preset", help="kimi-k2, kimi-k2.5, deepseek-v3, deepseek-v2-lite, tiny; auto = tiny without a GPU, kimi-k2 with one."),
    layers: int = typer.Option(None, "--layers", callback=bounded(1, 1000), help="Full-size target layers (default: as many of the preset's as fit; the record says how many)."),
    tp: int = typer.Option(1, "--tp", callback=bounded(1, 1024), help="Tensor-parallel ranks, one process each (NCCL on GPUs, gloo on CPU)."),
    tp_slice: int = typer.Option(None, "--tp-slice", callback=bounded(1, 1024), help="With --tp 1: one rank's shapes of TP=N on one device, without communication."),
    launches: int = LaunchesOpt,
    cycles: int = typer.Option(50, "--cycles", "-n", callback=bounded(*CYCLES), help="Measured cycles per launch (as many bare ones run interleaved; -C until the next release)."),
    warmup: int = typer.Option(5, "--warmup", callback=bounded(0, CYCLES[1]), help="Cycles run first and dropped (recorded as dropped)."),
    mode: Mode = typer.Option(Mode.eagle, "--mode", help="eagle: draft -> verify -> extend; baseline: one-token decode."),
    verify_graph: OnOff = typer.Option(OnOff.on, "--verify-graph", help="Verify as a CUDA graph (on) or eager (off)."),
    num_steps: int = typer.Option(2, "--num-steps", callback=bounded(1, 64), help="EAGLE speculative steps."),
    num_draft_tokens: int = typer.Option(None, "--num-draft-tokens", callback=bounded(1, 65), help="Tokens verified per cycle (topk 1: num-steps + 1, the default)."),
    accept_mean: float = typer.Option(2.0, "--accept-mean", callback=bounded(1.0, 65.0), help="Mean of the SIMULATED accept length."),
    batch: int = typer.Option(1, "--batch", callback=bounded(1, 65_536), help="Sequences per forward."),
    context: int = typer.Option(None, "--context", callback=bounded(1, 10_000_000), help="Tokens in the KV cache. Default 4096 (tiny: 512)."),
    naive_timer: bool = typer.Option(False, "--naive-timer", help="Also record unsynchronized perf_counter per phase, side by side."),
    block: int = typer.Option(1, "--block", callback=bounded(1, CYCLES[1]), help="Instrumented and bare cycles alternate in blocks of this many (ABBA order)."),
    device: Device = typer.Option(Device.auto, "--device", help="auto: CUDA when torch sees a GPU, else CPU."),
    dtype: DType = typer.Option(DType.auto, "--dtype", help="auto: bfloat16 on CUDA, float32 on CPU."),
    moe_impl: MoEImpl = typer.Option(MoEImpl.auto, "--moe-impl", help="auto: grouped_mm on CUDA, a loop over the hit experts on CPU."),
    weights: Weights = typer.Option(Weights.bf16, "--weights", help="bf16 (every weight in --dtype); preset (the checkpoint's: FP8 blocks for kimi-k2 and deepseek-v3, INT4 routed experts for kimi-k2.5); fp8; int4. Low-bit kernels on CUDA; on CPU only their bytes are modelled."),
    draft: Draft = typer.Option(Draft.eagle3, "--draft", help="eagle3 (shaped like the trained EAGLE-3 drafts) or mtp (DeepSeek-V3's own MTP layer)."),
    seed: int = typer.Option(0, "--seed", callback=bounded(0, 2**31 - 1), help="Weights seed (inputs use seed + launch index)."),
    slow_phase: list[str] = typer.Option(None, "--slow-phase", callback=_slow_ms, help="Test hook: PHASE:MS adds MS of real busy work to PHASE (also REGDIAG_PROBE_SLOW)."),
    crash_rank: int = typer.Option(None, "--crash-rank", callback=bounded(0, 1023), help="Test hook: this rank exits abruptly ..."),
    crash_at_launch: int = typer.Option(None, "--crash-at-launch", callback=bounded(0, LAUNCHES[1]), help="Test hook: ... in this launch (default 0; also REGDIAG_PROBE_CRASH=R@L)."),
    hang_timeout: float = HangOpt,
    allow_busy_gpu: bool = BusyOpt,
    timeout: float = TimeoutOpt,
    no_snapshot: bool = NoSnapOpt,
    output: Path = RecordOpt,
    json_out: bool = JsonOpt,
    fmt: str = FormatOpt,
    cold: bool = ColdOpt,
    target: Target = TARGET,
) -> None:  # fmt: skip
    from regdiag.measure.probes import presets

    if preset not in presets():
        raise BadInput(f"--preset {preset!r}: choose from {', '.join(presets())}")
    for name, val, low in (("--tp", tp, 1), ("--cycles", cycles, 1), ("--warmup", warmup, 0), ("--batch", batch, 1),
                           ("--context", context, 1), ("--num-steps", num_steps, 1), ("--block", block, 1)):  # fmt: skip
        if val is not None and val < low:
            raise BadInput(f"{name} must be >= {low}")
    if tp_slice is not None and tp != 1:
        raise BadInput("--tp-slice N needs --tp 1 (it builds one rank's shapes of TP=N on one device)")
    options: dict[str, Any] = {
        "preset": preset, "layers": layers, "tp": tp, "tp_slice": tp_slice, "cycles": cycles, "warmup": warmup,
        "mode": mode.value, "verify_graph": verify_graph.value, "num_steps": num_steps,
        "num_draft_tokens": num_draft_tokens, "accept_mean": accept_mean, "batch": batch, "context": context,
        "naive_timer": naive_timer, "block": block, "device": device.value, "dtype": dtype.value,
        "moe_impl": moe_impl.value, "weights": weights.value, "draft": draft.value, "seed": seed, "slow_phase": slow_phase or None, "crash_rank": crash_rank,
        "crash_at_launch": crash_at_launch, "hang_timeout": hang_timeout, "allow_busy_gpu": allow_busy_gpu,
    }  # fmt: skip
    out_fmt = pick_format("probe", fmt, json_out)
    _run("spec-decode", options, launches, timeout, no_snapshot, output, out_fmt, target, cold)


@target_options(kinds=("slurm",))
def collectives(
    tp: int = typer.Option(2, "--tp", callback=bounded(1, 1024), help="Ranks, one process each."),
    sizes: str = typer.Option(None, "--sizes", callback=_sizes, help="MIN:MAX[:FACTOR], a list (1K,64K,1M) or model:PRESET. Default: 1K:256M doubling on GPUs, 1K:16M on CPU."),
    op: CollOp = typer.Option(CollOp.all_reduce, "--op", help="Collective of a numeric sweep (model: sweeps set their own)."),
    mode: CollMode = typer.Option(CollMode.auto, "--mode", help="eager, graph (the loop in a CUDA graph) or both; auto: both on CUDA, eager on CPU."),
    api: CollApi = typer.Option(CollApi.auto, "--api", help="nccl: NCCL called directly on the current CUDA stream, as engines call it in graphs; torch: torch.distributed (its own stream and events per call); auto: nccl on CUDA when the library loads, torch on CPU."),
    dtype: DType = typer.Option(DType.auto, "--dtype", help="auto: bfloat16 for model: sweeps, else float32."),
    iters: int = typer.Option(20, "--iters", callback=bounded(*COUNT), help="Operations per timed repetition, at most."),
    reps: int = typer.Option(5, "--reps", callback=bounded(1, 100_000), help="Timed repetitions per size (the 'cycles' of the record)."),
    warmup: int = typer.Option(5, "--warmup", callback=bounded(0, COUNT[1]), help="Untimed operations per size."),
    target_ms: float = typer.Option(20.0, "--target-ms", callback=bounded(0.001, 60_000.0, unit="ms"), help="Fewer than --iters operations for sizes whose one operation already takes this long."),
    device: Device = typer.Option(Device.auto, "--device", help="auto: CUDA when torch sees a GPU, else CPU."),
    hang_timeout: float = HangOpt,
    allow_busy_gpu: bool = BusyOpt,
    launches: int = LaunchesOpt,
    timeout: float = TimeoutOpt,
    no_snapshot: bool = NoSnapOpt,
    output: Path = RecordOpt,
    json_out: bool = JsonOpt,
    fmt: str = FormatOpt,
    cold: bool = ColdOpt,
    target: Target = TARGET,
) -> None:  # fmt: skip
    if not 0 < target_ms < math.inf:  # NaN too: the probe could not write it into its record
        raise BadInput("--target-ms must be a positive number of milliseconds")
    for name, val, low in (
        ("--tp", tp, 1),
        ("--iters", iters, 1),
        ("--reps", reps, 1),
        ("--warmup", warmup, 0),
    ):
        if val < low:
            raise BadInput(f"{name} must be >= {low}")
    options = {"tp": tp, "sizes": sizes, "op": op.value, "mode": mode.value, "api": api.value, "dtype": dtype.value, "iters": iters, "reps": reps, "warmup": warmup, "target_ms": target_ms,
               "device": device.value, "hang_timeout": hang_timeout, "allow_busy_gpu": allow_busy_gpu}  # fmt: skip
    out_fmt = pick_format("probe", fmt, json_out)
    _run("collectives", options, launches, timeout, no_snapshot, output, out_fmt, target, cold)


def _run(
    name: str,
    options: dict[str, Any],
    launches: int,
    timeout: float | None,
    no_snapshot: bool,
    output: Path | None,
    out_fmt: str,
    target: Target,
    cold: bool = False,
) -> None:
    from regdiag.measure.probe import run_probe

    if launches < 1:
        raise BadInput("--launches must be >= 1")
    target = target.checked()
    if len(dict.fromkeys(target.hosts)) > 1:
        _run_many(name, options, launches, timeout, no_snapshot, output, out_fmt, target, cold)
        return
    args = options_argv(options)
    host = target.open(gpus=needs.gpu_need(name, args))  # --slurm asks for the GPUs these options need
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
            result = run_probe(
                host, name, args, launches=launches, also=output, timeout=timeout, snapshot=not no_snapshot,
                on_event=on_event, warm=not cold,
            )  # fmt: skip
    except KeyboardInterrupt as e:
        # Said here, in one line: typer turns a KeyboardInterrupt into a silent exit 130.
        kept = f"; finished launches kept in {where['path']}" if "path" in where else ""
        kept += f" and {output}" if kept and output is not None else ""
        raise RegdiagError(f"{interrupts.describe(e)}{kept}", interrupts.exit_status(e)) from None
    finally:
        host.close()
    show("probe", out_fmt, _summary(result, output))


def _summary(result: Any, copy: Path | None) -> dict[str, Any]:
    """The probe summary of a finished run: where it is stored, and the -o copy when there is one."""
    from regdiag.measure.summary import summarize_run

    summary = summarize_run(result.run)
    summary["path"] = str(result.path)
    if copy is not None:
        summary["copy"] = str(copy)
    return summary


def _run_many(
    name: str,
    options: dict[str, Any],
    launches: int,
    timeout: float | None,
    no_snapshot: bool,
    output: Path | None,
    out_fmt: str,
    target: Target,
    cold: bool = False,
) -> None:
    """The same probe on several hosts at once, one thread and one run record per host. A host that
    fails (cannot connect, a launch fails) does not stop the others; the exit status is the worst."""
    from regdiag.measure.probe import run_probe

    args = options_argv(options)
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
        result = run_probe(
            host, name, args, launches=launches, also=out, timeout=timeout, snapshot=not no_snapshot,
            on_event=on_event, warm=not cold,
        )  # fmt: skip
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
    from regdiag.runs import list_runs, runs_dir

    chosen = pick_format("runs", fmt, json_out)
    items = list_runs()
    if chosen == "json":
        print_json(listed("run-list", "runs", items))
        return
    show("runs", chosen, {"dir": str(runs_dir()), "runs": items})  # ids never cut (report/lists.py)


def register(app: typer.Typer) -> None:
    group = probe_group(app)
    group.command("spec-decode", help=SPEC_HELP)(spec_decode)
    group.command("collectives", help=COLL_HELP)(collectives)
    app.command("runs", help=RUNS_HELP)(runs_cmd)


def options_argv(options: dict[str, Any]) -> list[str]:
    """CLI options -> probe argv: None and False are left out, True is a bare flag, lists repeat."""
    out: list[str] = []
    for key, val in options.items():
        if val is None or val is False:
            continue
        flag = "--" + key.replace("_", "-")
        if val is True:
            out.append(flag)
        elif isinstance(val, (list, tuple)):
            for v in val:
                out += [flag, str(v)]
        else:
            out += [flag, str(val)]
    return out
