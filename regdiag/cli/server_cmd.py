"""`regdiag probe server` and `regdiag ingest-log`: parse, call regdiag.server, render."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from regdiag.cli.common import (
    COUNT,
    LAUNCHES,
    SECONDS,
    JsonOpt,
    OutputOpt,
    PlainProgress,
    bounded,
    err_console,
    format_opt,
    input_file,
    pick_format,
    probe_group,
    progress_bar,
    refuse_input_as_output,
    show,
)
from regdiag.cli.target import TARGET, Target, target_options
from regdiag.errors import ProbeError
from regdiag.measure.session import Session
from regdiag.records import save_record
from regdiag.report.server import fmt
from regdiag.runs import RunWriter, runs_dir

SERVER_HELP = """Measure a live SGLang or vLLM endpoint: TTFT, inter-token latency, tok/s, accept length.

Sends --requests greedy (temperature 0) requests per launch, --concurrency at a time, and repeats
for --launches launches. Each launch is one batch of requests. With --launch-cmd regdiag starts the
server (waits for /health, stops it by process group at the end), and the launches share starts: a
fresh start at the first and third launch, the others reuse it (--cold: a start per launch).
Without, the batches go to the running server. Accept length comes from the engine: SGLang's meta_info
(completion_tokens / spec_verify_ct) or vLLM's /metrics spec-decode counters.

The record (kind "server", primary "itl") is written after every request batch and goes through
`regdiag compare` and `regdiag explain` like probe runs. Exit 0 when every launch succeeded,
5 when a request or the server failed (the record keeps every finished request), 2 for bad input.
"""

INGEST_HELP = """Turn an engine log into a run record: SGLang "Decode batch" lines and vLLM metrics lines.

