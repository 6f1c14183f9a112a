"""One launch on a host: a fresh process of the probe, its stream parsed as it arrives, its deadline,
and the launch record made from what arrived (also when it failed or was interrupted).

    launch, stream, why = measure_launch(i, lambda s: run_probe_on(host, "spec-decode", args, s, env, t), t, keep)

A launch that fails is recorded with status "error" and a one-line reason; a usage error or a refusal
because other processes hold the GPUs, in a first launch, means nothing was measured (UsageAbort,
BusyAbort: the caller leaves no record). Where the launch ran beyond the run's host (a Slurm node and
its allocation) comes from the host itself (`Host.placement`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from regdiag import interrupts
from regdiag.errors import BadInput, ProbeError
from regdiag.hosts.base import CommandResult, Host
from regdiag.measure.probes import probe_table
from regdiag.measure.stream import LaunchStream
from regdiag.runs import now_iso

# Launch deadlines when the user sets none (--timeout): the probe's own hang watch ends a hung rank
# within minutes (docs/probes.md); this is the backstop should the probe process itself stall. Launch 0
# may take up to LAUNCH_CAP_S; later ones LAUNCH_FACTOR times launch 0's duration, at least LAUNCH_MIN_S.
LAUNCH_CAP_S = 1800.0
LAUNCH_FACTOR = 4.0
LAUNCH_MIN_S = 120.0


def deadline(timeout: float | None, first: dict[str, Any] | None) -> float:
    """One launch's deadline: the user's, else from the first launch's duration once it finished well."""
    if timeout:
        return timeout
    if first is not None and first.get("status") == "ok":
        return max(LAUNCH_MIN_S, LAUNCH_FACTOR * float(first["duration_s"]))
    return LAUNCH_CAP_S


def wrap_env(argv: Sequence[str], unset: Sequence[str]) -> list[str]:
    """A process without some variables: `env -u NAME ... --` (the Host interface can add, not remove)."""
    if not unset:
        return list(argv)
    out = ["env"]
    for name in sorted(unset):
        out += ["-u", name]
    return out + ["--"] + list(argv)


class LineSink(Protocol):
    """Where a launch's output goes as it arrives, line by line (a LaunchStream, a server's reader)."""

    def stdout_line(self, line: str) -> None: ...

    def stderr_line(self, line: str) -> None: ...


def launch(
    host: Host,
    argv: Sequence[str],
    sink: LineSink,
    *,
    env: Mapping[str, str] | None = None,
    unset: Sequence[str] = (),
    cwd: str | None = None,
    timeout: float | None = None,
    stdin: bytes | None = None,
    regdiag_code: bool = False,
) -> CommandResult:
    """The one way a launch runs: `argv` on `host` as one process, with `env` added and `unset` removed,
    its lines streamed to `sink` as they arrive (nothing kept in memory), killed at `timeout` or on
    Ctrl-C with its whole process tree. `regdiag_code`: argv runs regdiag's own code (host.regdiag_argv),
    so an interpreter that could not start is the host's failure (HostError), not the launch's.
    Every launch of probe, ab, bisect, probe server and probe engine comes through here."""
    res = host.run(
        wrap_env(argv, unset),
        stdin=stdin,
        env=dict(env) if env else None,
        cwd=cwd,
        timeout=timeout,
        on_stdout_line=sink.stdout_line,
        on_stderr_line=sink.stderr_line,
        keep_output=False,
    )
    if regdiag_code:
        host.check_regdiag(res)
    return res


def probe_argv(host: Host, name: str, args: Sequence[str], python: str | None = None) -> list[str]:
    """The argv of probe `name` on `host`, however that host runs regdiag's own code (it says)."""
    return host.regdiag_argv(["probe", probe_table()[name]["script"], *args], python)


def run_probe_on(
    host: Host,
    name: str,
    args: Sequence[str],
    stream: LaunchStream,
    env: Mapping[str, str] | None,
    timeout: float | None,
    *,
    python: str | None = None,
    unset: Sequence[str] = (),
    cwd: str | None = None,
    argv: list[str] | None = None,
) -> CommandResult:
    """Probe `name` as one launch on `host`: a fresh interpreter, or `argv` (one forked from a warm
    interpreter: measure/warm.py)."""
    argv = argv or probe_argv(host, name, args, python)
    return launch(host, argv, stream, env=env, unset=unset, cwd=cwd, timeout=timeout, regdiag_code=True)


