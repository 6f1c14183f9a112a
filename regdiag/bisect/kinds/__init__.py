"""Factor kinds: everything a bisect knows about one kind of difference, behind one interface.

A kind says which factors exist (from the two sides, i.e. the snapshot diff), how a value reads,
which values lie between the endpoints (ordered kinds), what a value needs built (`prepare`) and
what it needs set around a launch (`apply`, undone when the launch ends). search.py, lab.py and
run.py ask the kind; none of them names one. A new kind is one new file plus one line in KINDS
(docs/architecture.md works through kinds/gpu_clock.py).
"""

from __future__ import annotations

from regdiag.bisect.factor_base import Factor, use_kinds
from regdiag.bisect.kinds.base import BuildPlan, Difference, Kind, LaunchSetup, Where
from regdiag.bisect.kinds.commit import CommitKind
from regdiag.bisect.kinds.env import EnvKind
from regdiag.bisect.kinds.gpu_clock import GpuClockKind
from regdiag.bisect.kinds.package import PackageKind

__all__ = ["KINDS", "BuildPlan", "Difference", "Kind", "LaunchSetup", "Where", "kind_of"]

# The registry; also the order factors are tried in.
KINDS: dict[str, Kind] = {k.name: k for k in (CommitKind(), PackageKind(), EnvKind(), GpuClockKind())}
use_kinds(KINDS)  # a Factor's show() and label() ask its kind here


def kind_of(f: Factor) -> Kind:
    return KINDS[f.kind]
