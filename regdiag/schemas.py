"""JSON Schemas of every --json output, made from the types in regdiag.outputs.

    python -m regdiag.schemas            write docs/schemas/<kind>.schema.json (one per schema id)
    python -m regdiag.schemas --check    exit 1 naming each file that is missing or out of date

A TypedDict becomes an object schema: its fields with their types and descriptions (Annotated), the
fields of a total class required, additional properties allowed (a minor version may add fields), and
"schema" held to its id, a minor version included (`regdiag.run/1` and `regdiag.run/1.2`)."""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from regdiag.outputs import OUTPUTS
from regdiag.records import schema_id

DRAFT = "https://json-schema.org/draft/2020-12/schema"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "schemas"
_PLAIN = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def _is_typeddict(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, dict) and hasattr(t, "__required_keys__")


def type_schema(t: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of one annotation; TypedDicts go into `defs` by name and are referred to."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Annotated:
        return {**type_schema(args[0], defs), "description": str(args[1])}
    if t is Any:
        return {}
    if origin is typing.Literal:  # an enum: a verdict, a status
        return {"enum": list(args)}
    if t in _PLAIN:
        return {"type": _PLAIN[t]}
    if origin in (typing.Union, types.UnionType):
        parts = [type_schema(a, defs) for a in args]
        if all(set(p) == {"type"} for p in parts):
            return {"type": [p["type"] for p in parts]}
        return {"anyOf": parts}
    if origin is list:
        return {"type": "array", "items": type_schema(args[0], defs)} if args else {"type": "array"}
    if origin is dict:
        value = type_schema(args[1], defs) if args else {}
        return {"type": "object", "additionalProperties": value} if value else {"type": "object"}
    if _is_typeddict(t):
        if t.__name__ not in defs:
            defs[t.__name__] = {}  # a placeholder while its own fields are made
            defs[t.__name__] = object_schema(t, defs)
        return {"$ref": f"#/$defs/{t.__name__}"}
    raise TypeError(f"no JSON Schema for {t!r}")


def object_schema(td: Any, defs: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(td, include_extras=True)
    props = {name: type_schema(hint, defs) for name, hint in hints.items()}
    out: dict[str, Any] = {"type": "object", "properties": props}
    required = [n for n in hints if n in td.__required_keys__]
    if required:
        out["required"] = required
    if td.__doc__ and not td.__doc__.startswith(f"{td.__name__}("):
        out["description"] = " ".join(td.__doc__.split())
    return out


def schema_for(kind: str) -> dict[str, Any]:
    """The JSON Schema of the output whose id is regdiag.KIND/N."""
    defs: dict[str, Any] = {}
    top = object_schema(OUTPUTS[kind], defs)
    sid = schema_id(kind)
    top["properties"]["schema"] = {
        "description": f"{sid}, or a minor version of it",
        "type": "string",
        "pattern": "^" + re.escape(sid) + r"(\.[0-9]+)?$",
    }
    top["required"] = ["schema", *[n for n in top.get("required", []) if n != "schema"]]
    doc = {"$schema": DRAFT, "$id": sid, "title": f"regdiag {kind} ({sid})", **top}
    if defs:
        doc["$defs"] = dict(sorted(defs.items()))
    return doc


def path_for(kind: str, directory: Path = DOCS) -> Path:
    return directory / f"{kind}.schema.json"


def render(kind: str) -> str:
    return json.dumps(schema_for(kind), indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    stale = []
    for kind in OUTPUTS:
        p, text = path_for(kind), render(kind)
        if check:
            if not p.is_file() or p.read_text(encoding="utf-8") != text:
                stale.append(str(p))
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    for name in stale:
        print(
            f"regdiag.schemas: {name} is missing or out of date (python -m regdiag.schemas)", file=sys.stderr
        )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
