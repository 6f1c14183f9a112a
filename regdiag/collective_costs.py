"""The collectives a forward issues, as the engines issue them, and what they cost at a measured latency.

Counts per forward at tensor parallelism (TP > 1), per engine (docs/probes.md, "Collectives"):

- target (DeepSeek-V3 / Kimi-K2 layers in SGLang 0.5.23's deepseek_v2.py and vLLM's deepseek_v2.py):
  one all-reduce after the vocabulary-parallel embedding, two per layer (after o_proj, after the
  MLP/MoE), one all-gather of the vocabulary-sharded logits: 2L + 2 (124 at 61 layers);
- EAGLE-3 draft (llama_eagle3.py in both): embedding all-reduce, o_proj and down_proj all-reduces,
  logits all-gather: 4 per draft forward;
- MTP (NextN) draft: embedding, attention and MoE all-reduces, logits all-gather: 4;
- a vLLM draft phase (EagleProposer.propose) is SGLang's extend and draft together: its first draft
  forward runs over the verified tokens (with the fc over the target's hidden states), then
  num_steps - 1 forwards of one token; SGLang times that first forward apart, as its extend phase;
- sampling with temperature > 0: SGLang 0.5.23 broadcasts 3 times per cycle; vLLM samples on every rank
  (no broadcast).

Message bytes: an all-reduce carries tokens x hidden activations, an all-gather the gathered logits
(tokens x vocabulary, nccl-tests' convention, as `probe collectives` sizes it), bf16.

A `probe collectives` record gives the latency per (op, mode, bytes): the median over launches of each
launch's median; between measured sizes it is interpolated on log-log axes, below the smallest it is the
smallest's (latency-bound), above the largest it grows with the bytes.
"""

from __future__ import annotations

import bisect
import math
import statistics
from typing import Any

from regdiag.errors import BadInput

ELT = 2  # bf16 activations and logits
ENGINES = {
    "sglang": "SGLang 0.5.23: deepseek_v2.py (target), llama_eagle3.py (EAGLE-3 draft)",
    "vllm": "vLLM: deepseek_v2.py (target), llama_eagle3.py (EAGLE-3 draft)",
}
SAMPLING_BROADCASTS = {"sglang": 3, "vllm": 0}
_PREFIX = {"ar": "all_reduce", "ag": "all_gather", "rs": "reduce_scatter", "aa": "all_to_all"}


def forward_collectives(shape: Any, what: str, tokens: int) -> list[dict[str, Any]]:
    """[{op, bytes, count}] of one forward over `tokens` tokens: what = target, eagle3 or mtp."""
    act = tokens * shape.hidden * ELT
    if what == "target":
        return [
            {"op": "all_reduce", "bytes": act, "count": 2 * shape.layers + 1},
            {"op": "all_gather", "bytes": tokens * shape.vocab * ELT, "count": 1},
        ]
    vocab = shape.vocab if what == "mtp" else shape.draft_vocab
    return [
        {"op": "all_reduce", "bytes": act, "count": 3},
        {"op": "all_gather", "bytes": tokens * vocab * ELT, "count": 1},
    ]


def phase_collectives(shape: Any, phase: str, config: dict[str, Any]) -> list[dict[str, Any]]:
    """The collectives of one phase of a cycle: decode and verify are target forwards, draft is
    num_steps - 1 draft forwards of one token per sequence, extend one draft forward over the verified;
    vLLM's draft (config engine "vllm") is its extend pass and those num_steps - 1 forwards."""
    draft = getattr(shape, "draft", "eagle3")
    batch = int(config.get("batch") or 1)
    steps = int(config.get("num_steps") or 2)
    ndt = int(config.get("num_draft_tokens") or steps + 1)
    if phase == "decode":
        return forward_collectives(shape, "target", batch)
    if phase == "verify":
        return forward_collectives(shape, "target", batch * ndt)
    if phase == "extend":
        return forward_collectives(shape, draft, batch * ndt)
    if phase == "draft":
        one = forward_collectives(shape, draft, batch)
        rest = [{**c, "count": c["count"] * max(steps - 1, 0)} for c in one if steps > 1]
        if config.get("engine") == "vllm":
            return [*forward_collectives(shape, draft, batch * ndt), *rest]
        return rest
    return []


