"""The warm interpreter of one environment, as regdiag drives it (the process itself: probes/_warm.py).

    with WarmInterpreter(host, "spec_decode.py", env) as warm:
        argv = warm.launch_argv(args) if warm.ready else probe_argv(host, name, args)

`start` runs `_warm.py serve` on the host, with the launches' environment, through the one launch
function (measure.launch.launch), and waits for its `ready` line: torch and the probe imported once.
Each launch is then `_warm.py launch SOCKET ARGS`, a small interpreter that hands its stdout, stderr,
environment and directory to the warm parent, which forks the launch from there. A parent that cannot
start (no Unix sockets, an import that fails) leaves `ready` False and its reason in `why`: the launches
run cold, as before, and the record says so per launch (`start`).

`stop` ends it (its children first) and is called on every way out of the block, Ctrl-C included; a
regdiag killed with SIGKILL leaves a parent that exits when it sees its own parent gone.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from regdiag.errors import HostError
from regdiag.hosts.base import Host
from regdiag.measure.launch import command, launch

READY_TIMEOUT_S = 600.0  # `import torch` on a loaded or cold host can take minutes

# The warm parents this regdiag process starts, and every launch forked from them, carry this in their
# environment: the busy check of a launch (probes/_supervisor.py) knows another point's launch, still
# tearing down after its footer, as this run's, not another user's.
GROUP_ENV = "REGDIAG_WARM_GROUP"
GROUP = f"{os.getpid()}-{secrets.token_hex(6)}"


class WarmInterpreter:
    def __init__(
        self,
        host: Host,
        script: str,
        env: Mapping[str, str] | None = None,
        python: str | None = None,
        *,
        unset: Sequence[str] = (),
        cwd: str | None = None,
    ) -> None:
        self.host, self.script, self.env, self.python = (
            host,
            script,
            {**(env or {}), GROUP_ENV: GROUP},
            python,
        )
        self.unset, self.cwd = list(unset), cwd
        self.teardowns = 0  # launches torn down after their footer ...
        self.forced: list[dict[str, Any]] = []  # ... and those whose ranks had to be killed
        self.ready = False
        self.why: str | None = None
        self.facts: dict[str, Any] = {}
        self._tmp: str | None = None
        self._sock = ""
        self._thread: threading.Thread | None = None
        self._said = threading.Event()
        self._tail: list[str] = []

    # the parent's own output (measure.launch.LineSink)
    def stdout_line(self, line: str) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            msg = None
        if isinstance(msg, dict) and msg.get("warm") == "teardown":
            # a launch that returned at its footer, torn down since (probes/_warm.py, detach)
            self.teardowns += 1
            if msg.get("forced"):
                self.forced.append({k: msg.get(k) for k in ("s", "ranks", "where")})
        elif isinstance(msg, dict) and msg.get("warm") in ("ready", "failed"):
            self.ready = msg["warm"] == "ready"
            self.why = None if self.ready else str(msg.get("error"))
            self.facts = {k: v for k, v in msg.items() if k.endswith("_s")}
            self._said.set()

    def stderr_line(self, line: str) -> None:
        self._tail = [*self._tail[-4:], line[:300]]

    def _serve(self, argv: list[str]) -> None:
        try:
            res = launch(
                self.host, argv, self, env=self.env, unset=self.unset, cwd=self.cwd, regdiag_code=True
            )
            if not self._said.is_set():
                self.why = (
                    f"exited {res.returncode} before it was ready: {' | '.join(self._tail) or 'no output'}"
                )
        except Exception as e:  # the host failed: the launches run cold
            self.why = f"{type(e).__name__}: {e}"
        finally:
            self._said.set()

    def start(self, timeout: float = READY_TIMEOUT_S) -> bool:
        """Start the parent and wait until it is ready (True) or has failed (False, `why`)."""
        t0 = time.monotonic()
        self._tmp = self.host.make_tempdir()
        self._sock = f"{self._tmp}/warm.sock"
        argv = self.host.regdiag_argv(["warm", "serve", self._sock, self.script], self.python)
        self._thread = threading.Thread(target=self._serve, args=(argv,), name="regdiag-warm", daemon=True)
        self._thread.start()
        if not self._said.wait(timeout):
            self.why = f"not ready after {timeout:.0f} s"
            self.stop()
        self.facts["warm_start_s"] = round(time.monotonic() - t0, 3)
        return self.ready

    def launch_argv(self, args: Sequence[str]) -> list[str]:
        """The argv of one launch of the probe with `args`, forked from the warm parent."""
        return self.host.regdiag_argv(["warm", "launch", self._sock, *args], self.python)

    def stop(self) -> None:
        """Stop the parent; where its host is gone (an SSH connection closed as a run is interrupted), the
        host's end ended it (sshd hangs its session up), and the interruption is what is raised."""
        if self._thread is None:
            return
        try:
            if self._thread.is_alive():
                argv = self.host.regdiag_argv(["warm", "stop", self._sock], self.python)
                command(self.host, argv, timeout=60)
                self._thread.join(60.0)  # the last launches' teardowns first (probes/_warm.py)
            if self._tmp is not None:
                self.host.remove_tree(self._tmp)
        except HostError:
            pass
        finally:
            self._thread = None
            self.ready = False
            self._tmp = None

    def __enter__(self) -> WarmInterpreter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# Variables that differ from launch to launch of one environment: a launch has them, its parent not.
