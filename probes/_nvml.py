"""NVML for the probes and for regdiag's snapshot: the one table of clock-event reason bits, the clock
sampler that runs beside every GPU launch, and the list of processes that hold memory on a GPU.

Standard library only, pynvml when importable; no imports of other probe modules, so regdiag loads this
file too (regdiag/probe_modules.py) and the reason names cannot drift between a probe and a snapshot.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

# Clock-event ("throttle") reason bits, from nvml.h (nvmlClocksEventReason*).
REASON_BITS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)


def reason_names(mask: int) -> list[str]:
    """['none'] for 0; unknown bits as one hex string, so a newer driver's reason is not lost."""
    if mask == 0:
        return ["none"]
    names = [name for bit, name in REASON_BITS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in REASON_BITS)
    if rest:
        names.append(hex(rest))
    return names


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load() -> Any:
    """pynvml, initialised; raises whatever the import or nvmlInit raises."""
    import pynvml  # type: ignore[import-not-found]

    pynvml.nvmlInit()
    return pynvml


def visible_handles(nv: Any) -> list[tuple[int, Any]]:
    """(physical index, handle) of the GPUs this process's CUDA sees, in CUDA's order."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is None:
        return [(i, nv.nvmlDeviceGetHandleByIndex(i)) for i in range(nv.nvmlDeviceGetCount())]
    out = []
    for item in [v.strip() for v in vis.split(",") if v.strip()]:
        if item.isdigit():
            out.append((int(item), nv.nvmlDeviceGetHandleByIndex(int(item))))
        else:
            h = nv.nvmlDeviceGetHandleByUUID(item)
            out.append((int(nv.nvmlDeviceGetIndex(h)), h))
    return out


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            parts = [p.decode("utf-8", "replace") for p in f.read().split(b"\0") if p]
    except OSError:
        return "?"
    if not parts:
        return "?"
    # The program and its first argument say what it is; the rest may carry secrets (tokens, URLs).
    return _short(" ".join([os.path.basename(parts[0]), *[os.path.basename(p) for p in parts[1:2]]]), 80)


def gpu_processes(
    nv: Any, handles: list[tuple[int, Any]], exclude: set[int] | None = None
) -> list[dict[str, Any]]:
    """Compute and graphics processes on these GPUs: gpu (physical index), pid, used bytes, command.

    Processes in `exclude` (ours) are left out. A pid from another container's namespace has no
    /proc entry here: its command reads "?"."""
    exclude = exclude or set()
    out = []
    for index, h in handles:
        seen: set[int] = set()
        for fn_name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            fn = getattr(nv, fn_name, None)
            if fn is None:
                continue
            try:
                procs = fn(h)
            except Exception:  # NotSupported on this GPU or driver: nothing to say
                continue
            for p in procs:
                pid = int(p.pid)
                if pid in exclude or pid in seen:
                    continue
                seen.add(pid)
                used = getattr(p, "usedGpuMemory", None)
                out.append({"gpu": index, "pid": pid, "used_bytes": int(used) if isinstance(used, int) else None,
                            "command": _command(pid)})  # fmt: skip
    return out


def describe_processes(procs: list[dict[str, Any]]) -> str:
    """'GPU 0: pid 4242 (python3 serve.py) holds 117.9 GiB; ...' for one error line."""
    bits = []
    for p in procs:
        gib = f"{p['used_bytes'] / 2**30:.1f} GiB" if p.get("used_bytes") is not None else "memory"
        bits.append(f"GPU {p['gpu']}: pid {p['pid']} ({p['command']}) holds {gib}")
    return "; ".join(bits)


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
        self.physical: list[tuple[int, Any]] = []
        self.nv: Any = None
        try:
            self.nv = load()
        except Exception as e:  # no package, no driver: record nothing, say why
            self.status = f"unavailable: {_short(type(e).__name__ + ': ' + str(e))}"
            return
        try:
            self.physical = visible_handles(self.nv)[:world]
            self.handles = [(logical, h) for logical, (_, h) in enumerate(self.physical)]
        except Exception as e:
            self.status = f"unavailable: {_short(str(e))}"
            self.handles = []
        if not self.handles and self.status == "nvml":
            self.status = "unavailable: no GPU visible to NVML"

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
                ("util_pct", lambda h=h: nv.nvmlDeviceGetUtilizationRates(h).gpu),
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
