"""Model shapes for `regdiag explain`, and the bytes a forward pass must read.

The shapes are the published config.json values (SOURCES), read from the spec-decode probe's own
table (probes/_presets.py), so the probe and explain cannot disagree about a model. Field names follow the probe's header (`model.shape`), so a run's own resolved
shape (layers actually run, tensor-parallel shard) can be used as it is.

Byte accounting, per rank, bf16 unless said (`elt` bytes per element):
- MLA attention: q path (q_a and q_b, or q_proj without q_lora), kv_a (replicated on every rank),
  kv_b and o (heads sharded), plus the latent KV cache (kv_lora + rope per token and layer, read
  whole by every rank);
- dense MLP layers (the first `dense_layers`): gate, up and down;
- MoE layers: the router, the shared experts, and the routed experts *touched* by t tokens:
  E * (1 - (1 - k/E)^t) under uniform independent routing (k of E per token);
- lm_head (vocabulary sharded) once per forward, and the embedding rows of the t tokens.
The EAGLE-3 draft layer: fc (3H -> H, extend only), attention from 2H with draft_kv_heads,
its MLP and its lm_head over draft_vocab.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any


def _probe_presets() -> Any:
    """The spec-decode probe's preset module: the one table of published config.json values."""
    from regdiag.probe_modules import load

    return load("_presets")


SOURCES: dict[str, str] = dict(_probe_presets().SOURCES)

DTYPE_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "bf16": 2,
    "fp16": 2,
    "float32": 4,
    "fp32": 4,
    "float8_e4m3fn": 1,
    "fp8": 1,
}


def touched_experts(experts: int, topk: int, tokens: float) -> float:
    """Expected distinct experts one MoE layer reads for `tokens` tokens (uniform, independent routing)."""
    if experts <= 0 or tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - topk / experts) ** tokens)


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    layers: int
    heads: int
    q_lora: int
    kv_lora: int
    nope: int
    rope: int
    v_head: int
    experts: int
    shared: int
    topk: int
    moe_inter: int
    inter: int
    dense_layers: int
    vocab: int
    draft_heads: int
    draft_kv_heads: int
    draft_head_dim: int
    draft_inter: int
    draft_vocab: int
    shard: int = 1  # tensor-parallel degree the weights are cut for

    @classmethod
    def preset(cls, name: str, layers: int | None = None, shard: int = 1) -> ModelShape:
        if name not in PRESETS:
            raise KeyError(f"unknown model {name!r}; known: {', '.join(PRESETS)}")
        s = cls(name=name, shard=shard, **PRESETS[name])
        return replace(s, layers=min(layers, s.layers)) if layers else s

    @classmethod
    def from_dict(cls, d: dict[str, Any], name: str = "") -> ModelShape:
        """From a probe header's model.shape (extra keys ignored; missing ones from the preset)."""
        base = dict(PRESETS.get(str(d.get("preset") or name), {}))
        names = {f.name for f in fields(cls)} - {"name"}
        for k in names:
            if isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool):
                base[k] = int(d[k])
        missing = sorted(names - set(base) - {"shard"})
        if missing:
            raise KeyError(f"model shape lacks {', '.join(missing)}")
        return cls(name=str(d.get("preset") or name or "custom"), **base)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def n_dense(self) -> int:
        return min(self.dense_layers, self.layers)

    @property
    def n_moe(self) -> int:
        return self.layers - self.n_dense

    def _local(self, n: int) -> int:
        return max(1, n // self.shard)

    def target_breakdown(self, tokens: int, batch: int, kv_len: int, elt: int = 2) -> dict[str, float]:
        """Bytes one target forward over `tokens` tokens (all sequences together) reads, by part."""
        h, hl = self.hidden, self._local(self.heads)
        if self.q_lora:
            q = h * self.q_lora + self.q_lora * hl * (self.nope + self.rope)
        else:
            q = h * hl * (self.nope + self.rope)
        attn = (
            q
            + h * (self.kv_lora + self.rope)
            + hl * self.nope * self.kv_lora
            + hl * self.kv_lora * self.v_head
        )
        attn += hl * self.v_head * h
        kv = batch * kv_len * (self.kv_lora + self.rope)
        expert = 3 * h * self._local(self.moe_inter)
        touched = touched_experts(self.experts, self.topk, tokens)
        return {
            "attention": float(self.layers * attn * elt),
            "kv_cache": float(self.layers * kv * elt),
            "dense_mlp": float(self.n_dense * 3 * h * self._local(self.inter) * elt),
            "router": float(self.n_moe * h * self.experts * elt),
            "shared_experts": float(self.n_moe * self.shared * expert * elt),
            "routed_experts": float(self.n_moe * touched * expert * elt),
            "lm_head": float(h * self._local(self.vocab) * elt),
            "embedding_rows": float(tokens * h * elt),
        }

    def draft_breakdown(
        self, tokens: int, batch: int, kv_len: int, with_fc: bool, elt: int = 2
    ) -> dict[str, float]:
        """Bytes one EAGLE-3 draft forward reads (fc only in draft-extend, where hidden states enter)."""
        h, hl, hd = self.hidden, self._local(self.draft_heads), self.draft_head_dim
        kvh = max(1, self.draft_kv_heads // self.shard)
        return {
            "fc": float(3 * h * h * elt) if with_fc else 0.0,
            "attention": float((2 * h * (hl + 2 * kvh) * hd + hl * hd * h) * elt),
            "kv_cache": float(batch * kv_len * 2 * kvh * hd * elt),
            "mlp": float(3 * h * self._local(self.draft_inter) * elt),
            "lm_head": float(h * self._local(self.draft_vocab) * elt),
            "embedding_rows": float(tokens * h * elt),
        }


# The shape fields of each probe preset (hidden, layers, heads, MLA ranks, experts, top-k, widths,
# vocab, and the EAGLE-3 draft layer's): routing options such as scoring are the probe's business.
PRESETS: dict[str, dict[str, int]] = {
    name: {f.name: int(d[f.name]) for f in fields(ModelShape) if f.name in d}
    for name, d in _probe_presets().PRESETS.items()
}
