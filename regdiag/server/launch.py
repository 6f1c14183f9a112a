"""--launch-cmd: start a server, wait until it answers, stop it by process group.

The server runs under a small launcher (standard-library Python, sent over stdin like all user
data) on the target host, this machine or one reached over SSH through the Host interface:

- the launcher starts the command in a new session, so the server and every worker it forks
  share one process group whose id is the server's PID, and prints that PID;
- regdiag stops it with SIGTERM to that group, waits `grace_s` for a clean exit (engines free
  GPU memory and shut their workers down on SIGTERM), then SIGKILL to the group;
- if regdiag itself dies (kill -9), the launcher sees its parent change and stops the server
  the same way, so no orphaned engine keeps holding the GPUs.
"""

from __future__ import annotations

import collections
import json
import shlex
import threading
import time
from pathlib import Path
from typing import Any

from regdiag import probe_modules
from regdiag.host_phantom import scrub_host
from regdiag.hosts.base import Host
from regdiag.measure.launch import command, launch
from regdiag.server.client import Endpoint, RequestFailed, simple_get
from regdiag.server.draft import draft_path, read_draft
from regdiag.server.engine_config import (
    EngineConfigReader,
    graphs_at_run_time,
)
from regdiag.snapshot.redact import scrub_lines, scrub_record, scrub_text

MARK = "regdiag-launcher"


def watch_sources() -> dict[str, str]:
    """The probe modules the launcher watches with, as source text (sent with the spec)."""
    root = Path(probe_modules.load("_nvml").__file__ or "").parent
    return {name: (root / f"{name}.py").read_text(encoding="utf-8") for name in WATCH_MODULES}


LAUNCHER = r"""
import json, os, signal, subprocess, sys, time, types
spec = json.loads(sys.stdin.read())
env = dict(os.environ)
env.update(spec.get("env") or {})
nccl_added = bool(spec.get("nccl_debug")) and "NCCL_DEBUG" not in env
if nccl_added:  # NCCL says which settings it applied; regdiag reads those lines and does not show them
    env["NCCL_DEBUG"] = "INFO"
t0 = time.time()
watch, gpu, window, note = None, None, [None, None], None
if spec.get("watch"):  # the host and the GPUs beside the server (probes/_hoststat.py, probes/_nvml.py)
    try:
        for name, src in spec["watch"]["sources"].items():
            mod = types.ModuleType(name)
            sys.modules[name] = mod
            exec(compile(src, name + ".py", "exec"), mod.__dict__)
        if "CUDA_VISIBLE_DEVICES" in env:
            os.environ["CUDA_VISIBLE_DEVICES"] = env["CUDA_VISIBLE_DEVICES"]
        gpu = sys.modules["_nvml"].ClockSampler(1024)
    except Exception as e:
        note = "%s: %s" % (type(e).__name__, e)
try:
    p = subprocess.Popen(spec["argv"], env=env, stdin=subprocess.DEVNULL, start_new_session=True)
except OSError as e:
    print(json.dumps({"regdiag-launcher": "error", "error": "%s: %s" % (spec["argv"][0], e.strerror)}), flush=True)
    sys.exit(127)
started = {"pid": p.pid, "launcher": os.getpid(), "nccl_debug_added": nccl_added}
print(json.dumps({"regdiag-launcher": "started", **started}), flush=True)
parent = os.getppid()
if "_hoststat" in sys.modules:
    watch = sys.modules["_hoststat"].HostWatch(pgid=p.pid)
    watch.start()
if gpu is not None:
    gpu.start()

def mark(*_):
    window[0] = round(time.time() - t0, 4)
    if watch is not None:
        watch.mark()

def finish(*_):
    window[1] = round(time.time() - t0, 4)
    if watch is not None:
        watch.finish()
    if gpu is not None:
        gpu.stop()

def report():
    out = {"regdiag-launcher": "watch", "note": note, "window_s": window}
    try:
        if watch is not None:
            out["host"] = watch.result()
        if gpu is not None:
            gpu.stop()
            out.update(gpu.result(t0))
    except Exception as e:
        out["note"] = "%s: %s" % (type(e).__name__, e)
    print(json.dumps(out), flush=True)

def killpg(sig):
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass

def stop(*_):
    killpg(signal.SIGTERM)
    deadline = time.time() + float(spec.get("grace_s", 30))
    while p.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    killpg(signal.SIGKILL)
    p.wait()
    report()
    print(json.dumps({"regdiag-launcher": "exited", "code": p.returncode, "by": "launcher"}), flush=True)
    os._exit(0)

for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(s, stop)
signal.signal(signal.SIGUSR1, mark)
signal.signal(signal.SIGUSR2, finish)
while p.poll() is None:
    time.sleep(0.2)
    if os.getppid() != parent:
        stop()
killpg(signal.SIGKILL)
report()
print(json.dumps({"regdiag-launcher": "exited", "code": p.returncode}), flush=True)
"""

# What the launcher is sent to watch the host and the GPUs with (standard library, run there).
WATCH_MODULES = ("_nvml", "_hoststat")

