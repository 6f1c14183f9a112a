"""One engine start measured as several launches: a served engine (`--url`) is started once and each
launch is one window of requests to it, with a fresh start among them as the independence check.

An engine start is minutes for a large model; what a launch measures is its requests. `EngineStart`
starts the engine under the hook (engine/run.py), waits for it to be healthy, and then measures
windows: before launch K's requests it writes `K` to the hook's window file, after them `K end`, and
sends one short request that carries the news to the engine's processes (the hook reads the file
after an idle gap; probes/_engine_hook/regdiag_phase_timer.py). The hook writes each cycle under its
window and, at `K end`, window K's footer; launch K is the cycles of window K, read when every
process that timed one has written that footer.

What is fresh per launch: the requests, the cycles' warm-up (dropped again in every window) and the
ABBA blocks of bare cycles. What a reused launch shares with the launch before it: the engine's
processes, its loaded weights, compiled kernels and captured graphs, its allocator and KV cache, and
every variable and setting read at start (docs/engine.md, "Reused starts"). Launches of one start are
therefore not independent draws of the start: `FRESH_AT` starts the engine afresh at the first and
the third launch of every environment, and `start_check` compares the launches of different starts
against those of one start (measure/starts.py; a warning when the starts differ by more than the
launches of one start vary).
"""

from __future__ import annotations

import json
import time
from typing import Any

from regdiag.errors import ProbeError
from regdiag.measure.launch import command
from regdiag.measure.starts import FRESH_AT, fresh_start, note_start_check
from regdiag.measure.stream import LaunchStream
from regdiag.runs import RunWriter, now_iso
from regdiag.server.launch import LaunchError, ServerProcess
from regdiag.server.load import LoadSpec, run_load
from regdiag.server.record import new_launch

from .run import (
    EXEC_WITH_HOOK,
    READER,
    EngineProbe,
    Event,
    fill_launch,
    finish_run,
    judge,
    prepare_hook,
    run_engine,
    send_load,
)

SETTLE_S = 0.25  # after writing the window file: longer than the hook's idle gap (GAP_S, 0.05 s)
NEWS_TOKENS = 4  # the request that tells the engine's processes a window ended
FOOTER_WAIT_S = 60.0

WRITER = "import sys\nwith open(sys.argv[1], 'w') as f:\n    f.write(sys.argv[2])\n"


def reusable(probe: EngineProbe) -> str | None:
    """Why this engine's launches cannot share a start (None: they can)."""
    if probe.ep is None:
        return "the engine command runs to its end (no --url): each launch is its own start"
    return None


class EngineStart:
    """One start of the engine under the hook, measured window by window; `stop` always (a `with`)."""

    def __init__(self, probe: EngineProbe) -> None:
        self.probe = probe
        self.server: ServerProcess | None = None
        self.tmp: str | None = None
        self.out = ""
        self.window_file = ""
        self.windows = 0
        self.start_s: float | None = None
        self.told: set[str] = set()  # error lines already passed on (an error is told once)

    @property
    def up(self) -> bool:
        return self.server is not None and self.server.running

    def start(self) -> None:
        """Start the engine and wait until it is healthy (LaunchError when it is not)."""
        p = self.probe
        t0 = time.monotonic()
        self.tmp = p.host.make_tempdir()
        self.window_file = f"{self.tmp}/window"
        self._say("0")
        hook, cfg, self.out = prepare_hook(p.host, self.tmp, p, {"window_file": self.window_file})
        argv = [p.host.python, "-c", EXEC_WITH_HOOK, hook, cfg, *p.argv]
        self.server = ServerProcess(p.host, argv, p.env, grace_s=p.stop_grace_s)
        self.server.start()
        assert p.ep is not None
        self.server.wait_healthy(p.ep, p.timeout_s)
        self.start_s = round(time.monotonic() - t0, 3)

    def _say(self, text: str) -> None:
        host = self.probe.host
        command(host, [host.python, "-c", WRITER, self.window_file, text], timeout=60)

    def measure(self, writer: RunWriter, launch: dict[str, Any]) -> str | None:
        """One window of requests into `launch`; the failure, if any (BadInput on a usage error)."""
        assert self.server is not None and self.probe.ep is not None
        t0 = time.monotonic()
        k, self.windows = self.windows, self.windows + 1
        if k:
            self._say(str(k))
            time.sleep(SETTLE_S)
        failure: str | None = None
        try:
            failure = send_load(self.probe, self.server, launch)
        except LaunchError as e:
            failure = str(e)
        finally:
            streams = self._close_window(k)
            told = fill_launch(launch, streams)
            self.server.record_into(launch)  # the engine's configuration (host samples: at its stop)
            launch["duration_s"] = round(time.monotonic() - t0, 3)
            writer.flush()
        return judge(self.probe, writer, launch, failure, told)

    def _close_window(self, k: int) -> list[LaunchStream]:
        """Tell the engine window `k` ended, and read its cycles once every process wrote its footer."""
        assert self.probe.ep is not None
        self._say(f"{k} end")
        time.sleep(SETTLE_S)
        if self.up:
            run_load(self.probe.ep, self.probe.prompts, LoadSpec(requests=1, max_tokens=NEWS_TOKENS))
        deadline = time.monotonic() + FOOTER_WAIT_S
        while True:
            streams, waiting = self._read(k)
            if not waiting or not self.up or time.monotonic() > deadline:
                return streams
            time.sleep(0.2)

    def _read(self, k: int) -> tuple[list[LaunchStream], bool]:
        """Window `k`'s lines per process, and whether a process that timed a cycle in it has not
        written its footer yet."""
        host = self.probe.host
        res = command(host, [host.python, "-c", READER, self.out], timeout=120)
        by_pid: dict[int, LaunchStream] = {}
        ended: set[int] = set()
        timed: set[int] = set()
        for line in res.stdout.decode("utf-8", "replace").splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            pid, kind = int(obj.get("pid") or 0), obj.get("type")
            if kind in ("cycle", "footer", "profile") and obj.get("window") != k:
                continue
            if kind == "error":
                if line in self.told:
                    continue
                self.told.add(line)
            if kind == "cycle":
                timed.add(pid)
            elif kind == "footer":
                ended.add(pid)
            by_pid.setdefault(pid, LaunchStream()).stdout_line(line)
        return list(by_pid.values()), bool(timed - ended)

    def stop(self) -> dict[str, Any]:
        """Stop the engine (its process group) and remove the hook's files; how it stopped."""
        info: dict[str, Any] = {}
        if self.server is not None:
            info = self.server.stop()
            self.server = None
        if self.tmp is not None:
            self.probe.host.remove_tree(self.tmp)
            self.tmp = None
        return info

    def stop_into(self, launch: dict[str, Any] | None) -> None:
        """Stop, and give `launch` (the start's last) how it stopped and the host samples the launcher
        took beside the engine over the whole start."""
        server = self.server
        info = self.stop()
        if launch is not None and server is not None:
            launch["server_process"] = info
            server.record_into(launch)

    def __enter__(self) -> EngineStart:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_launches(probe: EngineProbe, writer: RunWriter, on_event: Event | None = None) -> None:
    """`probe engine`'s launches: windows of shared engine starts where they can be, else a start each."""
    why = reusable(probe) if probe.reuse else "--cold"
    if why is not None or probe.launches < 2:
        run_engine(probe, writer, on_event, why)
        return
    run_reused(probe, writer, on_event or (lambda kind, data: None))
    finish_run(writer)


