"""What the host's CPUs did during one launch: the measured processes' CPU time, context switches and
the CPUs they ran on, and, over the measured window, load, steal, iowait, runnable tasks, memory
pressure and the CPU that other processes took (by name).

Standard library only, read from /proc and /sys (Linux; elsewhere `status` says why nothing was
recorded); no imports of other probe modules, so regdiag's server launcher sends this file to the
engine's host and runs it there, and regdiag loads it too (regdiag/probe_modules.py).

    w = HostWatch(lambda: [rank pids])   # the supervisor of a probe launch, or the server launcher
    w.start()      # a sampler thread: every INTERVAL_S the cheap counters (with a process group, every
                   # SCAN_EVERY-th sample a /proc scan too)
    w.mark()       # the measured window starts (first measured cycle; load starts)
    w.finish()     # it ends (the footer; load ends)
    w.result()     # {"status", "window_s", "measured", "system", "others", ...} for the launch record

Context switches are those of each process's main thread (the one that issues the GPU's kernels);
CPU time (user, sys) is the whole process's. Process names are /proc/PID/comm, never a command
line; pids are not recorded. The sampler's own CPU time is recorded too (`own_cpu_s`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

INTERVAL_S = 0.5  # cheap counters: /proc/stat, the measured processes' stat and status, cpufreq
SCAN_EVERY = 4  # every this many samples, every process's CPU time (for "other processes took")
TOP_OTHERS = 5
OFF_ENV = "REGDIAG_HOST_SAMPLING"
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def cpu_list(cpus: Any) -> str:
    """'0-3,8' for {0, 1, 2, 3, 8}."""
    xs = sorted(set(int(c) for c in cpus))
    parts: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(parts)


def system_counters() -> dict[str, Any] | None:
    """/proc/stat's whole-machine CPU times (seconds) and running tasks; loadavg; PSI totals (us)."""
    text = _read("/proc/stat")
    if text is None:
        return None
    percpu: dict[int, float] = {}
    out: dict[str, Any] = {"t": time.monotonic(), "percpu": percpu}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            vals = [int(v) for v in parts[1:9]] + [0] * (8 - len(parts[1:9]))
            out["cpu"] = {k: vals[i] / TICK for i, k in enumerate(_STAT_FIELDS)}
        elif parts[0].startswith("cpu") and parts[0][3:].isdigit() and len(parts) > 5:
            # one CPU's busy seconds (all but idle and iowait): the others' share of the CPUs we ran on
            vals = [int(v) for v in parts[1:9]]
            percpu[int(parts[0][3:])] = (sum(vals) - vals[3] - vals[4]) / TICK
        elif parts[0] == "procs_running":
            out["running"] = int(parts[1])
        elif parts[0] == "procs_blocked":
            out["blocked"] = int(parts[1])
    load = _read("/proc/loadavg")
    if load:
        out["load"] = [float(v) for v in load.split()[:3]]
    psi: dict[str, float] = {}
    for res in ("cpu", "memory", "io"):
        for line in (_read(f"/proc/pressure/{res}") or "").splitlines():
            bits = line.split()
            tot = [b for b in bits[1:] if b.startswith("total=")]
            if bits and tot:
                psi[f"{res}_{bits[0]}"] = float(tot[0][6:])
    out["psi"] = psi
    return out


