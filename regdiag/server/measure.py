"""`probe server`: L launches of R requests each, every launch written to disk as it goes.

A launch is one server start when regdiag starts the server (--launch-cmd), else one batch of
requests against the running server. Inside a launch: server information, the engine's
counters before, `warmup` requests that are timed but dropped, the R measured requests, the
counters after. The launch is in the record (status "interrupted") from its first request on and
is rewritten at most once a second as requests finish, so Ctrl-C or kill -9 keeps every finished
request; its status becomes "ok", or "error" with the first failure, when it ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from regdiag.host_phantom import flag_run
from regdiag.hosts.base import Host
from regdiag.measure.starts import fresh_start, note_start_check
from regdiag.runs import RunWriter, now_iso
from regdiag.server import client, metrics
from regdiag.server.client import API_SGLANG, Endpoint, RequestFailed, RequestResult
from regdiag.server.launch import LaunchError, ServerProcess
from regdiag.server.load import LoadSpec, run_load
from regdiag.server.logparse import parse_lines
from regdiag.server.record import (
    failure_summary,
    fill_launch,
    new_launch,
    redact_tree,
    server_launch_header,
)

Event = Callable[[str, dict[str, Any]], None]


class MeasureError(RuntimeError):
    """The run cannot go on (server never came up, every request failed). One line."""


@dataclass
class ServerProbe:
    ep: Endpoint
    load: LoadSpec
    prompts: Sequence[str]
    launches: int = 3
    warmup: int = 1
    launch_argv: list[str] | None = None
    launch_env: dict[str, str] = field(default_factory=dict)
    host: Host | None = None
    startup_timeout_s: float = 1800.0
    stop_grace_s: float = 30.0
    cold: bool = False  # --cold: a server start per launch (else launches share starts)


def server_info(ep: Endpoint) -> dict[str, Any]:
    """What the server says about itself (secrets redacted); keys absent where it offers nothing."""
    info: dict[str, Any] = {}
    calls = (
        [("server_info", "/get_server_info"), ("model_info", "/get_model_info")]
        if ep.api == API_SGLANG
        else [("version", "/version"), ("models", "/v1/models"), ("server_info", "/get_server_info")]
    )
    for key, path in calls:
        try:
            doc = client.get_json(ep, path)
        except RequestFailed as e:
            info.setdefault("errors", []).append(str(e))
            continue
        if doc is not None:
            info[key] = redact_tree(doc)
    si = info.get("server_info")
    if isinstance(si, dict):
        # Keep the arguments and versions; drop bulky internal state lists some versions add.
        info["server_info"] = {k: v for k, v in si.items() if not isinstance(v, list) or len(v) <= 64}
    return info


def engine_version(info: dict[str, Any]) -> str | None:
    """SGLang's get_server_info "version", or vLLM's /version."""
    for key in ("server_info", "version"):
        doc = info.get(key)
        if isinstance(doc, dict) and isinstance(doc.get("version"), str):
            return str(doc["version"])
    return None


def resolve_model(ep: Endpoint, info: dict[str, Any]) -> str | None:
    models = info.get("models")
    if isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
        first = models["data"][0]
        if isinstance(first, dict) and isinstance(first.get("id"), str):
            return first["id"]
    return None


def scrape(ep: Endpoint) -> dict[str, Any] | None:
    try:
        status, body = client.simple_get(ep, "/metrics", accept="text/plain")
    except RequestFailed:
        return None
    if status != 200:
        return None
    return metrics.spec_counters(body.decode("utf-8", "replace"))


def engine_log_summary(lines: list[str]) -> dict[str, Any] | None:
    """The engine's own decode statistics printed while this launch ran (--launch-cmd only)."""
    if not lines:
        return None
    parse = parse_lines(lines)
    kept = [iv for iv in parse.intervals if not iv["warmup"]]
    acc = [iv["accept_len"] for iv in kept if iv.get("accept_len")]
    out: dict[str, Any] = {"counts": parse.counts(), "formats": sorted(parse.formats)}
    if acc:
        out["accept_len_mean"] = round(sum(acc) / len(acc), 4)
    graph = [iv["cuda_graph"] for iv in kept if "cuda_graph" in iv]
    if graph:
        out["cuda_graph_fraction"] = round(sum(graph) / len(graph), 4)
    return out


