"""Run a probe on a host: L launches (fresh processes), the JSON-lines stream parsed as it arrives,
each launch written to the run record as it finishes, a snapshot before and after.

    result = run_probe(LocalHost(), "spec-decode", ["--preset", "tiny", "--tp", "2"], launches=3)
    result.path, result.run

The probe scripts live in probes/ (the `regdiag.probes` package) and import nothing of regdiag; the
protocol they speak is documented in docs/probes.md. This module knows neither typer nor rich: the CLI
renders, `on_event` reports progress.

Failure semantics (docs/probes.md): a launch whose probe fails (a rank crashed, a timeout, no footer)
is recorded with status "error" and a one-line error, the launches before it are kept, no further
launch is started and ProbeError (exit 5) is raised; a usage error reported by the probe in its first
launch raises BadInput (exit 2) and leaves no record, and so does a first launch refused because other
processes hold the GPUs (ProbeError, exit 5); Ctrl-C, SIGTERM or SIGHUP (regdiag.interrupts) records the
launch in flight as "interrupted" and re-raises (exit 130, 143, 129).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regdiag import interrupts
from regdiag.errors import BadInput, ProbeError
from regdiag.hosts.base import CommandResult, Host
from regdiag.runs import RunWriter, new_run, now_iso
from regdiag.snapshot.redact import scrub_text

PROGRESS_PREFIX = "regdiag-progress "
PROTOCOL = 1

# The probes: what a run record says before the first header arrives (the header's own values replace
# these), and the script that runs on the host. One table: the SSH bundle is sent the script name too.
PROBES: dict[str, dict[str, Any]] = {
    "spec-decode": {"script": "spec_decode.py", "primary": "cycle", "phases": ["draft", "verify", "extend"]},
    "collectives": {"script": "collectives.py", "primary": "ar_256MiB", "phases": []},
}
PRESETS = ("auto", "kimi-k2", "deepseek-v3", "deepseek-v2-lite", "tiny")  # probes/_presets.py; a test checks

EventCallback = Callable[[str, dict[str, Any]], None]

# Launch deadlines when the user sets none (--timeout): the probe's own hang watch ends a hung rank
# within minutes (docs/probes.md); this is the backstop should the probe process itself stall. Launch 0
# may take up to LAUNCH_CAP_S; later ones LAUNCH_FACTOR times launch 0's duration, at least LAUNCH_MIN_S.
LAUNCH_CAP_S = 1800.0
LAUNCH_FACTOR = 4.0
LAUNCH_MIN_S = 120.0


def probe_script(name: str) -> Path:
    """The probe file that belongs with this regdiag: the probes/ beside this package in a source tree,
    else the installed `regdiag.probes` package."""
    if name not in PROBES:
        raise BadInput(f"unknown probe {name!r}; choose from {', '.join(PROBES)}")
    fname = PROBES[name]["script"]
    here = Path(__file__).resolve().parent
    for p in (here.parent / "probes" / fname, here / "probes" / fname):
        if p.is_file():
            return p
    try:
        from importlib.resources import files

        p = Path(str(files("regdiag.probes").joinpath(fname)))
        if p.is_file():
            return p
    except (ModuleNotFoundError, TypeError):
        pass
    raise ProbeError(f"probe script {fname} not found (neither in regdiag.probes nor in the repository)")


@dataclass
class LaunchStream:
    """Parses one launch's stdout (protocol lines) and stderr (progress and messages) as they arrive."""

    on_progress: Callable[[dict[str, Any]], None] | None = None
    header: dict[str, Any] | None = None
    footer: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    teardown: dict[str, Any] | None = None
    cycles: list[dict[str, Any]] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=20))
    bad_lines: int = 0

    def stdout_line(self, line: str) -> None:
        if not line.strip():
            return
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict) or "type" not in obj:
            self.bad_lines += 1
            if len(self.stray) < 5:
                self.stray.append(line[:200])
            return
        kind = obj["type"]
        if kind == "header":
            self.header = obj
        elif kind == "cycle":
            self.cycles.append(obj)
        elif kind == "footer":
            self.footer = obj
        elif kind == "error":
            self.error = obj
        elif kind == "teardown":
            self.teardown = obj

    def stderr_line(self, line: str) -> None:
        if line.startswith(PROGRESS_PREFIX):
            try:
                obj = json.loads(line[len(PROGRESS_PREFIX) :])
            except json.JSONDecodeError:
                return
            if self.on_progress is not None and isinstance(obj, dict):
                self.on_progress(obj)
            return
        if line.strip():
            self.stderr_tail.append(scrub_text(line))  # a rank's traceback can quote a token

    def failure(self, res: CommandResult | None, timeout: float | None) -> str | None:
        """The one-line reason this launch failed, or None when it succeeded."""
        if res is not None and res.timed_out:
            return f"the probe did not finish within {timeout:g} s (stopped it)"
        if self.error is not None:
            return scrub_text(str(self.error.get("message") or "the probe reported an error"))
        if res is not None and res.returncode != 0:
            tail = self.stderr_tail[-1] if self.stderr_tail else ""
            return f"the probe exited with status {res.returncode}" + (f": {tail}" if tail else "")
        if self.footer is None:
            return "the probe ended without a footer line" + (
                f" ({self.bad_lines} lines were not protocol)" if self.bad_lines else ""
            )
        return None

    def to_launch(self) -> dict[str, Any]:
        """The parts of a launch record that come from the stream (docs/records.md)."""
        samples: dict[str, list[float]] = {}
        values: dict[str, list[Any]] = {}
        naive: dict[str, list[float]] = {}
        bare: dict[str, list[float]] = {}
        nocomm: dict[str, list[float]] = {}
        warm = 0
        for c in self.cycles:
            if c.get("warmup"):
                warm += 1
                continue
            t = c.get("t") or {}
            if c.get("bare") or c.get("nocomm"):
                side = bare if c.get("bare") else nocomm
                for k, v in t.items():
                    side.setdefault(k, []).append(v)
                continue
            for k, v in t.items():
                samples.setdefault(k, []).append(v)
            for k, v in (c.get("values") or {}).items():
                values.setdefault(k, []).append(v)
            for k, v in (c.get("naive") or {}).items():
                naive.setdefault(k, []).append(v)
        footer = dict(self.footer) if self.footer else None
        clocks = footer.pop("clocks", []) if footer else []
        launch: dict[str, Any] = {
            "header": _redacted_header(self.header),
            "warmup_dropped": (footer or {}).get("warmup_dropped", warm),
            "samples": samples,
            "values": values,
            "scalars": dict((footer or {}).get("scalars") or {}),
            "clocks": clocks,
            "footer": footer,
        }
        if naive:
            launch["naive_samples"] = naive
        if bare:
            launch["bare_samples"] = bare
        if nocomm:
            launch["nocomm_samples"] = nocomm
        if self.teardown is not None:
            launch["teardown"] = {k: v for k, v in self.teardown.items() if k != "type"}
        if self.error is not None and self.error.get("kind") == "hang":
            launch["hang"] = {k: self.error.get(k) for k in ("rank", "stage", "stacks")}
        if self.stray:
            launch["stray_stdout"] = self.stray
        return launch


