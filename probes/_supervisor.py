"""The supervisor of one probe launch: starts the ranks, forwards rank 0's protocol lines, and makes sure
the launch ends — complete, failed, hung or interrupted — with no rank left behind.

Standard library only (pynvml when importable): it never imports torch, so a probe whose ranks fail to
import torch still reports that in one line.

    supervisor (this module)  -- owns stdout: forwards rank 0's protocol lines, adds clock samples to
      |                          the footer, writes the error / teardown line
      +-- rank 0 .. rank N-1  -- `python probe.py ARGS --_rank r --_world N --_port P`

How a launch ends (docs/probes.md, "Processes"):
- complete: the footer arrived. The ranks then get TEARDOWN_GRACE_S to exit; a rank still there is
  dumped (its Python stack) and killed, and a `teardown` line says so. The measurement stands.
- failed: a rank exited non-zero. The first rank to exit is the cause (the others die of its absence);
  the rest are stopped; one error line names it.
- hung: a rank went `--hang-timeout` seconds without a progress line. Every live rank is asked for its
  Python stack (SIGUSR1, faulthandler), all are stopped, and the error line (kind "hang") names the rank
  that stalled first, the stage and the frame it was in; the stacks travel in the line.
- busy: before a GPU launch, another process holds memory on a GPU this launch would use: one error
  line (kind "busy") names pid, command and GiB; nothing is started.
- interrupted: SIGINT, SIGTERM or SIGHUP, or the parent (regdiag) vanished: every rank is stopped.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Any

import _hoststat
import _nvml
from _dist import STACK_SIGNAL, SUPERVISOR_PID_ENV
from _protocol import PROGRESS_PREFIX, RANK_ERROR_PREFIX, Emitter, apply_env_defaults, emit_error

TEARDOWN_GRACE_S = 20.0  # after the footer; the ranks' own destroy deadline is 10 s
STOP_GRACE_S = 3.0  # between SIGTERM and SIGKILL
STACK_WAIT_S = 1.5  # for a rank to write its stack after SIGUSR1
HANG_S_SETUP = 180.0  # default hang limits: before measuring (init, build, capture) ...
HANG_S_RUN = 60.0  # ... and from the first measured cycle on
SETUP_STAGES = ("start", "bandwidth", "build", "capture")
MEASURE_STAGES = ("measure", "warmup")  # rank 0 measuring: the host watch's window starts
AFTER_STAGES = ("gather", "teardown")  # ... and ends
BUSY_UNSEEN_FRACTION = 0.10  # memory in use with no process listed (another namespace) that counts as busy
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+)$')


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Rank:
    """What the supervisor knows of one rank process."""

    def __init__(self, index: int, proc: subprocess.Popen[bytes]) -> None:
        self.index = index
        self.proc = proc
        self.last_active = time.monotonic()
        self.stage = "start"
        self.progressed = False
        self.lines: deque[tuple[float, str]] = deque(maxlen=400)
        self.error: dict[str, Any] | None = None
        self.exit_code: int | None = None
        self.exit_at: float | None = None
        self.exited = threading.Event()
        self.stderr_done = threading.Event()
        self.cpu_seen = 0.0

    def alive(self) -> bool:
        return not self.exited.is_set()

    def busy_starting(self) -> bool:
        """Before its first progress line (interpreter start, `import torch`, CUDA init): whether the
        rank used CPU since the last look. On a loaded host an import can take minutes, and a rank that
        is still working is not hung. After its first progress line CPU is no sign of life (a rank
        waiting on a GPU sync spins), and only progress counts."""
        if self.progressed:
            return False
        cpu = _cpu_seconds(self.proc.pid)
        if cpu is None or cpu <= self.cpu_seen:
            return False
        self.cpu_seen = cpu
        return True

    def tail(self) -> str:
        text = [ln for _, ln in self.lines if ln.strip() and not ln.startswith(PROGRESS_PREFIX)]
        return text[-1] if text else ""


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (Linux /proc), or None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def where_stuck(stack: str, probe_dir: str) -> str:
    """'destroy_process_group (distributed_c10d.py:2101), from teardown (_dist.py:190)' out of a
    faulthandler dump: the innermost frame of the main thread, and the innermost frame of the probe."""
    blocks: list[list[tuple[str, str, str]]] = []
    for line in stack.splitlines():
        if "(most recent call first)" in line:
            blocks.append([])
            continue
        m = _FRAME.match(line)
        if m and blocks:
            blocks[-1].append((m["file"], m["line"], m["func"].strip()))
    main = next((b for b in blocks if b and b[-1][2] == "<module>"), blocks[0] if blocks else [])
    if not main:
        return "an unknown place (no stack came back)"
    f, ln, fn = main[0]
    text = f"{fn} ({os.path.basename(f)}:{ln})"
    ours = next((fr for fr in main if os.path.dirname(os.path.abspath(fr[0])) == probe_dir), None)
    if ours is not None and ours != main[0]:
        text += f", from {ours[2]} ({os.path.basename(ours[0])}:{ours[1]})"
    return text


def _in_collective(stack: str) -> bool:
    """Whether a faulthandler dump's main thread is inside torch.distributed (a collective, a barrier)."""
    blocks = [b for b in stack.split("(most recent call first)") if "<module>" in b]
    main = blocks[0] if blocks else stack
    frames = [m for m in (_FRAME.match(ln) for ln in main.splitlines()) if m]
    return bool(frames) and "distributed" in frames[0]["file"]


