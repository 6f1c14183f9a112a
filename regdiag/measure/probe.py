"""The launch loop: L launches (fresh processes) of a probe on a host, each written to the run record as
it finishes, inside a Session (snapshots before and after).

    result = run_probe(LocalHost(), "spec-decode", ["--preset", "tiny", "--tp", "2"], launches=3)
    result.path, result.run

Failure semantics (docs/probes.md): a launch whose probe fails (a rank crashed, a timeout, no footer)
is recorded with status "error" and a one-line error, the launches before it are kept, no further
launch is started and ProbeError (exit 5) is raised; a usage error reported by the probe in its first
launch raises BadInput (exit 2) and leaves no record, and so does a first launch refused because other
processes hold the GPUs (ProbeError, exit 5); Ctrl-C, SIGTERM or SIGHUP (regdiag.interrupts) records the
launch in flight as "interrupted" and re-raises (exit 130, 143, 129). On a host of several nodes (a
Slurm allocation) launch i runs on node i mod n and its record names the node.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from regdiag.errors import BadInput, ProbeError
from regdiag.host_phantom import flag_run
from regdiag.hosts.base import CommandResult, Host
from regdiag.measure.launch import BusyAbort, UsageAbort, deadline, measure_launch, run_probe_on
from regdiag.measure.probes import probe_table
from regdiag.measure.session import Session, warn
from regdiag.measure.stream import LaunchStream, adopt_header, env_for_record, same_config
from regdiag.measure.warm import WarmInterpreter
from regdiag.runs import HOST_TRACES, RunWriter, new_run, trace_path
from regdiag.snapshot.redact import redact_argv

EventCallback = Callable[[str, dict[str, Any]], None]


@dataclass
class RunResult:
    path: Path
    run: dict[str, Any]


def new_probe_run(name: str, host: Host, args: Sequence[str] | None = None) -> dict[str, Any]:
    """A run record for probe `name` on `host`, before its first header says more (the probe table's
    values; a protocol-speaking --command is a cycle of unknown phases); `args`, the probe's own
    arguments, are kept redacted (`-- --hf-token X`: never kept in clear)."""
    info = probe_table().get(name, {"primary": "cycle", "phases": []})
    shape = {"primary": info["primary"], "phases": list(info["phases"])}
    run = new_run(kind="probe", probe_name=name, probe_version="?", config={}, host=host.describe(), **shape)
    if args is not None:
        run["probe"]["args"] = redact_argv(list(args))
    return run


def run_probe(
    host: Host,
    name: str,
    args: Sequence[str],
    *,
    launches: int = 3,
    output: str | Path | None = None,
    also: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    snapshot: bool = True,
    on_event: EventCallback | None = None,
    warm: bool = True,
) -> RunResult:
    """Run `launches` launches of probe `name` with `args` on `host`; see the module docstring.

    `output` is where the record lives (None: the store); `also` a copy kept as current (the CLI's -o).
    `env` is added to each launch's environment (bisect's env-var factors); `timeout` bounds one launch
    (None: LAUNCH_CAP_S for the first, then LAUNCH_FACTOR x the first's duration). `warm`: the launches
    fork from one warm interpreter that has imported torch and the probe (measure/warm.py), where the
    host is one machine and the interpreter starts; else, and with warm=False (--cold), each launch is a
    fresh interpreter. Each launch record says which (`start`: warm or cold).
    Events for a progress display: ("start", {"path", "id"}), ("snapshot", {"when"}), ("launch_start", {"index", "of"}),
    ("progress", {"index", "stage", "done", "total"}), ("launch_end", {"index", "launch"}), ("warm", {}) (the
    warm interpreter is starting).
    """
    if launches < 1:
        raise BadInput("--launches must be >= 1")
    if name not in probe_table():
        raise BadInput(f"unknown probe {name!r}; choose from {', '.join(probe_table())}")
    emit = on_event or (lambda kind, data: None)
    run = new_probe_run(name, host, args)
    if env:
        run["env"] = env_for_record(env)
    writer = RunWriter(output, run, also=also)
    emit("start", {"path": str(writer.path), "id": run["id"]})
    try:
        with Session(host, [writer], snapshot, lambda when: emit("snapshot", {"when": when})):
            with _warm_for(writer, host, name, env, warm, emit) as w:
                _launches(writer, host, name, args, launches, env, timeout, emit, w)
            flag_run(writer.run)  # launches whose host stood out from the others' (docs/statistics.md)
    except (UsageAbort, BusyAbort):
        writer.discard()  # nothing was measured: leave no record behind
        raise
    except KeyboardInterrupt:
        writer.finish("interrupted")
        raise
    except BaseException:
        writer.finish(
            "failed" if not any(la["status"] == "ok" for la in writer.run["launches"]) else "partial"
        )
        raise
    writer.finish()
    return RunResult(writer.path, writer.run)


@contextlib.contextmanager
def _warm_for(
    writer: RunWriter, host: Host, name: str, env: Mapping[str, str] | None, warm: bool, emit: EventCallback
) -> Iterator[WarmInterpreter | None]:
    """The warm interpreter of this run's environment, stopped on every way out; None: cold launches."""
    if not warm or not host.keeps_warm:
        why = "--cold" if not warm else f"launches on {host.via} start cold (a job step each)"
        writer.run["probe"]["start"] = {"mode": "cold", "why": why}
        yield None
        return
    emit("warm", {})
    w = WarmInterpreter(host, probe_table()[name]["script"], env)
    try:
        ready = w.start()
        writer.run["probe"]["start"] = (
            {"mode": "warm", **w.facts} if ready else {"mode": "cold", "why": w.why}
        )
        if not ready:
            warn(writer, f"launches start cold: the warm interpreter did not start ({w.why})")
        yield w
    finally:
        w.stop()
        if w.teardowns:  # launches that returned at their footer and tore down after it
            start = writer.run["probe"]["start"]
            start["detached_teardowns"] = w.teardowns
            if w.forced:
                start["forced_teardowns"] = w.forced
                warn(writer, f"{len(w.forced)} launch(es) had ranks killed after their footer (teardown)")


def _launches(
    writer: RunWriter,
    host: Host,
    name: str,
    args: Sequence[str],
    launches: int,
    env: Mapping[str, str] | None,
    timeout: float | None,
    emit: EventCallback,
    warm: WarmInterpreter | None = None,
) -> None:
    for i in range(launches):
        first = writer.run["launches"][0] if writer.run["launches"] else None
        limit = deadline(timeout, first)
        node = host.for_launch(i)
        emit("launch_start", {"index": i, "of": launches})

        how = "warm" if warm is not None and warm.ready else "cold"

        def start(
            stream: LaunchStream, i: int = i, limit: float = limit, node: Host = node, how: str = how
        ) -> CommandResult:
            these = [*args, "--launch-index", str(i), *trace_args(args, writer.path, i, node)]
            forked = warm.launch_argv(these) if how == "warm" and warm is not None else None
            return run_probe_on(node, name, these, stream, env, limit, argv=forked)

        def keep(launch: dict[str, Any], i: int = i, how: str = how) -> None:
            launch.setdefault("start", how)
            writer.add_launch(launch)
            emit("launch_end", {"index": i, "launch": launch})

        progress = _progress_to(emit, i)
        launch, stream, why = measure_launch(i, start, limit, keep, progress, node.placement())
        if isinstance(trace := (launch.get("profile") or {}).get("trace"), dict):
            trace.update(host=node.name, here=node.builds_here)  # here: a path on this machine
        kind = (stream.error or {}).get("kind")
        if why is not None and i == 0 and kind == "usage":
            raise UsageAbort(why)
        if why is not None and i == 0 and kind == "busy":
            raise BusyAbort(why)
        if i == 0 and stream.header is not None:
            adopt_header(writer.run, stream.header)
        elif stream.header is not None and not same_config(stream.header, writer.run):
            warn(writer, f"launch {i} ran with a different resolved config than launch 0")
        keep(launch)
        if why is not None:
            kept = sum(1 for la in writer.run["launches"] if la["status"] == "ok")
            raise ProbeError(f"launch {i} failed: {why} ({kept} earlier launch(es) kept in {writer.path})")


def trace_args(args: Sequence[str], record: Path, index: int, host: Host) -> list[str]:
    """--profile: where launch `index` writes its trace. The first launch of a run keeps one, beside the
    record where the host shares this machine's files (`<record>.profile-0.json.gz`), else in
    ~/.regdiag/traces/ on the host (the launch record names the host and the path)."""
    if index != 0 or not any(a == "--profile" or a.startswith("--profile=") for a in args):
        return []
    here = trace_path(record, index)
    path = str(here) if host.builds_here else f"{HOST_TRACES}/{here.name}"
    return ["--profile-trace", path]


def _progress_to(emit: EventCallback, index: int) -> Callable[[dict[str, Any]], None]:
    return lambda p: emit("progress", {"index": index, **p})
