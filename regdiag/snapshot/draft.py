"""The draft model's identity: which draft an engine loads, from its checkpoint directory (standard
library only: it runs on the engine's host, in a snapshot or sent as a script by the engine section,
regdiag/server/draft.py).

Read, never the weights themselves: config.json's SHA-256 and architectures; the draft's kind (EAGLE-3,
EAGLE, MTP, from the architecture or an eagle_config); EAGLE-3's auxiliary hidden-state layer ids; its
vocabulary and draft vocabulary; whether its checkpoint maps draft to target tokens (a `d2t` tensor in
a safetensors header); its attention (MLA with a latent KV rank, GQA with fewer KV heads than query
heads, else MHA); its layers. A path that is not a directory here (a hub id the engine downloads) is
recorded as given.

    python draft.py PATH   -> one JSON object (the identity)
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from typing import Any

MAX_HEADER = 64 << 20


def read(path: str) -> dict[str, Any]:
    """What the checkpoint directory holds: config.json (its hash and content), the tensor names."""
    found: dict[str, Any] = {"path": path}
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        return found
    with open(cfg_path, "rb") as f:
        raw = f.read(1 << 20)
    found["config_sha256"] = hashlib.sha256(raw).hexdigest()
    try:
        found["config"] = json.loads(raw)
    except ValueError:
        pass
    tensors: set[str] = set()
    for name in sorted(os.listdir(path))[:64]:
        if not name.endswith(".safetensors"):
            continue
        try:
            with open(os.path.join(path, name), "rb") as f:
                size = struct.unpack("<Q", f.read(8))[0]
                if size < MAX_HEADER:
                    tensors |= set(json.loads(f.read(size)))
        except (OSError, ValueError, struct.error):
            continue
    found["tensors"] = sorted(tensors)[:4096]
    return found


def _kind(arch: list[str], eagle: dict[str, Any]) -> str:
    names = " ".join(arch).lower()
    if "eagle3" in names or eagle:
        return "EAGLE-3"
    if "nextn" in names or "mtp" in names:
        return "MTP"
    return "EAGLE" if "eagle" in names else "draft model"


def _attention(c: dict[str, Any]) -> str:
    if c.get("kv_lora_rank"):
        return "MLA"
    return "GQA" if (c.get("num_key_value_heads") or 0) < (c.get("num_attention_heads") or 0) else "MHA"


def identity(found: dict[str, Any]) -> dict[str, Any]:
    """What tells two drafts apart, from what `read` found."""
    out: dict[str, Any] = {"path": found.get("path")}
    if "config_sha256" not in found:
        return out
    c = found.get("config") if isinstance(found.get("config"), dict) else {}
    arch = [str(a) for a in c.get("architectures") or []]
    eagle = c.get("eagle_config") if isinstance(c.get("eagle_config"), dict) else {}
    out.update(
        config_sha256=found["config_sha256"],
        architectures=arch,
        kind=_kind(arch, eagle),
        aux_hidden_state_layer_ids=eagle.get("eagle_aux_hidden_state_layer_ids"),
        vocab_size=c.get("vocab_size"),
        draft_vocab_size=c.get("draft_vocab_size"),
        d2t="d2t" in (found.get("tensors") or []),
        attention=_attention(c),
        layers=c.get("num_hidden_layers"),
    )
    return out


def path_from_argv(argv: list[str]) -> str | None:
    """The draft an engine's command line names: SGLang's --speculative-draft-model-path (or
    --speculative-draft), vLLM's --speculative-config JSON `model`."""
    args = [a for x in argv for a in (x.split("=", 1) if x.startswith("--") and "=" in x else [x])]
    for i, a in enumerate(args[:-1]):
        if a in ("--speculative-draft-model-path", "--speculative-draft", "--speculative_draft_model_path"):
            return args[i + 1]
        if a in ("--speculative-config", "--speculative_config"):
            try:
                cfg = json.loads(args[i + 1])
            except ValueError:
                continue
            model = cfg.get("model") if isinstance(cfg, dict) else None
            if isinstance(model, str) and model:
                return model
    return None


def collect(argv: list[str]) -> dict[str, Any] | None:
    """The identity of the draft a command line names, or None when it names none."""
    path = path_from_argv(argv)
    return None if path is None else identity(read(path))


if __name__ == "__main__":
    print(json.dumps(identity(read(sys.argv[1]))) if len(sys.argv) > 1 else "{}")
