"""Per-phase timing inside a running engine, installed by regdiag's sitecustomize (standard library
and torch only; torch is used only if the engine imported it, or for "profile").

The configuration (JSON, path in REGDIAG_ENGINE_HOOK) names each target as `module:Qualified.name`:

    {"phases": [["draft", "m:C.f"], ["verify", "m:C.g"], ["verify", "m2:D.g"]], "cycle": null,
     "sync": "m:C.h",
     "accept": [{"target": "m:C.h", "arg": "num_matches", "pos": 3, "plus": 1},
                {"target": "m:R.forward", "ret": "sampled_token_ids", "reduce": "count_ne", "value": -1}],
     "graph": [{"phase": "verify", "context": "m:get_forward_context", "attr": "cudagraph_runtime_mode"},
               {"phase": "*", "within": "m:GraphManager.run_fullgraph"},
               {"phase": "verify", "ret": "3"},
               {"phase": "verify", "target": "m:Worker.step", "ret": "can_run_cuda_graph"}],
     "out_dir": "/tmp/x/out", "warmup": 2, "block": 1, "profile": {"cycles": 3}}

A phase may name several targets (the same phase in two model runners of one engine): whichever the
engine imports is patched, and a target never imported is listed in the footer, not an error. A phase
not called in a cycle is absent from that cycle's times (never a zero). The `accept`, `graph` and
`tokens` readers (their forms: regdiag_phase_readers.py) add the cycle's accept length, each phase's
CUDA-graph flag and the tokens a phase's forward took.
Each cycle line also carries `prev_period`: the previous cycle's start to its own start, that is
the previous cycle plus the engine's time between cycles (the scheduler's included); with CUDA events
`prev_host_period` too, on the host clock. regdiag files each under the cycle it belongs to (`period`),
so a cycle line is written as soon as the cycle ends, and a process stopped by a signal loses none.

Targets are patched when their module is imported (a sys.meta_path finder wraps the loader), never
by importing the engine here. A cycle is one call of `cycle` when given; otherwise it opens when the
first phase starts and closes when `sync` returns (the engine has synchronised there, so reading the
events costs nothing) or, without a sync point, when the first phase starts again; those events are
read later, at most MAX_PENDING cycles behind (a synchronize on the oldest when the queue is full).
Nested calls of targets (a draft model's forward inside the draft phase) count in the outer call.

With "profile" (`probe engine --profile`), the `cycles` cycles after the warm-up run under
torch.profiler and are read per phase into the footer's "profile" (probes/_profile.py, shipped beside
this file as regdiag_profile.py); they are dropped from the measurement as the warm-up is
(regdiag_phase_profile.py).

Output: protocol lines (docs/probes.md) appended to OUT_DIR/hook-<pid>.jsonl, one file per process.

Windows (one engine start measured as several launches, regdiag/engine/reuse.py): with `"window_file"`
in the configuration, regdiag writes `K` there before launch K's requests and `K end` after them. The
hook reads the file at a call that follows an idle gap of at least GAP_S (a small read, never per cycle in a
busy engine). At a change it drops the cycle left open over the gap (it spans the idle time), writes
every cycle still pending (each under the window it opened in), and restarts the warm-up and ABBA
counts for the new window; at `K end` it writes window K's footer (`"window": K`). Cycles opened after
`K end` (the request that carries the news) are not written. Cycle lines carry their `window`.
"""

import atexit
import functools
import importlib.abc
import inspect
import json
import os
import sys
import threading
import time

from regdiag_phase_profile import Profile, kit
from regdiag_phase_readers import Readers

MAX_PENDING = 8
GAP_S = 0.05  # an idle engine between two windows: regdiag waits longer than this after writing the file
VERSION = "1"
PROTOCOL = 1  # probes/_protocol.py's: the hook runs in the engine without it (tests/test_layers.py ties them)

_timer = None


def _dist_version(module_name):
    top = module_name.split(".")[0]
    try:
        from importlib import metadata

        dists = metadata.packages_distributions().get(top) or [top]
        return f"{dists[0]} {metadata.version(dists[0])}"
    except Exception:
        mod = sys.modules.get(top)
        v = getattr(mod, "__version__", None)
        return f"{top} {v}" if v else f"{top} (version unknown: not an installed distribution)"


