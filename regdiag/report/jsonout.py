"""Any result as JSON on stdout: its `to_dict()` when it has one, else the plain data, with its schema id.

Every --json output is one object whose "schema" names it (regdiag.records.OUTPUT_KINDS); its JSON
Schema is docs/schemas/ (python -m regdiag.schemas)."""

from __future__ import annotations

import json
from typing import Any

from regdiag.records import finite, listed, tagged
from regdiag.report.registry import Out


def _plain(data: Any) -> Any:
    return data.to_dict() if hasattr(data, "to_dict") else data


def render(data: Any, out: Out) -> None:
    # Strict JSON: a NaN or an infinity (a tok/s of given extreme numbers) is null, as in records;
    # Python would print the bare NaN / Infinity that jq and other parsers refuse.
    out.text(json.dumps(finite(_plain(data)), indent=1, default=str, allow_nan=False) + "\n")


def one_or_many(data: list[Any], out: Out) -> None:
    """A list of per-host snapshots: one host prints its record, several print them as a snapshot-list."""
    render(data[0] if len(data) == 1 else listed("snapshot-list", "snapshots", data), out)


def checks(data: list[dict[str, Any]], out: Out) -> None:
    """`snapshot --check`: one host's result, or several as a check-list."""
    each = [tagged("check", d) for d in data]
    render(each[0] if len(each) == 1 else listed("check-list", "checks", each), out)


def diff(data: list[dict[str, Any]], out: Out) -> None:
    render(listed("diff", "differences", data), out)


def bisect(data: dict[str, Any], out: Out) -> None:
    # "kind" (the schema id, as bisect wrote it before "schema") stays for one release.
    render({"schema": data.get("kind"), **data}, out)


def _tagged(kind: str) -> Any:
    def fn(data: Any, out: Out) -> None:
        render(tagged(kind, _plain(data)), out)

    fn.__name__ = fn.__qualname__ = kind.replace("-", "_")
    return fn


probe = _tagged("probe-summary")
server = _tagged("server-summary")
ingest = _tagged("ingest")