@dataclass
class RunResult:
    path: Path
    run: dict[str, Any]


def _snapshot(host: Host) -> tuple[dict[str, Any] | None, str | None]:
    """A snapshot of `host`, or None and why (a failing snapshot never costs the measurement)."""
    try:
        from regdiag.hosts.remote import collect_snapshot
    except ImportError:
        collect_snapshot = None  # type: ignore[assignment]
    try:
        if collect_snapshot is not None:
            return collect_snapshot(host), None
        if host.via != "local":
            return None, "no SSH layer in this build"
        from regdiag.snapshot import collect

        return collect(), None
    except ImportError as e:
        return None, f"snapshot unavailable: {e}"
    except Exception as e:  # recorded, not raised: the probe run is what the user asked for
        return None, f"snapshot failed: {' '.join(str(e).split())[:200]}"


def _run_once(
    host: Host,
    name: str,
    args: Sequence[str],
    stream: LaunchStream,
    env: Mapping[str, str] | None,
    timeout: float | None,
) -> CommandResult:
    if host.via == "ssh":
        from regdiag.hosts.remote import run_bundle

        return run_bundle(
            host,
            ["probe", PROBES[name]["script"], *args],
            on_stdout_line=stream.stdout_line,
            on_stderr_line=stream.stderr_line,
            timeout=timeout,
            env=dict(env) if env else None,
        )
    argv = [host.python, str(probe_script(name)), *args]
    return host.run(
        argv,
        env=env,
        timeout=timeout,
        on_stdout_line=stream.stdout_line,
        on_stderr_line=stream.stderr_line,
        keep_output=False,
    )