def _loaded():
    """The distributions this process loaded (probes/_loaded.py), or None."""
    try:
        return kit("loaded").loaded_distributions()
    except Exception:
        return None


class _Out:
    def __init__(self, out_dir):
        self.path = os.path.join(out_dir, f"hook-{os.getpid()}.jsonl")
        self.lock = threading.Lock()
        self.f = None

    def write(self, obj):
        obj["pid"] = os.getpid()
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with self.lock:
            if self.f is None or self.pid != os.getpid():  # a forked child writes its own file
                self.path = os.path.join(os.path.dirname(self.path), f"hook-{os.getpid()}.jsonl")
                self.f = open(self.path, "a", encoding="utf-8")
                self.pid = os.getpid()
            self.f.write(line)
            self.f.flush()


def emergency_error(message):
    out_dir = _out_dir_from_env()
    if out_dir:
        _Out(out_dir).write({"type": "error", "kind": "error", "message": message})


def _out_dir_from_env():
    try:
        with open(os.environ["REGDIAG_ENGINE_HOOK"], encoding="utf-8") as f:
            return json.load(f).get("out_dir")
    except Exception:
        return None


class _Cycle:
    __slots__ = (
        "i", "start", "end", "prev_start", "host_start", "host_prev", "marks", "bare", "warmup",
        "accept", "calls", "graph", "graph_mode", "tokens", "window", "profiled",
    )  # fmt: skip

    def __init__(self, i, start, bare, warmup, window=None, profiled=False):
        self.i, self.start, self.end, self.prev_start = i, start, None, None
        self.host_start, self.host_prev = time.perf_counter(), None
        self.marks = []  # (phase, start mark, end mark)
        self.bare, self.warmup = bare, warmup
        self.accept = []  # (spec, value read at the call), reduced when the cycle is emitted
        self.calls = {}
        self.graph, self.graph_mode = {}, {}
        self.tokens = {}  # phase -> tokens its forward took (the batch's verified tokens)
        self.window = window  # (K, ending) of the window it opened in; None without windows
        self.profiled = profiled  # None, or under --profile's profiler ("warm", "read"): dropped


