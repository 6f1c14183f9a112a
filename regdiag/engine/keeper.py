"""One engine per environment for `bisect --probe engine` and `ab --probe engine`: its launches share
engine starts (engine/reuse.py), a fresh start at the indices of FRESH_AT.

    regdiag (bisect, ab) ── keeper: `regdiag probe engine --serve-launches SOCKET ARGS`, started with the
       │                     environment's interpreter, variables and directory (a cold launch's)
       └─ launch K: `python -m regdiag.engine.keeper attach SOCKET K fresh|reused`
                    (asks the keeper for one launch, prints its probe-protocol lines, exits as it did)

The keeper plans the engine run once (targets checked, the record opened), starts the engine at the
first launch and again where a launch asks for a fresh start, and measures each launch as one window
of requests: the lines a `probe engine --protocol` launch prints, with `start` and `engine_start` in
the footer. A launch that asks to reuse an engine that has exited fails (an engine that dies between
launches is a finding, not something to paper over). It stops the engine on `stop`, when its parent
goes, and after IDLE_S without a request.

`EnginePool` is regdiag's side: one keeper per environment and host, at most `keep` at once (the one
used least recently stops first, and its engine with it), all stopped by `close`, on every way out.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from regdiag.errors import BadInput
from regdiag.hosts.base import Host
from regdiag.measure.launch import launch
from regdiag.measure.starts import FRESH_AT, fresh_start
from regdiag.measure.warm import GROUP, GROUP_ENV, PER_LAUNCH, Kept, WarmPool
from regdiag.runs import RunWriter

from .reuse import SharedStarts
from .run import EngineProbe, protocol_lines

IDLE_S = float(os.environ.get("REGDIAG_WARM_IDLE_S", "900"))
READY_TIMEOUT_S = 600.0  # the keeper checks every target in the engine's source before it is ready
USAGE_EXIT, ERROR_EXIT = 2, 5


# -- the keeper process -------------------------------------------------------------------------------


def serve(sock_path: str, measure: Any, stop: Any) -> int:
    """Answer launch requests on `sock_path` with `measure(index, fresh) -> (lines, exit code)` until a
    stop request, the parent's exit or IDLE_S without one; then `stop()`."""
    parent = os.getppid()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket is its owner's only
    try:
        srv.bind(sock_path)
    finally:
        os.umask(old)
    srv.listen(4)
    srv.settimeout(1.0)
    _say({"keeper": "ready", "pid": os.getpid()})
    last = time.monotonic()
    try:
        while os.getppid() == parent and time.monotonic() - last < IDLE_S:
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                req = _request(conn)
                if req.get("stop"):
                    return 0
                try:
                    lines, code = measure(int(req.get("index", 0)), bool(req.get("fresh")))
                except (
                    Exception
                ) as e:  # the host failed mid-launch: this launch fails, the next starts afresh
                    lines, code = (
                        [{"type": "error", "kind": "error", "message": f"{type(e).__name__}: {e}"}],
                        5,
                    )
                try:
                    for line in lines:
                        conn.sendall((json.dumps(line, default=str) + "\n").encode())
                    conn.sendall((json.dumps({"keeper_exit": code}) + "\n").encode())
                except OSError:
                    pass  # the launch's client went (a timeout, Ctrl-C): the next launch is asked anew
            last = time.monotonic()
        return 0
    finally:
        stop()
        srv.close()
        try:
            os.unlink(sock_path)
        except OSError:
            pass


class Launches:
    """The keeper's engine run: one record, its launches measured as asked, as protocol lines."""

    def __init__(self, probe: EngineProbe, writer: RunWriter) -> None:
        self.shared = SharedStarts(probe, writer)

    def measure(self, index: int, fresh: bool) -> tuple[list[dict[str, Any]], int]:
        try:
            la, failure = self.shared.launch(index, fresh)
        except BadInput as e:
            return [{"type": "error", "kind": "usage", "message": str(e)}], USAGE_EXIT
        la["bisect_index"] = index
        if failure is not None:
            return [{"type": "error", "kind": "error", "message": failure}], ERROR_EXIT
        return protocol_lines(self.shared.writer.run, la), 0

    def stop(self) -> None:
        self.shared.stop()


