"""Read-only, typed views of a run record (regdiag.run/1), and the one definition of which launches count.

A launch counts ("usable") when it did not fail (`status` is not "error": "ok", or "interrupted"
with the cycles it finished) and it measured something (a non-empty sample series). compare,
explain, baselines, runs and bisect all ask `usable`, so "3 launches" means the same everywhere.

The views never change the record and keep no copy of its numbers beyond what they expose; unknown
fields stay in the record (`RunView.record`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def usable(launch: Mapping[str, Any]) -> bool:
    """Does this launch record count as evidence?"""
    samples = launch.get("samples")
    return (
        launch.get("status") != "error"
        and isinstance(samples, Mapping)
        and any(isinstance(v, list) and v for v in samples.values())
    )


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


@dataclass(frozen=True)
class LaunchView:
    index: int
    status: str
    error: str | None
    samples: Mapping[str, list[float]]  # per-cycle series, ms
    values: Mapping[str, list[float]]  # per-cycle values that are not times (accept length)
    scalars: Mapping[str, Any]
    header: Mapping[str, Any]
    usable: bool

    @classmethod
    def of(cls, launch: Mapping[str, Any], i: int) -> LaunchView:
        return cls(
            index=int(launch.get("index", i)),
            status=str(launch.get("status")),
            error=launch.get("error"),
            samples=_dict(launch.get("samples")),
            values=_dict(launch.get("values")),
            scalars=_dict(launch.get("scalars")),
            header=_dict(launch.get("header")),
            usable=usable(launch),
        )


@dataclass(frozen=True)
class RunView:
    record: Mapping[str, Any]
    launches: tuple[LaunchView, ...]

    @classmethod
    def of(cls, run: Mapping[str, Any]) -> RunView:
        raw = run.get("launches")
        las = raw if isinstance(raw, list) else []
        return cls(
            run, tuple(LaunchView.of(la if isinstance(la, dict) else {}, i) for i, la in enumerate(las))
        )

    @property
    def usable(self) -> list[LaunchView]:
        return [la for la in self.launches if la.usable]

    @property
    def primary(self) -> str | None:
        p = self.record.get("primary")
        return p if isinstance(p, str) else None

    @property
    def probe(self) -> Mapping[str, Any]:
        return _dict(self.record.get("probe"))

    @property
    def header(self) -> Mapping[str, Any]:
        """The header of the first usable launch (the probe's own description of what it ran)."""
        return next((la.header for la in self.usable), {})