def _env_for_record(env: Mapping[str, str] | None) -> dict[str, str]:
    """Variables as a record may hold them: the snapshot's redaction rules, so no secret is stored."""
    if not env:
        return {}
    from regdiag.snapshot.redact import redact_env

    kept, redacted = redact_env(dict(env))
    return {**kept, **{k: "<redacted>" for k in redacted}}


def _redacted_header(header: dict[str, Any] | None) -> dict[str, Any] | None:
    """The probe reports the NCCL_* variables each rank saw, raw (it knows no redaction rules)."""
    if header is None or not isinstance(header.get("env"), dict):
        return header
    return {**header, "env": _env_for_record({str(k): str(v) for k, v in header["env"].items()})}


def new_probe_run(name: str, host: Host) -> dict[str, Any]:
    """A run record for probe `name` on `host`, before its first header says more (PROBES' values; a
    protocol-speaking --command is a cycle of unknown phases)."""
    info = PROBES.get(name, {"primary": "cycle", "phases": []})
    return new_run(kind="probe", probe_name=name, probe_version="?", config={}, primary=info["primary"],
                   phases=list(info["phases"]), host=host.describe())  # fmt: skip


def run_probe(
    host: Host,
    name: str,
    args: Sequence[str],
    *,
    launches: int = 3,
    output: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    snapshot: bool = True,
    on_event: EventCallback | None = None,
) -> RunResult:
    """Run `launches` launches of probe `name` with `args` on `host`; see the module docstring.

    `env` is added to each launch's environment (bisect's env-var factors); `timeout` bounds one launch
    (None: LAUNCH_CAP_S for the first, then LAUNCH_FACTOR x the first's duration).
    Events for a progress display: ("start", {"path", "id"}), ("snapshot", {"when"}), ("launch_start", {"index", "of"}),
    ("progress", {"index", "stage", "done", "total"}), ("launch_end", {"index", "launch"}).
    """
    if launches < 1:
        raise BadInput("--launches must be >= 1")
    info = PROBES.get(name)
    if info is None:
        raise BadInput(f"unknown probe {name!r}; choose from {', '.join(PROBES)}")
    emit = on_event or (lambda kind, data: None)
    run = new_probe_run(name, host)
    run["probe"]["args"] = list(args)
    if env:
        run["env"] = _env_for_record(env)
    warnings: list[str] = []
    writer = RunWriter(output, run)
    emit("start", {"path": str(writer.path), "id": run["id"]})
    try:
        _launches(writer, host, name, args, launches, env, timeout, snapshot, emit, warnings)
    except (_UsageAbort, _BusyAbort):
        writer.path.unlink(missing_ok=True)  # nothing was measured: leave no record behind
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


def _launches(
    writer: RunWriter,
    host: Host,
    name: str,
    args: Sequence[str],
    launches: int,
    env: Mapping[str, str] | None,
    timeout: float | None,
    snapshot: bool,
    emit: EventCallback,
    warnings: list[str],
) -> None:
    if snapshot:
        emit("snapshot", {"when": "before"})
        snap, why = _snapshot(host)
        writer.run["snapshot_before"] = snap
        if why:
            warnings.append(f"snapshot before: {why}")
        writer.flush()
    limit = timeout or LAUNCH_CAP_S
    for i in range(launches):
        if i == 1 and timeout is None and writer.run["launches"][0]["status"] == "ok":
            # The first launch says how long one takes; a later one far past that is hung.
            limit = max(LAUNCH_MIN_S, LAUNCH_FACTOR * writer.run["launches"][0]["duration_s"])
        emit("launch_start", {"index": i, "of": launches})

        def start(stream: LaunchStream, i: int = i, limit: float = limit) -> CommandResult:
            return _run_once(host, name, [*args, "--launch-index", str(i)], stream, env, limit)

        def keep(launch: dict[str, Any], i: int = i) -> None:
            writer.add_launch(launch)
            emit("launch_end", {"index": i, "launch": launch})

        launch, stream, why = measure_launch(i, start, limit, keep, _progress_to(emit, i))
        kind = (stream.error or {}).get("kind")
        if why is not None and i == 0 and kind == "usage":
            raise _UsageAbort(why)
        if why is not None and i == 0 and kind == "busy":
            raise _BusyAbort(why)
        if i == 0 and stream.header is not None:
            _adopt_header(writer.run, stream.header)
        elif stream.header is not None and stream.header.get("config") != writer.run["probe"]["config"]:
            warnings.append(f"launch {i} ran with a different resolved config than launch 0")
        if warnings:
            writer.run["warnings"] = list(dict.fromkeys(warnings))
        keep(launch)
        if why is not None:
            if snapshot:
                _after(writer, host, emit, warnings)
            kept = sum(1 for la in writer.run["launches"] if la["status"] == "ok")
            raise ProbeError(f"launch {i} failed: {why} ({kept} earlier launch(es) kept in {writer.path})")
    if snapshot:
        _after(writer, host, emit, warnings)


