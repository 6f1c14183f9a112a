"""paramiko, imported without `invoke`.

paramiko.config imports invoke (and through it asyncio, unittest.mock, yaml) only to run `Match exec`
lines; that is 0.35 s of the 0.65 s paramiko import, paid by every `--host` command. Here invoke is
hidden during the import, and put back only for a config that has a `Match exec` line.
"""

from __future__ import annotations

import sys

if "paramiko" not in sys.modules and "invoke" not in sys.modules:
    sys.modules["invoke"] = None  # type: ignore[assignment]  # makes `import invoke` raise ImportError
    try:
        import paramiko
    finally:
        del sys.modules["invoke"]

import paramiko  # noqa: E402
import paramiko.config  # noqa: E402


def enable_match_exec() -> None:
    """Give paramiko's config parser invoke back (when installed) for `Match exec`."""
    if getattr(paramiko.config, "invoke", None) is not None:
        return
    try:
        import invoke
    except ImportError:
        return  # paramiko then reports that Match exec needs invoke
    paramiko.config.invoke = invoke  # type: ignore[attr-defined]


__all__ = ["enable_match_exec", "paramiko"]
