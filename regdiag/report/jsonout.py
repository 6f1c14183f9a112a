"""Any result as JSON on stdout: its `to_dict()` when it has one, else the plain data."""

from __future__ import annotations

import json
from typing import Any

from regdiag.records import finite
from regdiag.report.registry import Out


def _plain(data: Any) -> Any:
    return data.to_dict() if hasattr(data, "to_dict") else data


def render(data: Any, out: Out) -> None:
    # Strict JSON: a NaN or an infinity (a tok/s of given extreme numbers) is null, as in records;
    # Python would print the bare NaN / Infinity that jq and other parsers refuse.
    out.text(json.dumps(finite(_plain(data)), indent=1, default=str, allow_nan=False) + "\n")


def one_or_many(data: list[Any], out: Out) -> None:
    """A list of per-host results: one host prints its object, several print the list."""
    render(data[0] if len(data) == 1 else data, out)
