"""A warm interpreter per environment: import torch once, fork every launch from there.

    python _warm.py serve SOCKET SCRIPT     -- the parent: imports torch and SCRIPT's modules (never
                                               CUDA), prints one `{"warm": "ready"}` line, then forks one
                                               child per request on the Unix socket SOCKET
    python _warm.py launch SOCKET ARGS...    -- one launch: a small stdlib interpreter that hands its
                                               stdout, stderr, environment and directory to the parent
                                               and exits with the launch's status
    python _warm.py stop SOCKET              -- the parent stops (its children first)

A child is what `python SCRIPT ARGS` would be, started from a parent that has already imported torch:
its environment is exactly the launch's (os.environ replaced), its cwd the launch's, its stdout and
stderr the launch client's own file descriptors (passed over the socket), its signals at their
defaults. The child then runs SCRIPT's main: the supervisor, whose ranks are forked from it in turn
(`fork_rank`) before any thread starts, so each rank initialises CUDA, builds, measures and exits with a
fresh context, allocator and library handles, as a cold launch does.

What is shared with the parent is what it imported: modules, and variables read at import time, which
is why there is one parent per environment, started with that environment's variables. docs/probes.md
("Warm launches") says how the independence of warm launches is checked.

Nothing outlives its owner: a child whose client goes away (regdiag stopped, a timeout, kill -9) is sent
SIGTERM, then SIGKILL; the parent exits when its own parent goes, after IDLE_S without a request, or on
`stop`, and takes its children with it.
"""

from __future__ import annotations

import array
import json
import os
import selectors
import signal
import socket
import sys
import time
from typing import Any

IDLE_S = float(os.environ.get("REGDIAG_WARM_IDLE_S", "900"))
KILL_GRACE_S = 5.0
DETACHED_GRACE_S = 30.0  # a launch's teardown after its footer (the supervisor forces it within 23 s)
MAX_MSG = 1 << 20

# Set in a forked supervisor: how its ranks start (fork_rank) instead of a fresh interpreter each.
FORK_MAIN: Any = None
# Set in a forked launch: the pipe on which it tells the parent that its results are out (detach).
DETACH_FD: int | None = None


# -- the launch client (stdlib only: it starts in milliseconds) -------------------------------------------


def _send(sock: socket.socket, obj: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode() + b"\n"
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(data)


def _client(sock_path: str, request: dict[str, Any]) -> int:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sock_path)
    except OSError as e:
        sys.stderr.write(f"regdiag warm: cannot reach the warm interpreter at {sock_path}: {e}\n")
        return 1
    got: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda n, _f: got.append(n))
    sys.stdout.flush()
    _send(s, request, [1, 2])
    parent = os.getppid()
    s.settimeout(0.2)
    buf = b""
    while not got and os.getppid() == parent:
        try:
            chunk = s.recv(4096)
        except TimeoutError:
            continue
        if not chunk:
            return 1  # the warm parent went away: the launch failed
        buf += chunk
        if b"\n" in buf:
            return int(json.loads(buf.split(b"\n", 1)[0]).get("exit", 1))
    s.close()  # closing is the stop request: the parent stops the child
    return 128 + got[0] if got else 1


def launch_main(sock_path: str, argv: list[str]) -> int:
    return _client(sock_path, {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()})


# -- the warm parent ----------------------------------------------------------------------------------------


def _preload(script: str) -> tuple[Any, dict[str, float]]:
    """Import torch and the probe (its module-level imports, and those it names in WARM_IMPORTS)."""
    import importlib
    import runpy

    t0 = time.monotonic()
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    import torch

    t1 = time.monotonic()
    module = runpy.run_path(script, run_name="regdiag_warm_probe")
    # every probe's supervisor (and NVML's bindings, imported, not initialised), and the rank's modules
    for name in ("_supervisor", "pynvml", *module.get("WARM_IMPORTS", ())):
        try:
            importlib.import_module(name)
        except ImportError:  # a launch imports it then (and says why it cannot), as a cold one does
            pass
    t2 = time.monotonic()
    try:  # what the environment has installed, which every launch's footer names (probes/_loaded.py)
        import _loaded

        _loaded.prime()
    except Exception:  # a launch reads it then, as a cold one does
        pass
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        raise RuntimeError("the warm parent initialised CUDA while importing")
    return module["main"], {
        "import_torch_s": round(t1 - t0, 3),
        "import_probe_s": round(t2 - t1, 3),
        "read_installed_s": round(time.monotonic() - t2, 3),
    }