class Timer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.out = _Out(cfg["out_dir"])
        self.phases = list(dict.fromkeys(p[0] for p in cfg["phases"]))
        self.first = self.phases[0]
        self.readers = Readers(cfg)
        self.warmup = int(cfg.get("warmup", 2))
        self.block = int(cfg.get("block", 1))
        # target "module:qual" -> roles: ("phase", name) | ("cycle",) | ("sync",) | ("accept",)
        self.roles = {}
        for name, target in cfg["phases"]:
            self.roles.setdefault(target, []).append(("phase", name))
        for role in ("cycle", "sync"):
            for target in [cfg[role]] if isinstance(cfg.get(role), str) else cfg.get(role) or []:
                self.roles.setdefault(target, []).append((role,))
        for target, role in self.readers.roles():
            self.roles.setdefault(target, []).append(role)
        self.pending_modules = {}
        for target in self.roles:
            self.pending_modules.setdefault(target.split(":")[0], []).append(target)
        self.patched = []
        self.absent = []  # graph-reader targets this engine version does not define
        self.cuda = None
        self.local = threading.local()
        self.cycle = None
        self.last_start = None  # (mark, host time) of the last counted cycle's start: the period
        self.n_cycles = 0
        self.pending = []
        self.header_written = False
        self.emitted = 0
        self.skipped = 0
        # windows (see the module's docstring): the file, the window now, its first cycle's number
        self.window_file = cfg.get("window_file")
        self.window = (0, False)
        self.window_base = 0
        self.last_call = time.perf_counter()
        self.profile = Profile(cfg.get("profile"))

    # -- patching -------------------------------------------------------------------------------
    def patch_module(self, module):
        for target in self.pending_modules.pop(module.__name__, []):
            qual = target.split(":", 1)[1]
            parts = qual.split(".")
            owner = module
            try:
                for p in parts[:-1]:
                    owner = getattr(owner, p)
                static = inspect.getattr_static(owner, parts[-1])
            except AttributeError:
                if all(r[0] == "graph" for r in self.roles[target]):  # a graph flag this version lacks
                    self.absent.append(target)
                    continue
                what = ", ".join(_role_name(r) for r in self.roles[target])
                self.out.write(
                    {
                        "type": "error",
                        "kind": "usage",
                        "message": f"{what}: {target} does not exist in the installed "
                        f"{_dist_version(module.__name__)}",
                        "target": target,
                    }
                )
                continue
            if isinstance(static, (staticmethod, classmethod)):
                setattr(owner, parts[-1], type(static)(self._wrap(static.__func__, target)))
            else:
                setattr(owner, parts[-1], self._wrap(getattr(owner, parts[-1]), target))
            self.patched.append(target)

    def _wrap(self, fn, target):
        roles = self.roles[target]
        timer = self
        self.readers.bind(fn, target)

        @functools.wraps(fn)
        def regdiag_timed(*args, **kwargs):
            return timer.call(fn, roles, args, kwargs, target)

        regdiag_timed.__regdiag_target__ = target
        return regdiag_timed

    # -- timing ---------------------------------------------------------------------------------
    def _mark(self):
        if self.cuda is None:
            torch = sys.modules.get("torch")
            self.cuda = bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized())
            self.timer_name = "cuda-events" if self.cuda else "perf-counter"
        if self.cuda:
            import torch

            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def _ms(self, a, b):
        if self.cuda:
            return a.elapsed_time(b)
        return (b - a) * 1e3

    def _open(self, mark=None):
        n = self.n_cycles
        self.n_cycles += 1
        w = n - self.window_base  # the warm-up and the ABBA blocks count from the window's start
        ended = bool(self.window_file) and self.window[1]  # the request that carries a window's end
        profiled = not ended and self.profile.wants(w, self.warmup)
        first = self.warmup + self.profile.span  # the first measured cycle: after the profiled ones
        bare = self.block > 0 and w >= first and ((w - first) // self.block) % 4 in (1, 2)
        window = self.window if self.window_file else None
        c = _Cycle(n, mark if mark is not None else self._mark(), bare, w < first, window, profiled)
        if self.last_start is not None:  # the period: the previous cycle's start to this one's
            c.prev_start, c.host_prev = self.last_start
        self.last_start = (c.start, c.host_start)
        self.cycle = c
        if profiled:
            self.profile.start(self.cuda)
        if profiled == "read":
            self.profile.push("cycle")

    def _close(self, mark=None, synced=False):
        c = self.cycle
        self.cycle = None
        c.end = mark if mark is not None else self._mark()
        if c.profiled == "read":
            self.profile.pop()
        if self.first not in c.calls:  # e.g. a prefill through the cycle function: not a spec cycle
            self.skipped += 1
            self.n_cycles -= 1
            self.last_start = None  # the next period would span the skipped call
            return
        self.pending.append(c)
        self._drain(force_all=synced)
        if c.profiled == "read":
            self.profile.done += 1
            if self.profile.done >= self.profile.cycles:
                self.profile.finish(self.phases, self.cuda, self.out, self._window_no())
                self.last_start = None  # the next period would span the reading of the trace

    def _drain(self, force_all=False):
        while self.pending:
            c = self.pending[0]
            if self.cuda and not force_all and len(self.pending) <= MAX_PENDING and not c.end.query():
                return
            if self.cuda:
                c.end.synchronize()
            self.pending.pop(0)
            self._emit(c)

    def _window_no(self):
        return self.window[0] if self.window_file else None

    def _window_check(self):
        """After an idle gap: has regdiag moved to another window? (the module's docstring)"""
        try:
            with open(self.window_file, encoding="utf-8") as f:
                words = f.read().split()
            now = (int(words[0]), len(words) > 1 and words[1] == "end")
        except (OSError, ValueError, IndexError):
            return
        if now == self.window:
            return
        if self.cycle is not None:  # left open over the idle gap: it would time the gap
            if self.cycle.profiled == "read":
                self.profile.pop()
            self.cycle = None
            self.n_cycles -= 1
        self.last_start = None
        self._drain(force_all=True)
        # a window that ended before its profiled cycles did: what was profiled, under the old window
        self.profile.finish(self.phases, self.cuda, self.out, self._window_no())
        ended = self.window
        self.window = now
        self.window_base = self.n_cycles
        if now[1] and not ended[1]:
            self._footer({"window": now[0]})
        self.profile.reset()  # each window profiles its own cycles after its warm-up

    def _emit(self, c):
        if c.window is not None and c.window[1]:
            return  # opened after a window's end: the request that told the hook, not measured
        if not self.header_written:
            self._header()
        t = {"cycle": round(self._ms(c.start, c.end), 5)}
        line = {"type": "cycle", "i": c.i}
        if c.prev_start is not None:  # the previous cycle's period, known now that this one started
            line["prev_period"] = round(self._ms(c.prev_start, c.start), 5)
            if self.cuda:
                line["prev_host_period"] = round((c.host_start - c.host_prev) * 1e3, 5)
        if c.bare:
            line["bare"] = True
        else:
            for name, a, b in c.marks:  # a phase not called in this cycle stays absent, never 0
                t[name] = t.get(name, 0.0) + self._ms(a, b)
            for name in self.phases:
                if name in t:
                    t[name] = round(t[name], 5)
            line["values"] = self.readers.values(c)
            line["calls"] = c.calls
            if c.graph:
                line["graph"] = dict(c.graph)
            if c.graph_mode:
                line["graph_mode"] = dict(c.graph_mode)
        if c.warmup:
            line["warmup"] = True
        if c.profiled:
            line["profiled"] = c.profiled
        if c.window is not None:
            line["window"] = c.window[0]
        line["t"] = t
        self.out.write(line)
        self.emitted += 1

    def _header(self):
        self.header_written = True
        torch = sys.modules.get("torch")
        device = {"type": "cuda" if self.cuda else "cpu"}
        if self.cuda:
            device["name"] = torch.cuda.get_device_name()
            device["index"] = torch.cuda.current_device()
        versions = sorted({_dist_version(t.split(":")[0]) for t in self.patched or self.roles})
        self.out.write(
            {
                "type": "header",
                "protocol": PROTOCOL,
                "probe": "engine",
                "version": VERSION,
                "primary": "cycle",
                "phases": self.phases,
                "units": {
                    **{k: "ms" for k in ["cycle", "period", *self.phases]},
                    "accept_len": "tokens/step",
                },
                "better": {"period": "lower", "accept_len": "higher", "host_period": "lower"},
                "timer": self.timer_name,
                "targets": _targets_by_role(self.roles),
                "patched": list(self.patched),
                "engine_versions": versions,
                "python": sys.version.split()[0],
                "torch": getattr(torch, "__version__", None),
                "device": device,
                "chained_sitecustomize": os.environ.get("REGDIAG_ENGINE_HOOK_CHAINED"),
                "warmup": self.warmup,
                "block": self.block,
            }
        )

    def _capturing(self):
        torch = sys.modules.get("torch")
        return bool(
            torch is not None
            and torch.cuda.is_available()
            and torch.cuda.is_initialized()
            and torch.cuda.is_current_stream_capturing()
        )

    def _cycle_for(self, phase, is_cycle):
        """Open or turn over the cycle at this call; the start mark when this call opened one."""
        has_cycle_fn = bool(self.cfg.get("cycle"))
        if is_cycle:
            if self.cycle is None:
                self._open()
            return None
        if phase is None or phase != self.first or has_cycle_fn:
            return None
        start = self._mark()
        if self.cycle is None:
            self._open(start)
        elif self.first in self.cycle.calls:
            self._close(start)  # no sync point: the next cycle starts here
            self._open(start)
        else:
            return None
        return start

    def call(self, fn, roles, args, kwargs, target=None):
        if self.window_file is not None:
            now = time.perf_counter()
            if now - self.last_call > GAP_S:
                self._window_check()
            self.last_call = now
        if self._capturing():  # an engine capturing a CUDA graph: an event there would be captured
            return fn(*args, **kwargs)
        depth = getattr(self.local, "depth", 0)
        if depth:  # nested inside another target: counted there
            outer_phase, outer_target = getattr(self.local, "phase", None) or (None, None)
            self.readers.graph_within(self.cycle, outer_phase, outer_target, roles)
            result = fn(*args, **kwargs)
            self.readers.graph_ret(self.cycle, roles, result)
            self.readers.accept(self.cycle, roles, args, kwargs, result)
            return result
        phase = next((r[1] for r in roles if r[0] == "phase"), None)
        if phase is not None and not self.readers.admits(phase, target, args, kwargs):
            return fn(*args, **kwargs)  # not this phase (a prefill through a decode worker): untimed
        is_cycle = any(r[0] == "cycle" for r in roles)
        start = self._cycle_for(phase, is_cycle)
        c = self.cycle
        timed = phase is not None and c is not None and not c.bare
        if timed and start is None:
            start = self._mark()
        if phase is not None and c is not None:
            c.calls[phase] = c.calls.get(phase, 0) + 1
            self.readers.graph_before(c, phase, target)
            self.readers.count_tokens(c, phase, target, args, kwargs)
        self.local.depth = depth + 1 if phase is not None else depth
        self.local.phase = (phase, target)
        ranged = phase is not None and c is not None and c.profiled == "read"
        if ranged:
            self.profile.push(phase)
        try:
            result = fn(*args, **kwargs)
        finally:
            self.local.depth, self.local.phase = depth, None
            if ranged:
                self.profile.pop()
        if timed:
            c.marks.append((phase, start, self._mark()))
        if phase is not None and c is not None:
            self.readers.graph_after(c, phase, target, result, self.patched)
        self.readers.graph_ret(self.cycle, roles, result)
        self.readers.accept(self.cycle, roles, args, kwargs, result)
        is_sync = any(r[0] == "sync" for r in roles) and not self.cfg.get("cycle")
        if self.cycle is not None and ((is_cycle and self.cycle is c) or is_sync):
            self._close(synced=is_sync)
        return result

    def finish(self):
        if self.cycle is not None and self.cfg.get("sync") is None and not self.cfg.get("cycle"):
            self._close()  # the last cycle ended with the loop
        self._drain(force_all=True)
        self.profile.finish(self.phases, self.cuda, self.out, self._window_no())
        self._footer({})

    def _footer(self, extra):
        missing = [t for ts in self.pending_modules.values() for t in ts]
        if self.header_written or self.patched:
            self.out.write(
                {
                    "type": "footer",
                    "cycles": self.emitted,
                    "skipped": self.skipped,
                    "patched": self.patched,
                    "never_imported": missing,
                    "absent": self.absent,
                    "loaded": _loaded(),
                    **extra,
                }
            )


def _role_name(r):
    return r[1] if r[0] == "phase" else r[0]


def _targets_by_role(roles):
    """{role: target}, or {role: [targets]} where a phase names several (one per model runner)."""
    out = {}
    for t, rs in roles.items():
        for r in rs:
            name = _role_name(r)
            if name in out:
                prev = out[name] if isinstance(out[name], list) else [out[name]]
                out[name] = prev + [t] if t not in prev else prev
            else:
                out[name] = t
    return out


class _Loader(importlib.abc.Loader):
    def __init__(self, orig, timer):
        self._orig, self._timer = orig, timer

    def create_module(self, spec):
        return self._orig.create_module(spec)

    def exec_module(self, module):
        self._orig.exec_module(module)
        self._timer.patch_module(module)

    def __getattr__(self, name):
        return getattr(self._orig, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, timer):
        self.timer = timer

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.timer.pending_modules:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader, self.timer)
        return spec


def install(config_path):
    global _timer
    with open(config_path, encoding="utf-8") as f:
        cfg = json.load(f)
    _timer = Timer(cfg)
    sys.meta_path.insert(0, _Finder(_timer))
    for name in list(_timer.pending_modules):
        if name in sys.modules:  # imported before us (by a chained sitecustomize)
            _timer.patch_module(sys.modules[name])
    atexit.register(_timer.finish)
