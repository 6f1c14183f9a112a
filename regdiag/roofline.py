"""The roofline of one phase: the bytes its forwards read (regdiag.models), the floor those bytes set
at a bandwidth, and the phase's collectives as the engine issues them (regdiag.collective_costs),
priced at a measured latency when a `probe collectives` record is given."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from regdiag.collective_costs import SAMPLING_BROADCASTS, Latencies, count, phase_collectives
from regdiag.models import DTYPE_BYTES, touched_experts
from regdiag.profiles import profile_reason

LAUNCH_BOUND_FRACTION = 0.5  # an eager phase below this share of its floor is launch-bound
FAR_FROM_FLOOR = 0.15


@dataclass
class PhaseRoofline:
    phase: str
    tokens: int
    bytes: float
    breakdown: dict[str, float]
    touched_experts: float | None
    floor_ms: float  # bytes / bandwidth, plus the collectives when their latency is known
    measured_ms: float | None
    graph: bool | None  # ran as a CUDA graph replay (None: unknown)
    bytes_floor_ms: float = 0.0
    comm_ms: float | None = None  # count x measured latency of the phase's collectives
    collectives: int | None = None  # per phase (all its forwards), as the engine issues them
    profile: dict[str, Any] | None = None  # --profile's figures of the phase (regdiag/profiles.py)

    @property
    def achieved(self) -> float | None:
        if not self.measured_ms:
            return None
        return self.floor_ms / self.measured_ms

    @property
    def launch_bound(self) -> bool:
        a = self.achieved
        return self.graph is False and a is not None and a < LAUNCH_BOUND_FRACTION

    @property
    def note(self) -> str:
        a = self.achieved
        if a is None:
            return "not measured in this run"
        why = profile_reason(self.profile) if self.profile else None
        if self.launch_bound:
            return "launch-bound: " + (why or "eager kernel launches, not bytes, set its time")
        if a > 1.05:
            return "faster than the floor: the bandwidth or the byte model is wrong for this run"
        if a < FAR_FROM_FLOOR:
            return "far from the floor: " + (why or "small kernels, syncs or communication dominate")
        return ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(achieved=self.achieved, launch_bound=self.launch_bound, note=self.note)
        return d


def add_comm(
    rows: list[PhaseRoofline],
    shape: Any,
    config: dict[str, Any],
    notes: list[str],
    lat: Latencies | None = None,
    sampling: bool = False,
    engine: str = "sglang",
) -> None:
    """Each row's collectives as the engine issues them; with a latency record, their cost in the floor."""
    tp = int(config.get("tp") or config.get("shard") or shape.shard or 1)
    if tp <= 1 and shape.shard <= 1:
        return
    if lat is not None and lat.tp is not None and lat.tp != tp:
        notes.append(
            f"{lat.label} measured at TP={lat.tp}, this model runs at TP={tp}: latencies are that TP's"
        )
    read_from: set[str] = set()
    for r in rows:
        items = phase_collectives(shape, r.phase, config)
        r.collectives = count(items)
        if r.phase == "verify" and sampling:
            n = SAMPLING_BROADCASTS.get(engine, 0)
            items = [*items, {"op": "all_reduce", "bytes": 8 * int(config.get("batch") or 1), "count": n}]
            r.collectives += n
        if lat is None:
            continue
        r.comm_ms, used = lat.cost_ms(items, "graph" if r.graph else "eager")
        read_from.update(used)
        r.floor_ms = r.bytes_floor_ms + r.comm_ms
    if lat is None:
        notes.append(
            "collectives counted as the engine issues them; give --collectives RUN for their latency"
        )
    else:
        notes.append(f"floors include the collectives at {lat.label}'s measured latencies")
        notes += sorted(read_from)
    if sampling:
        notes.append(f"sampling broadcasts ({engine}) priced as the smallest all-reduce of that size")


def bytes_ratio(shape: Any, config: dict[str, Any]) -> float | None:
    """Bytes of one verify over one decode of this shape, at the run's batch, context and steps."""
    batch = int(config.get("batch") or 1)
    ctx = int(config.get("context") or 0)
    steps = int(config.get("num_steps") or 2)
    ndt = int(config.get("num_draft_tokens") or steps + 1)
    elt = DTYPE_BYTES.get(str(config.get("dtype") or "bfloat16"), 2)
    d = sum(shape.target_breakdown(batch, batch, ctx + 1, elt).values())
    v = sum(shape.target_breakdown(batch * ndt, batch, ctx + ndt, elt).values())
    return v / d if d > 0 else None


def roofline(
    phase: str,
    shape: Any,
    config: dict[str, Any],
    elt: int,
    bandwidth: float,
    measured: float | None,
    graph: Any,
) -> PhaseRoofline | None:
    batch = int(config.get("batch") or 1)
    ctx = int(config.get("context") or 0)
    steps = int(config.get("num_steps") or 2)
    ndt = int(config.get("num_draft_tokens") or steps + 1)
    touched: float | None = None
    if phase == "decode":
        tokens = batch
        parts = shape.target_breakdown(tokens, batch, ctx + 1, elt)
        touched = touched_experts(shape.experts, shape.topk, tokens)
    elif phase == "verify":
        tokens = batch * ndt
        parts = shape.target_breakdown(tokens, batch, ctx + ndt, elt)
        touched = touched_experts(shape.experts, shape.topk, tokens)
    elif phase == "draft":
        # steps - 1 draft forwards of one token each (the first draft token came from draft-extend).
        tokens = batch
        one = shape.draft_breakdown(tokens, batch, ctx, with_fc=False, elt=elt)
        parts = {k: v * max(steps - 1, 0) for k, v in one.items()}
        if config.get("engine") == "vllm":  # vLLM's propose runs the extend pass first, in the phase
            tokens = batch * ndt
            ext = shape.draft_breakdown(tokens, batch, ctx + ndt, with_fc=True, elt=elt)
            parts = {k: parts.get(k, 0.0) + ext.get(k, 0.0) for k in {*parts, *ext}}
    elif phase == "extend":
        tokens = batch * ndt
        parts = shape.draft_breakdown(tokens, batch, ctx + ndt, with_fc=True, elt=elt)
    else:
        return None
    total = sum(parts.values())
    floor = total / bandwidth * 1e3
    return PhaseRoofline(
        phase=phase,
        tokens=tokens,
        bytes=total,
        breakdown=parts,
        touched_experts=touched,
        floor_ms=floor,
        measured_ms=measured,
        graph=graph if isinstance(graph, bool) else None,
        bytes_floor_ms=floor,
    )