KILLER = (
    "import os, signal, sys\n"
    "try:\n"
    "    (os.kill if sys.argv[3:] else os.killpg)(int(sys.argv[1]), getattr(signal, 'SIG' + sys.argv[2]))\n"
    "except ProcessLookupError:\n"
    "    sys.exit(3)\n"
)

# Lines worth keeping from a server's output: what logparse reads.
ENGINE_LINE_MARKS = (
    "Decode batch",
    "Prefill batch",
    "SpecDecoding metrics",
    "Speculative metrics",
    "Avg generation throughput",
)
MAX_ENGINE_LINES = 200_000


def _version_of(engine: Any, header: dict[str, Any]) -> str | None:
    """The engine's version where its log gives none: the server's own (/server_info, /version) or the
    distribution the hook found the targets in ("sglang 0.5.23")."""
    if isinstance(header.get("engine_version"), str):
        return header["engine_version"]
    for v in header.get("engine_versions") or []:
        name, _, version = str(v).partition(" ")
        if name == engine and version[:1].isdigit():
            return version
    return None


def _scrubbed(v: Any) -> Any:
    """Through the one scrubber, each value judged under its key (a digest under `config_sha256` is kept;
    a bare 64-hex word elsewhere reads as a token)."""
    return scrub_record(v)


class LaunchError(RuntimeError):
    """The server could not be started or never became healthy; the message is one line."""


def split_launch_cmd(cmd: str) -> tuple[list[str], dict[str, str]]:
    """shlex-split a command line; leading NAME=VALUE words become the server's environment."""
    try:
        words = shlex.split(cmd)
    except ValueError as e:
        raise LaunchError(f"--launch-cmd: {e}") from None
    env: dict[str, str] = {}
    while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words:
        raise LaunchError("--launch-cmd: no command")
    return words, env


