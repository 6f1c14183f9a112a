"""`regdiag explain`: parse, call the library (regdiag.explain), render."""

from __future__ import annotations

import typer

from regdiag.cli.common import JsonOpt, format_opt, pick_format, show
from regdiag.errors import BadInput

EXPLAIN_HELP = (
    "Throughput model and MoE roofline: regression, or physics?\n\n"
    "tok/s = accept_len / (cycle + overhead); plain decoding 1 / (t_decode + decode overhead); speculation "
    "breaks even at accept_len = (cycle + overhead) / (t_decode + decode overhead). An accept length is "
    "1..num_steps+1 tokens per cycle. Per phase of RUN (or of --preset at --tp without a run): the bytes a "
    "forward must read, each component in its checkpoint's format (FP8 blocks, INT4 experts), the floor "
    "at a bandwidth plus the collectives the engine issues (their latency from --collectives RUN), the "
    "achieved fraction, and eager phases far from their floor flagged launch-bound. Times are medians.\n\n"
    "Works on plain numbers too: regdiag explain --cycle-ms 30 --decode-ms 12 --accept-len 2.0 "
    "--overhead-ms 3.3"
)

OVERHEAD_HELP = "Engine time per {} beyond its GPU time, ms (default: the {}engine record's period minus its cycle; else 0)."

BANDWIDTH_HELP = (
    "Memory bandwidth in bytes/s for the floor (default: the probe's measured copy bandwidth, else the "
    "record's device in the table of docs/compare.md, else an H200's 4.24e12)."
)
GPU_HELP = (
    "Take the bandwidth of this card from the table: H200, H100, B200, 'RTX PRO 6000 Blackwell', A100, L40S."
)
MODEL_HELP = "Model shapes for the roofline: kimi-k2, kimi-k2.5, deepseek-v3, deepseek-v2-lite, tiny (default: the run's)."