def measure_launch(
    index: int,
    start: Callable[[LaunchStream], CommandResult],
    timeout: float | None,
    keep: Callable[[dict[str, Any]], None],
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    placement: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], LaunchStream, str | None]:
    """One launch: `start(stream)` runs the probe, feeding its lines to the stream; returns the launch
    record, the stream and why it failed (None: ok). An interruption or a host failure records what
    arrived through `keep` before it propagates, so no finished cycle is lost. `placement` (where it ran:
    Host.placement) goes into the record as it is."""
    stream = LaunchStream(on_progress=on_progress)
    started, t0 = now_iso(), time.monotonic()
    try:
        res = start(stream)
    except KeyboardInterrupt as e:
        keep(
            finish_launch(stream, index, started, t0, None, "interrupted", interrupts.describe(e), placement)
        )
        raise
    except Exception as e:  # the host failed (connection dropped): keep what arrived
        keep(finish_launch(stream, index, started, t0, None, "error", " ".join(str(e).split()), placement))
        raise
    why = stream.failure(res, timeout)
    status = "ok" if why is None else "error"
    return finish_launch(stream, index, started, t0, res, status, why, placement), stream, why


class UsageAbort(BadInput):
    """The probe refused its arguments: nothing was measured, so no record is left behind."""


class BusyAbort(ProbeError):
    """The GPUs are held by other processes: nothing was measured, so no record is left behind."""


def stages(la: Mapping[str, Any]) -> dict[str, float]:
    """Where one launch's wall time went, in seconds, from its record (the footer's times run from the
    supervisor's start): `start` (interpreter, import torch and CUDA initialisation, or the fork of a
    warm launch, up to the build), `build`, `capture+warmup`, `measure`, `gather` (rank 0's report and
    the supervisor's footer), `teardown` (0 for a warm launch, which returns at its footer) and
    `regdiag`, the rest of `launch` (regdiag's own: starting the process, reading its output)."""
    foot = la.get("footer") or {}
    header = la.get("header") or {}
    w0, w1 = (list(foot.get("measure_window_s") or []) + [0.0, 0.0])[:2]
    wall = float(foot.get("launch_wall_s") or w1)
    build = float(header.get("build_s") or 0.0)
    tear = float((la.get("teardown") or {}).get("s") or 0.0)
    cycles = (la.get("samples") or {}).get("cycle") or []
    measure = sum(cycles) / 1000.0 if cycles else w1 - w0
    total = float(la.get("duration_s") or 0.0)
    out = {
        "launch": total,
        "start": max(0.0, w0 - build),
        "build": build,
        "capture+warmup": max(0.0, w1 - w0 - measure),
        "measure": measure,
        "gather": max(0.0, wall - w1),
        "teardown": tear,
        "regdiag": max(0.0, total - wall - tear),
    }
    return {k: round(v, 4) for k, v in out.items()}


def finish_launch(
    stream: LaunchStream,
    index: int,
    started: str,
    t0: float,
    res: CommandResult | None,
    status: str,
    error: str | None,
    placement: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    launch: dict[str, Any] = {
        "index": index,
        "status": status,
        "error": error,
        "started": started,
        "duration_s": round(time.monotonic() - t0, 3),
        "returncode": None if res is None else res.returncode,
        **stream.to_launch(),
        **(placement or {}),
    }
    if status != "ok":
        launch["stderr_tail"] = list(stream.stderr_tail)[-8:]
    elif launch["footer"]:
        launch["stages_s"] = stages(launch)  # where its wall time went (bench/bench_launch.py: medians)
    return launch


def command(
    host: Host,
    argv: Sequence[str],
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdin: bytes | None = None,
) -> CommandResult:
    """The one way a helper command runs (git, ls, du, pip index, a short python script, a process's
    killer): `argv` on `host` as one process with `env` added, killed at `timeout` or on Ctrl-C with its
    whole process tree; its output is kept and returned whole (a launch, read line by line as it
    arrives, is `launch`)."""
    return host.run(list(argv), stdin=stdin, env=dict(env) if env else None, cwd=cwd, timeout=timeout)
