"""Factor kinds: everything a bisect knows about one kind of difference, behind one interface.

A kind says which factors exist (from the two sides, i.e. the snapshot diff), how a value reads,
which values lie between the endpoints (ordered kinds), what a value needs built (`prepare`) and
what it needs set around a launch (`apply`, undone when the launch ends). search.py, lab.py and
run.py ask the kind; none of them names one. A new kind is one new file plus one line in KINDS
(docs/architecture.md works through kinds/gpu_clock.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from regdiag.bisect.factors import Factor, Spec
    from regdiag.hosts.base import Host


@dataclass
class Where:
    """What kinds may need to know about this bisect: the engine checkout, the package index, the
    base interpreter."""

    repo: str | None = None
    find_links: str | None = None
    index_url: str | None = None
    python: str | None = None
    host: Host | None = None  # a remote host the bisect runs on (paths above are its); None: here


@dataclass
class BuildPlan:
    """The environment a point needs built (regdiag.bisect.envs.Builder): filled in by `prepare`."""

    packages: dict[str, str] = field(default_factory=dict)
    commit: str | None = None


@dataclass
class LaunchSetup:
    """What one launch gets: variables (None: unset) and the undo steps of what `apply` changed.

    Used as a context manager around the launch: the undo steps run in reverse order when it ends,
    whether it ended well, failed, or was interrupted."""

    variables: dict[str, str | None] = field(default_factory=dict)
    undo: list[Callable[[], None]] = field(default_factory=list)

    def __enter__(self) -> LaunchSetup:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        first: BaseException | None = None
        while self.undo:
            try:
                self.undo.pop()()
            except Exception as e:  # every undo step runs; the first failure is raised after them
                first = first or e
        if first is not None and exc_type is None:
            raise first


class Kind:
    """The interface, with the defaults of an unordered kind that builds and sets nothing."""

    name = ""
    ordered = False  # values between the endpoints exist (commits, versions): a range search refines it

    def parse(self, token: str, spec: Spec) -> bool:
        """Claim a spec-string token (`NAME==VERSION`, `commit=REV`, ...) by recording it in `spec`."""
        return False

    def read_snapshot(self, snap: dict[str, Any], spec: Spec) -> None:
        """Record in `spec` what this kind reads from a snapshot (`spec.settings[self.name]`)."""

    def factors(self, good: Spec, bad: Spec, notes: list[str]) -> list[Factor]:
        """The factors of this kind that tell the sides apart; what cannot be bisected goes to notes."""
        from regdiag.bisect.factors import Factor

        g, b = good.settings.get(self.name, {}), bad.settings.get(self.name, {})
        return [
            Factor(self.name, n, g.get(n), b.get(n)) for n in sorted(set(g) | set(b)) if g.get(n) != b.get(n)
        ]

    def check(self, factors: list[Factor], where: Where) -> list[Factor]:
        """Refuse (BadInput) what cannot be bisected here, before anything is measured; may normalize."""
        return factors

    def show(self, f: Factor, value: str | None) -> str:
        """One value of the factor, as a point's label names it."""
        return f"{f.name}={value}" if value is not None else f"{f.name} unset"

    def text(self, value: str | None) -> str:
        return "unset" if value is None else str(value)

    def label(self, f: Factor) -> str:
        """The change, good -> bad."""
        return f"{f.name} {self.text(f.good)} -> {self.text(f.bad)}"

    def values_between(self, f: Factor, where: Where) -> list[str | None]:
        return [f.good, f.bad]

    def prepare(self, f: Factor, value: str | None, plan: BuildPlan) -> None:
        """Add what `value` needs to the environment build."""

    def apply(self, f: Factor, value: str | None, setup: LaunchSetup) -> None:
        """Set `value` for one launch; push the undo step to `setup.undo` right after changing anything."""

    def annotate(self, f: dict[str, Any], where: Where) -> None:
        """Add to a reported factor what people know it by (a commit's subject)."""


# The registry, below the interface its modules import; also the order factors are tried in.
from regdiag.bisect.kinds.commit import CommitKind  # noqa: E402
from regdiag.bisect.kinds.env import EnvKind  # noqa: E402
from regdiag.bisect.kinds.gpu_clock import GpuClockKind  # noqa: E402
from regdiag.bisect.kinds.package import PackageKind  # noqa: E402

KINDS: dict[str, Kind] = {k.name: k for k in (CommitKind(), PackageKind(), EnvKind(), GpuClockKind())}


def kind_of(f: Factor) -> Kind:
    return KINDS[f.kind]