def _recv_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    fds = array.array("i")
    data, anc, _flags, _addr = conn.recvmsg(MAX_MSG, socket.CMSG_SPACE(2 * fds.itemsize))
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    while data and not data.endswith(b"\n"):
        more = conn.recv(MAX_MSG)
        if not more:
            break
        data += more
    return (json.loads(data) if data else {}), list(fds)


# What the parent's own start (a .pth file, sitecustomize, importing torch and the probe) did to its
# environment: a cold launch's start does the same to the launch's, so each child does it again over the
# launch's variables (set: name -> value; unset: names). Read against the environment it was exec'd with.
STARTUP_ENV: tuple[dict[str, str], list[str]] = ({}, [])


def _startup_env() -> tuple[dict[str, str], list[str]]:
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
    except OSError:  # not Linux: the launch's variables alone, as before
        return {}, []
    at_exec = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, _, v = item.partition(b"=")
            at_exec[os.fsdecode(k)] = os.fsdecode(v)
    now = dict(os.environ)
    return {k: v for k, v in now.items() if at_exec.get(k) != v}, [k for k in at_exec if k not in now]


def _become(env: dict[str, str], cwd: str | None, fds: list[int], script: str, argv: list[str]) -> None:
    """In a forked child: the process `python SCRIPT ARGV` with this environment would be."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if len(fds) >= 2:
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds:
            if fd > 2:
                os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.environ.clear()
    os.environ.update(env)
    changed, removed = STARTUP_ENV
    os.environ.update(changed)
    for k in removed:
        os.environ.pop(k, None)
    if cwd:
        try:
            os.chdir(cwd)
        except OSError:
            pass
    sys.argv = [script, *argv]


def _run_child(main: Any, argv: list[str]) -> None:
    code = 1
    try:
        code = int(main(argv) or 0)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class _Child:
    def __init__(self, pid: int, conn: socket.socket | None, done: int | None) -> None:
        self.pid, self.conn, self.done = pid, conn, done
        self.killed_at: float | None = None
        self.buf = b""


class Parent:
    """The warm parent's loop: one thread, so that forking it is safe."""

    def __init__(self, sock_path: str, script: str, main: Any) -> None:
        self.script, self.main = script, main
        self.sel = selectors.DefaultSelector()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(sock_path)
        os.chmod(sock_path, 0o600)
        self.server.listen(64)
        self.sel.register(self.server, selectors.EVENT_READ, None)
        self.children: dict[int, _Child] = {}
        self.parent = os.getppid()
        self.last = time.monotonic()
        self.stopping = False
        self.patient = False  # stopped on request: torn-down launches may finish their teardown first

    def serve(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        signal.signal(signal.SIGHUP, lambda *_: setattr(self, "stopping", True))
        while not self.stopping:
            for key, _ in self.sel.select(0.05):
                if key.data is None:
                    self._accept()
                elif isinstance(key.data, tuple):
                    self._told(key.data[1])
                else:
                    self._lost(key.data)
            self._reap()
            idle = not self.children and time.monotonic() - self.last > IDLE_S
            if os.getppid() != self.parent or idle:
                break
        self._stop_children()
        return 0

    def _accept(self) -> None:
        conn, _ = self.server.accept()
        conn.setblocking(True)
        req, fds = _recv_request(conn)
        self.last = time.monotonic()
        if req.get("stop"):
            self.stopping = self.patient = True
            conn.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the launch
            self.sel.close()
            self.server.close()
            for c in self.children.values():
                if c.conn is not None:
                    c.conn.close()
                if c.done is not None:
                    os.close(c.done)
            conn.close()
            os.close(done_r)
            global FORK_MAIN, DETACH_FD
            FORK_MAIN = self.main  # the supervisor forks its ranks from here too
            DETACH_FD = done_w
            argv = [str(a) for a in req.get("argv") or []]
            _become(dict(req.get("env") or {}), req.get("cwd"), fds, self.script, argv)
            _run_child(self.main, argv)
        for fd in fds:
            os.close(fd)
        os.close(done_w)
        os.set_blocking(done_r, False)
        child = _Child(pid, conn, done_r)
        self.children[pid] = child
        self.sel.register(conn, selectors.EVENT_READ, child)
        self.sel.register(done_r, selectors.EVENT_READ, ("done", child))

    def _told(self, child: _Child, last: bool = False) -> None:
        """The launch spoke on its detach pipe: its results are out ({"exit": N}: answer the client
        now, while it tears down), or how its teardown went ({"teardown": {...}}, kept on stdout).
        `last`: it has exited; read what is left and close the pipe."""
        while child.done is not None:
            try:
                data = os.read(child.done, 65536)
            except BlockingIOError:
                data = None
            except OSError:
                data = b""
            if not data:
                if data is None and not last:
                    return
                self.sel.unregister(child.done)
                os.close(child.done)
                child.done = None
            else:
                child.buf += data
            if not last:
                break
        while b"\n" in child.buf:
            line, child.buf = child.buf.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "exit" in msg and child.conn is not None:
                self._answer(child, int(msg["exit"]))
            elif isinstance(msg.get("teardown"), dict):
                sys.stdout.write(json.dumps({"warm": "teardown", "pid": child.pid, **msg["teardown"]}) + "\n")
                sys.stdout.flush()

    def _answer(self, child: _Child, code: int) -> None:
        """The client's launch is over with `code` (it exits); what the child does next is ours."""
        assert child.conn is not None
        try:
            _send(child.conn, {"exit": code})
        except OSError:
            pass
        self.sel.unregister(child.conn)
        child.conn.close()
        child.conn = None

    def _lost(self, child: _Child) -> None:
        """The client spoke or went away; it only ever goes away (regdiag stopped the launch)."""
        assert child.conn is not None
        try:
            data = child.conn.recv(64)
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(child.conn)
            child.conn.close()
            child.conn = None
            self._signal(child, signal.SIGTERM)

    def _signal(self, child: _Child, sig: int) -> None:
        try:
            os.kill(child.pid, sig)
        except ProcessLookupError:
            return
        if child.killed_at is None:
            child.killed_at = time.monotonic()

    def _reap(self) -> None:
        for pid, child in list(self.children.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == 0:
                if child.killed_at is not None and time.monotonic() - child.killed_at > KILL_GRACE_S:
                    self._signal(child, signal.SIGKILL)
                continue
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
            self._told(child, last=True)  # what it said before it went
            if child.conn is not None:
                self._answer(child, code)
            del self.children[pid]
            self.last = time.monotonic()

    def _stop_children(self) -> None:
        deadline = time.monotonic() + (DETACHED_GRACE_S if self.patient else 0.0)
        while time.monotonic() < deadline and any(c.conn is None for c in self.children.values()):
            self._reap()  # launches that returned at their footer, still tearing down
            time.sleep(0.02)
        for child in self.children.values():
            self._signal(child, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_S
        while self.children and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.05)
        for child in list(self.children.values()):
            self._signal(child, signal.SIGKILL)
            os.waitpid(child.pid, 0)


def serve_main(sock_path: str, script: str) -> int:
    if not os.path.isabs(script):  # a probe's file name: the one beside this file (regdiag sends names)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), script)
    sys.modules.setdefault("_warm", sys.modules[__name__])  # the supervisor's `import _warm` is this module
    global STARTUP_ENV
    try:
        main, took = _preload(script)
        STARTUP_ENV = _startup_env()
    except BaseException as e:  # one line for regdiag, which then launches cold
        sys.stdout.write(json.dumps({"warm": "failed", "error": f"{type(e).__name__}: {e}"}) + "\n")
        sys.stdout.flush()
        return 1
    parent = Parent(sock_path, script, main)
    sys.stdout.write(json.dumps({"warm": "ready", "pid": os.getpid(), **took}) + "\n")
    sys.stdout.flush()
    try:
        return parent.serve()
    finally:
        try:
            os.unlink(sock_path)
        except OSError:
            pass


# -- a warm launch's supervisor ----------------------------------------------------------------------------


def detach(code: int) -> bool:
    """In a warm launch whose results are out (its footer written): its client returns `code` now, and
    this process finishes the teardown with its output going nowhere (`detached_report` then says how
    the teardown went). False in a cold launch, which keeps its stdout until it exits."""
    if DETACH_FD is None:
        return False
    sys.stdout.flush()
    sys.stderr.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    os.write(DETACH_FD, json.dumps({"exit": code}).encode() + b"\n")
    return True


def detached_report(teardown: dict[str, Any]) -> None:
    """How a detached launch's teardown went, for the warm parent to pass on (one line of its own)."""
    global DETACH_FD
    if DETACH_FD is None:
        return
    try:
        os.write(DETACH_FD, json.dumps({"teardown": teardown}).encode() + b"\n")
        os.close(DETACH_FD)
    except OSError:
        pass
    DETACH_FD = None


# -- the ranks of a warm launch -----------------------------------------------------------------------------


class ForkedRank:
    """A rank forked from a warm supervisor, with the part of subprocess.Popen's interface it uses."""

    def __init__(self, pid: int, stdout: Any, stderr: Any) -> None:
        self.pid, self.stdout, self.stderr = pid, stdout, stderr
        self.returncode: int | None = None

    def _status(self, flags: int) -> int | None:
        if self.returncode is None:
            try:
                done, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped by the other thread that waits for it
                return self.returncode
            if done:
                code = os.waitstatus_to_exitcode(status)
                self.returncode = code
        return self.returncode

    def poll(self) -> int | None:
        return self._status(os.WNOHANG)

    def wait(self, timeout: float | None = None) -> int:
        if timeout is None:
            return int(self._status(0))  # type: ignore[arg-type]
        end = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > end:
                import subprocess

                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.02)
        return int(self.returncode)  # type: ignore[arg-type]

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        try:
            self.send_signal(signal.SIGKILL)
        except ProcessLookupError:
            pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def fork_rank(argv: list[str], env: dict[str, str], want_stdout: bool) -> ForkedRank:
    """Rank `argv` of this (warm, single-threaded) supervisor, forked: SCRIPT's main with these args."""
    out_r, out_w = os.pipe() if want_stdout else (None, None)
    err_r, err_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        fds = [out_w if out_w is not None else os.open(os.devnull, os.O_WRONLY), err_w]
        for fd in (out_r, err_r, DETACH_FD):
            if fd is not None:
                os.close(fd)
        _become(env, None, fds, sys.argv[0], argv)
        _run_child(FORK_MAIN, argv)
    os.close(err_w)
    if out_w is not None:
        os.close(out_w)
    stdout = os.fdopen(out_r, "rb") if out_r is not None else None
    return ForkedRank(pid, stdout, os.fdopen(err_r, "rb"))


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "serve":
        return serve_main(argv[1], argv[2])
    if len(argv) >= 2 and argv[0] == "launch":
        return launch_main(argv[1], argv[2:])
    if len(argv) == 2 and argv[0] == "stop":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(argv[1])
            _send(s, {"stop": True})
        except OSError:
            pass
        return 0
    sys.stderr.write("usage: _warm.py {serve SOCKET SCRIPT | launch SOCKET ARGS... | stop SOCKET}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
