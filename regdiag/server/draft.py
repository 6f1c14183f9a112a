"""The draft model's identity, for the engine section: which draft the engine loaded, read from its
checkpoint directory on the engine's host (the path the engine printed in its speculative settings).

Read (standard library, on the host; never the weights themselves): config.json's SHA-256 and
architectures; the draft's kind (EAGLE-3 / EAGLE / MTP, from the architecture); EAGLE-3's auxiliary
hidden-state layer ids; its vocabulary and draft vocabulary; whether its checkpoint maps draft to
target tokens (a `d2t` tensor in a safetensors header); its attention (MLA when it has a latent KV
rank, GQA when fewer KV heads than query heads, else MHA). A path that is not a directory on the host
(a hub id the engine downloaded) is recorded as given, without the rest.
"""

from __future__ import annotations

import json
from typing import Any

from regdiag.hosts.base import Host

READER = r"""
import hashlib, json, os, struct, sys
d = sys.argv[1]
out = {"path": d}
cfg_path = os.path.join(d, "config.json")
if os.path.isfile(cfg_path):
    raw = open(cfg_path, "rb").read()
    out["config_sha256"] = hashlib.sha256(raw).hexdigest()
    try:
        out["config"] = json.loads(raw)
    except ValueError:
        pass
    tensors = []
    for n in sorted(os.listdir(d))[:64]:
        if n.endswith(".safetensors"):
            try:
                with open(os.path.join(d, n), "rb") as f:
                    size = struct.unpack("<Q", f.read(8))[0]
                    if size < 64 << 20:
                        tensors += list(json.loads(f.read(size)))
            except Exception:
                pass
    out["tensors"] = sorted(set(tensors))[:4096]
print(json.dumps(out))
"""


def draft_path(cfg: dict[str, Any]) -> str | None:
    """The draft checkpoint the engine's speculative settings name (vLLM `model`, SGLang
    `speculative_draft_model_path`)."""
    spec = cfg.get("speculative") or {}
    for key in ("speculative_draft_model_path", "model", "draft_model"):
        v = spec.get(key)
        if isinstance(v, str) and v and v != "None":
            return v
    return None


def identity(found: dict[str, Any]) -> dict[str, Any]:
    """What tells two drafts apart, from what READER found."""
    c = found.get("config") if isinstance(found.get("config"), dict) else {}
    out: dict[str, Any] = {"path": found.get("path")}
    if "config_sha256" not in found:
        return out
    arch = [str(a) for a in c.get("architectures") or []]
    names = " ".join(arch).lower()
    eagle = c.get("eagle_config") if isinstance(c.get("eagle_config"), dict) else {}
    out.update(
        config_sha256=found["config_sha256"],
        architectures=arch,
        kind="EAGLE-3"
        if "eagle3" in names or eagle
        else "MTP"
        if "nextn" in names or "mtp" in names
        else "EAGLE"
        if "eagle" in names
        else "draft model",
        aux_hidden_state_layer_ids=eagle.get("eagle_aux_hidden_state_layer_ids"),
        vocab_size=c.get("vocab_size"),
        draft_vocab_size=c.get("draft_vocab_size"),
        d2t="d2t" in (found.get("tensors") or []),
        attention="MLA"
        if c.get("kv_lora_rank")
        else "GQA"
        if (c.get("num_key_value_heads") or 0) < (c.get("num_attention_heads") or 0)
        else "MHA",
        layers=c.get("num_hidden_layers"),
    )
    return out


def read_draft(host: Host, path: str) -> dict[str, Any]:
    """The draft's identity on `host`; just its path when it cannot be read there."""
    try:
        res = host.run([host.python, "-c", READER, path], timeout=60)
        found = json.loads(res.stdout.decode("utf-8", "replace")) if res.ok else {"path": path}
    except Exception:  # an identity is context: a host that cannot say leaves the path alone
        found = {"path": path}
    return identity(found if isinstance(found, dict) else {"path": path})
