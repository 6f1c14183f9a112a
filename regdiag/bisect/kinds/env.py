"""Environment variables: set (or unset, with `env -u`) per launch; nothing to build."""

from __future__ import annotations

from typing import TYPE_CHECKING

from regdiag.bisect.kinds.base import Difference, Kind, LaunchSetup
from regdiag.snapshot.redact import is_hidden, redact_value

if TYPE_CHECKING:
    from regdiag.bisect.factor_base import Factor, Spec


ENV = "env"


class EnvKind(Kind):
    name = ENV
    variables_only = True

    def differences(self, good: Spec, bad: Spec, notes: list[str]) -> list[Difference]:
        out: list[Difference] = []
        for name in sorted(set(good.env) | set(bad.env)):
            g, b = good.env.get(name), bad.env.get(name)
            if g == b:
                continue
            if is_hidden(g) or is_hidden(b) or name in good.redacted or name in bad.redacted:
                notes.append(f"{name} differs but its value was redacted in a snapshot; not bisected")
                continue
            out.append((name, g, b))
        return out

    def show(self, f: Factor, value: str | None) -> str:
        return f"{f.name}={_shown(f.name, value)}" if value is not None else f"{f.name} unset"

    def label(self, f: Factor) -> str:
        g = "unset" if f.good is None else repr(_shown(f.name, f.good))
        b = "unset" if f.bad is None else repr(_shown(f.name, f.bad))
        return f"{f.name} {g} -> {b}"

    def apply(self, f: Factor, value: str | None, setup: LaunchSetup) -> None:
        setup.variables[f.name] = value  # a process's own environment: nothing to undo


def _shown(name: str, value: str) -> str:
    """An env value as labels and the screen show it: secrets out (the factor keeps the real value)."""
    return redact_value(name, value)[0]
