"""GPU clocks: locked SM clocks and application clocks, set through NVML around each launch.

Factors, per GPU index i:
  gpu<i>.sm_lock     locked SM clock range "MIN-MAX" MHz (nvidia-smi -lgc MIN,MAX); unset: not locked
  gpu<i>.app_clocks  application clocks "MEM,SM" MHz (nvidia-smi -ac MEM,SM); unset: the defaults

Where they come from: application clocks from the two snapshots (gpu<i>.clock_mem_app_mhz and
gpu<i>.clock_sm_app_mhz); locked clocks from spec strings (``gpu0.sm_lock=1410`` or
``gpu0.sm_lock=1410-1980``, ``-gpu0.sm_lock`` for unlocked), since NVML has no call that reads them
back and so no snapshot records them.

Applied before a launch and undone after it, even when the launch fails or is interrupted:
nvmlDeviceSetGpuLockedClocks / nvmlDeviceResetGpuLockedClocks (undo: unlocked: the earlier lock
cannot be read back), nvmlDeviceSetApplicationsClocks (undo: the application clocks read just
before). Refusals are one line, exit 2 (regdiag.errors.BadInput): no nvidia-ml-py, no GPU or driver
(checked before anything is measured), no permission (root is needed; at the first launch, with the
journal kept). A value the GPU rejects (a clock it does not support) makes that point SKIP.

`open_control` is the one way in to the hardware; tests put a stand-in there (tests/test_bisect_kinds.py).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Protocol

from regdiag.bisect.failures import StepFailed
from regdiag.bisect.kinds.base import Difference, Kind, LaunchSetup, Where
from regdiag.errors import BadInput
from regdiag.snapshot.fields import field_value

if TYPE_CHECKING:
    from regdiag.bisect.factor_base import Factor, Spec

_NAME = re.compile(r"^gpu(\d+)\.(sm_lock|app_clocks)$")
_LOCK = re.compile(r"^(\d+)(?:-(\d+))?$")
_APP = re.compile(r"^(\d+),(\d+)$")


class ApplyFailed(StepFailed):
    """The GPU refused this value (e.g. a clock it does not support): the point is SKIP."""

    kind = "apply"


class ClockControl(Protocol):
    def lock_sm(self, gpu: int, lo: int, hi: int) -> None: ...
    def unlock_sm(self, gpu: int) -> None: ...
    def app_clocks(self, gpu: int) -> tuple[int, int]: ...  # (mem, sm) MHz
    def set_app_clocks(self, gpu: int, mem: int, sm: int) -> None: ...
    def reset_app_clocks(self, gpu: int) -> None: ...


class NvmlClocks:
    """The real thing: NVML through nvidia-ml-py."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError:
            raise BadInput("GPU clock factors need nvidia-ml-py (pip install nvidia-ml-py)") from None
        self.nv = pynvml
        try:
            pynvml.nvmlInit()
            self.count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as e:
            raise BadInput(f"GPU clock factors need a GPU and its driver here: NVML says {e}") from None

    def _call(self, what: str, gpu: int, *args: int) -> Any:
        nv = self.nv
        if not 0 <= gpu < self.count:
            raise BadInput(f"gpu{gpu}: this machine has {self.count} GPU(s)")
        try:
            return getattr(nv, what)(nv.nvmlDeviceGetHandleByIndex(gpu), *args)
        except nv.NVMLError_NoPermission as e:
            raise BadInput(
                f"gpu{gpu}: {what} needs root: NVML says {e}; run the bisect as root, or set the clocks "
                "yourself and leave them out of the sides"
            ) from None
        except nv.NVMLError as e:
            raise ApplyFailed(f"gpu{gpu}: {what}{list(args)}: NVML says {e}") from None

    def lock_sm(self, gpu: int, lo: int, hi: int) -> None:
        self._call("nvmlDeviceSetGpuLockedClocks", gpu, lo, hi)

    def unlock_sm(self, gpu: int) -> None:
        self._call("nvmlDeviceResetGpuLockedClocks", gpu)

    def app_clocks(self, gpu: int) -> tuple[int, int]:
        mem = self._call("nvmlDeviceGetApplicationsClock", gpu, self.nv.NVML_CLOCK_MEM)
        sm = self._call("nvmlDeviceGetApplicationsClock", gpu, self.nv.NVML_CLOCK_SM)
        return int(mem), int(sm)

    def set_app_clocks(self, gpu: int, mem: int, sm: int) -> None:
        self._call("nvmlDeviceSetApplicationsClocks", gpu, mem, sm)

    def reset_app_clocks(self, gpu: int) -> None:
        self._call("nvmlDeviceResetApplicationsClocks", gpu)