Each FILE is one launch. SGLang: every "Decode batch." / "Decode batch," line is an interval with
accept len, accept rate, cuda graph, gen throughput, #running-req, #token and the rank; vLLM: the
"Avg generation throughput" and "SpecDecoding metrics" lines. Other lines are skipped and counted.
The first interval after idle is flagged warm-up and dropped. The record's primary is "itl"
(ms per token of one request, 1000 x #running-req / gen throughput), the same metric as
`probe server`, so last week's log compares with today's run.
"""


def _launch_line(la: dict[str, Any], total: int) -> str:
    sc = la.get("scalars", {})
    status = la.get("status")
    mark = "[green]ok[/]" if status == "ok" else f"[red]{status}[/]"
    parts = [f"launch {la['index'] + 1}/{total}  {mark}"]
    if sc:
        parts.append(f"{sc.get('requests_ok', 0)}/{sc.get('requests', 0)} requests")
    if "itl_ms_median" in sc:
        parts.append(
            f"itl {fmt(sc['itl_ms_median'], ' ms')} ({fmt(sc.get('tok_s_per_request'), ' tok/s', 1)} per stream)"
        )
    if "ttft_ms_median" in sc:
        parts.append(f"ttft {fmt(sc['ttft_ms_median'], ' ms', 1)}")
    if "tok_s" in sc:
        parts.append(f"all streams {fmt(sc['tok_s'], ' tok/s', 1)}")
    if "accept_len_mean" in sc:
        parts.append(f"accept len {fmt(sc['accept_len_mean'])}")
    line = "  ".join(parts)
    if la.get("error"):
        line += f"\n    [red]{la['error']}[/]"
    return line


def _progress_sink(total_launches: int, requests: int):  # type: ignore[no-untyped-def]
    """Progress on stderr (a rich bar on a terminal, plain lines otherwise), returned as (event
    callback, progress context)."""
    from rich.text import Text

    plain = PlainProgress("probe server")
    progress = progress_bar(disable=plain.enabled)
    task = progress.add_task("requests", total=requests)

    def on_event(kind: str, data: dict[str, Any]) -> None:
        li = data.get("launch", 0) + 1
        if kind == "launch_start":
            progress.reset(task, total=requests, description=f"launch {li}/{total_launches}")
            plain.step(f"launch {li}/{total_launches} started")
        elif kind == "server_starting":
            progress.update(task, description=f"launch {li}/{total_launches}: starting the server")
            plain.step(f"launch {li}/{total_launches}: starting the server")
        elif kind == "server_healthy":
            healthy = f"launch {li}/{total_launches}: healthy after {data['after_s']:.1f} s"
            progress.update(task, description=healthy)
            plain.step(healthy)
        elif kind == "request":
            progress.update(task, completed=data["done"])
            plain.tick(f"launch {li}/{total_launches}: {data['done']}/{requests} requests")
        elif kind == "launch_end":
            line = _launch_line(data["record"], total_launches)
            if plain.enabled:
                plain.step(" ".join(Text.from_markup(line).plain.split()))
            else:
                progress.console.print(line, soft_wrap=True)

    return on_event, progress


@target_options(one="probe server")
def probe_server(
    url: str = typer.Option(..., "--url", help="Base URL of the server, e.g. http://127.0.0.1:30000."),
    api: str = typer.Option(
        "sglang",
        "--api",
        help="Request format: sglang (POST /generate), openai (/v1/completions) or "
        "openai-chat (/v1/chat/completions); the OpenAI ones work with SGLang and vLLM. Default: sglang.",
    ),
    model: str | None = typer.Option(
        None, "--model", help="Model name for the OpenAI APIs. Default: the first of /v1/models."
    ),
    launches: int = typer.Option(
        3,
        "--launches",
        "-L",
        callback=bounded(*LAUNCHES),
        help="Launches (windows of requests; with --launch-cmd, of shared server starts). Default: 3.",
    ),
    requests: int = typer.Option(
        8, "--requests", "-R", callback=bounded(*COUNT), help="Measured requests per launch. Default: 8."
    ),
    concurrency: int = typer.Option(
        1, "--concurrency", "-C", callback=bounded(1, 10_000), help="Requests in flight at once. Default: 1."
    ),
    max_tokens: int = typer.Option(
        128, "--max-tokens", callback=bounded(*COUNT), help="Output tokens per request. Default: 128."
    ),
    prompts: Path | None = typer.Option(
        None,
        "--prompts",
        callback=input_file,
        help='Prompt file: one prompt per line, or .jsonl with a "prompt" field. Default: 8 built-in prompts.',
    ),
    warmup: int = typer.Option(
        1,
        "--warmup",
        callback=bounded(0, COUNT[1]),
        help="Requests per launch sent first and dropped. Default: 1.",
    ),
    stream: bool = typer.Option(
        True, "--stream/--no-stream", help="Stream (needed for TTFT and ITL). Default: stream."
    ),
    ignore_eos: bool = typer.Option(
        True,
        "--ignore-eos/--no-ignore-eos",
        help="Decode exactly --max-tokens tokens per request. Default: on.",
    ),
    connect_timeout: float = typer.Option(
        10.0,
        "--connect-timeout",
        callback=bounded(*SECONDS, unit="seconds"),
        help="Seconds to connect. Default: 10.",
    ),
    read_timeout: float = typer.Option(
        300.0,
        "--read-timeout",
        callback=bounded(*SECONDS, unit="seconds"),
        help="Longest wait for the next bytes, in seconds. Default: 300.",
    ),
    api_key_env: str | None = typer.Option(
        None,
        "--api-key-env",
        help="Name of an environment variable holding the API key (sent as a Bearer token, never stored).",
    ),
    launch_cmd: str | None = typer.Option(
        None,
        "--launch-cmd",
        help="Start the server with this command for every launch (NAME=VALUE words first set its "
        "environment), e.g. 'python -m sglang.launch_server --model-path M --port 30000'. Default: measure a running server.",
    ),
    cold: bool = typer.Option(
        False,
        "--cold",
        help="With --launch-cmd: start the server for every launch. Default: launches share server starts, "
        'a fresh start at the first and third (docs/engine.md, "Reused starts").',
    ),
    startup_timeout: float = typer.Option(
        1800.0,
        "--startup-timeout",
        callback=bounded(*SECONDS, unit="seconds"),
        help="Seconds to wait for /health after a start. Default: 1800.",
    ),
    stop_grace: float = typer.Option(
        30.0,
        "--stop-grace",
        callback=bounded(0.0, SECONDS[1], unit="seconds"),
        help="Seconds between SIGTERM and SIGKILL at stop. Default: 30.",
    ),
    snapshot: bool = typer.Option(
        True,
        "--snapshot/--no-snapshot",
        help="Record the environment of the server's host before and after (--host, or this machine when the server is local). Default: on.",
    ),
    output: Path | None = OutputOpt,
    json_out: bool = JsonOpt,
    fmt: str | None = format_opt("server"),
    target: Target = TARGET,
) -> None:
    chosen = pick_format("server", fmt, json_out)  # before any request is sent
    on = target.host
    from regdiag.server.measure import MeasureError, run_probe
    from regdiag.server.plan import ServerRequest, failed_launches, plan_probe, run_summary

    plan = plan_probe(
        ServerRequest(
            url=url,
            api=api,
            model=model,
            launches=launches,
            requests=requests,
            concurrency=concurrency,
            max_tokens=max_tokens,
            prompts=None if prompts is None else str(prompts),
            warmup=warmup,
            stream=stream,
            ignore_eos=ignore_eos,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            api_key_env=api_key_env,
            launch_cmd=launch_cmd,
            startup_timeout=startup_timeout,
            stop_grace=stop_grace,
            host=on,
            cold=cold,
        )
    )
    host = target.open() if plan.needs_host else None
    run = plan.run_record(host)
    try:
        with (
            RunWriter(None, run, also=output) as writer,
            Session(host, [writer], snapshot and plan.can_snapshot(host)),
        ):
            if chosen == "terminal":
                err_console.print(
                    f"regdiag: measuring {plan.ep.display} ({api}); record {writer.path}", soft_wrap=True
                )
            on_event, progress = _progress_sink(launches, requests)
            try:
                with progress:
                    run_probe(plan.probe(host), writer, on_event)
            except MeasureError as e:
                raise ProbeError(f"{e}; record: {writer.path}") from None
    finally:
        if host is not None:
            host.close()
    summary = run_summary(writer.run)
    summary["path"] = str(writer.path)
    show("server", chosen, summary)
    failed = failed_launches(writer.run)
    if failed:
        raise ProbeError(f"{failed}; record: {writer.path}")


def ingest_log(
    files: list[Path] = typer.Argument(
        ..., help="Engine log files; each becomes one launch.", callback=input_file
    ),
    idle_gap: float = typer.Option(
        5.0,
        "--idle-gap",
        callback=bounded(0.0, SECONDS[1], unit="seconds"),
        help="Seconds between two lines of a rank that count as idle. Default: 5.",
    ),
    rank: str | None = typer.Option(
        None, "--rank", help="Keep only SGLang lines of this rank, e.g. 'TP0' or 'DP1 TP1'. Default: all."
    ),
    output: Path | None = OutputOpt,
    json_out: bool = JsonOpt,
    fmt: str | None = format_opt("ingest"),
) -> None:
    from regdiag.server.ingest import ingest_logs, ingest_summary

    chosen = pick_format("ingest", fmt, json_out)
    refuse_input_as_output(output, [str(f) for f in files], "-o")
    run = ingest_logs([str(f) for f in files], idle_gap_s=idle_gap, rank=rank)
    path = runs_dir() / f"{run['id']}.json"
    save_record(path, run)
    if output is not None:
        save_record(output, run)
    show("ingest", chosen, ingest_summary(run, str(path)))


def register(app: typer.Typer) -> None:
    group = probe_group(app)
    group.command("server", help=SERVER_HELP, no_args_is_help=True)(probe_server)
    app.command("ingest-log", help=INGEST_HELP, no_args_is_help=True)(ingest_log)
