"""Run the user's engine with the hook, drive it, and turn the hook's lines into launch records.

Each launch: a private temp dir on the host gets the hook package and its configuration; the engine
starts under the server launcher (regdiag/server/launch.py: own process group, stopped with regdiag)
with the hook's directory prepended to PYTHONPATH, so every Python process it starts (workers
included) loads the hook; then either regdiag sends requests (--url) or the command runs to its end.
The hook writes one file per process; the launch's phase times per cycle are the maximum over the
processes that timed cycles (the tensor-parallel ranks), as the spec-decode probe does.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regdiag.errors import BadInput, ProbeError
from regdiag.host_phantom import flag_run
from regdiag.hosts.base import Host
from regdiag.measure.launch import command
from regdiag.measure.stream import PROTOCOL, LaunchStream
from regdiag.probe_modules import probes_dir
from regdiag.runs import RunWriter, now_iso
from regdiag.server.client import Endpoint
from regdiag.server.launch import LaunchError, ServerProcess
from regdiag.server.load import LoadSpec, run_load
from regdiag.server.record import new_launch

from .acceptance import launch_acceptance, per_position_rates
from .acceptance import warnings as acceptance_warnings
from .presets import Targets
from .profiled import launch_profile

HOOK_FILES = (
    "sitecustomize.py",
    "regdiag_phase_timer.py",
    "regdiag_phase_readers.py",
    "regdiag_phase_profile.py",
)
LOADED_FILE = "regdiag_loaded.py"
PROFILE_FILE = "regdiag_profile.py"  # probes/_profile.py: --profile's reading, in the engine's processes

# Prepends the hook to PYTHONPATH and becomes the engine (exec: same PID, same process group).
EXEC_WITH_HOOK = (
    "import os, sys\n"
    "e = os.environ.get('PYTHONPATH')\n"
    "os.environ['PYTHONPATH'] = sys.argv[1] + (os.pathsep + e if e else '')\n"
    "os.environ['REGDIAG_ENGINE_HOOK'] = sys.argv[2]\n"
    "try:\n"
    "    os.execvp(sys.argv[3], sys.argv[3:])\n"
    "except OSError as e:\n"  # one line for the error message, as a shell says it, not a traceback
    "    sys.stderr.write(f'cannot start {sys.argv[3]}: {e.strerror}\\n')\n"
    "    sys.exit(127)\n"
)
READER = (
    "import os, sys\n"
    "d = sys.argv[1]\n"
    "for n in sorted(os.listdir(d)):\n"
    "    with open(os.path.join(d, n), encoding='utf-8', errors='replace') as f:\n"
    "        sys.stdout.write(f.read())\n"
)

Event = Callable[[str, dict[str, Any]], None]


def hook_dir() -> Path:
    d = probes_dir()
    if d is not None and (d / "_engine_hook" / HOOK_FILES[0]).is_file():
        return d / "_engine_hook"
    raise ProbeError("the engine hook (probes/_engine_hook) is not found beside regdiag")


@dataclass
class EngineProbe:
    host: Host
    argv: list[str]
    targets: Targets
    env: dict[str, str] = field(default_factory=dict)
    launches: int = 3
    warmup: int = 2
    block: int = 1
    ep: Endpoint | None = None
    load: LoadSpec | None = None
    prompts: Sequence[str] = ()
    timeout_s: float = 1800.0
    stop_grace_s: float = 30.0
    reuse: bool = True  # launches share engine starts where they can (engine/reuse.py)
    profile_cycles: int = 0  # --profile: cycles after the warm-up under torch.profiler (engine/profiled.py)


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def paired_overhead(cycles: list[dict[str, Any]]) -> tuple[float, int] | None:
    """Median over adjacent (instrumented, bare) blocks of the relative difference of their medians:
    pairing cancels the drift within a launch (an engine's cycles slow down as its KV cache grows)."""
    runs: list[tuple[bool, list[float]]] = []
    for c in cycles:
        if c.get("warmup") or "cycle" not in (c.get("t") or {}):
            continue
        bare = bool(c.get("bare"))
        if runs and runs[-1][0] == bare:
            runs[-1][1].append(c["t"]["cycle"])
        else:
            runs.append((bare, [c["t"]["cycle"]]))
    diffs = []
    for (b1, x1), (_, x2) in zip(runs, runs[1:], strict=False):
        inst, bare_ms = (x2, x1) if b1 else (x1, x2)
        mb = statistics.median(bare_ms)
        if mb > 0:
            diffs.append((statistics.median(inst) - mb) / mb * 100)
    return (round(statistics.median(diffs), 3), len(diffs)) if diffs else None


def combine(streams: list[LaunchStream]) -> dict[str, Any]:
    """One launch from the processes' streams: per cycle index, the slowest process's times."""
    timed = [s for s in streams if s.cycles]
    if not timed:
        return {"samples": {}, "values": {}, "scalars": {}, "warmup_dropped": 0}
    for s in timed:
        file_periods(s.cycles)
    if len(timed) == 1:
        merged = timed[0]
    else:
        merged = LaunchStream()
        merged.header = timed[0].header
        by_i: dict[int, dict[str, Any]] = {}
        for s in timed:
            for c in s.cycles:
                m = by_i.setdefault(c["i"], {**c, "t": {}})
                for k, v in (c.get("t") or {}).items():
                    m["t"][k] = max(v, m["t"].get(k, v))
        merged.cycles = [by_i[i] for i in sorted(by_i)]
    launch = merged.to_launch()
    launch["processes_timed"] = len(timed)
    kept = [c for c in merged.cycles if not c.get("warmup") and not c.get("bare")]
    phases = [p for p in ((merged.header or {}).get("phases") or []) if isinstance(p, str)]
    launch.update(per_cycle_facts(kept, phases))
    _scalars(launch, merged.cycles, kept, phases)
    rates = per_position_rates(launch["values"])  # taken out of the per-cycle values: one curve a launch
    if rates:
        launch["engine_counters"] = {
            "per_position_rate": rates,
            "source": "the hook's rejection-sampler reads",
        }
    acc = launch_acceptance(launch["values"])
    if acc is not None:
        launch["acceptance"] = acc
    return launch


def file_periods(cycles: list[dict[str, Any]]) -> None:
    """The hook writes each cycle's start-to-start period on the next cycle's line (it is known only
    then): file it under its own cycle, `t.period` (and `values.host_period` on the host clock)."""
    by_i = {c.get("i"): c for c in cycles}
    for c in cycles:
        prev = by_i.get(c["i"] - 1) if isinstance(c.get("i"), int) else None
        if prev is None:
            continue
        if isinstance(c.get("prev_period"), (int, float)):
            prev.setdefault("t", {})["period"] = c["prev_period"]
        if isinstance(c.get("prev_host_period"), (int, float)) and not prev.get("bare"):
            prev.setdefault("values", {})["host_period"] = c["prev_host_period"]


def per_cycle_facts(kept: list[dict[str, Any]], phases: list[str]) -> dict[str, Any]:
    """How often each phase ran, which never did (absent: no samples, never zeros), and the share of
    cycles each phase ran as a CUDA graph where the engine said so."""
    calls: dict[str, list[int]] = {}
    graph: dict[str, list[bool]] = {}
    modes: dict[str, dict[str, int]] = {}
    for c in kept:
        for k, v in (c.get("calls") or {}).items():
            calls.setdefault(k, []).append(v)
        for k, v in (c.get("graph") or {}).items():
            graph.setdefault(k, []).append(bool(v))
        for k, v in (c.get("graph_mode") or {}).items():
            modes.setdefault(k, {})[str(v)] = modes.setdefault(k, {}).get(str(v), 0) + 1
    out: dict[str, Any] = {
        "calls_per_cycle": {k: round(statistics.fmean(v), 3) for k, v in calls.items()},
        "phase_cycles": {p: len(calls.get(p, [])) for p in phases},
        "phases_absent": [p for p in phases if p not in calls],
    }
    if graph:
        out["graph_share"] = {k: round(sum(v) / len(v), 4) for k, v in graph.items()}
    if modes:
        out["graph_modes"] = modes
    return out


def _scalars(
    launch: dict[str, Any], cycles: list[dict[str, Any]], kept: list[dict[str, Any]], phases: list[str]
) -> None:
    cyc = launch["samples"].get("cycle", [])
    bare = (launch.get("bare_samples") or {}).get("cycle", [])
    scalars = launch["scalars"]
    # The share of the cycle in no phase, per cycle, over the phases that ran in it.
    gaps = [
        abs(t["cycle"] - sum(t.get(p, 0.0) for p in phases)) / t["cycle"] * 100
        for t in (c.get("t") or {} for c in kept)
        if t.get("cycle", 0) > 0
    ]
    if gaps:
        scalars["phase_sum_gap_pct_median"] = round(statistics.median(gaps), 3)
    mi, mb = _median(cyc), _median(bare)
    if mi and mb:
        scalars["overhead_unpaired_pct"] = round((mi - mb) / mb * 100, 3)
    paired = paired_overhead(cycles)
    if paired is not None:
        scalars["overhead_pct"], scalars["overhead_pairs"] = paired
    period = _median(launch["samples"].get("period", []))
    if period and mi:
        # Start to start against the cycle itself: the engine's time between cycles (scheduling,
        # output processing), which a stream's token period includes and the GPU cycle does not.
        scalars["period_ms_median"] = round(period, 4)
        scalars["between_cycles_ms"] = round(period - mi, 4)
        scalars["between_cycles_pct"] = round((period - mi) / period * 100, 3)
    acc = [v for v in launch["values"].get("accept_len", []) if v is not None]
    if acc and mi:
        scalars["accept_len_mean"] = round(statistics.fmean(acc), 4)
        scalars["tok_s"] = round(statistics.fmean(acc) / mi * 1000, 3)
        scalars["accept_len_source"] = "engine"
        if period:
            scalars["tok_s_period"] = round(statistics.fmean(acc) / period * 1000, 3)


def read_streams(host: Host, out_dir: str) -> list[LaunchStream]:
    res = command(host, [host.python, "-c", READER, out_dir], timeout=120)
    streams: dict[int, LaunchStream] = {}
    for line in res.stdout.decode("utf-8", "replace").splitlines():
        try:
            pid = int(json.loads(line).get("pid", 0))
        except (ValueError, AttributeError):
            pid = 0
        streams.setdefault(pid, LaunchStream()).stdout_line(line)
    return list(streams.values())


def prepare_hook(
    host: Host, tmp: str, probe: EngineProbe, extra: dict[str, Any] | None = None
) -> tuple[str, str, str]:
    hook = f"{tmp}/hook"
    out = f"{tmp}/out"
    command(
        host, [host.python, "-c", "import os, sys\nfor d in sys.argv[1:]: os.makedirs(d, 0o700)", hook, out]
    )
    src = hook_dir()
    for name in HOOK_FILES:
        host.put_file(src / name, f"{hook}/{name}")
    # what each engine process loaded (probes/_loaded.py), read by the hook's footer from beside it
    host.put_file(src.parent / "_loaded.py", f"{hook}/{LOADED_FILE}")
    host.put_file(src.parent / "_profile.py", f"{hook}/{PROFILE_FILE}")
    cfg = {
        **probe.targets.config(),
        "out_dir": out,
        "warmup": probe.warmup,
        "block": probe.block,
        **({"profile": {"cycles": probe.profile_cycles}} if probe.profile_cycles else {}),
        **(extra or {}),
    }
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "hook.json"
        p.write_text(json.dumps(cfg))
        host.put_file(p, f"{tmp}/hook.json")
    return hook, f"{tmp}/hook.json", out


def fill_launch(
    launch: dict[str, Any], streams: list[LaunchStream]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """The launch's measurements from the hook's streams; returns (usage errors, other errors, patched)."""
    usage = [s.error for s in streams if s.error and s.error.get("kind") == "usage"]
    errors = [s.error for s in streams if s.error and s.error.get("kind") != "usage"]
    launch.update(combine(streams))
    launch_profile(streams, launch)
    headers = [s.header for s in streams if s.header]
    launch["header"] = {**(headers[0] if headers else {}), "processes": len(streams)}
    launch["header"].pop("pid", None)
    footers = [s.footer for s in streams if s.footer]
    patched = sorted(
        {t for f in footers for t in f.get("patched", [])}
        | {t for h in headers for t in h.get("patched", [])}
    )
    never = sorted({t for f in footers for t in f.get("never_imported", [])})
    launch["hook"] = {"patched": patched, "never_imported": never}
    launch["loaded"] = _loaded_union(footers)
    return usage, errors, patched


def _loaded_union(footers: list[dict[str, Any]]) -> list[dict[str, str]] | None:
    """The distributions any process of the engine loaded (None when no process said)."""
    told = [f["loaded"] for f in footers if isinstance(f.get("loaded"), list)]
    if not told:
        return None
    seen = {(d.get("name"), d.get("path")): d for lst in told for d in lst if isinstance(d, dict)}
    return [seen[k] for k in sorted(seen, key=str)]


def _drive(probe: EngineProbe, server: ServerProcess, launch: dict[str, Any]) -> str | None:
    """Start the engine, then send the requests (--url) or wait for the command to end; the failure, if any."""
    server.start()
    if probe.ep is None:
        if not server.wait_exit(probe.timeout_s):
            return f"the engine command did not finish within {probe.timeout_s:g} s (stopped it)"
        if server.returncode not in (0, None):
            return server.exit_note("with an error")
        return None
    server.wait_healthy(probe.ep, probe.timeout_s)
    return send_load(probe, server, launch)


def send_load(probe: EngineProbe, server: ServerProcess, launch: dict[str, Any]) -> str | None:
    """The launch's requests to the healthy engine (--url); the failure, if any."""
    assert probe.ep is not None and probe.load is not None
    server.window(True)  # the host and GPU samples' measured window is the load's
    results, wall = run_load(probe.ep, probe.prompts, probe.load)
    server.window(False)
    ok = [r for r in results if r.ok]
    launch["load"] = {
        "requests": len(results),
        "ok": len(ok),
        "wall_s": round(wall, 3),
        "output_tokens": sum(r.output_tokens or 0 for r in ok),
    }
    if not ok:
        return f"every request failed: {results[0].error if results else 'none sent'}"
    return None


def _measure_launch(probe: EngineProbe, writer: RunWriter, launch: dict[str, Any]) -> str | None:
    """One engine start under the hook, into `launch`; the failure, if any. Raises BadInput when the
    hook refused its configuration (a usage error: no further launch can do better)."""
    t0 = time.monotonic()
    with probe.host.tempdir() as tmp:
        hook, cfg, out = prepare_hook(probe.host, tmp, probe)
        argv = [probe.host.python, "-c", EXEC_WITH_HOOK, hook, cfg, *probe.argv]
        server = ServerProcess(probe.host, argv, probe.env, grace_s=probe.stop_grace_s)
        failure: str | None = None
        try:
            failure = _drive(probe, server, launch)
        except LaunchError as e:
            failure = str(e)
        finally:
            # Also on Ctrl-C / SIGTERM: stop the engine, keep every cycle it wrote.
            launch["server_process"] = server.stop()
            streams = read_streams(probe.host, out)
            usage, errors, patched = fill_launch(launch, streams)
            server.record_into(launch)  # the host and GPU samples beside the engine
            launch["duration_s"] = round(time.monotonic() - t0, 3)
            writer.flush()
    return judge(probe, writer, launch, failure, (usage, errors, patched))


def judge(
    probe: EngineProbe,
    writer: RunWriter,
    launch: dict[str, Any],
    failure: str | None,
    told: tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]],
) -> str | None:
    """The launch's failure from what the hook told (fill_launch's answer); raises BadInput on a usage
    error (no further launch can do better)."""
    usage, errors, patched = told
    if usage:
        launch["status"], launch["error"] = "error", str(usage[0].get("message"))
        writer.flush()
        raise BadInput(launch["error"])
    if failure is None and errors:
        failure = f"the engine hook: {errors[0].get('message')}"
    if failure is None and not launch["samples"]:
        missing = [t for _, t in probe.targets.all() if t not in patched]
        failure = (
            "the engine ran but no cycle was timed; targets never patched (module never imported "
            f"by any process of the engine): {', '.join(missing) or 'none'}"
        )
    return failure