def count(items: list[dict[str, Any]]) -> int:
    return sum(int(c["count"]) for c in items)


def _rows(launch: dict[str, Any]) -> list[dict[str, Any]]:
    rows = ((launch.get("footer") or {}).get("table")) or []
    return [r for r in rows if isinstance(r, dict)]


def _op_mode(row: dict[str, Any]) -> tuple[str, str] | None:
    op, mode = row.get("op"), row.get("mode")
    metric = row.get("metric")
    if (not isinstance(op, str) or not isinstance(mode, str)) and isinstance(metric, str) and "_" in metric:
        prefix = metric.split("_", 1)[0]
        graph = prefix.endswith("g") and prefix[:-1] in _PREFIX
        op = op if isinstance(op, str) else _PREFIX.get(prefix[:-1] if graph else prefix)
        mode = mode if isinstance(mode, str) else ("graph" if graph else "eager")
    return (op, mode) if isinstance(op, str) and isinstance(mode, str) else None


class Latencies:
    """Measured latency per (op, mode) and message size, from a `probe collectives` record."""

    def __init__(self, table: dict[tuple[str, str], list[tuple[int, float]]], tp: int | None, label: str):
        self.table, self.tp, self.label = table, tp, label

    @classmethod
    def from_record(cls, rec: dict[str, Any], label: str) -> Latencies:
        probe = (rec.get("probe") or {}).get("name") if isinstance(rec.get("probe"), dict) else None
        if probe not in (None, "collectives"):
            raise BadInput(f"{label} is a {probe} run; --collectives takes a `probe collectives` run")
        per: dict[tuple[str, str, int], list[float]] = {}
        tps = set()
        for la in rec.get("launches") or []:
            if not isinstance(la, dict) or la.get("status") not in (None, "ok"):
                continue
            cfg = ((la.get("header") or {}).get("config") or {}) if isinstance(la.get("header"), dict) else {}
            if isinstance(cfg.get("tp"), int):
                tps.add(cfg["tp"])
            for r in _rows(la):
                om, b, us = _op_mode(r), r.get("bytes"), r.get("us")
                if (
                    om
                    and isinstance(b, int)
                    and b > 0
                    and isinstance(us, (int, float))
                    and math.isfinite(us)
                    and us > 0
                ):
                    per.setdefault((*om, b), []).append(float(us))
        if not per:
            raise BadInput(f"{label}: no measured collective latencies (footer table) in the record")
        table: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for (op, mode, b), xs in per.items():
            table.setdefault((op, mode), []).append((b, statistics.median(xs)))
        for v in table.values():
            v.sort()
        return cls(table, tps.pop() if len(tps) == 1 else None, label)

    def us(self, op: str, mode: str, nbytes: int) -> tuple[float, str]:
        """Latency in us of one op of nbytes, and what it was read from (another mode or op when that
        one was not measured: said so)."""
        key, note = (op, mode), ""
        if key not in self.table:
            for alt in ((op, "eager"), (op, "graph"), ("all_reduce", mode), ("all_reduce", "eager")):
                if alt in self.table:
                    key, note = alt, f" ({alt[0]} {alt[1]} latency: {op} {mode} not measured)"
                    break
            else:
                raise BadInput(f"{self.label} measured no {op} latency")
        pts = self.table[key]
        sizes = [b for b, _ in pts]
        i = bisect.bisect_left(sizes, nbytes)
        if i < len(pts) and sizes[i] == nbytes:
            return pts[i][1], note
        if i == 0:
            return pts[0][1], note
        if i == len(pts):
            b, t = pts[-1]
            return t * nbytes / b, note
        (b0, t0), (b1, t1) = pts[i - 1], pts[i]
        f = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
        return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0))), note

    def cost_ms(self, items: list[dict[str, Any]], mode: str) -> tuple[float, list[str]]:
        total, notes = 0.0, []
        for c in items:
            us, note = self.us(c["op"], mode, int(c["bytes"]))
            total += c["count"] * us / 1e3
            if note:
                notes.append(note.strip(" ()"))
        return total, sorted(set(notes))