class ServerProcess:
    """One start of a server. Use start(), wait_healthy(), then stop() (always, in a finally)."""

    def __init__(
        self, host: Host, argv: list[str], env: dict[str, str] | None = None, *, grace_s: float = 30.0
    ) -> None:
        self.host = host
        self.argv = argv
        self.env = env or {}
        self.grace_s = grace_s
        self.pid: int | None = None
        self.returncode: int | None = None
        self.start_error: str | None = None
        self.started_at: float | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        self.engine_lines: list[str] = []
        self.launcher_pid: int | None = None
        self.watched: dict[str, Any] | None = None  # the launcher's host and GPU samples, once it exits
        self.config = EngineConfigReader()  # the configuration in effect, from what the engine prints
        self.nccl_debug_added = False
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- output ---------------------------------------------------------------------------------
    def _line(self, line: str) -> None:
        if line.startswith('{"' + MARK):
            try:
                msg = json.loads(line)
            except ValueError:
                msg = {}
            if msg.get(MARK) == "started":
                self.pid = int(msg["pid"])
                self.launcher_pid = msg.get("launcher") if isinstance(msg.get("launcher"), int) else None
                self.nccl_debug_added = msg.get("nccl_debug_added") is True
                self._started.set()
                return
            if msg.get(MARK) == "error":
                # It names the program, a word of --launch-cmd: it can be `--api-key=...` by mistake.
                self.start_error = scrub_text(str(msg.get("error")))
                self._started.set()
                return
            if msg.get(MARK) == "watch":
                self.watched = msg
                return
            if msg.get(MARK) == "exited":
                self.returncode = msg.get("code")
                return
        with self._lock:
            self.config.feed(line)
            if self.nccl_debug_added and self.config.is_nccl(line):
                return  # asked for by regdiag, read above, not shown
            self.tail.append(line[:500])  # raw in memory: scrubbed as one text when shown (a key spans lines)
            if len(self.engine_lines) < MAX_ENGINE_LINES and any(m in line for m in ENGINE_LINE_MARKS):
                self.engine_lines.append(line)

    # the launcher's output, both streams alike (measure.launch.LineSink)
    def stdout_line(self, line: str) -> None:
        self._line(line)

    def stderr_line(self, line: str) -> None:
        self._line(line)

    def _run(self) -> None:
        spec = json.dumps(
            {
                "argv": self.argv,
                "env": self.env,
                "grace_s": self.grace_s,
                "nccl_debug": True,
                "watch": {"sources": watch_sources()},
            }
        ).encode()
        try:
            argv = [self.host.python, "-c", LAUNCHER]
            res = launch(self.host, argv, self, stdin=spec, regdiag_code=True)
            if self.returncode is None and self.pid is None and not self.start_error:
                self.start_error = (
                    f"launcher failed (exit {res.returncode}): {scrub_text(res.stderr_tail() or 'no output')}"
                )
        except Exception as e:  # a host error must not leave start() waiting
            self.start_error = scrub_text(f"{type(e).__name__}: {e}")
        finally:
            self._started.set()

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, timeout_s: float = 60.0) -> None:
        self.started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="regdiag-server", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout_s):
            raise LaunchError(f"the launcher did not report a PID within {timeout_s:g} s")
        if self.start_error:
            raise LaunchError(f"cannot start the server: {self.start_error}")
        if self.pid is None:
            raise LaunchError(f"the server exited at once{self._tail_note()}")

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.returncode is None

    def _tail_note(self, n: int = 3) -> str:
        # Several lines: an engine's own error is not always the last line (usage text follows it).
        with self._lock:
            lines = [ln.strip() for ln in scrub_lines(self.tail) if ln.strip()]
        return f"; last output: {' | '.join(lines[-n:])[-400:]}" if lines else ""

    def exit_note(self, when: str) -> str:
        """'server exited WHEN (code N; last output: ...)'."""
        return f"server exited {when} (code {self.returncode}{self._tail_note()})"

    def wait_exit(self, timeout_s: float) -> bool:
        """True when the server has exited (waiting up to timeout_s for it to be seen)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        return not self.running

    def wait_healthy(
        self, ep: Endpoint, timeout_s: float, paths: tuple[str, ...] = ("/health", "/v1/models")
    ) -> float:
        """Poll until a health path answers 200; seconds from start. Fails at once if the server exits."""
        probe = Endpoint(ep.url, api=ep.api, connect_timeout=2.0, read_timeout=10.0, api_key=ep.api_key)
        t0 = self.started_at or time.monotonic()
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.running:
                raise LaunchError(self.exit_note("before it became healthy"))
            for path in paths:
                try:
                    status, _ = simple_get(probe, path)
                except RequestFailed:
                    break  # not listening yet
                if status == 200:
                    return time.monotonic() - t0
                if status != 404:
                    break  # 503 while loading: keep waiting on the same path
            if time.monotonic() > deadline:
                raise LaunchError(f"the server was not healthy after {timeout_s:g} s{self._tail_note()}")
            time.sleep(0.5)

    def _signal(self, sig: str) -> None:
        if self.pid is None:
            return
        command(self.host, [self.host.python, "-c", KILLER, str(self.pid), sig], timeout=30)

    def window(self, start: bool) -> None:
        """The measured window starts (load begins) or ends: the launcher's host watch is told so."""
        if self.launcher_pid is not None and self.running:
            command(
                self.host,
                [self.host.python, "-c", KILLER, str(self.launcher_pid), "USR1" if start else "USR2", "pid"],
                timeout=30,
            )

    def record_into(self, launch: dict[str, Any]) -> None:
        """The host and GPU samples taken beside the server into its launch record (after stop())."""
        w = self.watched or {}
        if isinstance(w.get("host"), dict):
            launch["host"] = scrub_host(w["host"])
        else:
            launch["host"] = {"status": f"unavailable: {w.get('note') or 'the launcher reported nothing'}"}
        launch["clocks"] = w.get("clocks") if isinstance(w.get("clocks"), list) else []
        status = str(w.get("clock_sampler") or w.get("note") or "unavailable")
        launch["clock_sampler"] = "nvml" if status == "nvml" else f"no GPU ({status})"
        with self._lock:
            cfg = self.config.result()
        if cfg is not None:
            if (path := draft_path(cfg)) is not None:  # which draft: diff names a changed one
                cfg["draft"] = read_draft(self.host, path)
            cfg = _scrubbed(cfg)  # paths and flags the engine printed: a key passed by mistake is not kept
            if cfg.get("version") is None:
                cfg["version"] = _version_of(cfg.get("engine"), launch.get("header") or {})
            rate = (launch.get("engine_counters") or {}).get("prefix_cache_hit_rate")
            if isinstance(rate, (int, float)):  # /metrics over the measured requests beats the log's
                cfg["prefix_cache_hit_rate"] = round(float(rate), 4)
            cfg["nccl_debug"] = "added by regdiag (INFO)" if self.nccl_debug_added else "as the user set it"
            launch["engine_config"] = cfg
            said = graphs_at_run_time(cfg.get("graphs"), launch.get("graph_share"), launch.get("graph_modes"))
            if said:
                cfg["graphs_at_run_time"] = said
            if isinstance(hit := cfg.get("prefix_cache_hit_rate"), (int, float)):
                # a measurement of the launch (higher is better: regdiag/direction.py), compared as one
                launch.setdefault("values", {})["prefix_cache_hit_rate"] = [hit]
        win = w.get("window_s")
        if isinstance(win, list) and len(win) == 2 and all(isinstance(x, (int, float)) for x in win):
            launch["clocks_window_s"] = win

    def stop(self) -> dict[str, Any]:
        """SIGTERM the process group, SIGKILL after grace_s. Returns how it went."""
        info: dict[str, Any] = {"pid": self.pid}
        t0 = time.monotonic()
        if self._thread is None:
            return info
        if not self._thread.is_alive() or self.returncode is not None:
            info["stopped_by"] = "exited by itself"
        else:
            self._signal("TERM")
            self._thread.join(self.grace_s)
            info["stopped_by"] = "SIGTERM"
            if self._thread.is_alive() and self.returncode is None:
                self._signal("KILL")
                info["stopped_by"] = "SIGKILL"
        self._thread.join(15.0)
        info["exit_code"] = self.returncode
        info["stop_s"] = round(time.monotonic() - t0, 3)
        return info