def run_engine(
    probe: EngineProbe, writer: RunWriter, on_event: Event | None = None, why: str | None = None
) -> None:
    """Each launch its own engine start (engine/reuse.py's run_launches chooses); `why` says why."""
    emit = on_event or (lambda kind, data: None)
    if probe.launches > 1 and why is not None:
        writer.run["probe"]["start"] = {"mode": "fresh", "why": why}
    for li in range(probe.launches):
        launch = new_launch(len(writer.run["launches"]), now_iso())
        launch.update({"start": "fresh", "engine_start": li})  # each launch its own engine start
        writer.add_launch(launch)
        emit("launch_start", {"launch": li, "of": probe.launches})
        failure = _measure_launch(probe, writer, launch)
        launch["status"], launch["error"] = ("ok", None) if failure is None else ("error", failure)
        writer.flush()
        emit("launch_end", {"launch": li, "record": launch})
        if failure is not None:
            raise ProbeError(f"launch {li}: {failure}")
    finish_run(writer)


def finish_run(writer: RunWriter) -> None:
    """The run's warnings once its launches are in."""
    flag_run(writer.run)  # launches whose host stood out from the others' (docs/statistics.md)
    # acceptance as a signal: a drifting accept length, a verify size that varied (docs/engine.md)
    found = acceptance_warnings(writer.run["launches"])
    writer.run["warnings"] = list(dict.fromkeys([*writer.run.get("warnings", []), *found]))
    writer.flush()