def proc_counters(pid: int) -> dict[str, Any] | None:
    """One process: comm, CPU time (s), the CPU it last ran on, its main thread's context switches."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None or ")" not in stat:
        return None
    comm = stat[stat.find("(") + 1 : stat.rfind(")")]
    rest = stat[stat.rfind(")") + 2 :].split()
    try:
        d: dict[str, Any] = {"comm": comm, "pgrp": int(rest[2]), "user_s": int(rest[11]) / TICK,
                             "sys_s": int(rest[12]) / TICK, "cpu": int(rest[36])}  # fmt: skip
    except (IndexError, ValueError):
        return None
    for line in (_read(f"/proc/{pid}/status") or "").splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            d["ctx_vol"] = int(line.split()[1])
        elif line.startswith("nonvoluntary_ctxt_switches:"):
            d["ctx_invol"] = int(line.split()[1])
    return d


def scan() -> dict[int, tuple[str, int, float]]:
    """Every process's (comm, process group, CPU seconds)."""
    out: dict[int, tuple[str, int, float]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        stat = _read(f"/proc/{name}/stat")
        if stat is None or ")" not in stat:
            continue
        rest = stat[stat.rfind(")") + 2 :].split()
        try:
            out[int(name)] = (stat[stat.find("(") + 1 : stat.rfind(")")], int(rest[2]),
                              (int(rest[11]) + int(rest[12])) / TICK)  # fmt: skip
        except (IndexError, ValueError):
            continue
    return out


def cpu_mhz(cpu: int) -> float | None:
    text = _read(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq")
    try:
        return int(text) / 1000.0 if text else None
    except ValueError:
        return None


def _affinity(pid: int) -> set[int] | None:
    try:
        return set(os.sched_getaffinity(pid))
    except (AttributeError, OSError):
        return None


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


class HostWatch:
    """Samples the host beside a launch. `pids()` names the measured processes (the ranks); or, with
    `pgid`, every process of that process group is measured (a server and the workers it forks)."""

    def __init__(
        self,
        pids: Callable[[], list[int]] | None = None,
        *,
        pgid: int | None = None,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self.pids_fn = pids or (lambda: [])
        self.pgid = pgid
        self.interval_s = interval_s
        self.status = "proc" if os.path.isfile("/proc/stat") else "unavailable: no /proc/stat (not Linux)"
        if os.environ.get(OFF_ENV) == "0":  # to measure what the sampling costs (bench/bench_host_sampler.py)
            self.status = f"off ({OFF_ENV}=0)"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._n = 0
        self.t0 = time.monotonic()
        self.t_mark: float | None = None
        self.t_end: float | None = None
        self.sys0: dict[str, Any] | None = None
        self.sys1: dict[str, Any] | None = None
        self.scan0: dict[int, tuple[str, int, float]] = {}
        self.scan1: dict[int, tuple[str, int, float]] = {}
        self.base: dict[int, dict[str, Any]] = {}  # measured pid -> counters at the window's start
        self.last: dict[int, dict[str, Any]] = {}  # measured pid -> the latest counters read
        self.ran_on: dict[int, set[int]] = {}
        self.affinity: dict[int, set[int]] = {}
        self.running: list[int] = []
        self.mhz: list[float] = []
        self.own0 = os.times()

    # -- sampling --------------------------------------------------------------------------------

    def _measured(self, table: dict[int, tuple[str, int, float]] | None) -> list[int]:
        pids = list(self.pids_fn())
        if self.pgid is not None:
            table = table if table is not None else (self.scan1 or self.scan0)
            pids += [p for p, (_, g, _) in table.items() if g == self.pgid and p not in pids]
        return pids

    def _sample(self, full: bool) -> None:
        sysc = system_counters()
        table = scan() if full else None
        with self._lock:
            if table is not None:
                self.scan1 = table
            for pid in self._measured(table):
                c = proc_counters(pid)
                if c is None:
                    continue
                if pid not in self.last and self.t_mark is not None:
                    self.base.setdefault(pid, {"user_s": 0.0, "sys_s": 0.0, "ctx_vol": 0, "ctx_invol": 0})
                self.last[pid] = c
                if pid not in self.affinity:
                    aff = _affinity(pid)
                    if aff is not None:
                        self.affinity[pid] = aff
                if self.t_mark is not None and self.t_end is None:
                    self.ran_on.setdefault(pid, set()).add(c["cpu"])
                    mhz = cpu_mhz(c["cpu"])
                    if mhz is not None:
                        self.mhz.append(mhz)
            if sysc is not None:
                self.sys1 = sysc
                if self.t_mark is not None and self.t_end is None and "running" in sysc:
                    self.running.append(sysc["running"])

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._n += 1
            try:
                # a process group's members are found by scanning; known pids need the scan only at
                # the window's ends (mark, finish)
                self._sample(self.pgid is not None and self._n % SCAN_EVERY == 0)
            except Exception:  # a process vanished mid-read, /proc odd: the next sample tries again
                continue

    def start(self) -> None:
        if not self.status.startswith("proc"):
            return
        self.t0 = time.monotonic()
        self.own0 = os.times()
        self._thread = threading.Thread(target=self._run, daemon=True, name="host-sampler")
        self._thread.start()

    def mark(self) -> None:
        """The measured window starts now (once; later calls do nothing)."""
        if self.t_mark is not None or not self.status.startswith("proc"):
            return
        self._sample(True)
        with self._lock:
            self.t_mark = time.monotonic()
            self.sys0, self.scan0 = self.sys1, self.scan1
            self.base = {p: dict(c) for p, c in self.last.items()}
            for p, c in self.last.items():
                self.ran_on.setdefault(p, set()).add(c["cpu"])

    def finish(self) -> None:
        """The measured window ends now (once); without a mark it started at start()."""
        if self.t_end is not None or not self.status.startswith("proc"):
            return
        if self.t_mark is None:
            self.mark()
        self._sample(True)
        with self._lock:
            self.t_end = time.monotonic()
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)

    # -- the record ------------------------------------------------------------------------------

    def result(self) -> dict[str, Any]:
        if not self.status.startswith("proc"):
            return {"status": self.status}
        if self.t_end is None:  # the processes ended first (an engine that exited): their last reading
            with self._lock:
                if self.t_mark is None:
                    self.t_mark, self.sys0, self.scan0 = (
                        self.t0,
                        self.sys0 or self.sys1,
                        self.scan0 or self.scan1,
                    )
                self.t_end = time.monotonic()
            self.stop()
        with self._lock:
            return self._result()

    def _result(self) -> dict[str, Any]:
        assert self.t_mark is not None and self.t_end is not None
        window = max(1e-6, self.t_end - self.t_mark)
        online = os.cpu_count() or 1
        usable = _affinity(0)
        out: dict[str, Any] = {"status": self.status, "window_s": round(window, 3), "cpus_online": online,
                               "cpus_usable": len(usable) if usable else online,
                               "interval_s": self.interval_s}  # fmt: skip
        measured = self._measured_record()
        out["measured"] = measured
        out["system"] = self._system_record(window)
        busy = out["system"].get("busy_cpu_s")
        own = os.times()
        own_s = (own.user - self.own0.user) + (own.system - self.own0.system)
        out["own_cpu_s"] = round(own_s, 3)
        out["others"] = self._others_record(window, online, busy, measured, own_s)
        self._on_our_cpus(out["others"], window, measured, own_s)
        if self.mhz:
            out["cpu_mhz"] = {"median": _median(self.mhz), "min": min(self.mhz), "max": max(self.mhz)}
        else:
            out["cpu_mhz"] = None
        return out

    def _measured_record(self) -> dict[str, Any]:
        procs = []
        for pid, c in self.last.items():
            b = self.base.get(pid, {"user_s": 0.0, "sys_s": 0.0, "ctx_vol": 0, "ctx_invol": 0})
            procs.append(
                {
                    "name": c["comm"],
                    "user_s": round(c["user_s"] - b.get("user_s", 0.0), 3),
                    "sys_s": round(c["sys_s"] - b.get("sys_s", 0.0), 3),
                    "ctx_vol": c.get("ctx_vol", 0) - b.get("ctx_vol", 0),
                    "ctx_invol": c.get("ctx_invol", 0) - b.get("ctx_invol", 0),
                    "affinity": cpu_list(self.affinity[pid]) if pid in self.affinity else None,
                    "ran_on": sorted(self.ran_on.get(pid, set())),
                }  # fmt: skip
            )
        ran = set().union(*self.ran_on.values()) if self.ran_on else set()
        aff = set().union(*self.affinity.values()) if self.affinity else set()
        return {
            "processes": len(procs),
            "user_s": round(sum(p["user_s"] for p in procs), 3),
            "sys_s": round(sum(p["sys_s"] for p in procs), 3),
            "ctx_vol": sum(p["ctx_vol"] for p in procs),
            "ctx_invol": sum(p["ctx_invol"] for p in procs),
            "affinity": cpu_list(aff) if aff else None,
            "ran_on": cpu_list(ran) if ran else None,
            "per_process": procs,
        }

    def _system_record(self, window: float) -> dict[str, Any]:
        a, b = self.sys0, self.sys1
        if not a or not b or "cpu" not in a or "cpu" not in b:
            return {}
        d = {k: max(0.0, b["cpu"][k] - a["cpu"][k]) for k in _STAT_FIELDS}
        total = sum(d.values()) or 1e-9
        rec: dict[str, Any] = {f"{k}_pct": round(100 * d[k] / total, 2) for k in ("iowait", "steal")}
        busy = total - d["idle"] - d["iowait"]
        rec["busy_pct"] = round(100 * busy / total, 2)
        rec["busy_cpu_s"] = round(busy, 3)
        rec["load_1m"] = (b.get("load") or [None])[0]
        rec["load_1m_start"] = (a.get("load") or [None])[0]
        if self.running:
            rec["runnable_median"] = _median([float(x) for x in self.running])
            rec["runnable_max"] = max(self.running)
        psi_a, psi_b = a.get("psi") or {}, b.get("psi") or {}
        # % of the window stalled (the kernel's totals and our clock differ by a little: at most 100)
        rec["psi_pct"] = {
            k: min(100.0, round((psi_b[k] - psi_a[k]) / 1e4 / window, 2)) for k in psi_b if k in psi_a
        } or None
        return rec

    def _others_record(
        self, window: float, online: int, busy: float | None, measured: dict[str, Any], own_s: float
    ) -> dict[str, Any]:
        mine = set(self.last) | {os.getpid()}
        by_name: dict[str, float] = {}
        for pid, (comm, _, cpu_s) in self.scan1.items():
            if pid in mine:
                continue
            before = self.scan0.get(pid)
            # a kernel worker renames itself as it works (kworker/1:0-events): matched by pid; a pid
            # reused since (less CPU time than before) is a new process
            took = cpu_s - (before[2] if before and before[2] <= cpu_s else 0.0)
            if took > 0:
                name = comm.split("/")[0] if comm.startswith(("kworker/", "ksoftirqd/")) else comm
                by_name[name] = by_name.get(name, 0.0) + took
        top = sorted(by_name.items(), key=lambda kv: -kv[1])[:TOP_OTHERS]
        rec: dict[str, Any] = {
            "top": [
                {"name": n, "cpu_s": round(s, 3), "pct": round(100 * s / (window * online), 2)}
                for n, s in top
            ]
        }
        if busy is not None:
            # whole-machine busy time less ours: also what processes outside this pid namespace took
            rest = max(0.0, busy - measured["user_s"] - measured["sys_s"] - own_s)
            rec["cpu_s"] = round(rest, 3)
            rec["pct"] = round(100 * rest / (window * online), 2)
        return rec

    def _on_our_cpus(
        self, others: dict[str, Any], window: float, measured: dict[str, Any], own_s: float
    ) -> None:
        """The others' share of the CPUs the measured processes may run on (their affinity), when that
        is fewer than all: a rank pinned with taskset competes only there."""
        aff = set().union(*self.affinity.values()) if self.affinity else set()
        a, b = (self.sys0 or {}).get("percpu") or {}, (self.sys1 or {}).get("percpu") or {}
        if not aff or len(aff) >= len(b) or not all(c in a and c in b for c in aff):
            return
        busy = sum(max(0.0, b[c] - a[c]) for c in aff)
        mine = _affinity(0)
        ours = measured["user_s"] + measured["sys_s"] + (own_s if mine and mine <= aff else 0.0)
        rest = max(0.0, busy - ours)
        others["their_cpus"] = cpu_list(aff)
        others["pct_of_their_cpus"] = round(100 * rest / (window * len(aff)), 2)