def _say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _request(conn: socket.socket) -> dict[str, Any]:
    buf = b""
    conn.settimeout(30.0)
    while not buf.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        buf += chunk
    try:
        obj = json.loads(buf or b"{}")
    except ValueError:
        obj = {}
    return obj if isinstance(obj, dict) else {}


def attach(sock_path: str, request: dict[str, Any]) -> int:
    """One launch: ask the keeper, print its lines on stdout, exit with its code."""
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock_path)
    except OSError as e:
        _say({"type": "error", "kind": "error", "message": f"the engine's keeper is gone: {e.strerror}"})
        return ERROR_EXIT
    with s:
        s.sendall((json.dumps(request) + "\n").encode())
        code = None
        for raw in s.makefile("rb"):
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict) and "keeper_exit" in obj:
                code = int(obj["keeper_exit"])
                continue
            sys.stdout.write(raw.decode("utf-8", "replace"))
            sys.stdout.flush()
    if code is None:
        _say({"type": "error", "kind": "error", "message": "the engine's keeper ended during the launch"})
        return ERROR_EXIT
    return code


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "attach":
        return attach(argv[1], {"index": int(argv[2]), "fresh": argv[3] == "fresh"})
    if len(argv) == 2 and argv[0] == "stop":
        return attach(argv[1], {"stop": True})
    sys.stderr.write(
        "usage: python -m regdiag.engine.keeper attach SOCKET INDEX fresh|reused | stop SOCKET\n"
    )
    return 2


# -- regdiag's side ----------------------------------------------------------------------------------


class EngineKeeper:
    """One keeper process on `host`, started with an environment's variables, as regdiag drives it."""

    def __init__(
        self,
        host: Host,
        args: Sequence[str],
        env: Mapping[str, str],
        unset: Sequence[str] = (),
        cwd: str | None = None,
    ) -> None:
        self.host, self.args = host, list(args)
        self.env = {**env, GROUP_ENV: GROUP}
        self.unset, self.cwd = list(unset), cwd
        self.ready, self.why = False, None
        self.launches = 0
        self._tmp: str | None = None
        self._sock = ""
        self._said = threading.Event()
        self._thread: threading.Thread | None = None
        self._tail: list[str] = []

    def stdout_line(self, line: str) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            return
        if isinstance(msg, dict) and msg.get("keeper") == "ready":
            self.ready = True
            self._said.set()
        elif isinstance(msg, dict) and msg.get("type") == "error":
            self.why = str(msg.get("message"))

    def stderr_line(self, line: str) -> None:
        self._tail = [*self._tail[-4:], line[:300]]

    def _serve(self, argv: list[str]) -> None:
        try:
            res = launch(self.host, argv, self, env=self.env, unset=self.unset, cwd=self.cwd)
            if not self._said.is_set():
                self.why = self.why or f"exited {res.returncode}: {' | '.join(self._tail) or 'no output'}"
        except Exception as e:  # the host failed: the launches start the engine each
            self.why = f"{type(e).__name__}: {e}"
        finally:
            self._said.set()

    def start(self, timeout: float = READY_TIMEOUT_S) -> bool:
        self._tmp = self.host.make_tempdir()
        self._sock = f"{self._tmp}/engine.sock"
        argv = [
            sys.executable,
            "-m",
            "regdiag",
            "probe",
            "engine",
            "--serve-launches",
            self._sock,
            *self.args,
        ]
        self._thread = threading.Thread(target=self._serve, args=(argv,), name="regdiag-engine", daemon=True)
        self._thread.start()
        if not self._said.wait(timeout):
            self.why = f"not ready after {timeout:.0f} s"
            self.stop()
        return self.ready

    def attach_argv(self, index: int, fresh: bool) -> list[str]:
        how = "fresh" if fresh else "reused"
        return [sys.executable, "-m", "regdiag.engine.keeper", "attach", self._sock, str(index), how]

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._thread.is_alive():
            attach_quietly(self._sock)
            self._thread.join(120.0)  # the keeper stops its engine (SIGTERM, then SIGKILL) first
        self._thread = None
        self.ready = False
        if self._tmp is not None:
            self.host.remove_tree(self._tmp)
            self._tmp = None


