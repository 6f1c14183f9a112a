"""Shared by the probe scripts: the JSON-lines protocol, the rank supervisor, the NVML clock sampler.

Standard library only (pynvml when importable): the supervisor never imports torch, so a probe whose
ranks fail to import torch still reports that in one line. See docs/probes.md for the protocol.

Process layout of every probe launch:

    supervisor (this module, no torch)  -- owns stdout: forwards rank 0's protocol lines,
      |                                    adds clock samples to the footer, writes the error line
      +-- rank 0 .. rank N-1            -- `python probe.py ARGS --_rank r --_world N --_port P`

A rank that dies takes the launch with it: the supervisor kills the other ranks (which would block
in a collective forever) and prints one error line naming the rank.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

PROTOCOL = 1
PROGRESS_PREFIX = "regdiag-progress "
RANK_ERROR_PREFIX = "regdiag-probe-error "

# A lent multi-GPU machine requires NVLink multicast off in every process (it can take the host's
# GPUs out of service); set where the user has not set them, and say so in the header.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

# Test hooks, documented in docs/probes.md: they do real work (slow) or really kill a rank (crash).
SLOW_ENV = "REGDIAG_PROBE_SLOW"  # "verify:2.0,draft:0.5" = add that many ms of busy work to the phase
CRASH_ENV = "REGDIAG_PROBE_CRASH"  # "RANK@LAUNCH" = that rank exits abruptly in that launch


def apply_env_defaults() -> dict[str, str]:
    """Set the multicast-off variables where unset; return the ones this call set."""
    applied = {}
    for k, v in MULTICAST_OFF.items():
        if k not in os.environ:
            os.environ[k] = v
            applied[k] = v
    return applied


def env_vars(
    prefixes: tuple[str, ...] = ("NCCL_", "TORCH_NCCL_", "NVSHMEM_", "TORCH_SYMM_MEM_"),
) -> dict[str, str]:
    """The communication-relevant variables this process sees (values of NCCL knobs are not secrets)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


# ---------------------------------------------------------------------------------------- protocol


class Emitter:
    """Writes protocol lines to stdout, one JSON object per line, flushed, thread-safe."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()

    def emit(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, allow_nan=False, separators=(",", ":"))
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()


class Progress:
    """Progress lines on stderr for the regdiag progress bar; at most ~10 a second."""

    def __init__(self, min_interval_s: float = 0.1) -> None:
        self.min_interval_s = min_interval_s
        self._last = 0.0

    def __call__(
        self, stage: str, done: int | None = None, total: int | None = None, force: bool = False
    ) -> None:
        now = time.monotonic()
        final = done is not None and total is not None and done >= total
        if not (force or final or now - self._last >= self.min_interval_s):
            return
        self._last = now
        obj: dict[str, Any] = {"stage": stage}
        if done is not None:
            obj["done"] = done
        if total is not None:
            obj["total"] = total
        sys.stderr.write(PROGRESS_PREFIX + json.dumps(obj, separators=(",", ":")) + "\n")
        sys.stderr.flush()


def rank_error(message: str, kind: str = "error") -> None:
    """How a rank reports a fatal problem: one line on stderr that the supervisor turns into the error line."""
    sys.stderr.write(RANK_ERROR_PREFIX + json.dumps({"kind": kind, "message": one_line(message)}) + "\n")
    sys.stderr.flush()


def one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class UsageError(Exception):
    """Bad arguments or a configuration this probe cannot run; reported with kind 'usage'."""


class ProbeArgParser(argparse.ArgumentParser):
    """argparse that reports errors as one protocol error line (kind 'usage') and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        Emitter().emit({"type": "error", "kind": "usage", "rank": None, "message": one_line(message)})
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def add_rank_args(p: argparse.ArgumentParser) -> None:
    """Internal arguments the supervisor passes to each rank (not for users)."""
    p.add_argument("--_rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_world", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_port", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_t0", type=float, default=None, help=argparse.SUPPRESS)


def parse_crash(spec: str | None, env: str | None) -> tuple[int, int] | None:
    """'--crash-rank R --crash-at-launch L' or REGDIAG_PROBE_CRASH='R@L' -> (R, L)."""
    text = spec or env
    if not text:
        return None
    try:
        r, _, la = text.partition("@")
        return int(r), int(la or 0)
    except ValueError:
        raise UsageError(f"crash hook {text!r}: expected RANK@LAUNCH, e.g. 1@2") from None


def parse_slow(items: list[str] | None, env: str | None, phases: list[str]) -> dict[str, float]:
    """'verify:2.0' (repeatable, or comma-separated in REGDIAG_PROBE_SLOW) -> {'verify': 2.0} in ms."""
    out: dict[str, float] = {}
    specs = list(items or [])
    if env:
        specs += [s for s in env.split(",") if s.strip()]
    for spec in specs:
        name, _, ms = spec.strip().partition(":")
        if name not in phases:
            raise UsageError(f"slow-phase {spec!r}: phase must be one of {', '.join(phases)}")
        try:
            val = float(ms)
        except ValueError:
            raise UsageError(f"slow-phase {spec!r}: expected PHASE:MS, e.g. verify:2.0") from None
        if val < 0:
            raise UsageError(f"slow-phase {spec!r}: milliseconds must be >= 0")
        out[name] = out.get(name, 0.0) + val
    return out


