"""`probe engine --profile` inside the engine (the hook's part; standard library, and torch once a
profile starts): torch.profiler over the cycles after the warm-up, read by the probe kit's _profile.py.
"""

import os
import time


def kit(name):
    """The probe kit's module probes/_NAME.py, which regdiag puts beside this file as regdiag_NAME.py
    (or, run from a checkout, the one in the directory above)."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, f"regdiag_{name}.py")
    if not os.path.isfile(path):
        path = os.path.join(os.path.dirname(here), f"_{name}.py")
    spec = importlib.util.spec_from_file_location(f"regdiag_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Profile:
    """`probe engine --profile`: torch.profiler over the `cycles` cycles after the warm-up of each
    process (and of each window), read per phase by probes/_profile.py into the footer's "profile".
    The profiled cycles (and one before them, the profiler's own warm-up) are dropped from the
    measurement as the warm-up is (`warmup` and `profiled` on their lines): the measured cycles are
    never profiled. Each profiled cycle is a `cycle` range holding
    one range per phase call, so the reading has a per-cycle spread (its noise gate). torch is the
    instrument: imported here if the engine did not."""

    def __init__(self, cfg):
        self.cycles = int((cfg or {}).get("cycles") or 0)
        self.reset()

    def reset(self):
        self.prof, self.ranges, self.done, self.result, self.t0 = None, None, 0, None, None
        self.told = False

    @property
    def span(self):
        """The cycles the profile takes: one with the profiler started but not read (its start-up
        costs land there, as torch.profiler's own warm-up steps do), then `cycles` read ones."""
        return self.cycles + 1 if self.cycles > 0 else 0

    def wants(self, w, warmup):
        """None, "warm" (the profiler's warm-up cycle) or "read" for cycle `w` of the window."""
        if self.result is not None or not warmup <= w < warmup + self.span:
            return None
        return "warm" if w == warmup else "read"

    def start(self, cuda):
        if self.prof is not None or self.result is not None:
            return
        self.t0 = time.perf_counter()
        try:
            import torch  # noqa: F401  (the instrument)
            from torch.profiler import ProfilerActivity, profile

            self.kit = kit("profile")
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            prof = profile(activities=acts)
            prof.__enter__()
            self.prof, self.ranges = prof, self.kit.Ranges()
        except Exception as e:
            self.result = {"error": _one_line(f"the profiler did not start: {type(e).__name__}: {e}")}

    def push(self, name):
        if self.ranges is not None:
            self.ranges.range_push(name)

    def pop(self):
        if self.ranges is not None and self.ranges._open:
            self.ranges.range_pop()

    def finish(self, phases, cuda, out, window=None):
        """Stop the profiler (its cycles done, or the window or process ended first), read it, and
        write it as a "profile" line at once (a served engine is stopped by a signal: no footer)."""
        if self.prof is None:
            if self.result is not None and not self.told:  # the profiler did not start: say why
                self._tell(out, window)
            return
        prof, self.prof = self.prof, None
        while self.ranges._open:
            self.ranges.range_pop()
        self.ranges = None
        t1 = time.perf_counter()
        try:
            prof.__exit__(None, None, None)
            if not self.done:
                raise RuntimeError("no profiled cycle ended")
            got = self.kit._read(prof, phases, cuda, self.done, None)
            got.pop("trace", None)
        except Exception as e:
            got = {"error": _one_line(f"{type(e).__name__}: {e}"), "cycles": self.done}
        got["cost"] = {
            "profile_s": round(time.perf_counter() - self.t0, 3),
            "read_s": round(time.perf_counter() - t1, 3),
            "window": "the cycles after the warm-up (and one for the profiler's own), dropped from the "
            "measurement as the warm-up is",
        }
        self.result = got
        self._tell(out, window)

    def _tell(self, out, window):
        self.told = True
        line = {"type": "profile", "profile": self.result}
        if window is not None:
            line["window"] = window
        out.write(line)


def _one_line(text):
    return " ".join(str(text).split())[:300]
