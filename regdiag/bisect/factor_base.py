"""The two sides of a bisect (`Spec`) and one difference between them (`Factor`), as data.

Below both regdiag.bisect.factors (which reads sides and diffs them through the kinds) and the kinds
themselves (regdiag.bisect.kinds, which take and give these): neither is imported here. A Factor reads
its values through its kind, found in the registry that regdiag.bisect.kinds hands over as it loads
(`use_kinds`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Spec:
    """One side of a bisect. `packages` maps normalized names to versions (None: not installed)."""

    packages: dict[str, str | None] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)
    commit: str | None = None
    source: str = "spec"
    repo: str | None = None  # the engine checkout a snapshot names
    notes: list[str] = field(default_factory=list)
    redacted: set[str] = field(default_factory=set)
    dirty: bool = False  # the engine checkout had uncommitted changes
    # Values of the other kinds: {kind name: {factor name: value}} (e.g. gpu-clock's gpu0.sm_lock).
    settings: dict[str, dict[str, str | None]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """What a record says of this side (regdiag ab): values as given, secrets redacted by the caller."""
        return {
            "source": self.source,
            "packages": self.packages,
            "env": self.env,
            "commit": self.commit,
            "settings": self.settings,
        }


class Shows(Protocol):
    """What a Factor asks of its kind (regdiag.bisect.kinds.Kind has it)."""

    def show(self, f: Factor, value: str | None) -> str: ...

    def label(self, f: Factor) -> str: ...


# Kind name -> its kind: the registry itself (regdiag.bisect.kinds.KINDS), so a kind added to it later is found.
_kinds: Mapping[str, Shows] = {}


def use_kinds(kinds: Mapping[str, Shows]) -> None:
    """Where a Factor finds its kind: regdiag.bisect.kinds calls this with its registry as it loads."""
    global _kinds
    _kinds = kinds


@dataclass(frozen=True)
class Factor:
    kind: str
    name: str
    good: str | None
    bad: str | None

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"

    def show(self, value: str | None) -> str:
        return _kinds[self.kind].show(self, value)

    def label(self) -> str:
        return _kinds[self.kind].label(self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "good": self.good,
            "bad": self.bad,
            "label": self.label(),
        }