def summary(values: list[float]) -> dict[str, float]:
    """Median and quartiles, stdlib only."""
    if not values:
        return {}
    s = sorted(values)

    def q(p: float) -> float:
        pos = p * (len(s) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    return {"median": q(0.5), "p25": q(0.25), "p75": q(0.75), "min": s[0], "max": s[-1], "n": len(s)}


# --------------------------------------------------------------------------------------- supervisor


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def watch_parent() -> None:
    """A rank whose supervisor vanished (kill -9) exits instead of blocking in a collective forever."""
    parent = os.getppid()

    def loop() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=loop, daemon=True, name="parent-watch").start()


def supervise(
    script: str,
    argv: list[str],
    world: int,
    *,
    gpu_sampling: bool = True,
    decorate_header: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Start `world` ranks of `script`, forward rank 0's protocol lines, and watch for a dead rank.

    Returns the exit status for the probe process: 0, 1 (a rank failed), 2 (usage), 130/143 (signal).
    """
    emitter = Emitter()
    t0 = time.time()
    applied = apply_env_defaults()
    port = free_port()
    env = dict(os.environ)
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world)})
    env.setdefault("PYTHONUNBUFFERED", "1")
    sampler = ClockSampler(world) if gpu_sampling else None
    if sampler is not None:
        sampler.start()
    procs: list[subprocess.Popen[bytes]] = []
    last_err: list[deque[str]] = [deque(maxlen=8) for _ in range(world)]
    rank_errors: list[dict[str, Any] | None] = [None] * world
    header_seen = threading.Event()
    footer_seen = threading.Event()
    device_kind: list[str] = ["cpu"]

    def pump_stderr(r: int, stream: Any) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith(RANK_ERROR_PREFIX):
                try:
                    rank_errors[r] = json.loads(line[len(RANK_ERROR_PREFIX) :])
                except json.JSONDecodeError:
                    rank_errors[r] = {"kind": "error", "message": line[len(RANK_ERROR_PREFIX) :]}
                continue
            if line.strip():
                last_err[r].append(line)
            if r == 0 or not line.startswith(PROGRESS_PREFIX):
                sys.stderr.write(line + "\n" if r == 0 else f"[rank {r}] {line}\n")
                sys.stderr.flush()
        stream.close()

    def pump_stdout(stream: Any) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                # Not ours (a library printing to stdout): keep stdout clean, show it on stderr.
                sys.stderr.write(f"[rank 0 stdout] {line}\n")
                continue
            if not isinstance(obj, dict):
                continue
            kind = obj.get("type")
            if kind == "header":
                device_kind[0] = str(obj.get("device", {}).get("type", "cpu"))
                obj["supervisor"] = {
                    "env_defaults_applied": applied,
                    "clock_sampler": _sampler_status(sampler),
                }
                if decorate_header is not None:
                    decorate_header(obj)
                header_seen.set()
            elif kind == "footer":
                if sampler is not None:
                    sampler.stop()
                    if device_kind[0] == "cuda":
                        obj.update(sampler.result(t0))
                obj.setdefault("clocks", [])
                obj["launch_wall_s"] = round(time.time() - t0, 3)
                footer_seen.set()
            emitter.emit(obj)
        stream.close()

    def stop_all(sig: int = signal.SIGTERM) -> None:
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 3.0
        for p in procs:
            try:
                p.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    received: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        received.append(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    threads: list[threading.Thread] = []
    try:
        for r in range(world):
            cmd = [
                sys.executable,
                script,
                *argv,
                "--_rank",
                str(r),
                "--_world",
                str(world),
                "--_port",
                str(port),
            ]
            cmd += ["--_t0", repr(t0)]
            p = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            )
            procs.append(p)
            t = threading.Thread(target=pump_stderr, args=(r, p.stderr), daemon=True)
            t.start()
            threads.append(t)
            if r == 0:
                t = threading.Thread(target=pump_stdout, args=(p.stdout,), daemon=True)
                t.start()
                threads.append(t)
        failed: tuple[int, int] | None = None
        while True:
            if received:
                stop_all()
                return 128 + received[0]
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                failed = bad[0]
                # A rank that exits non-zero first is the cause; others die of its absence.
                break
            if all(c == 0 for c in codes):
                break
            time.sleep(0.05)
        if failed is not None:
            stop_all()
            if received:  # Ctrl-C reached the ranks before the supervisor noticed: an interruption
                return 128 + received[0]
        for t in threads:
            t.join(timeout=5.0)
        if sampler is not None:
            sampler.stop()
        if failed is None:
            if not footer_seen.is_set():
                emitter.emit(
                    {"type": "error", "kind": "error", "rank": 0, "message": "rank 0 exited without a footer"}
                )
                return 1
            return 0
        r, code = failed
        info = rank_errors[r]
        if info is None:
            tail = last_err[r][-1] if last_err[r] else ""
            how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
            msg = f"rank {r} {how}" + (f": {tail}" if tail else "")
            kind = "crash"
        else:
            msg = f"rank {r}: {info.get('message', '')}" if world > 1 else str(info.get("message", ""))
            kind = str(info.get("kind", "error"))
        emitter.emit({"type": "error", "kind": kind, "rank": r, "message": one_line(msg)})
        return 2 if kind == "usage" else 1
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for p in procs:
            if p.poll() is None:
                p.kill()


# ------------------------------------------------------------------------------------ NVML sampler

_REASONS = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
]


def reason_names(mask: int) -> list[str]:
    names = [n for bit, n in _REASONS if mask & bit]
    return names or ["none"]


def _sampler_status(sampler: ClockSampler | None) -> str:
    if sampler is None:
        return "off"
    return sampler.status


class ClockSampler:
    """Samples SM/memory clocks, power, temperature and clock-event reasons every ~50 ms through NVML,
    and the violation (throttle-time) counters before and after. Without pynvml or a driver it records
    nothing and says why in `status`."""

    POLICIES = ("POWER", "THERMAL", "SYNC_BOOST", "BOARD_LIMIT", "LOW_UTILIZATION", "RELIABILITY")
    MAX_SAMPLES = 6000  # per launch; beyond it every other sample is dropped (the trace keeps its shape)

    def __init__(self, world: int, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.samples: list[dict[str, Any]] = []
        self.status = "nvml"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.time()
        self.before: dict[str, dict[str, int]] = {}
        self.after: dict[str, dict[str, int]] = {}
        self.handles: list[tuple[int, Any]] = []
        try:
            import pynvml  # type: ignore[import-not-found]

            self.nv = pynvml
            pynvml.nvmlInit()
        except Exception as e:  # no package, no driver: record nothing, say why
            self.status = f"unavailable: {one_line(type(e).__name__ + ': ' + str(e), 120)}"
            self.nv = None
            return
        try:
            for logical, handle in enumerate(self._visible_handles()[:world]):
                self.handles.append((logical, handle))
        except Exception as e:
            self.status = f"unavailable: {one_line(str(e), 120)}"
            self.handles = []
        if not self.handles and self.status == "nvml":
            self.status = "unavailable: no GPU visible to NVML"

    def _visible_handles(self) -> list[Any]:
        nv = self.nv
        vis = os.environ.get("CUDA_VISIBLE_DEVICES")
        if vis is None:
            return [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        out = []
        for item in [v.strip() for v in vis.split(",") if v.strip()]:
            if item.isdigit():
                out.append(nv.nvmlDeviceGetHandleByIndex(int(item)))
            else:
                out.append(nv.nvmlDeviceGetHandleByUUID(item))
        return out

    def _violations(self) -> dict[str, dict[str, int]]:
        nv = self.nv
        out: dict[str, dict[str, int]] = {}
        for logical, h in self.handles:
            d: dict[str, int] = {}
            for name in self.POLICIES:
                const = getattr(nv, f"NVML_PERF_POLICY_{name}", None)
                if const is None:
                    continue
                try:
                    d[name.lower()] = int(nv.nvmlDeviceGetViolationStatus(h, const).violationTime)
                except Exception:
                    continue
            out[str(logical)] = d
        return out

    def _reasons(self, h: Any) -> int:
        nv = self.nv
        # The event-reasons name replaced the throttle-reasons one in newer nvidia-ml-py.
        fn = (
            getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return int(fn(h))

    def _sample(self) -> None:
        nv = self.nv
        t = round(time.time() - self._t0, 4)
        for logical, h in self.handles:
            s: dict[str, Any] = {"t": t, "gpu": logical}
            for key, fn in (
                ("sm_mhz", lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                ("mem_mhz", lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
                ("power_w", lambda h=h: round(nv.nvmlDeviceGetPowerUsage(h) / 1000.0, 1)),
                ("temp_c", lambda h=h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                ("reasons", lambda h=h: reason_names(self._reasons(h))),
            ):
                try:
                    s[key] = fn()
                except Exception:  # one field NotSupported on this GPU: keep the others
                    s[key] = None
            self.samples.append(s)
        if len(self.samples) > self.MAX_SAMPLES:
            self.samples = self.samples[::2]

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            self._sample()
            # NVML calls cost ~1 ms each; keep the period, not the gap, at interval_s.
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t)))

    def start(self) -> None:
        if not self.handles:
            return
        self._t0 = time.time()
        self.before = self._violations()
        self._thread = threading.Thread(target=self._run, daemon=True, name="nvml-sampler")
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None or self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.after = self._violations()

    def result(self, t0: float) -> dict[str, Any]:
        shift = round(self._t0 - t0, 4)
        clocks = [{**s, "t": round(s["t"] + shift, 4)} for s in self.samples]
        delta: dict[str, dict[str, int]] = {}
        for gpu, d in self.after.items():
            b = self.before.get(gpu, {})
            delta[gpu] = {k: v - b.get(k, 0) for k, v in d.items() if k in b}
        return {"clocks": clocks, "violations_ns": delta, "clock_sampler": self.status}