def open_control() -> ClockControl:
    return NvmlClocks()


def _gpu_fields(snap: dict[str, Any]) -> dict[str, Any]:
    group = (snap.get("groups") or {}).get("gpu") or {}
    return {n: field_value(group, n) for n in group.get("fields") or {}}


class GpuClockKind(Kind):
    name = "gpu-clock"

    def __init__(self) -> None:
        self._control: ClockControl | None = None

    def control(self) -> ClockControl:
        if self._control is None:
            self._control = open_control()
        return self._control

    def parse(self, token: str, spec: Spec) -> bool:
        unset = token.startswith("-")
        name, eq, value = token.lstrip("-").partition("=")
        m = _NAME.match(name)
        if m is None:
            return False
        if unset == bool(eq):
            raise BadInput(f"{token!r}: write {name}=VALUE, or -{name} for the default")
        settings = spec.settings.setdefault(self.name, {})
        if name in settings:
            raise BadInput(f"{name} is given twice ({token!r})")
        settings[name] = None if unset else _normal(m.group(2), value, token)
        return True

    def read_snapshot(self, snap: dict[str, Any], spec: Spec) -> None:
        values = _gpu_fields(snap)
        for key, mem in values.items():
            m = re.match(r"^gpu(\d+)\.clock_mem_app_mhz$", key)
            sm = values.get(f"gpu{m.group(1)}.clock_sm_app_mhz") if m else None
            if m and isinstance(mem, int) and isinstance(sm, int):
                spec.settings.setdefault(self.name, {})[f"gpu{m.group(1)}.app_clocks"] = f"{mem},{sm}"

    def differences(self, good: Spec, bad: Spec, notes: list[str]) -> list[Difference]:
        g, b = good.settings.get(self.name, {}), bad.settings.get(self.name, {})
        out: list[Difference] = []
        for name in sorted(set(g) | set(b)):
            if g.get(name) == b.get(name):
                continue
            if name not in g or name not in b:  # one snapshot saw no GPU there: nothing to go back to
                notes.append(f"{name} is known on one side only; not bisected")
                continue
            out.append((name, g[name], b[name]))
        return out

    def check(self, factors: list[Factor], where: Where) -> list[Factor]:
        if factors and where.host is not None:
            raise BadInput(
                f"GPU clock factors are set through NVML on this machine only, not on {where.host.name} "
                "(--host); bisect the other factors there, or run regdiag on that host"
            )
        if factors:
            self.control()  # no nvidia-ml-py, no GPU, no driver: refused now, before any launch
        return factors

    def show(self, f: Factor, value: str | None) -> str:
        return f"{f.name}={value}" if value is not None else f"{f.name} default"

    def text(self, value: str | None) -> str:
        return "default" if value is None else str(value)

    def apply(self, f: Factor, value: str | None, setup: LaunchSetup) -> None:
        m = _NAME.match(f.name)
        assert m is not None
        gpu, what, ctl = int(m.group(1)), m.group(2), self.control()
        if what == "sm_lock":
            if value is None:
                ctl.unlock_sm(gpu)
            else:
                lo, _, hi = value.partition("-")
                ctl.lock_sm(gpu, int(lo), int(hi))
                setup.undo.append(lambda: ctl.unlock_sm(gpu))
            return
        mem0, sm0 = ctl.app_clocks(gpu)
        if value is None:
            ctl.reset_app_clocks(gpu)
        else:
            mem, _, sm = value.partition(",")
            ctl.set_app_clocks(gpu, int(mem), int(sm))
        setup.undo.append(lambda: ctl.set_app_clocks(gpu, mem0, sm0))


def _normal(what: str, value: str, token: str) -> str:
    if what == "sm_lock":
        m = _LOCK.match(value)
        if m is None:
            raise BadInput(f"{token!r}: a locked SM clock is MHZ or MIN-MAX (MHz), e.g. 1410 or 1410-1980")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if lo > hi:
            raise BadInput(f"{token!r}: MIN is above MAX")
        return f"{lo}-{hi}"
    if _APP.match(value) is None:
        raise BadInput(f"{token!r}: application clocks are MEM,SM (MHz), e.g. 2619,1980")
    return value