def explain(
    run: str = typer.Argument(
        None,
        help="A run file, baseline name or stored run id (optional with the number options or --preset).",
    ),
    baseline: str = typer.Option(
        None, "--baseline", "-b", help="A plain-decode run (probe --mode baseline): its cycle is t_decode."
    ),
    cycle_ms: float = typer.Option(
        None, "--cycle-ms", help="Speculative GPU cycle in ms (default: from RUN)."
    ),
    decode_ms: float = typer.Option(
        None, "--decode-ms", help="Plain decode GPU time per token in ms (default: from --baseline)."
    ),
    verify_ms: float = typer.Option(
        None,
        "--verify-ms",
        help="A verify's GPU time in ms: with --decode-ms and --preset, how much of it the bytes and "
        "collectives explain, without a run (default: RUN's verify phase).",
    ),
    accept_len: float = typer.Option(
        None, "--accept-len", help="Mean tokens accepted per cycle, 1..num-steps+1 (default: from RUN)."
    ),
    num_steps: int = typer.Option(
        None, "--num-steps", help="Draft steps per cycle, 1..64 (default: the run's; without a run 2)."
    ),
    overhead_ms: float = typer.Option(
        None, "--overhead-ms", help=OVERHEAD_HELP.format("speculative cycle", "")
    ),
    decode_overhead_ms: float = typer.Option(
        None, "--decode-overhead-ms", help=OVERHEAD_HELP.format("plain-decode token", "baseline ")
    ),
    bandwidth: float = typer.Option(None, "--bandwidth", help=BANDWIDTH_HELP),
    gpu: str = typer.Option(None, "--gpu", help=GPU_HELP),
    model: str = typer.Option(None, "--preset", help=MODEL_HELP),
    tp: int = typer.Option(
        1, "--tp", help="With --preset and no RUN: the tensor-parallel degree (default 1)."
    ),
    context: int = typer.Option(
        4096, "--context", help="With --preset and no RUN: tokens in the KV cache (default 4096)."
    ),
    draft: str = typer.Option(
        "eagle3", "--draft", help="With --preset and no RUN: eagle3, or mtp (DeepSeek-V3's own MTP layer)."
    ),
    collectives: str = typer.Option(
        None, "--collectives", help="A `probe collectives` run: its latencies price each phase's collectives."
    ),
    per_position: str = typer.Option(
        None,
        "--per-position",
        help="Per-position acceptance rates, comma-separated (vLLM's 'Per-position acceptance rate'): the "
        "accept length at each step count (default: the record's, when it has them).",
    ),
    graph: str = typer.Option(
        None,
        "--graph",
        help="on|off: the phases ran as CUDA graphs, for pricing their collectives (default: what RUN "
        "says; without a run decode and verify graphed, as both engines run them by default).",
    ),
    sampling: bool = typer.Option(
        False,
        "--sampling",
        help="Temperature > 0: add the engine's sampling broadcasts per cycle (SGLang: 3).",
    ),
    engine: str = typer.Option(
        None,
        "--engine",
        help="sglang|vllm: how the phases are priced (vLLM's draft includes its extend pass; default: "
        "the run's engine, else sglang).",
    ),
    json_out: bool = JsonOpt,
    markdown: bool = typer.Option(False, "--markdown", help="Print Markdown instead of the terminal view."),
    fmt: str = format_opt("explain"),
) -> None:
    from regdiag import baselines
    from regdiag import explain as ex
    from regdiag.bandwidth import bandwidth_for
    from regdiag.collective_costs import Latencies

    chosen = pick_format("explain", fmt, json_out, markdown)
    given = ex.Given(
        cycle_ms,
        decode_ms,
        accept_len,
        overhead_ms,
        decode_overhead_ms,
        num_steps,
        bandwidth,
        gpu,
        model,
        None,
        sampling,
    )
    given.verify_ms = verify_ms
    given.engine = engine
    given.graph = _on_off(graph)
    given.check()  # before any file is read; the library checks again
    if verify_ms is not None and run is None and model is None:
        raise BadInput("--verify-ms needs --preset (the bytes a verify and a decode read) or a RUN")
    if per_position is not None:
        given.per_position = _curve(per_position)
    bandwidth_for([], bandwidth, gpu)  # a bad --bandwidth or --gpu before any file too
    if collectives is not None:
        rec, name = baselines.resolve(collectives)
        given.collectives = Latencies.from_record(rec, name)
    if run is None and model is not None:
        result = ex.explain_model(model, tp, context=context, given=given, draft=draft)
    elif run is None:
        if cycle_ms is None or accept_len is None:
            raise BadInput(
                "give a RUN, --preset, or --cycle-ms and --accept-len (and --decode-ms for the break-even)"
            )
        bw, bw_src = bandwidth_for([], bandwidth, gpu)
        steps = 2 if num_steps is None else num_steps
        tput = ex.explain_numbers(
            cycle_ms,
            decode_ms,
            accept_len,
            overhead_ms=overhead_ms,
            decode_overhead_ms=decode_overhead_ms,
            num_steps=steps,
        )
        tput.per_position = given.per_position
        result = ex.Explanation(tput, [], bw, bw_src, None)
    else:
        rec, name = baselines.resolve(run)
        base = baselines.resolve(baseline) if baseline else None
        result = ex.explain_run(
            rec,
            base[0] if base else None,
            label=name,
            baseline_label=base[1] if base else "BASELINE",
            given=given,
        )
    show("explain", chosen, result)


def _on_off(text: str | None) -> bool | None:
    if text is None:
        return None
    if text.lower() not in ("on", "off"):
        raise BadInput(f"--graph {text!r}: on or off")
    return text.lower() == "on"


def _curve(text: str) -> list[float]:
    from regdiag.throughput import check_per_position

    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        rates = []
    curve = check_per_position(rates)
    if curve is None:
        raise BadInput(f"--per-position {text!r}: comma-separated rates within 0..1, at most 64")
    return curve


def register(app: typer.Typer) -> None:
    app.command("explain", help=EXPLAIN_HELP)(explain)