def measure_launch(
    index: int,
    start: Callable[[LaunchStream], CommandResult],
    timeout: float | None,
    keep: Callable[[dict[str, Any]], None],
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[dict[str, Any], LaunchStream, str | None]:
    """One launch: `start(stream)` runs the probe, feeding its lines to the stream; returns the launch
    record, the stream and why it failed (None: ok). An interruption or a host failure records what
    arrived through `keep` before it propagates, so no finished cycle is lost."""
    stream = LaunchStream(on_progress=on_progress)
    started, t0 = now_iso(), time.monotonic()
    try:
        res = start(stream)
    except KeyboardInterrupt as e:
        keep(_finish_launch(stream, index, started, t0, None, "interrupted", interrupts.describe(e)))
        raise
    except Exception as e:  # the host failed (connection dropped): keep what arrived
        keep(_finish_launch(stream, index, started, t0, None, "error", " ".join(str(e).split())))
        raise
    why = stream.failure(res, timeout)
    return _finish_launch(stream, index, started, t0, res, "ok" if why is None else "error", why), stream, why


def _progress_to(emit: EventCallback, index: int) -> Callable[[dict[str, Any]], None]:
    return lambda p: emit("progress", {"index": index, **p})


class _UsageAbort(BadInput):
    """The probe refused its arguments: nothing was measured, so no record is left behind."""


class _BusyAbort(ProbeError):
    """The GPUs are held by other processes: nothing was measured, so no record is left behind."""


def _after(writer: RunWriter, host: Host, emit: EventCallback, warnings: list[str]) -> None:
    emit("snapshot", {"when": "after"})
    snap, why = _snapshot(host)
    writer.run["snapshot_after"] = snap
    if why:
        warnings.append(f"snapshot after: {why}")
        writer.run["warnings"] = list(dict.fromkeys(warnings))
    writer.flush()


def _adopt_header(run: dict[str, Any], header: dict[str, Any]) -> None:
    """The first header's resolved values (preset 'auto' -> the real one, layers that fit) define the run."""
    run["probe"]["version"] = str(header.get("version", "?"))
    run["probe"]["config"] = header.get("config", {})
    run["primary"] = header.get("primary", run["primary"])
    run["phases"] = list(header.get("phases", run["phases"]))
    run["units"] = dict(header.get("units", {}))
    if isinstance(header.get("better"), dict):  # which way is better per metric: regdiag/direction.py
        run["better"] = dict(header["better"])
    if isinstance(
        header.get("derived"), dict
    ):  # metric -> the one it is computed from (compare tests it once)
        run["derived"] = dict(header["derived"])
    if header.get("labels"):
        run["labels"] = header["labels"]
    if header.get("protocol") not in (None, PROTOCOL):
        run.setdefault("warnings", []).append(
            f"probe speaks protocol {header.get('protocol')}, regdiag {PROTOCOL}"
        )


def _finish_launch(
    stream: LaunchStream,
    index: int,
    started: str,
    t0: float,
    res: CommandResult | None,
    status: str,
    error: str | None,
) -> dict[str, Any]:
    launch: dict[str, Any] = {
        "index": index,
        "status": status,
        "error": error,
        "started": started,
        "duration_s": round(time.monotonic() - t0, 3),
        "returncode": None if res is None else res.returncode,
        **stream.to_launch(),
    }
    if status != "ok":
        launch["stderr_tail"] = list(stream.stderr_tail)[-8:]
    return launch


# ----------------------------------------------------------------------------- summaries for display


def _quartiles(xs: Sequence[float]) -> tuple[float, float, float]:
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def summarize_run(run: dict[str, Any]) -> dict[str, Any]:
    """Per metric (primary first, then phases, then the rest): median and IQR over the kept cycles of the
    ok launches, and the per-launch medians (the unit of evidence). For display, not for verdicts."""
    ok = [la for la in run.get("launches", []) if la.get("status") == "ok"]
    order = [run.get("primary"), *run.get("phases", [])]
    names: list[str] = [m for m in order if m]
    for la in ok:
        for m in la.get("samples", {}):
            if m not in names:
                names.append(m)
    metrics = []
    for m in names:
        per_launch = [statistics.median(la["samples"][m]) for la in ok if la.get("samples", {}).get(m)]
        pooled = [x for la in ok for x in la.get("samples", {}).get(m, [])]
        if not pooled:
            continue
        p25, med, p75 = _quartiles(pooled)
        metrics.append(
            {"metric": m, "unit": run.get("units", {}).get(m, ""), "median": med, "p25": p25, "p75": p75,
             "launch_medians": per_launch, "n": len(pooled)}
        )  # fmt: skip
    scalars: dict[str, Any] = {}
    for key in ("overhead_pct", "tok_s", "accept_len_mean", "copy_GBps"):
        vals = [la.get("scalars", {}).get(key) for la in ok]
        vals = [v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if vals:
            scalars[key] = statistics.median(vals)
    clocks = [c for la in ok for c in la.get("clocks", []) if isinstance(c.get("sm_mhz"), (int, float))]
    clock = None
    if clocks:
        sm = [c["sm_mhz"] for c in clocks]
        reasons = sorted(
            {r for c in clocks for r in (c.get("reasons") or []) if r not in ("none", "gpu_idle")}
        )
        clock = {"sm_mhz_min": min(sm), "sm_mhz_median": statistics.median(sm), "sm_mhz_max": max(sm),
                 "reasons": reasons, "samples": len(clocks)}  # fmt: skip
    from regdiag.comm import comm_shares

    return {
        "comm": {c.phase: c.to_dict() for c in comm_shares(run)},
        "id": run.get("id"),
        "status": run.get("status"),
        "probe": run.get("probe", {}).get("name"),
        "config": run.get("probe", {}).get("config", {}),
        "launches": len(run.get("launches", [])),
        "ok_launches": len(ok),
        "metrics": metrics,
        "scalars": scalars,
        "clocks": clock,
        "accept_len_simulated": any(la.get("scalars", {}).get("accept_len_simulated") for la in ok),
        "warnings": run.get("warnings", []),
        "sizes": collective_sizes(ok),
    }


def collective_sizes(ok: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A collectives run as nccl-tests prints it: one row per (op, bytes) with latency and busbw of each
    mode side by side, each the median over launches of the footer table's value. [] for other probes."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for la in ok:
        for r in (la.get("footer") or {}).get("table") or []:
            if not isinstance(r, dict) or not isinstance(r.get("bytes"), int):
                continue
            key = (str(r.get("op", "all_reduce")), r["bytes"])
            row = rows.setdefault(key, {"op": key[0], "bytes": key[1], "label": r.get("label", ""), "_m": {}})
            mode = str(r.get("mode", "eager"))
            row["_m"].setdefault(mode, {"us": [], "busbw_GBps": []})
            for k in ("us", "busbw_GBps"):
                if isinstance(r.get(k), (int, float)):
                    row["_m"][mode][k].append(float(r[k]))
    out = []
    for row in rows.values():
        for mode, vals in row.pop("_m").items():
            for k, xs in vals.items():
                row[f"{mode}_{k}"] = statistics.median(xs) if xs else None
        out.append(row)
    return out


def probe_args(options: Mapping[str, Any]) -> list[str]:
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


if __name__ == "__main__":  # pragma: no cover - debugging aid: python -m regdiag.probe_runner NAME ARGS
    from regdiag.hosts.local import LocalHost

    r = run_probe(LocalHost(), sys.argv[1], sys.argv[2:], launches=1)
    print(r.path)
