"""Model shapes for `regdiag explain`, and the bytes a forward pass must read.

One shape and one byte model: the spec-decode probe's own (probes/_presets.py, `Shape`), loaded from
the probe kit, so the probe's HBM floor and explain's roofline cannot disagree about a model. The
shapes are the published config.json values (SOURCES); a run's own resolved shape (its header's
`model.shape`: layers actually run, tensor-parallel shard) is used as it is.

Byte accounting, per rank, in `Shape.target_breakdown` / `Shape.draft_breakdown`. Each component has a
weight format (`Shape.formats()`: attention, dense MLP, shared experts, routed experts, lm_head, KV
cache): "base" is the run's dtype (`elt` bytes per element, bf16 unless said), "fp8_block128" is FP8
e4m3 with a float32 scale per 128x128 block (DeepSeek-V3, Kimi-K2), "int4_g32" is INT4 with a bf16
scale per 32 weights (Kimi-K2.5's routed experts). A preset's formats are its checkpoint's
(WEIGHTS, WEIGHT_SOURCES); a probe run's are what the probe ran (its header's shape).
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

from dataclasses import fields, replace
from typing import Any

from regdiag.errors import BadInput
from regdiag.probe_modules import load

_presets = load("_presets")
Shape = _presets.Shape
SOURCES: dict[str, str] = dict(_presets.SOURCES)
DRAFT_SOURCES: dict[str, str] = dict(_presets.DRAFT_SOURCES)
WEIGHT_SOURCES: dict[str, str] = dict(_presets.WEIGHT_SOURCES)
COMPONENTS: tuple[str, ...] = tuple(_presets.COMPONENTS)
PRESETS: dict[str, dict[str, Any]] = {name: dict(d) for name, d in _presets.PRESETS.items()}

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


def preset_shape(
    name: str, layers: int | None = None, shard: int = 1, weights: str = "preset", draft: str = "eagle3"
) -> Any:
    """A preset cut for one rank of TP=`shard`, `layers` of its layers, its weights in the checkpoint's
    formats (or a probe --weights choice: bf16, fp8, int4). BadInput for an unknown model or a degree the
    model's dimensions do not divide by."""
    if name not in PRESETS:
        raise BadInput(f"unknown model {name!r}; known: {', '.join(PRESETS)}")
    try:
        return _presets.resolve_shape(name, layers, shard, weights, draft)
    except ValueError as e:
        raise BadInput(f"model {name}: {e}") from None


def shape_from_dict(d: dict[str, Any], name: str = "") -> Any:
    """From a probe header's model.shape; fields it lacks come from its preset (BadInput for a field of
    the wrong kind, or a shape of no preset that lacks fields)."""
    preset = d.get("preset") if isinstance(d.get("preset"), str) else name
    typical = _presets.resolve_shape("tiny", None, 1)  # the kind of every field
    kinds = {f.name: type(getattr(typical, f.name)) for f in fields(Shape)}
    given: dict[str, Any] = {}
    for k, v in d.items():
        if k not in kinds or v is None or k == "preset":
            continue
        want = kinds[k]
        ok = isinstance(v, bool) if want is bool else isinstance(v, (int, float)) and not isinstance(v, bool)
        if want is str:
            ok = isinstance(v, str)
        if ok and want is int:  # a count: whole and not negative (int(5e-324) was a shard of 0)
            ok = float(v).is_integer() and (1 if k == "shard" else 0) <= v <= 2**31
        if not ok:
            raise BadInput(f"the probe header's model shape has an invalid {k}: {v!r}")
        given[k] = want(v)
    if preset in PRESETS:
        # A header without formats is from a probe that ran every weight in its dtype.
        weights = "preset" if any(c in given for c in COMPONENTS) else "bf16"
        return replace(_presets.resolve_shape(preset, None, 1, weights), **given)
    missing = sorted(set(kinds) - set(given) - {"preset", "shard", "draft", *COMPONENTS})
    if missing:
        raise BadInput(f"model shape lacks {', '.join(missing)}")
    return Shape(preset=preset or "custom", **given)