def _descends(pid: int, root: int, depth: int = 4) -> bool:
    """Whether `root` is among `pid`'s ancestors (Linux /proc), up to `depth` generations."""
    for _ in range(depth):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                pid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == root:
            return True
    return False


OWN_WAIT_S = TEARDOWN_GRACE_S + STOP_GRACE_S + 10.0  # the longest a previous warm launch may tear down


def _siblings(root: int) -> bool:
    """Whether `root` has a child besides this process (Linux /proc): in a warm launch, an earlier
    launch's supervisor still tearing down."""
    me = os.getpid()
    return any(ppid == root and pid != me for pid, ppid in _processes())


def _processes() -> list[tuple[int, int]]:
    """(pid, parent pid) of every process this namespace sees (Linux /proc)."""
    found = []
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                found.append((pid, int(f.read().rpartition(")")[2].split()[1])))
        except (OSError, ValueError, IndexError):
            continue
    return found


GROUP_ENV = "REGDIAG_WARM_GROUP"  # regdiag/measure/warm.py: one value per regdiag run


def _group_token() -> str:
    """This run's warm group, as this process's environment at exec has it (a forked launch's
    os.environ is the launch's own, without it)."""
    try:
        with open("/proc/self/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(f"{GROUP_ENV}=".encode()):
                    return item.partition(b"=")[2].decode("ascii", "replace")
    except OSError:
        pass
    return ""


def _in_group(pid: int, token: str) -> bool:
    """Whether process `pid` started under this run's warm group (its environment at exec; a forked
    child keeps its parent's)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{GROUP_ENV}={token}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def _group_launch_alive(token: str) -> bool:
    """Whether a launch of this run other than this one is still alive (tearing down): a process of the
    group whose parent is of the group too (a warm parent's parent is regdiag, not of the group)."""
    me = os.getpid()
    procs = [(pid, ppid) for pid, ppid in _processes() if pid != me and ppid != me]
    group = {pid for pid, _ in procs if _in_group(pid, token)}
    return any(pid in group and ppid in group for pid, ppid in procs)


def busy_gpus(world: int, own_root: int | None = None) -> str | None:
    """One line naming what holds memory on the GPUs this launch would use, or None (also when NVML
    cannot tell: then the launch runs and the header's clock sampler says why NVML was unavailable).

    `own_root`: the warm parent of this launch (probes/_warm.py). The ranks of its earlier launches, and
    of the other warm parents of this run (a bisect's other points: $REGDIAG_WARM_GROUP), still tearing
    down after their results went out, are ours, not another's: they do not count, and
    this launch starts beside them while the GPU has as much memory free as they hold (the next launch
    of one environment needs about what the last one held); else it waits for them to leave. Where NVML
    names processes this namespace cannot see (a container), an earlier launch still tearing down may
    be among them: the launch waits for it before it judges."""
    try:
        nv = _nvml.load()
    except Exception:
        return None
    token = _group_token() if own_root is not None else ""
    try:
        handles = _nvml.visible_handles(nv)[:world]
        end = time.monotonic() + OWN_WAIT_S
        while True:
            procs = _nvml.gpu_processes(nv, handles)
            ours = [
                p
                for p in procs
                if own_root is not None
                and (_descends(p["pid"], own_root) or (token and _in_group(p["pid"], token)))
            ]
            others = [p for p in procs if p not in ours]
            held = {index: 0 for index, _ in handles}
            for p in ours:
                held[p["gpu"]] = held.get(p["gpu"], 0) + int(p.get("used_bytes") or 0)
            hidden = []
            for index, h in handles:
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                used = mem.used - held.get(index, 0)
                if mem.total and mem.free < held.get(index, 0):
                    hidden.append("")  # ours hold more than is free: wait for them
                elif mem.total and used > BUSY_UNSEEN_FRACTION * mem.total:
                    hidden.append(f"GPU {index}: {used / 2**30:.1f} GiB in use by processes not visible here")
            unclear = (
                (others or hidden)
                and own_root is not None
                and (_siblings(own_root) or (token and _group_launch_alive(token)))
            )
            if not unclear and "" not in hidden or time.monotonic() > end:
                break
            time.sleep(0.05)  # our last launch's teardown frees what this one needs
        if others:
            return _nvml.describe_processes(others)
        return "; ".join(h for h in hidden if h) or None
    except Exception:
        return None
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


class Supervisor:
    def __init__(self, script: str, argv: list[str], a: Any, gpu_sampling: bool) -> None:
        self.script, self.argv, self.world = script, argv, int(a.tp)
        self.hang_timeout: float | None = getattr(a, "hang_timeout", None)
        self.check_busy = gpu_sampling and not getattr(a, "allow_busy_gpu", False)
        self.emitter = Emitter()
        self.t0 = time.time()
        self.applied = apply_env_defaults()
        self.sampler = _nvml.ClockSampler(self.world) if gpu_sampling else None
        # the host beside the ranks: their CPU time, context switches, CPUs; load and the others' CPU
        self.host_watch = _hoststat.HostWatch(lambda: [rk.proc.pid for rk in self.ranks])
        self.ranks: list[_Rank] = []
        self.device_kind = "cpu"
        self.footer_at: float | None = None
        self.received: list[int] = []
        self.parent = os.getppid()
        self.probe_dir = os.path.dirname(os.path.abspath(script))

    # -- streams ----------------------------------------------------------------------------------

    def _pump_stderr(self, rk: _Rank) -> None:
        assert rk.proc.stderr is not None
        for raw in iter(rk.proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            now = time.monotonic()
            rk.lines.append((now, line))
            if line.startswith(RANK_ERROR_PREFIX):
                try:
                    rk.error = json.loads(line[len(RANK_ERROR_PREFIX) :])
                except json.JSONDecodeError:
                    rk.error = {"kind": "error", "message": line[len(RANK_ERROR_PREFIX) :]}
                continue
            if line.startswith(PROGRESS_PREFIX):
                rk.last_active, rk.progressed = now, True
                try:
                    rk.stage = str(json.loads(line[len(PROGRESS_PREFIX) :]).get("stage", rk.stage))
                except (json.JSONDecodeError, AttributeError):
                    pass
                if rk.index == 0 and rk.stage in MEASURE_STAGES:
                    self.host_watch.mark()  # the host's measured window: rank 0's cycles (or steps)
                elif rk.index == 0 and rk.stage in AFTER_STAGES and self.host_watch.t_mark is not None:
                    self.host_watch.finish()
                if rk.index != 0:
                    continue
            sys.stderr.write(line + "\n" if rk.index == 0 else f"[rank {rk.index}] {line}\n")
            sys.stderr.flush()
        rk.proc.stderr.close()
        rk.stderr_done.set()

    def _pump_stdout(self, stream: Any) -> None:
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
                self.device_kind = str(obj.get("device", {}).get("type", "cpu"))
                obj["supervisor"] = {
                    "env_defaults_applied": self.applied,
                    "clock_sampler": self.sampler.status if self.sampler is not None else "off",
                }
            elif kind == "footer":
                self.host_watch.finish()
                obj["host"] = self.host_watch.result()
                if self.sampler is not None:
                    self.sampler.stop()
                    if self.device_kind == "cuda":
                        obj.update(self.sampler.result(self.t0))
                obj.setdefault("clocks", [])
                obj["launch_wall_s"] = round(time.time() - self.t0, 3)
                self.footer_at = time.monotonic()
            self.emitter.emit(obj)
        stream.close()

    def _wait(self, rk: _Rank) -> None:
        rk.exit_code = rk.proc.wait()
        rk.exit_at = time.monotonic()
        rk.exited.set()

    # -- ranks ------------------------------------------------------------------------------------

    def _start(self) -> None:
        """Every rank's process first, then the threads that read and wait for them: a warm launch
        forks its ranks (probes/_warm.py), which is safe only before this process starts a thread."""
        import _warm

        port = free_port()
        env = dict(os.environ)
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(self.world),
                    SUPERVISOR_PID_ENV: str(os.getpid())})  # fmt: skip
        env.setdefault("PYTHONUNBUFFERED", "1")
        for r in range(self.world):
            args = [*self.argv, "--_rank", str(r), "--_world", str(self.world), "--_port", str(port),
                    "--_t0", repr(self.t0)]  # fmt: skip
            rank_env = {**env, "RANK": str(r), "LOCAL_RANK": str(r)}
            if _warm.FORK_MAIN is not None:
                proc: Any = _warm.fork_rank(args, rank_env, want_stdout=r == 0)
            else:
                proc = subprocess.Popen(
                    [sys.executable, self.script, *args],
                    stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL,
                    env=rank_env,
                )
            self.ranks.append(_Rank(r, proc))

    def _start_readers(self) -> None:
        for rk in self.ranks:
            threading.Thread(target=self._pump_stderr, args=(rk,), daemon=True).start()
            threading.Thread(target=self._wait, args=(rk,), daemon=True).start()
            if rk.index == 0:
                self.stdout_thread = threading.Thread(
                    target=self._pump_stdout, args=(rk.proc.stdout,), daemon=True
                )
                self.stdout_thread.start()

    def _stop_all(self) -> None:
        """SIGTERM every live rank, SIGKILL what is left after STOP_GRACE_S."""
        for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
            live = [rk for rk in self.ranks if rk.alive()]
            if not live:
                return
            for rk in live:
                try:
                    rk.proc.send_signal(sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            for rk in live:
                rk.exited.wait(max(0.05, deadline - time.monotonic()))

    def _stacks(self, ranks: list[_Rank]) -> dict[str, str]:
        """Ask each rank for its Python stack (SIGUSR1 -> faulthandler) and collect what comes back."""
        asked = time.monotonic()
        for rk in ranks:
            try:
                os.kill(rk.proc.pid, STACK_SIGNAL)
            except ProcessLookupError:
                pass
        time.sleep(STACK_WAIT_S)
        out = {}
        for rk in ranks:
            text = "\n".join(
                ln for t, ln in list(rk.lines) if t >= asked and not ln.startswith(PROGRESS_PREFIX)
            )
            out[str(rk.index)] = text[-6000:]
        return out

    def _hang_limit(self, rk: _Rank) -> float:
        if not rk.progressed:  # interpreter start and `import torch`: slow on a loaded or cold host
            return max(self.hang_timeout or 0.0, HANG_S_SETUP)
        if self.hang_timeout is not None:
            return self.hang_timeout
        return HANG_S_SETUP if rk.stage in SETUP_STAGES else HANG_S_RUN

    def _hung(self) -> _Rank | None:
        """The live rank that has been silent past its limit the longest, if any."""
        now = time.monotonic()
        late = [rk for rk in self.ranks if rk.alive() and now - rk.last_active > self._hang_limit(rk)]
        for rk in [rk for rk in late if rk.busy_starting()]:  # still importing on a busy host: alive
            rk.last_active = now
            late.remove(rk)
        return min(late, key=lambda rk: rk.last_active) if late else None

    # -- outcomes ---------------------------------------------------------------------------------

    def _report_failure(self, rk: _Rank) -> int:
        rk.stderr_done.wait(5.0)  # the rank's last words, before they are quoted
        info = rk.error
        if info is None:
            code = rk.exit_code or 0
            tail = rk.tail()
            how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
            msg = f"rank {rk.index} {how}" + (f": {tail}" if tail else "")
            kind = "crash"
        else:
            msg = (
                f"rank {rk.index}: {info.get('message', '')}"
                if self.world > 1
                else str(info.get("message", ""))
            )
            kind = str(info.get("kind", "error"))
        emit_error(msg, kind, rk.index)
        return 2 if kind == "usage" else 1

    def _report_hang(self, rk: _Rank) -> int:
        stacks = self._stacks([r for r in self.ranks if r.alive()])
        rk = self._culprit(rk, stacks)
        silent = time.monotonic() - rk.last_active
        self._stop_all()
        where = where_stuck(stacks.get(str(rk.index), ""), self.probe_dir)
        msg = (f"rank {rk.index} hung in stage {rk.stage}: no progress for {silent:.0f} s "
               f"(limit {self._hang_limit(rk):g} s, --hang-timeout); stuck in {where}")  # fmt: skip
        emit_error(msg, "hang", rk.index, stage=rk.stage, stacks=stacks)
        return 1

    def _culprit(self, first: _Rank, stacks: dict[str, str]) -> _Rank:
        """The rank to name: a rank waiting in a collective is usually waiting for the one that hangs,
        and it may have gone silent a moment before it; so prefer, among the silent ranks, one whose
        main thread is not inside torch.distributed. Failing that, the one silent longest."""
        now = time.monotonic()
        late = [rk for rk in self.ranks if rk.alive() and now - rk.last_active > self._hang_limit(rk) / 2]
        elsewhere = [rk for rk in late if not _in_collective(stacks.get(str(rk.index), ""))]
        return min(elsewhere, key=lambda rk: rk.last_active) if elsewhere else first

    def _finish_teardown(self) -> int:
        """After the footer: wait for the ranks to leave; force the ones that do not, and say so. A warm
        launch returns here, its results being out (`detached` in its teardown line), and tears down
        after its client has gone: the warm parent passes on how that went (probes/_warm.py)."""
        assert self.footer_at is not None
        import _warm

        detached = False
        if not self.received and _warm.DETACH_FD is not None:
            self.emitter.emit({"type": "teardown", "detached": True})
            detached = _warm.detach(0)
        while any(rk.alive() for rk in self.ranks):
            if self.received or time.monotonic() - self.footer_at > (self.hang_timeout or TEARDOWN_GRACE_S):
                break
            time.sleep(0.05)
        late = [rk for rk in self.ranks if rk.alive()]
        line: dict[str, Any] = {"type": "teardown", "forced": bool(late)}
        if late and not self.received:
            line["stacks"] = self._stacks(late)
            line["ranks"] = [rk.index for rk in late]
            line["where"] = {
                str(rk.index): where_stuck(line["stacks"][str(rk.index)], self.probe_dir) for rk in late
            }
        self._stop_all()
        line["s"] = round(time.monotonic() - self.footer_at, 3)
        if detached:
            _warm.detached_report({k: v for k, v in line.items() if k != "type"})
        else:
            self.emitter.emit(line)
        return 128 + self.received[0] if self.received else 0

    def run(self) -> int:
        if self.check_busy:
            import _warm

            busy = busy_gpus(self.world, os.getppid() if _warm.FORK_MAIN is not None else None)
            if busy:
                emit_error(f"GPUs in use by other processes: {busy} (--allow-busy-gpu to run anyway)", "busy")
                return 1
        old = {s: signal.signal(s, lambda n, _f: self.received.append(n)) for s in
               (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}  # fmt: skip
        try:
            self._start()  # before any thread of this process
            self._start_readers()
            if self.sampler is not None:
                self.sampler.start()
            self.host_watch.start()
            return self._watch()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            for rk in self.ranks:
                if rk.alive():
                    rk.proc.kill()
            if self.sampler is not None:
                self.sampler.stop()
            self.host_watch.stop()

    def _watch(self) -> int:
        while True:
            if self.received:
                self._stop_all()
                return 128 + self.received[0]
            if os.getppid() != self.parent:  # regdiag was killed: nobody reads our output any more
                self._stop_all()
                return 1
            if self.footer_at is not None:  # the measurement is complete, whatever teardown does
                return self._finish_teardown()
            failed = [rk for rk in self.ranks if rk.exited.is_set() and rk.exit_code]
            if failed:
                self._stop_all()
                if self.received:  # a signal reached the ranks before us: an interruption, not a failure
                    return 128 + self.received[0]
                # The first rank to exit is the cause; the others died of its absence.
                return self._report_failure(min(failed, key=lambda rk: rk.exit_at or 0.0))
            if all(rk.exited.is_set() for rk in self.ranks):
                self.stdout_thread.join(5.0)
                if self.footer_at is not None:
                    return self._finish_teardown()
                emit_error("rank 0 exited without a footer", "error", 0)
                return 1
            hung = self._hung()
            if hung is not None:
                return self._report_hang(hung)
            time.sleep(0.05)


def supervise(script: str, argv: list[str], a: Any, *, gpu_sampling: bool = True) -> int:
    """Run one launch of `a.tp` ranks of `script`; the exit status of the probe process: 0, 1 (a rank
    failed, hung, or the GPUs are busy), 2 (usage), 128 + signal (interrupted)."""
    return Supervisor(script, argv, a, gpu_sampling).run()