class _Flusher:
    """Rewrites the record as requests finish, at most once per `every_s` seconds."""

    def __init__(self, writer: RunWriter, launch: dict[str, Any], warmup: int, every_s: float = 1.0) -> None:
        self.writer, self.launch, self.warmup, self.every_s = writer, launch, warmup, every_s
        self.results: list[RequestResult] = []
        self.last = 0.0

    def __call__(self, r: RequestResult) -> None:
        self.results.append(r)
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            fill_launch(self.launch, self.results, wall_s=None, warmup=self.warmup)
            self.writer.flush()


def run_probe(probe: ServerProbe, writer: RunWriter, on_event: Event | None = None) -> None:
    """All launches, into `writer`. Raises MeasureError when going on makes no sense. With --launch-cmd
    the launches share server starts (a fresh start at each index of engine/reuse.py's FRESH_AT; every
    launch with --cold), each launch saying `start` (fresh / reused)."""
    emit = on_event or (lambda kind, data: None)
    server: ServerProcess | None = None
    try:
        for li in range(probe.launches):
            launch = new_launch(len(writer.run["launches"]), now_iso(), server_launch_header(probe.ep))
            fresh = probe.launch_argv is not None and (probe.cold or fresh_start(li) or server is None)
            if fresh and server is not None:
                _stop_into(server, writer.run["launches"][-1])
                server = None
            writer.add_launch(launch)
            t_launch = time.monotonic()
            emit("launch_start", {"launch": li, "of": probe.launches})
            fatal: str | None = None
            mark = 0  # the engine's log lines before this launch (a reused server's earlier ones)
            try:
                if fresh:
                    server, fatal = _start(probe, launch, li, emit)
                elif server is not None:
                    launch["start"] = "reused"
                    if not server.running:
                        fatal = launch["error"] = server.exit_note("since its last launch")
                        launch["status"] = "error"
                mark = len(server.engine_lines) if server is not None else 0
                if fatal is None:
                    fatal = _one_launch(probe, writer, launch, li, server, emit)
            finally:
                if server is not None and probe.cold:
                    _stop_into(server, launch)
                    server = None
                elif server is not None:
                    summary = engine_log_summary(server.engine_lines[mark:])
                    if summary:
                        launch["engine_log"] = summary
                launch["duration_s"] = round(time.monotonic() - t_launch, 3)
                writer.flush()
                emit("launch_end", {"launch": li, "record": launch})
            if fatal:
                raise MeasureError(f"launch {li}: {fatal}")
    finally:
        if server is not None:
            _stop_into(server, writer.run["launches"][-1])
            writer.flush()
    if probe.launch_argv is not None and not probe.cold:
        note_start_check(writer.run)
    flag_run(writer.run)  # launches whose host stood out from the others' (docs/statistics.md)
    writer.flush()


def _start(
    probe: ServerProbe, launch: dict[str, Any], li: int, emit: Event
) -> tuple[ServerProcess, str | None]:
    """Start the server for launch `li` and wait until it is healthy; it, and the failure if any."""
    assert probe.host is not None and probe.launch_argv is not None
    server = ServerProcess(probe.host, probe.launch_argv, probe.launch_env, grace_s=probe.stop_grace_s)
    launch["start"] = "fresh"
    emit("server_starting", {"launch": li})
    try:
        server.start()
        launch["header"]["server_pid"] = server.pid
        healthy = server.wait_healthy(probe.ep, probe.startup_timeout_s)
        launch["header"]["healthy_after_s"] = round(healthy, 3)
        emit("server_healthy", {"launch": li, "after_s": healthy})
    except LaunchError as e:
        launch["status"], launch["error"] = "error", str(e)
        return server, str(e)
    return server, None


def _stop_into(server: ServerProcess, launch: dict[str, Any]) -> None:
    """Stop the server; its last launch gets how it stopped, the host and GPU samples of its start and
    (without reuse) the engine's own decode statistics."""
    launch["server_process"] = server.stop()
    server.record_into(launch)  # the host and GPU samples beside it
    if "engine_log" not in launch and launch.get("start") == "fresh":
        summary = engine_log_summary(server.engine_lines)
        if summary:
            launch["engine_log"] = summary