def run_reused(probe: EngineProbe, writer: RunWriter, emit: Any) -> None:
    """`probe engine -L N --url`: the launches as windows of shared engine starts, a fresh start at
    each index of FRESH_AT; each launch says `start` (fresh / reused) and `engine_start` (which)."""
    shared = SharedStarts(probe, writer)
    try:
        for li in range(probe.launches):
            emit("launch_start", {"launch": li, "of": probe.launches})
            launch, failure = shared.launch(li, fresh_start(li))
            emit("launch_end", {"launch": li, "record": launch})
            if failure is not None:
                raise ProbeError(f"launch {li}: {failure}")
    finally:
        shared.stop()
        finish_reused(writer, [])


class SharedStarts:
    """Launches into one record, each a window of the engine's current start, or of a new start where
    a launch asks for one (`launch`); `stop` always."""

    def __init__(self, probe: EngineProbe, writer: RunWriter) -> None:
        self.probe, self.writer = probe, writer
        self.engine: EngineStart | None = None
        self.starts = 0

    def launch(self, index: int, fresh: bool) -> tuple[dict[str, Any], str | None]:
        """Launch `index` (fresh: on a new start), recorded; it and its failure, if any. BadInput on a
        usage error (no further launch can do better)."""
        w = self.writer
        if fresh:
            self.stop()
        la = new_launch(len(w.run["launches"]), now_iso())
        w.add_launch(la)
        failure = None
        if fresh:
            self.engine = EngineStart(self.probe)
            self.starts += 1
            try:
                self.engine.start()
            except LaunchError as e:
                failure = str(e)
            la["engine_start_s"] = self.engine.start_s
        elif self.engine is None or self.engine.server is None:
            failure = "no engine to reuse (a launch asked to reuse one)"
        elif not self.engine.up:
            failure = self.engine.server.exit_note("since its last launch")
        la["start"], la["engine_start"] = ("fresh" if fresh else "reused"), self.starts - 1
        if failure is None and self.engine is not None:
            failure = self.engine.measure(w, la)
        la["status"], la["error"] = ("ok", None) if failure is None else ("error", failure)
        w.flush()
        return la, failure

    def stop(self) -> None:
        if self.engine is not None:
            launches = self.writer.run["launches"]
            self.engine.stop_into(launches[-1] if launches else None)
            self.engine = None


def finish_reused(writer: RunWriter, starts: list[float | None]) -> None:
    """The run's `probe.start` (how its launches started, the independence check) and its warning."""
    launches = writer.run["launches"]
    starts = starts or [la.get("engine_start_s") for la in launches if la.get("start") == "fresh"]
    writer.run["probe"]["start"] = {"mode": "reused", "fresh_at": list(FRESH_AT), "starts_s": starts}
    note_start_check(writer.run)
    writer.flush()
