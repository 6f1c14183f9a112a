"""How big a JSON document regdiag reads may be in shape: how deep it nests, how much text its strings
hold. regdiag.records refuses a record past either in one line (exit 2), before any reader walks it.

Standard library only (travels to remote hosts in the bundle, with records.py).
"""

from __future__ import annotations

from typing import Any

# How deep a JSON document regdiag reads may nest: its own records nest 9 levels at most (an engine's
# config among them). Every reader of a record walks it (the scrubber, compare's and explain's views,
# the HTML report), most of them recursively: a record nested 500 deep, which json.loads still
# parses, ended those in a RecursionError traceback.
MAX_DEPTH = 64


def depth_over(obj: Any, limit: int) -> int | None:
    """The depth past `limit` that `obj` reaches (found without recursion), or None within it."""
    stack = [(obj, 1)] if isinstance(obj, (dict, list)) else []
    while stack:
        x, d = stack.pop()
        if d > limit:
            return d
        if isinstance(x, list) and _numbers(x):
            continue
        for v in x.values() if isinstance(x, dict) else x:
            if isinstance(v, (dict, list)):
                stack.append((v, d + 1))
    return None


_NUMBER_TYPES = frozenset({int, float})


def _numbers(values: list[Any]) -> bool:
    """Whether a list holds numbers only (a launch's samples): told by the set of its item types,
    which is made without a Python loop, so a walk passes over millions of samples quickly."""
    return set(map(type, values)) <= _NUMBER_TYPES


# The text a record's strings may hold in all (keys too). Every string of a record read for a report
# goes through the scrubber (snapshot/redact.py), which takes about 0.7 s a MiB: a 200 MiB label took
# minutes. The largest real record holds 0.1 MiB of text; its samples are numbers, which are not counted.
MAX_RECORD_TEXT = 16 << 20


def text_over(obj: Any, limit: int) -> tuple[str, int] | None:
    """Where the longest string is and its length, when `obj`'s strings hold more than `limit`
    characters in all; None within it. Without recursion (depth_over bounds the depth first)."""
    total, longest, where = 0, -1, ""
    stack: list[tuple[Any, str]] = [(obj, "")]
    while stack:
        x, at = stack.pop()
        if isinstance(x, dict):
            for k, v in x.items():
                total += len(k)
                stack.append((v, f"{at}.{k}" if at else k))
        elif isinstance(x, list) and not _numbers(x):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(x) if not isinstance(v, (int, float)))
        elif isinstance(x, str):
            total += len(x)
            if len(x) > longest:
                longest, where = len(x), at or "the top level"
    return (where, longest) if total > limit else None