def _learn_server(
    probe: ServerProbe, writer: RunWriter, launch: dict[str, Any], li: int, server: ServerProcess | None
) -> str | None:
    """The server's model, version and information into the launch header (and the run's, once); a
    message when the run cannot go on."""
    ep = probe.ep
    if server is None and li > 0:  # the same server as the first launch
        launch["header"]["engine_version"] = writer.run["launches"][0]["header"].get("engine_version")
        return None
    info = server_info(ep)
    if ep.model is None and ep.api != API_SGLANG:
        ep.model = resolve_model(ep, info)
        if ep.model is None:
            launch["status"] = "error"
            launch["error"] = "the server lists no model at /v1/models; give --model"
            return launch["error"]
        launch["header"]["model"] = ep.model
    launch["header"]["engine_version"] = engine_version(info)
    if server is not None:  # each start may differ (arguments, version); one server: once per run
        launch["header"]["server"] = info
    if "server_info" not in writer.run:
        writer.run["server_info"] = info
    return None


def _warm_up(
    probe: ServerProbe, launch: dict[str, Any], server: ServerProcess | None
) -> tuple[list[RequestResult], str | None]:
    """Send the warm-up requests (timed, dropped). When one fails the launch ends in error; the message
    returned says the run should stop too (none of them succeeded)."""
    if not probe.warmup:
        return [], None
    warm_spec = LoadSpec(
        requests=probe.warmup,
        concurrency=1,
        max_tokens=probe.load.max_tokens,
        stream=probe.load.stream,
        ignore_eos=probe.load.ignore_eos,
    )
    warm_results, _ = run_load(probe.ep, probe.prompts, warm_spec)
    launch["warmup_dropped"] = len(warm_results)
    bad = [r for r in warm_results if not r.ok]
    if not bad:
        return warm_results, None
    launch["status"] = "error"
    launch["error"] = f"warm-up request failed: {bad[0].error}"
    if server is not None and server.wait_exit(2.0):
        launch["error"] = f"{server.exit_note('during the warm-up')}; {launch['error']}"
    return warm_results, None if any(r.ok for r in warm_results) else launch["error"]


def _end_status(launch: dict[str, Any], results: list[RequestResult], server: ServerProcess | None) -> None:
    failed = failure_summary(results)
    if not failed:
        launch["status"] = "ok"
        return
    launch["status"], launch["error"] = "error", failed
    # A dead server fails requests before its exit is seen: give the exit a moment to arrive.
    if server is not None and server.wait_exit(2.0):
        launch["error"] = f"{server.exit_note('during the launch')}; {failed}"


def _one_launch(
    probe: ServerProbe,
    writer: RunWriter,
    launch: dict[str, Any],
    li: int,
    server: ServerProcess | None,
    emit: Event,
) -> str | None:
    """Measure one launch into `launch`; return a message when the run should stop."""
    ep = probe.ep
    fatal = _learn_server(probe, writer, launch, li, server)
    if fatal is not None:
        return fatal
    before = scrape(ep)
    warm_results, fatal = _warm_up(probe, launch, server)
    if not all(r.ok for r in warm_results):
        return fatal
    if probe.warmup:
        before = scrape(ep) or before  # count only the measured requests
    flusher = _Flusher(writer, launch, len(warm_results))
    done = [0]

    def on_result(r: RequestResult) -> None:
        flusher(r)
        done[0] += 1
        emit("request", {"launch": li, "done": done[0], "total": probe.load.requests, "ok": r.ok})

    stop = threading.Event()
    if server is not None:
        server.window(True)
    try:
        results, wall = run_load(ep, probe.prompts, probe.load, on_result=on_result, stop=stop)
        if server is not None:
            server.window(False)
    except KeyboardInterrupt:
        fill_launch(launch, flusher.results, wall_s=None, warmup=len(warm_results))
        launch["status"] = "interrupted"
        raise
    spec = metrics.spec_delta(before, scrape(ep))
    fill_launch(launch, results, wall_s=wall, warmup=len(warm_results), spec=spec or None)
    _end_status(launch, results, server)
    if not any(r.ok for r in results):
        return launch["error"]
    return None
