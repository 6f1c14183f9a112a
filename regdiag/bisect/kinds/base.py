"""The factor-kind interface (`Kind`) and what it works with: `Where` a bisect runs, the `BuildPlan`
a point needs built, the `LaunchSetup` around one launch. The kinds import this module; the registry
(regdiag.bisect.kinds.KINDS) imports the kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from regdiag.bisect.factor_base import Factor, Spec
    from regdiag.hosts.base import Host

# One factor of a kind, as the kind finds it: (name, good value, bad value); None is "unset".
Difference = tuple[str, str | None, str | None]


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
    # `apply` only sets the launch's variables, changing nothing else: a warm interpreter can be started
    # with them before the launch (bisect/lab.py, _prestart)
    variables_only = False

    def parse(self, token: str, spec: Spec) -> bool:
        """Claim a spec-string token (`NAME==VERSION`, `commit=REV`, ...) by recording it in `spec`."""
        return False

    def read_snapshot(self, snap: dict[str, Any], spec: Spec) -> None:
        """Record in `spec` what this kind reads from a snapshot (`spec.settings[self.name]`)."""

    def differences(self, good: Spec, bad: Spec, notes: list[str]) -> list[Difference]:
        """(name, good value, bad value) of each factor of this kind that tells the sides apart (the diff
        makes them Factors); what cannot be bisected goes to notes."""
        g, b = good.settings.get(self.name, {}), bad.settings.get(self.name, {})
        return [(n, g.get(n), b.get(n)) for n in sorted(set(g) | set(b)) if g.get(n) != b.get(n)]

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
