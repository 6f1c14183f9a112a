"""The draft model's identity for the engine section: read on the engine's host by
regdiag/snapshot/draft.py (sent as a script, as the source check is), from the checkpoint path the
engine printed in its speculative settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from regdiag.hosts.base import Host
from regdiag.measure.launch import command
from regdiag.snapshot import draft as snapshot_draft

SCRIPT = Path(snapshot_draft.__file__).read_text(encoding="utf-8")


def draft_path(cfg: dict[str, Any]) -> str | None:
    """The draft checkpoint the engine's speculative settings name (vLLM `model`, SGLang
    `speculative_draft_model_path`)."""
    spec = cfg.get("speculative") or {}
    for key in ("speculative_draft_model_path", "model", "draft_model"):
        v = spec.get(key)
        if isinstance(v, str) and v and v != "None":
            return v
    return None


def read_draft(host: Host, path: str) -> dict[str, Any]:
    """The draft's identity on `host`; just its path when it cannot be read there."""
    try:
        res = command(host, [host.python, "-c", SCRIPT, path], timeout=60)
        found = json.loads(res.stdout.decode("utf-8", "replace")) if res.ok else None
    except Exception:  # an identity is context: a host that cannot say leaves the path alone
        found = None
    return found if isinstance(found, dict) and found.get("path") == path else {"path": path}
