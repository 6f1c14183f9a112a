"""What one launch of a probe needs of the machine it runs on, read from the probe's own options, so that
a host that hands out resources (a Slurm allocation, docs/fleet.md) can ask for them and check them
before any launch.

    gpu_need("spec-decode", ["--preset", "kimi-k2", "--tp", "8"])  -> GpuNeed(8, "--preset kimi-k2 --tp 8")
    gpu_need("spec-decode", ["--preset", "tiny"])                 -> GpuNeed(0, "--preset tiny")

The synthetic probes run on CUDA with `--device cuda`, and with `--device auto` (their default) unless
their preset is regdiag's CPU shape `tiny`; `--device cpu` needs no GPU. Each rank is one GPU, so a
launch needs `--tp` of them (collectives: 2 by default). An engine or a --command says nothing regdiag
can read: it needs what --slurm-args asks for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TP_DEFAULT = {"spec-decode": 1, "collectives": 2}
CPU_PRESETS = ("tiny",)


@dataclass(frozen=True)
class GpuNeed:
    count: int  # GPUs one launch uses (one per rank); 0: none
    why: str  # the probe options that say so, as given ("--device cuda --tp 2")


def _option(args: Sequence[str], name: str) -> str | None:
    """The value of `name` in argparse style (`--tp 2`, `--tp=2`), the last one given."""
    value = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


def gpu_need(probe: str | None, args: Sequence[str]) -> GpuNeed:
    """The GPUs one launch of `probe` with `args` uses (see the module docstring)."""
    if probe not in TP_DEFAULT:
        return GpuNeed(0, "")
    device = _option(args, "--device") or "auto"
    preset = _option(args, "--preset") or "auto"
    tp_given = _option(args, "--tp")
    try:
        tp = max(1, int(tp_given)) if tp_given else TP_DEFAULT[probe]
    except ValueError:
        tp = TP_DEFAULT[probe]  # the probe refuses it in its own words
    tp_said = f" --tp {tp}" if tp_given else f" (--tp {tp} by default)"
    if device == "cpu":
        return GpuNeed(0, "--device cpu")
    if device == "cuda":
        return GpuNeed(tp, f"--device cuda{tp_said}")
    if probe == "spec-decode" and preset in CPU_PRESETS:
        return GpuNeed(0, f"--preset {preset}")
    said = f"--preset {preset}" if probe == "spec-decode" else "--device auto"
    return GpuNeed(tp, f"{said}{tp_said}")