def attach_quietly(sock_path: str) -> None:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(sock_path)
            s.sendall(b'{"stop": true}\n')
            s.settimeout(120.0)
            s.recv(1)
    except OSError:
        pass


class EnginePool:
    """The keepers of several environments (a bisect's points, an A/B run's sides): one per environment
    and host, started at its first launch, kept for its later ones; at most `keep` at once (engines
    hold GPU memory: the default is one). `starts` says per environment how its launches started."""

    def __init__(self, keep: int = 1, enabled: bool = True) -> None:
        self.keep, self.enabled = max(1, keep), enabled
        self.off_why = "--cold"  # why launches start their own engine when not enabled
        # The environments whose launches include a second fresh start (FRESH_AT), the independence
        # check; None: every one (an A/B run's two sides). A bisect names its endpoints: its other
        # points' launches share one start.
        self.checked: set[str] | None = None
        self.keepers: Kept[EngineKeeper] = Kept(self.keep)
        self.starts: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def argv(
        self,
        key: str,
        host: Host,
        args: Sequence[str],
        index: int,
        *,
        env: Mapping[str, str],
        unset: Sequence[str] = (),
        cwd: str | None = None,
    ) -> tuple[list[str] | None, str]:
        """Launch `index` of environment `key` through its keeper, and "fresh" or "reused"; (None,
        "cold") where its launches each start the engine (--cold, a Slurm host, a keeper that failed)."""
        if not self.enabled or not host.keeps_warm:
            why = self.off_why if not self.enabled else f"launches on {host.via} start cold (a job step each)"
            self.starts.setdefault(key, {"mode": "cold", "why": why})
            return None, "cold"
        with self._lock:
            slot = (key, host.name)
            kept_env = {k2: v for k2, v in env.items() if k2 not in PER_LAUNCH}
            same = (tuple(args), sorted(kept_env.items()), sorted(unset), cwd)
            k, new = self.keepers.take(
                slot, same, lambda: EngineKeeper(host, args, kept_env, unset, cwd), lambda k: k.ready
            )
            if new:
                if not k.start():
                    self.starts[key] = {"mode": "cold", "why": k.why}
                    self.keepers.drop(slot)
                    return None, "cold"
                self.starts[key] = {"mode": "reused", "fresh_at": list(FRESH_AT)}
            checked = self.checked is None or key in self.checked
            fresh = (fresh_start(index) if checked else index == 0) or k.launches == 0
            k.launches += 1
            return k.attach_argv(index, fresh), "fresh" if fresh else "reused"

    def close(self) -> None:
        with self._lock:
            self.keepers.close()


class LaunchPools(WarmPool):
    """The warm parents of a bisect's points (an A/B run's sides) and, for `--probe engine`, their
    engines' keepers (`engines`, at most `keep_engines` alive: each holds its model's memory); `close`
    stops both, on every way out."""

    def __init__(self, keep: int = 6, enabled: bool = True, keep_engines: int = 1) -> None:
        super().__init__(keep, enabled)
        self.engines = EnginePool(keep_engines, enabled)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.engines.close()

    def __enter__(self) -> LaunchPools:
        return self


def refuse_reuse_args(args: Sequence[str]) -> None:
    if any(a.split("=")[0] in ("--serve-launches", "--cold") for a in args):
        raise BadInput("--probe engine: --serve-launches and --cold are the bisect's to set")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