def protocol_lines(run: dict[str, Any], la: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The run's one launch (or `la`) as probe-protocol lines (docs/probes.md), for `bisect --command`."""
    la = run["launches"][0] if la is None else la
    hdr = la.get("header") or {}
    lines: list[dict[str, Any]] = [
        {
            "type": "header",
            "protocol": PROTOCOL,
            "probe": "engine",
            "version": run["probe"]["version"],
            "config": run["probe"]["config"],
            "primary": run["primary"],
            "phases": run["phases"],
            "units": run["units"],
            "timer": hdr.get("timer"),
            "engine_versions": hdr.get("engine_versions"),
        }
    ]
    samples, values = la["samples"], la["values"]
    # A phase that ran in only some cycles (absent in the others) and the period (known from the
    # second cycle on) have fewer samples than the cycle: each metric's line k is its own k-th sample,
    # which is all a consumer of these lines keeps (bisect: each metric's median over its samples).
    for k in range(len(samples.get("cycle", []))):
        t = {m: v[k] for m, v in samples.items() if k < len(v)}
        line: dict[str, Any] = {"type": "cycle", "i": k, "t": t}
        vals = {m: v[k] for m, v in values.items() if k < len(v)}
        if vals:
            line["values"] = vals
        lines.append(line)
    for v in (la.get("bare_samples") or {}).get("cycle", []):
        lines.append({"type": "cycle", "bare": True, "t": {"cycle": v}})
    lines.append(
        {
            "type": "footer",
            "cycles": len(samples.get("cycle", [])),
            "warmup_dropped": la.get("warmup_dropped", 0),
            "scalars": la.get("scalars", {}),
            "loaded": la.get("loaded"),
            # what the engine chose at start: a bisect names a change of it beside its culprit
            **({"engine_config": la["engine_config"]} if isinstance(la.get("engine_config"), dict) else {}),
            # a launch of a shared engine start (engine/reuse.py): which start, and whether it began it
            **{k: la[k] for k in ("start", "engine_start", "engine_start_s") if la.get(k) is not None},
        }
    )
    return lines
