"""Model presets of the spec-decode probe and the byte accounting behind the HBM floor.

Standard library only, so the probe's supervisor can validate a configuration without importing torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

# Published config.json values (sources in SOURCES and docs/probes.md). The draft_* fields are the
# EAGLE-3 draft layer's shape as the public trained drafts have it (DRAFT_SOURCES): Kimi-K2/K2.5's
# SpecForge config (64 heads, 64 KV heads of 128, MLP 18432), DeepSeek-V3's SpecForge config (56 heads,
# 8 KV heads, MLP 40960); 32000 draft tokens. Models without a published draft keep the target's heads
# and MLP with 8 KV heads.
PRESETS: dict[str, dict[str, Any]] = {
    "kimi-k2": dict(
        hidden=7168, layers=61, heads=64, q_lora=1536, kv_lora=512, nope=128, rope=64, v_head=128,
        experts=384, shared=1, topk=8, moe_inter=2048, inter=18432, dense_layers=1, vocab=163840,
        scoring="sigmoid", norm_topk=True, routed_scale=2.827, n_group=1, topk_group=1, rope_theta=50000.0,
        draft_heads=64, draft_kv_heads=64, draft_head_dim=128, draft_inter=18432, draft_vocab=32000,
    ),
    "deepseek-v3": dict(
        hidden=7168, layers=61, heads=128, q_lora=1536, kv_lora=512, nope=128, rope=64, v_head=128,
        experts=256, shared=1, topk=8, moe_inter=2048, inter=18432, dense_layers=3, vocab=129280,
        scoring="sigmoid", norm_topk=True, routed_scale=2.5, n_group=8, topk_group=4, rope_theta=10000.0,
        draft_heads=56, draft_kv_heads=8, draft_head_dim=128, draft_inter=40960, draft_vocab=32000,
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
# Kimi-K2.5's text model (its config.json's text_config) has Kimi-K2's shape; its routed experts ship
# INT4 (WEIGHTS), and its EAGLE-3 draft is shaped as Kimi-K2's (SpecForge's kimi-k25-eagle3.json).
PRESETS["kimi-k2.5"] = dict(PRESETS["kimi-k2"])

# KV-cache length when --context is not given: a long chat for the real models; short for the CI shape,
# whose attention would otherwise dominate its cycle on a small CPU.
DEFAULT_CONTEXT = 4096
CONTEXT = {"tiny": 512}

SOURCES = {
    "kimi-k2": "https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json",
    "kimi-k2.5": "https://huggingface.co/moonshotai/Kimi-K2.5/blob/main/config.json (text_config)",
    "deepseek-v3": "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
    "deepseek-v2-lite": "https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json",
    "tiny": "regdiag's own CI shape",
}
DRAFTS = ("eagle3", "mtp")
# Presets with an MTP (NextN) layer: DeepSeek-V3's config.json has num_nextn_predict_layers 1 (the module:
# enorm, hnorm, eh_proj 2H -> H, one decoder layer of the model's shape, the shared head); Kimi-K2 and
# V2-Lite have none. tiny has one for CI.
MTP = ("deepseek-v3", "tiny")
MTP_SOURCE = (
    "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (num_nextn_predict_layers 1)"
)
DRAFT_SOURCES = {
    "kimi-k2": "https://github.com/sgl-project/SpecForge/blob/main/configs/kimi-k2-eagle3.json",
    "kimi-k2.5": "https://github.com/sgl-project/SpecForge/blob/main/configs/kimi-k25-eagle3.json",
    "deepseek-v3": "https://github.com/sgl-project/SpecForge/blob/main/configs/deepseek-v3-671b-eagle3.json",
    "deepseek-v2-lite": "no published EAGLE-3 draft: the target's heads and MLP, 8 KV heads",
    "tiny": "regdiag's own CI shape",
}

# ----- weight formats per component (what a checkpoint stores; "base" is the run's own dtype)
# Bytes per weight element, scales included: FP8 e4m3 with one float32 scale per 128x128 block
# (DeepSeek-V3's and Kimi-K2's quantization_config: fmt e4m3, weight_block_size [128, 128]); INT4
# symmetric with one bf16 scale per 32 weights (Kimi-K2.5's compressed-tensors pack-quantized,
# group_size 32, symmetric, no zero point).
FORMAT_BYTES: dict[str, float | None] = {
    "base": None,
    "fp8": 1.0,
    "fp8_block128": 1.0 + 4.0 / (128 * 128),
    "int4_g32": 0.5 + 2.0 / 32,
}
COMPONENTS = ("w_attn", "w_dense", "w_shared", "w_routed", "w_lm_head", "kv_cache")
_FP8_CKPT = dict(
    w_attn="fp8_block128", w_dense="fp8_block128", w_shared="fp8_block128", w_routed="fp8_block128"
)
# The checkpoint's formats per preset (components not named are "base": the router, norms, embedding and
# lm_head stay bf16 in all three; the KV cache is the engine's choice, bf16 by default).
WEIGHTS: dict[str, dict[str, str]] = {
    "kimi-k2": dict(_FP8_CKPT),
    "deepseek-v3": dict(_FP8_CKPT),
    "kimi-k2.5": dict(w_routed="int4_g32"),  # attention, dense MLP, shared experts, lm_head: bf16
}
WEIGHT_SOURCES = {
    "kimi-k2": "Kimi-K2-Instruct config.json quantization_config: fp8, e4m3, weight_block_size [128, 128]",
    "deepseek-v3": "DeepSeek-V3 config.json quantization_config: fp8, e4m3, weight_block_size [128, 128]",
    "kimi-k2.5": "Kimi-K2.5 config.json quantization_config: compressed-tensors, int4 group 32 symmetric, "
    "routed experts only",
}
# --weights of the probe: "bf16" is every weight in the run's dtype (the probe's default), "preset" the
# checkpoint's formats above, "fp8" DeepSeek-V3's layout on any preset, "int4" Kimi-K2.5's.
WEIGHT_CHOICES = ("bf16", "preset", "fp8", "int4")


def weight_formats(preset: str, weights: str = "preset") -> dict[str, str]:
    """The format of each component for a --weights choice (ValueError for an unknown one)."""
    if weights not in WEIGHT_CHOICES:
        raise ValueError(f"unknown weights {weights!r}; choose from {', '.join(WEIGHT_CHOICES)}")
    fmts = {c: "base" for c in COMPONENTS}
    if weights == "preset":
        fmts.update(WEIGHTS.get(preset, {}))
    elif weights == "fp8":
        fmts.update(_FP8_CKPT)
    elif weights == "int4":
        fmts["w_routed"] = "int4_g32"
    return fmts


def fmt_bytes(fmt: str, elt: float) -> float:
    """Bytes per element of a format; "base" (or an unknown name) is the run's own element size."""
    v = FORMAT_BYTES.get(fmt)
    return float(elt) if v is None else v


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
    # Weight formats per component (FORMAT_BYTES); "base" is the run's dtype. Set by resolve_shape.
    w_attn: str = "base"
    w_dense: str = "base"
    w_shared: str = "base"
    w_routed: str = "base"
    w_lm_head: str = "base"
    kv_cache: str = "base"
    draft: str = "eagle3"  # the draft model: "eagle3" (draft_* fields) or "mtp" (the model's own MTP layer)

    def nbytes(self, component: str, elt: float) -> float:
        """Bytes per element of a component ("w_routed", ...) in a run whose dtype has `elt` bytes."""
        return fmt_bytes(getattr(self, component), elt)

    def formats(self) -> dict[str, str]:
        return {c: getattr(self, c) for c in COMPONENTS}

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
        # SGLang's EAGLE-3 default capture points, clamped into a shortened stack; MTP takes the last
        # layer's hidden state.
        if self.draft == "mtp":
            return [self.layers - 1]
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
        if self.draft not in DRAFTS:
            raise ValueError(f"unknown draft {self.draft!r}; choose from {', '.join(DRAFTS)}")
        if self.draft == "mtp" and self.preset not in MTP:
            raise ValueError(
                f"{self.preset} has no MTP layer (num_nextn_predict_layers 0); MTP drafts: {', '.join(MTP)}"
            )

    # ----- bytes each forward must read (weights of this rank + KV cache), for the HBM floor
    def layer_bytes(self, elt: float) -> dict[str, float]:
        """Bytes of one layer's parts on this rank, each component in its format (the absorbed kv_b,
        W_UK and W_UV, in the run's dtype: SGLang dequantizes an FP8 kv_b_proj at load)."""
        h, hl = self.hidden, self.heads // self.shard
        q = (
            (h * self.q_lora + self.q_lora * hl * (self.nope + self.rope))
            if self.q_lora
            else h * hl * (self.nope + self.rope)
        )
        attn = q + h * (self.kv_lora + self.rope) + hl * self.v_head * h
        kv_b = hl * self.nope * self.kv_lora + hl * self.kv_lora * self.v_head
        il, ml = self.inter // self.shard, self.moe_inter // self.shard
        return {
            "attn": attn * self.nbytes("w_attn", elt) + kv_b * elt,
            "dense_mlp": 3 * h * il * self.nbytes("w_dense", elt),
            "expert": 3 * h * ml * self.nbytes("w_routed", elt),
            "shared": 3 * h * ml * self.shared * self.nbytes("w_shared", elt),
            "gate": h * self.experts * elt,
            "lm_head": h * (self.vocab // self.shard) * self.nbytes("w_lm_head", elt),
            "embed": h * (self.vocab // self.shard) * elt,
        }

    def draft_bytes(self, elt: float) -> int:
        if self.draft == "mtp":
            b = self.layer_bytes(elt)
            return int(
                2 * self.hidden**2 * elt + b["attn"] + b["gate"] + b["shared"] + self.experts * b["expert"]
            )
        h, hl, kv, hd = self.hidden, self.draft_heads // self.shard, self.draft_kv_local, self.draft_head_dim
        il = self.draft_inter // self.shard
        return int(
            (
                3 * h * h
                + 2 * h * (hl + 2 * kv) * hd
                + hl * hd * h
                + 3 * h * il
                + h * (self.draft_vocab // self.shard)
            )
            * elt
        )

    def expected_unique(self, tokens: int) -> float:
        """Experts a MoE layer reads for `tokens` tokens under uniform independent routing."""
        e, k = self.experts, self.topk
        return e * (1.0 - (1.0 - k / e) ** tokens)

    def target_breakdown(
        self, tokens: int, batch: int, kv_len: int, elt: float = 2, unique: float | None = None
    ) -> dict[str, float]:
        """Bytes one target forward over `tokens` tokens (all sequences together) must read at least once,
        by part: the HBM floor's numerator (the probe's footer and `regdiag explain` both use this)."""
        b = self.layer_bytes(elt)
        u = self.expected_unique(tokens) if unique is None else unique
        return {
            "attention": float(self.layers * b["attn"]),
            "kv_cache": float(
                self.layers * batch * kv_len * (self.kv_lora + self.rope) * self.nbytes("kv_cache", elt)
            ),
            "dense_mlp": float(self.n_dense * b["dense_mlp"]),
            "router": float(self.n_moe * b["gate"]),
            "shared_experts": float(self.n_moe * b["shared"]),
            "routed_experts": float(self.n_moe * u * b["expert"]),
            "lm_head": float(b["lm_head"]),
            "embedding_rows": float(tokens * self.hidden * elt),
        }

    def target_bytes(
        self, tokens: int, batch: int, kv_len: int, elt: float, unique: float | None = None
    ) -> int:
        return int(sum(self.target_breakdown(tokens, batch, kv_len, elt, unique).values()))

    def draft_breakdown(
        self, tokens: int, batch: int, kv_len: int, with_fc: bool, elt: float = 2
    ) -> dict[str, float]:
        """Bytes one draft forward reads. EAGLE-3: fc only in draft-extend, where hidden states enter.
        MTP: eh_proj (2H -> H, in the run's dtype) every forward, one MLA + MoE layer of the target's
        shape and formats (the routed experts `tokens` touch), the target-sized lm_head."""
        if self.draft == "mtp":
            return self._mtp_breakdown(tokens, batch, kv_len, elt)
        h, hl, kvh, hd = self.hidden, self.draft_heads // self.shard, self.draft_kv_local, self.draft_head_dim
        return {
            "fc": float(3 * h * h * elt) if with_fc else 0.0,
            "attention": float((2 * h * (hl + 2 * kvh) * hd + hl * hd * h) * elt),
            "kv_cache": float(batch * kv_len * 2 * kvh * hd * elt),
            "mlp": float(3 * h * (self.draft_inter // self.shard) * elt),
            "lm_head": float(h * (self.draft_vocab // self.shard) * elt),
            "embedding_rows": float(tokens * h * elt),
        }

    def _mtp_breakdown(self, tokens: int, batch: int, kv_len: int, elt: float) -> dict[str, float]:
        b = self.layer_bytes(elt)
        return {
            "fc": float(2 * self.hidden * self.hidden * elt),
            "attention": float(b["attn"]),
            "kv_cache": float(batch * kv_len * (self.kv_lora + self.rope) * self.nbytes("kv_cache", elt)),
            "router": float(b["gate"]),
            "shared_experts": float(b["shared"]),
            "routed_experts": float(self.expected_unique(tokens) * b["expert"]),
            "lm_head": float(b["lm_head"]),
            "embedding_rows": float(tokens * self.hidden * elt),
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_shape(
    preset: str, layers: int | None, shard: int, weights: str = "preset", draft: str = "eagle3"
) -> Shape:
    """A preset for one rank of TP=`shard`, `layers` of its layers, weights in the formats of a --weights
    choice (default the checkpoint's), with an EAGLE-3 draft or the model's MTP layer."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    p = PRESETS[preset]
    fmts = weight_formats(preset, weights)
    s = Shape(preset=preset, layers_full=p["layers"], shard=shard, draft=draft, **p, **fmts)
    if layers is not None:
        if layers < 1:
            raise ValueError("--layers must be >= 1")
        s = replace(s, layers=min(layers, p["layers"]))
    s.check()
    return s


def shape_dict(s: Shape) -> dict[str, Any]:
    return asdict(s)


def fit_layers(s: Shape, elt: float, free_bytes: int, reserve_bytes: int, per_layer_extra: int = 0) -> int:
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
