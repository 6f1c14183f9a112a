"""Package versions: pinned installs into a venv layered on the base interpreter; ordered by the
versions the index (or --find-links) has between the two."""

from __future__ import annotations

from typing import TYPE_CHECKING

from regdiag.bisect import ranges
from regdiag.bisect.kinds.base import BuildPlan, Difference, Kind, Where
from regdiag.errors import BadInput

if TYPE_CHECKING:
    from regdiag.bisect.factor_base import Factor, Spec


PACKAGE = "package"


class PackageKind(Kind):
    name = PACKAGE
    ordered = True

    def differences(self, good: Spec, bad: Spec, notes: list[str]) -> list[Difference]:
        out: list[Difference] = []
        both_from_specs = good.source == "spec" and bad.source == "spec"
        for name in sorted(set(good.packages) | set(bad.packages)):
            g, b = good.packages.get(name), bad.packages.get(name)
            if g == b:
                continue
            if both_from_specs and (name not in good.packages or name not in bad.packages):
                side = "--good" if name not in good.packages else "--bad"
                raise BadInput(f"{name} is pinned on one side only (missing on {side}); pin it on both sides")
            if g is None or b is None:
                where = "--good" if g is None else "--bad"
                notes.append(
                    f"{name} is not installed on {where} ({g or b} on the other side); a bisect installs "
                    "pinned versions but does not uninstall, so this difference is not bisected"
                )
                continue
            out.append((name, g, b))
        return out

    def show(self, f: Factor, value: str | None) -> str:
        return f"{f.name}=={value}" if value is not None else f"{f.name} (not installed)"

    def label(self, f: Factor) -> str:
        return f"{f.name} {f.good} -> {f.bad}"

    def values_between(self, f: Factor, where: Where) -> list[str | None]:
        return list(
            ranges.versions_between(
                f.name,
                f.good or "",
                f.bad or "",
                find_links=where.find_links,
                index_url=where.index_url,
                python=where.python,
                host=where.host,
            )
        )

    def prepare(self, f: Factor, value: str | None, plan: BuildPlan) -> None:
        if value is not None:
            plan.packages[f.name] = value