PER_LAUNCH = ("REGDIAG_LAUNCH_INDEX",)


class Stoppable(Protocol):
    def stop(self) -> None: ...


P = TypeVar("P", bound=Stoppable)


class Kept(Generic[P]):
    """Long-lived processes by slot (environment, host), at most `keep` at once, in order of last use:
    `take` gives a slot's process, a new one (`make`) where it has none, where the one it has was made for
    other inputs (`same`) or is no longer `usable`; the one used least recently stops first. The warm
    parents here and the engines' keepers (engine/keeper.py) are kept so."""

    def __init__(self, keep: int) -> None:
        self.keep = max(1, keep)
        self.items: dict[tuple[str, str], P] = {}  # in order of last use
        self._same: dict[tuple[str, str], Any] = {}

    def take(
        self,
        slot: tuple[str, str],
        same: Any,
        make: Callable[[], P],
        usable: Callable[[P], bool] = lambda _: True,
    ) -> tuple[P, bool]:
        """The slot's process and whether it is new (not started yet)."""
        old = self.items.pop(slot, None)
        if old is not None and (self._same.get(slot) != same or not usable(old)):
            old.stop()
            old = None
        if old is not None:
            self.items[slot] = old
            return old, False
        while len(self.items) >= self.keep:
            self.items.pop(next(iter(self.items))).stop()
        new = make()
        self.items[slot], self._same[slot] = new, same
        return new, True

    def drop(self, slot: tuple[str, str]) -> None:
        """Stop the slot's process and forget it (one that did not start)."""
        if (p := self.items.pop(slot, None)) is not None:
            p.stop()

    def close(self) -> None:
        while self.items:
            self.items.pop(next(iter(self.items))).stop()


class WarmPool:
    """The warm interpreters of several environments (a bisect's points, an A/B run's sides): one per
    environment and host, started at its first launch (or before: `prestart`), with that environment's
    interpreter, variables and directory (a cold launch's, less what differs per launch: PER_LAUNCH),
    and kept for its later launches. At most `keep` run at once (the one used least recently stops
    first: the points a search has moved on from). `close` stops them all and is called on every way
    out (a `with` block).

        with WarmPool() as pool:
            argv, how = pool.argv(key, host, "spec_decode.py", args, env=env, unset=unset, cwd=wt, python=py)

    `starts` says per environment how its parent started (costs) or why its launches run cold."""

    def __init__(self, keep: int = 6, enabled: bool = True) -> None:
        self.keep, self.enabled = keep, enabled
        self.warm: Kept[WarmInterpreter] = Kept(keep)
        self.starts: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()  # the lanes of several nodes ask from their own threads

    def argv(
        self,
        key: str,
        host: Host,
        script: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        unset: Sequence[str] = (),
        cwd: str | None = None,
        python: str | None = None,
    ) -> tuple[list[str] | None, str]:
        """The argv of one launch of `script` with `args` forked from environment `key`'s warm parent
        on `host` (started now if need be), and "warm"; or (None, "cold") where there is none (--cold,
        a host whose launches are job steps, a parent that did not start: `starts` says why)."""
        with self._lock:
            w, fresh = self._parent(key, host, script, env, unset, cwd, python)
            if fresh and w is not None:
                self._start(key, w)
        if w is None or not w.ready:
            return None, "cold"
        return w.launch_argv(args), "warm"

    def prestart(self, wanted: Sequence[Mapping[str, Any]]) -> None:
        """Start the parents of environments about to be measured in turn (each a mapping of argv's
        keywords but args), side by side: their imports run in parallel, before any of their launches."""
        with self._lock:
            fresh = []
            for want in list(wanted)[: self.keep]:
                where = (want.get("unset", ()), want.get("cwd"), want.get("python"))
                w, new = self._parent(want["key"], want["host"], want["script"], want["env"], *where)
                if new and w is not None:
                    fresh.append((want["key"], w))
            threads = [threading.Thread(target=self._start, args=kw, daemon=True) for kw in fresh]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

    def _parent(
        self,
        key: str,
        host: Host,
        script: str,
        env: Mapping[str, str],
        unset: Sequence[str],
        cwd: str | None,
        python: str | None,
    ) -> tuple[WarmInterpreter | None, bool]:
        """Environment `key`'s parent on `host` (None: its launches run cold), and whether it is new
        (not started yet)."""
        if not self.enabled or not host.keeps_warm:
            why = "--cold" if not self.enabled else f"launches on {host.via} start cold (a job step each)"
            self.starts.setdefault(key, {"mode": "cold", "why": why})
            return None, False
        parent_env = {k: v for k, v in env.items() if k not in PER_LAUNCH}
        same = (script, sorted(parent_env.items()), sorted(unset), cwd, python)

        def make() -> WarmInterpreter:
            return WarmInterpreter(host, script, parent_env, python, unset=unset, cwd=cwd)

        return self.warm.take((key, host.name), same, make)

    def _start(self, key: str, w: WarmInterpreter) -> None:
        ready = w.start()
        self.starts[key] = {"mode": "warm", **w.facts} if ready else {"mode": "cold", "why": w.why}

    def close(self) -> None:
        """Stop every warm parent (each lets its last launch finish tearing down)."""
        with self._lock:
            self.warm.close()

    def __enter__(self) -> WarmPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
