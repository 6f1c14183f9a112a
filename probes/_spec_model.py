"""The synthetic target and EAGLE-3 draft of the spec-decode probe: random weights, real layer shapes.

Target: DeepSeek-V3-style decoder layers. MLA attention in its absorbed form over a latent KV cache
(what SGLang/vLLM run for decode and verify), dense SwiGLU MLPs in the first layers, then MoE layers with
routed and shared experts. Tensor parallelism as the engines do it: attention heads and every MLP/expert
intermediate dimension sharded, two all-reduces per layer (after o_proj, after the MLP/MoE), lm_head
sharded over the vocabulary with an all-gather of the logits.

Draft: EAGLE-3 (fc over three captured target hidden states, one LLaMA decoder layer whose attention
reads [embedding ; hidden], a draft-vocabulary lm_head mapped to target ids).

Only torch. docs/probes.md describes every choice and where the numbers come from.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F
from _lowbit import Fp8Experts, Fp8Linear, Int4Experts  # noqa: E402  (the probe directory is on sys.path)
from _presets import Shape  # noqa: E402

# -------------------------------------------------------------------------------------- primitives


class Comm:
    """The collectives of one rank; a world of 1 (or a --tp-slice run) communicates nothing.

    `enabled = False` leaves every collective out while keeping the per-rank shapes (the vocabulary
    argmax then reads this rank's shard only): the probe times the same phases with and without
    communication, interleaved, and the difference is the communication's share. While `log` is a list,
    each collective appends (op, bytes) to it: the header's count and size of collectives per phase."""

    def __init__(self, group: Any, world: int) -> None:
        self.group = group
        self.world = world
        self.rank = 0
        if world > 1:
            import torch.distributed as dist

            self.rank = dist.get_rank(group)
        self.enabled = True
        self.log: list[tuple[str, int]] | None = None

    def _note(self, op: str, x: torch.Tensor) -> None:
        if self.log is not None:
            self.log.append((op, x.numel() * x.element_size()))

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        self._note("all_reduce", x)  # noted at any world size: the header says what TP would issue
        if self.world > 1 and self.enabled:
            import torch.distributed as dist

            dist.all_reduce(x, group=self.group)
        return x

    def vocab_argmax(self, logits: torch.Tensor) -> torch.Tensor:
        """Argmax over a vocabulary sharded across ranks: all-gather the logits like ParallelLMHead."""
        self._note("all_gather", logits)
        if self.world == 1 or not self.enabled:
            return logits.argmax(-1)
        import torch.distributed as dist

        t, vl = logits.shape
        out = torch.empty(self.world * t, vl, dtype=logits.dtype, device=logits.device)
        # all_gather_single is the newer name (torch >= 2.13); the old one warns there.
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(out, logits.contiguous(), group=self.group)
        return out.view(self.world, t, vl).permute(1, 0, 2).reshape(t, self.world * vl).argmax(-1)


def lin(x: torch.Tensor, w: Any) -> torch.Tensor:
    """x W^T for a tensor weight or a low-bit one (which carries its kernel)."""
    return F.linear(x, w) if isinstance(w, torch.Tensor) else w(x)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE; cos/sin are (T, d/2), x is (T, ..., d)."""
    d = x.shape[-1] // 2
    while cos.dim() < x.dim():
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class Pos:
    """Static per-call geometry: `t` new tokens per sequence written at cache slots [p0, p0 + t)."""

    def __init__(self, p0: int, t: int, batch: int, cos: torch.Tensor, sin: torch.Tensor) -> None:
        self.p0, self.t, self.batch = p0, t, batch
        idx = torch.arange(p0, p0 + t, device=cos.device).repeat(batch)
        self.cos, self.sin = cos[idx], sin[idx]
        self.s = p0 + t
        if t > 1:  # causal inside the new tokens; everything before p0 is visible
            j = torch.arange(self.s, device=cos.device)
            i = torch.arange(t, device=cos.device)
            allowed = j[None, :] <= (p0 + i)[:, None]
            mask = torch.zeros(t, self.s, device=cos.device, dtype=torch.float32)
            self.mask: torch.Tensor | None = mask.masked_fill(~allowed, float("-inf"))
        else:
            self.mask = None


def rope_tables(
    dim: int, n: int, theta: float, device: Any, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))
    f = torch.outer(torch.arange(n, device=device, dtype=torch.float32), inv)
    return f.cos().to(dtype), f.sin().to(dtype)  # in the activation dtype: no silent upcast of q/k


class Init:
    """Makes the weights and counts their bytes. `lowbit`: components whose format is not "base" get
    low-bit weights and kernels (CUDA only; _lowbit.py); `int4_impl` names the INT4 expert kernel."""

    def __init__(
        self, device: Any, dtype: torch.dtype, lowbit: bool = False, int4_impl: str = "none"
    ) -> None:
        self.device, self.dtype = device, dtype
        self.lowbit, self.int4_impl = lowbit, int4_impl
        self.bytes = 0

    def lin(self, n: int, k: int, fmt: str = "base", fan_in: int | None = None) -> Any:
        """A weight for y = x W^T: a tensor, or an FP8 one with its kernel where the format says so."""
        if self.lowbit and fmt.startswith("fp8"):
            m = Fp8Linear(n, k, self.device, fan_in)
            self.bytes += m.nbytes
            return m
        return self.w(n, k, fan_in=fan_in)

    def w(self, *shape: int, fan_in: int | None = None) -> torch.Tensor:
        # Random (never zeros: zeros run faster than data), scaled so activations stay O(1).
        t = torch.empty(*shape, device=self.device, dtype=self.dtype)
        t.normal_(0.0, (fan_in or shape[-1]) ** -0.5)
        self.bytes += t.numel() * t.element_size()
        return t

    def ones(self, n: int) -> torch.Tensor:
        self.bytes += n * torch.finfo(self.dtype).bits // 8
        return torch.ones(n, device=self.device, dtype=self.dtype)


# -------------------------------------------------------------------------------------------- MoE


def grouped_mm_available(device: torch.device, dtype: torch.dtype) -> bool:
    if not hasattr(torch, "_grouped_mm"):
        return False
    try:
        x = torch.randn(4, 16, device=device, dtype=dtype)
        w = torch.randn(2, 16, 8, device=device, dtype=dtype)
        torch._grouped_mm(x, w, offs=torch.tensor([1, 4], device=device, dtype=torch.int32))
        return True
    except Exception:
        return False


class MoE:
    """Routed + shared experts. Reads only the experts the tokens route to:

    grouped_mm: torch._grouped_mm over expert-sorted rows with offsets from scatter_add + cumsum and a
      counting sort (no bincount, no sort kernel, no host sync): capturable in a CUDA graph; experts with
      zero rows issue no work.
    loop: one matmul pair per expert that was hit (host sync to learn which): CPU, or eager debugging.
    """

    def __init__(self, s: Shape, init: Init, comm: Comm, impl: str) -> None:
        h, e, ml = s.hidden, s.experts, s.moe_inter // s.shard
        self.s, self.comm, self.impl, self.ml = s, comm, impl, ml
        self.gate = init.w(e, h)
        self.bias = torch.zeros(e, device=init.device, dtype=torch.float32)  # noaux_tc correction bias
        fmt = s.w_routed if init.lowbit else "base"
        self.lowbit = fmt if fmt in ("fp8", "fp8_block128", "int4_g32") else ""
        if self.lowbit.startswith("fp8"):
            self.e13: Any = Fp8Experts(e, 2 * ml, h, init.device)
            self.e2: Any = Fp8Experts(e, h, ml, init.device)
        elif self.lowbit:
            self.e13 = Int4Experts(e, 2 * ml, h, init.device, init.dtype, init.int4_impl)
            self.e2 = Int4Experts(e, h, ml, init.device, init.dtype, init.int4_impl)
        else:
            self.w13 = init.w(e, 2 * ml, h)
            self.w2 = init.w(e, h, ml)
        if self.lowbit:
            init.bytes += self.e13.nbytes + self.e2.nbytes
        sl = ml * s.shared
        self.s13 = init.lin(2 * sl, h, s.w_shared)
        self.s2 = init.lin(h, sl, s.w_shared)
        self.arange_e = torch.arange(e, device=init.device)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.s
        scores = F.linear(x, self.gate).float()
        scores = scores.sigmoid() if s.scoring == "sigmoid" else scores.softmax(-1)
        sel = scores + self.bias if s.scoring == "sigmoid" else scores
        if s.n_group > 1:  # DeepSeek-V3's group-limited routing
            g = sel.view(x.shape[0], s.n_group, -1)
            gs = g.topk(2, dim=-1).values.sum(-1)
            keep = torch.zeros_like(gs).scatter_(1, gs.topk(s.topk_group, dim=-1).indices, 1.0)
            sel = g.masked_fill(keep.unsqueeze(-1) == 0, float("-inf")).view(x.shape[0], -1)
        idx = sel.topk(s.topk, dim=-1).indices
        w = scores.gather(1, idx)
        if s.norm_topk:
            w = w / w.sum(-1, keepdim=True)
        return idx, w * s.routed_scale

    def __call__(self, x: torch.Tensor, counts_out: torch.Tensor | None) -> torch.Tensor:
        k = self.s.topk
        idx, w = self.route(x)
        flat = idx.reshape(-1)
        n = flat.numel()
        counts = torch.zeros(self.s.experts, device=x.device, dtype=torch.int32)
        counts.scatter_add_(0, flat, torch.ones(n, device=x.device, dtype=torch.int32))
        if counts_out is not None:
            counts_out.copy_(counts)
        if self.lowbit == "int4_g32":  # one kernel program per (token, expert) pair: no sort needed
            slots = torch.arange(n, device=x.device)
            tok, wf = slots // k, w.reshape(-1)
            hcat = self.e13(x, tok, flat)
            y = self.e2(F.silu(hcat[:, : self.ml]) * hcat[:, self.ml :], slots, flat)
        elif self.impl == "loop":
            y, tok, wf = self._loop(x, flat, counts, w)
        else:
            offs = counts.cumsum(0, dtype=torch.int32)
            # Counting sort: the slot of each (token, k) pair in expert order, without a sort kernel.
            eq = (flat.unsqueeze(1) == self.arange_e).to(torch.int32)
            rank = eq.cumsum(0, dtype=torch.int32).gather(1, flat.unsqueeze(1)).squeeze(1) - 1
            pos = (offs - counts).index_select(0, flat) + rank
            perm = torch.empty_like(flat).scatter_(0, pos.long(), torch.arange(n, device=x.device))
            tok = perm // k
            xs = x.index_select(0, tok)
            if self.lowbit:
                hcat = self.e13(xs, offs, x.dtype)
                y = self.e2(F.silu(hcat[:, : self.ml]) * hcat[:, self.ml :], offs, x.dtype)
            else:
                hcat = torch._grouped_mm(xs, self.w13.transpose(1, 2), offs=offs)
                a = F.silu(hcat[:, : self.ml]) * hcat[:, self.ml :]
                y = torch._grouped_mm(a, self.w2.transpose(1, 2), offs=offs)
            wf = w.reshape(-1).index_select(0, perm)
        out = torch.zeros_like(x).index_add_(0, tok, y * wf.unsqueeze(1).to(y.dtype))
        hs = lin(x, self.s13)
        sl = hs.shape[1] // 2
        out += lin(F.silu(hs[:, :sl]) * hs[:, sl:], self.s2)
        return self.comm.all_reduce(out)

    def _loop(self, x: torch.Tensor, flat: torch.Tensor, counts: torch.Tensor, w: torch.Tensor) -> Any:
        order = torch.argsort(flat, stable=True)
        tok = order // self.s.topk
        xs = x.index_select(0, tok)
        y = torch.empty_like(xs)
        start = 0
        for e, c in enumerate(counts.tolist()):
            if c:
                hc = F.linear(xs[start : start + c], self.w13[e])
                y[start : start + c] = F.linear(F.silu(hc[:, : self.ml]) * hc[:, self.ml :], self.w2[e])
                start += c
        return y, tok, w.reshape(-1).index_select(0, order)


class DenseMLP:
    def __init__(self, h: int, inter_local: int, init: Init, comm: Comm, fmt: str = "base") -> None:
        self.w13 = init.lin(2 * inter_local, h, fmt)
        self.w2 = init.lin(h, inter_local, fmt)
        self.il, self.comm = inter_local, comm

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        hcat = lin(x, self.w13)
        return self.comm.all_reduce(lin(F.silu(hcat[:, : self.il]) * hcat[:, self.il :], self.w2))


# -------------------------------------------------------------------------------------- attention


class MLA:
    """Absorbed multi-head latent attention over a latent cache (batch, slots, kv_lora + rope)."""

    def __init__(self, s: Shape, init: Init, comm: Comm, batch: int, slots: int) -> None:
        h, hl = s.hidden, s.heads // s.shard
        self.s, self.hl, self.comm = s, hl, comm
        fa = s.w_attn
        if s.q_lora:
            self.q_a, self.q_ln, self.q_b = (
                init.lin(s.q_lora, h, fa),
                init.ones(s.q_lora),
                init.lin(hl * (s.nope + s.rope), s.q_lora, fa),
            )
        else:
            self.q_proj = init.lin(hl * (s.nope + s.rope), h, fa)
        self.kv_a = init.lin(s.kv_lora + s.rope, h, fa)
        self.kv_ln = init.ones(s.kv_lora)
        self.w_uk = init.w(hl, s.nope, s.kv_lora, fan_in=s.nope)
        self.w_uv = init.w(hl, s.kv_lora, s.v_head, fan_in=s.kv_lora)
        self.o_proj = init.lin(h, hl * s.v_head, fa)
        self.cache = init.w(batch, slots, s.kv_lora + s.rope, fan_in=1)  # a filled context, not zeros
        self.scale = (s.nope + s.rope) ** -0.5

    def __call__(self, x: torch.Tensor, p: Pos) -> torch.Tensor:
        s, hl, c = self.s, self.hl, self.s.kv_lora
        n = x.shape[0]
        q = lin(rms_norm(lin(x, self.q_a), self.q_ln), self.q_b) if s.q_lora else lin(x, self.q_proj)
        q = q.view(n, hl, s.nope + s.rope)
        kv = lin(x, self.kv_a)
        ckv = rms_norm(kv[:, :c], self.kv_ln)
        kpe = rope(kv[:, c:], p.cos, p.sin)
        self.cache[:, p.p0 : p.s].copy_(torch.cat([ckv, kpe], -1).view(p.batch, p.t, c + s.rope))
        q_lat = torch.bmm(q[:, :, : s.nope].transpose(0, 1), self.w_uk)  # (hl, n, c): W_UK absorbed into q
        q_pe = rope(q[:, :, s.nope :], p.cos, p.sin).transpose(0, 1)
        qf = torch.cat([q_lat, q_pe], -1).view(hl, p.batch, p.t, c + s.rope).permute(1, 2, 0, 3)
        qf = qf.reshape(p.batch, p.t * hl, c + s.rope)
        kvc = self.cache[:, : p.s]
        sc = torch.bmm(qf, kvc.transpose(1, 2)).float() * self.scale
        if p.mask is not None:
            sc = (sc.view(p.batch, p.t, hl, p.s) + p.mask[None, :, None, :]).view(p.batch, p.t * hl, p.s)
        pr = sc.softmax(-1).to(x.dtype)
        o_lat = torch.bmm(pr, kvc[:, :, :c])  # (batch, t*hl, c)
        o = torch.bmm(o_lat.view(n, hl, c).transpose(0, 1), self.w_uv)  # W_UV absorbed on the way out
        out = lin(o.transpose(0, 1).reshape(n, hl * s.v_head), self.o_proj)
        return self.comm.all_reduce(out)


class GQA:
    """The draft layer's attention: LLaMA grouped-query attention over [embedding ; hidden] (2H inputs)."""

    def __init__(self, s: Shape, init: Init, comm: Comm, batch: int, slots: int) -> None:
        h, hd = s.hidden, s.draft_head_dim
        self.hl, self.kv, self.hd, self.comm = s.draft_heads // s.shard, s.draft_kv_local, hd, comm
        self.wq = init.w(self.hl * hd, 2 * h)
        self.wkv = init.w(2 * self.kv * hd, 2 * h)
        self.wo = init.w(h, self.hl * hd)
        self.kcache = init.w(batch, self.kv, slots, hd, fan_in=1)
        self.vcache = init.w(batch, self.kv, slots, hd, fan_in=1)

    def __call__(self, x2: torch.Tensor, p: Pos) -> torch.Tensor:
        n, hl, kv, hd, g = x2.shape[0], self.hl, self.kv, self.hd, self.hl // self.kv
        q = rope(F.linear(x2, self.wq).view(n, hl, hd), p.cos, p.sin)
        kvp = F.linear(x2, self.wkv).view(n, 2, kv, hd)
        k = rope(kvp[:, 0], p.cos, p.sin)
        self.kcache[:, :, p.p0 : p.s].copy_(k.view(p.batch, p.t, kv, hd).transpose(1, 2))
        self.vcache[:, :, p.p0 : p.s].copy_(kvp[:, 1].view(p.batch, p.t, kv, hd).transpose(1, 2))
        qg = q.view(p.batch, p.t, kv, g, hd).permute(0, 2, 1, 3, 4).reshape(p.batch * kv, p.t * g, hd)
        kc = self.kcache[:, :, : p.s].reshape(p.batch * kv, p.s, hd)
        vc = self.vcache[:, :, : p.s].reshape(p.batch * kv, p.s, hd)
        sc = torch.bmm(qg, kc.transpose(1, 2)).float() * hd**-0.5
        if p.mask is not None:
            sc = (sc.view(-1, p.t, g, p.s) + p.mask[None, :, None, :]).view(-1, p.t * g, p.s)
        o = torch.bmm(sc.softmax(-1).to(x2.dtype), vc)  # (batch*kv, t*g, hd)
        o = o.view(p.batch, kv, p.t, g, hd).permute(0, 2, 1, 3, 4).reshape(n, hl * hd)
        return self.comm.all_reduce(F.linear(o, self.wo))


# ------------------------------------------------------------------------------------------ models


class VocabEmbed:
    """The embedding sharded over the vocabulary, as VocabParallelEmbedding: each rank looks up the ids
    in its range (zeros elsewhere) and an all-reduce sums them, the forward's first collective. In a
    --tp-slice run (one rank, no communication) every id is looked up in the one shard, modulo its
    rows: the same bytes, and data rather than zeros for the tokens outside it."""

    def __init__(self, s: Shape, init: Init, comm: Comm) -> None:
        self.rows = s.vocab // s.shard
        self.w = init.w(self.rows, s.hidden, fan_in=1)
        self.lo = comm.rank * self.rows
        self.comm = comm

    def __call__(self, tok: torch.Tensor) -> torch.Tensor:
        ids = tok.reshape(-1)
        if self.comm.world == 1:
            return self.comm.all_reduce(F.embedding(ids % self.rows, self.w))
        local = ids - self.lo
        ok = ((local >= 0) & (local < self.rows)).unsqueeze(-1)
        x = F.embedding(local.clamp(0, self.rows - 1), self.w) * ok.to(self.w.dtype)
        return self.comm.all_reduce(x)


class Target:
    def __init__(
        self, s: Shape, init: Init, comm: Comm, batch: int, slots: int, moe_impl: str, on_layer: Any = None
    ) -> None:
        self.s, self.comm, self.moe_impl = s, comm, moe_impl
        self.embed = VocabEmbed(s, init, comm)
        self.layers: list[dict[str, Any]] = []
        for i in range(s.layers):
            if on_layer is not None:
                on_layer(i, s.layers)
            layer: dict[str, Any] = {
                "ln1": init.ones(s.hidden),
                "ln2": init.ones(s.hidden),
                "attn": MLA(s, init, comm, batch, slots),
            }
            if i < s.n_dense:
                layer["mlp"] = DenseMLP(s.hidden, s.inter // s.shard, init, comm, s.w_dense)
            else:
                layer["moe"] = MoE(s, init, comm, moe_impl)
            self.layers.append(layer)
        self.norm = init.ones(s.hidden)
        self.lm_head = init.w(s.vocab // s.shard, s.hidden)
        self.aux_ids = s.aux_layers()
        self.counts = torch.zeros(max(1, s.n_moe), s.experts, device=init.device, dtype=torch.int32)

    def __call__(self, tok: torch.Tensor, p: Pos, aux_out: torch.Tensor | None = None) -> torch.Tensor:
        h = self.s.hidden
        x = self.embed(tok)
        j = 0
        for i, layer in enumerate(self.layers):
            x = x + layer["attn"](rms_norm(x, layer["ln1"]), p)
            y = rms_norm(x, layer["ln2"])
            if "mlp" in layer:
                x = x + layer["mlp"](y)
            else:
                x = x + layer["moe"](y, self.counts[j])
                j += 1
            if aux_out is not None:
                for slot, li in enumerate(self.aux_ids):
                    if li == i:
                        aux_out[:, slot * h : (slot + 1) * h].copy_(x)
        return self.comm.vocab_argmax(F.linear(rms_norm(x, self.norm), self.lm_head))


class Draft:
    """EAGLE-3 draft: fc(3H -> H), one decoder layer, draft-vocabulary lm_head (sharded, gathered)."""

    def __init__(self, s: Shape, init: Init, comm: Comm, batch: int, slots: int, embed: VocabEmbed) -> None:
        h = s.hidden
        self.s, self.comm, self.embed = s, comm, embed  # the draft shares the target's embedding
        self.fc = init.w(h, 3 * h)  # replicated, as in SGLang's LlamaForCausalLMEagle3
        self.ln_in, self.ln_h, self.ln_post, self.norm = (init.ones(h) for _ in range(4))
        self.attn = GQA(s, init, comm, batch, slots)
        self.mlp = DenseMLP(h, s.draft_inter // s.shard, init, comm)
        self.lm_head = init.w(s.draft_vocab // s.shard, h)
        # draft id -> target id offset table (EAGLE-3's d2t), random but fixed
        self.d2t = torch.randint(0, s.vocab - s.draft_vocab, (s.draft_vocab,), device=init.device)

    def hidden_in(self, aux: torch.Tensor) -> torch.Tensor:
        return F.linear(aux, self.fc)  # fc over the three captured hidden states

    def __call__(self, tok: torch.Tensor, hidden: torch.Tensor, p: Pos) -> tuple[torch.Tensor, torch.Tensor]:
        e = self.embed(tok)
        x2 = torch.cat([rms_norm(e, self.ln_in), rms_norm(hidden, self.ln_h)], -1)
        x = hidden + self.attn(x2, p)
        x = x + self.mlp(rms_norm(x, self.ln_post))
        ids = self.comm.vocab_argmax(F.linear(rms_norm(x, self.norm), self.lm_head))
        return ids + self.d2t.index_select(0, ids), x


class MTP:
    """DeepSeek-V3's multi-token-prediction module as a draft: enorm(embedding) and hnorm(hidden)
    concatenated through eh_proj (2H -> H), one decoder layer of the target's shape (MLA, MoE), the
    target's lm_head (the shared head) over the full vocabulary."""

    def __init__(self, s: Shape, init: Init, comm: Comm, batch: int, slots: int, target: Any) -> None:
        h = s.hidden
        self.s, self.comm, self.embed, self.lm_head = s, comm, target.embed, target.lm_head
        self.eh_proj = init.w(h, 2 * h)  # replicated, in the run's dtype
        self.enorm, self.hnorm, self.ln1, self.ln2, self.norm = (init.ones(h) for _ in range(5))
        self.attn = MLA(s, init, comm, batch, slots)
        self.moe = MoE(s, init, comm, target.moe_impl)

    def hidden_in(self, aux: torch.Tensor) -> torch.Tensor:
        return aux  # the target's last hidden state

    def __call__(self, tok: torch.Tensor, hidden: torch.Tensor, p: Pos) -> tuple[torch.Tensor, torch.Tensor]:
        e = self.embed(tok)
        x = F.linear(torch.cat([rms_norm(e, self.enorm), rms_norm(hidden, self.hnorm)], -1), self.eh_proj)
        x = x + self.attn(rms_norm(x, self.ln1), p)
        x = x + self.moe(rms_norm(x, self.ln2), None)
        return self.comm.vocab_argmax(lin(rms_norm(x, self.norm), self.lm_head)), x


def available_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def simulate_accept_len(n: int, batch: int, ndt: int, alpha: float, gen: torch.Generator) -> torch.Tensor:
    """(n, batch) accept lengths in 1..ndt: each draft token accepted with probability `alpha` until the
    first rejection (chain acceptance, as greedy verification of a topk-1 draft behaves)."""
    if ndt <= 1:
        return torch.ones(n, batch, dtype=torch.long)
    u = torch.rand(n, batch, ndt - 1, generator=gen)
    return 1 + (u < alpha).long().cumprod(-1).sum(-1)
