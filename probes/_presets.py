"""Model presets of the spec-decode probe and the byte accounting behind the HBM floor.

Standard library only, so the probe's supervisor can validate a configuration without importing torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

# Published config.json values (sources in SOURCES and docs/probes.md). The draft_* fields are the
# EAGLE-3 draft layer's shape, which has no single published config: head count and MLP width of the
# target, 8 KV heads of 128, and EAGLE-3's default draft vocabulary of 32000.
PRESETS: dict[str, dict[str, Any]] = {
    "kimi-k2": dict(
        hidden=7168, layers=61, heads=64, q_lora=1536, kv_lora=512, nope=128, rope=64, v_head=128,
        experts=384, shared=1, topk=8, moe_inter=2048, inter=18432, dense_layers=1, vocab=163840,
        scoring="sigmoid", norm_topk=True, routed_scale=2.827, n_group=1, topk_group=1, rope_theta=50000.0,
        draft_heads=64, draft_kv_heads=8, draft_head_dim=128, draft_inter=18432, draft_vocab=32000,
    ),
    "deepseek-v3": dict(
        hidden=7168, layers=61, heads=128, q_lora=1536, kv_lora=512, nope=128, rope=64, v_head=128,
        experts=256, shared=1, topk=8, moe_inter=2048, inter=18432, dense_layers=3, vocab=129280,
        scoring="sigmoid", norm_topk=True, routed_scale=2.5, n_group=8, topk_group=4, rope_theta=10000.0,
        draft_heads=128, draft_kv_heads=8, draft_head_dim=128, draft_inter=18432, draft_vocab=32000,
    ),
    "deepseek-v2-lite": dict(
        hidden=2048, layers=27, heads=16, q_lora=0, kv_lora=512, nope=128, rope=64, v_head=128,
        experts=64, shared=2, topk=6, moe_inter=1408, inter=10944, dense_layers=1, vocab=102400,
        scoring="softmax", norm_topk=False, routed_scale=1.0, n_group=1, topk_group=1, rope_theta=10000.0,
        draft_heads=16, draft_kv_heads=8, draft_head_dim=128, draft_inter=10944, draft_vocab=32000,
    ),
    # Small enough for CI on two CPU cores; every mechanism of the big ones is present.
    "tiny": dict(
        hidden=256, layers=4, heads=4, q_lora=128, kv_lora=64, nope=32, rope=16, v_head=32,
        experts=16, shared=1, topk=2, moe_inter=64, inter=512, dense_layers=1, vocab=2048,
        scoring="sigmoid", norm_topk=True, routed_scale=1.0, n_group=1, topk_group=1, rope_theta=10000.0,
        draft_heads=4, draft_kv_heads=2, draft_head_dim=32, draft_inter=512, draft_vocab=1024,
    ),
}  # fmt: skip

# KV-cache length when --context is not given: a long chat for the real models; short for the CI shape,
# whose attention would otherwise dominate its cycle on a small CPU.
DEFAULT_CONTEXT = 4096
CONTEXT = {"tiny": 512}

SOURCES = {
    "kimi-k2": "https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json",
    "deepseek-v3": "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
    "deepseek-v2-lite": "https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json",
    "tiny": "regdiag's own CI shape",
}


@dataclass(frozen=True)
class Shape:
    """A preset resolved for one rank: `shard` is the tensor-parallel degree the weights are cut for."""

    preset: str
    hidden: int
    layers: int
    layers_full: int
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
    scoring: str
    norm_topk: bool
    routed_scale: float
    n_group: int
    topk_group: int
    rope_theta: float
    draft_heads: int
    draft_kv_heads: int
    draft_head_dim: int
    draft_inter: int
    draft_vocab: int
    shard: int = 1

    def local(self, n: int, what: str) -> int:
        if n % self.shard:
            raise ValueError(f"{what} = {n} is not divisible by the tensor-parallel degree {self.shard}")
        return n // self.shard

    @property
    def n_dense(self) -> int:
        return min(self.dense_layers, self.layers)

    @property
    def n_moe(self) -> int:
        return self.layers - self.n_dense

    @property
    def draft_kv_local(self) -> int:
        # Fewer KV heads than ranks: each rank keeps one (replicated), as the engines do.
        return max(1, self.draft_kv_heads // self.shard)

    def aux_layers(self) -> list[int]:
        # SGLang's EAGLE-3 default capture points, clamped into a shortened stack.
        return [min(max(i, 0), self.layers - 1) for i in (2, self.layers // 2, self.layers - 3)]

    def check(self) -> None:
        self.local(self.heads, "attention heads")
        self.local(self.inter, "dense intermediate size")
        self.local(self.moe_inter, "moe_intermediate_size")
        self.local(self.vocab, "vocabulary")
        self.local(self.draft_heads, "draft attention heads")
        self.local(self.draft_inter, "draft intermediate size")
        self.local(self.draft_vocab, "draft vocabulary")
        if (self.draft_heads // self.shard) % self.draft_kv_local:
            raise ValueError("draft heads per rank must be a multiple of draft KV heads per rank")
        if self.experts % self.n_group:
            raise ValueError("experts must divide into n_group groups")

    # ----- bytes each forward must read (weights of this rank + KV cache), for the HBM floor
    def layer_bytes(self, elt: int) -> dict[str, int]:
        h, hl = self.hidden, self.heads // self.shard
        q = (
            (h * self.q_lora + self.q_lora * hl * (self.nope + self.rope))
            if self.q_lora
            else h * hl * (self.nope + self.rope)
        )
        attn = (
            q
            + h * (self.kv_lora + self.rope)
            + hl * self.nope * self.kv_lora
            + hl * self.kv_lora * self.v_head
        )
        attn += hl * self.v_head * h
        il, ml = self.inter // self.shard, self.moe_inter // self.shard
        return {
            "attn": attn * elt,
            "dense_mlp": 3 * h * il * elt,
            "expert": 3 * h * ml * elt,
            "shared": 3 * h * ml * self.shared * elt,
            "gate": h * self.experts * elt,
            "lm_head": h * (self.vocab // self.shard) * elt,
            "embed": h * self.vocab * elt,
        }

    def draft_bytes(self, elt: int) -> int:
        h, hl, kv, hd = self.hidden, self.draft_heads // self.shard, self.draft_kv_local, self.draft_head_dim
        il = self.draft_inter // self.shard
        return (
            3 * h * h
            + 2 * h * (hl + 2 * kv) * hd
            + hl * hd * h
            + 3 * h * il
            + h * (self.draft_vocab // self.shard)
        ) * elt

    def expected_unique(self, tokens: int) -> float:
        """Experts a MoE layer reads for `tokens` tokens under uniform independent routing."""
        e, k = self.experts, self.topk
        return e * (1.0 - (1.0 - k / e) ** tokens)

    def target_breakdown(
        self, tokens: int, batch: int, kv_len: int, elt: int = 2, unique: float | None = None
    ) -> dict[str, float]:
        """Bytes one target forward over `tokens` tokens (all sequences together) must read at least once,
        by part: the HBM floor's numerator (the probe's footer and `regdiag explain` both use this)."""
        b = self.layer_bytes(elt)
        u = self.expected_unique(tokens) if unique is None else unique
        return {
            "attention": float(self.layers * b["attn"]),
            "kv_cache": float(self.layers * batch * kv_len * (self.kv_lora + self.rope) * elt),
            "dense_mlp": float(self.n_dense * b["dense_mlp"]),
            "router": float(self.n_moe * b["gate"]),
            "shared_experts": float(self.n_moe * b["shared"]),
            "routed_experts": float(self.n_moe * u * b["expert"]),
            "lm_head": float(b["lm_head"]),
            "embedding_rows": float(tokens * self.hidden * elt),
        }

    def target_bytes(
        self, tokens: int, batch: int, kv_len: int, elt: int, unique: float | None = None
    ) -> int:
        return int(sum(self.target_breakdown(tokens, batch, kv_len, elt, unique).values()))

    def draft_breakdown(
        self, tokens: int, batch: int, kv_len: int, with_fc: bool, elt: int = 2
    ) -> dict[str, float]:
        """Bytes one EAGLE-3 draft forward reads (fc only in draft-extend, where hidden states enter)."""
        h, hl, kvh, hd = self.hidden, self.draft_heads // self.shard, self.draft_kv_local, self.draft_head_dim
        return {
            "fc": float(3 * h * h * elt) if with_fc else 0.0,
            "attention": float((2 * h * (hl + 2 * kvh) * hd + hl * hd * h) * elt),
            "kv_cache": float(batch * kv_len * 2 * kvh * hd * elt),
            "mlp": float(3 * h * (self.draft_inter // self.shard) * elt),
            "lm_head": float(h * (self.draft_vocab // self.shard) * elt),
            "embedding_rows": float(tokens * h * elt),
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_shape(preset: str, layers: int | None, shard: int) -> Shape:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    p = PRESETS[preset]
    s = Shape(preset=preset, layers_full=p["layers"], shard=shard, **p)
    if layers is not None:
        if layers < 1:
            raise ValueError("--layers must be >= 1")
        s = replace(s, layers=min(layers, p["layers"]))
    s.check()
    return s


def shape_dict(s: Shape) -> dict[str, Any]:
    return asdict(s)


def fit_layers(s: Shape, elt: int, free_bytes: int, reserve_bytes: int, per_layer_extra: int = 0) -> int:
    """How many full-size layers fit next to everything else (the 'as many as fit' default)."""
    b = s.layer_bytes(elt)
    fixed = b["lm_head"] + b["embed"] + s.draft_bytes(elt) + reserve_bytes
    dense = b["attn"] + b["dense_mlp"] + per_layer_extra
    moe = b["attn"] + b["gate"] + b["shared"] + s.experts * b["expert"] + per_layer_extra
    room = free_bytes - fixed
    n = 0
    while n < s.layers_full:
        need = dense if n < s.dense_layers else moe
        if need > room:
            break
        room -= need
        n += 1
    return n


def gib(n: float) -> float:
    return round(n / 2**30, 3)
