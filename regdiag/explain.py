"""`regdiag explain`: the throughput model of speculative decoding and an MoE roofline per phase.

Regression or physics? Two questions with arithmetic answers:

1. Does speculation pay? tok/s = accept_len / cycle; plain decoding gives 1 / t_decode; the
   speedup is accept_len * t_decode / cycle. It breaks even at accept_len = cycle / t_decode, or
   at cycle = accept_len * t_decode. (Per sequence; a batch multiplies both sides alike.)
2. How far is each phase from the floor that its bytes set? A forward over t tokens of an MoE
   reads the attention and dense weights once, the shared experts, and the routed experts those t
   tokens touch, E * (1 - (1 - k/E)^t) per layer (regdiag.models). At a bandwidth B the phase
   cannot beat bytes / B; the achieved fraction is floor / measured. A phase run eagerly far from
   its floor is paying kernel launches, not moving bytes: flagged launch-bound.

Library code: no typer, no rich.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from regdiag import stats
from regdiag.comm import CommShare, comm_shares
from regdiag.errors import BadInput
from regdiag.models import DTYPE_BYTES, preset_shape, shape_from_dict, touched_experts
from regdiag.records import EXPLANATION, RUN, RecordError, check_record, schema_id
from regdiag.run_view import usable

DEFAULT_BANDWIDTH = 4.24e12  # B/s: device copy bandwidth measured on one H200 (docs/compare.md)
LAUNCH_BOUND_FRACTION = 0.5  # an eager phase below this share of its floor is launch-bound
FAR_FROM_FLOOR = 0.15


@dataclass
class ThroughputModel:
    accept_len: float
    cycle_ms: float
    decode_ms: float | None
    batch: int = 1
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def tok_s(self) -> float:
        return self.batch * self.accept_len / self.cycle_ms * 1e3

    @property
    def baseline_tok_s(self) -> float | None:
        return None if self.decode_ms is None else self.batch / self.decode_ms * 1e3

    @property
    def speedup(self) -> float | None:
        return None if self.decode_ms is None else self.accept_len * self.decode_ms / self.cycle_ms

    @property
    def breakeven_accept(self) -> float | None:
        return None if self.decode_ms is None else self.cycle_ms / self.decode_ms

    @property
    def breakeven_cycle_ms(self) -> float | None:
        return None if self.decode_ms is None else self.accept_len * self.decode_ms

    def summary(self) -> list[str]:
        lines = [
            f"speculation: {self.accept_len:.3g} tokens per {self.cycle_ms:.3g} ms cycle -> {self.tok_s:.0f} tok/s"
            + (f" (batch {self.batch})" if self.batch != 1 else "")
        ]
        if self.decode_ms is None:
            lines.append(
                "no plain-decode time: pass --decode-ms or --baseline RUN for the speedup and break-even"
            )
            return lines
        assert (
            self.speedup is not None
            and self.breakeven_accept is not None
            and self.breakeven_cycle_ms is not None
        )
        lines.append(
            f"plain decode: {self.decode_ms:.3g} ms per token -> {self.baseline_tok_s:.0f} tok/s baseline"
        )
        if self.speedup < 1:
            lines.append(
                f"speedup {self.speedup:.2f}x: {self.tok_s:.0f} tok/s vs {self.baseline_tok_s:.0f} baseline; "
                f"speculation loses until accept_len >= {self.breakeven_accept:.3g} "
                f"or cycle <= {self.breakeven_cycle_ms:.3g} ms"
            )
        else:
            lines.append(
                f"speedup {self.speedup:.2f}x: {self.tok_s:.0f} tok/s vs {self.baseline_tok_s:.0f} baseline; "
                f"speculation pays while accept_len >= {self.breakeven_accept:.3g} "
                f"and cycle <= {self.breakeven_cycle_ms:.3g} ms"
            )
        return lines

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("tok_s", "baseline_tok_s", "speedup", "breakeven_accept", "breakeven_cycle_ms"):
            d[k] = getattr(self, k)
        return d


@dataclass
class PhaseRoofline:
    phase: str
    tokens: int
    bytes: float
    breakdown: dict[str, float]
    touched_experts: float | None
    floor_ms: float
    measured_ms: float | None
    graph: bool | None  # ran as a CUDA graph replay (None: unknown)

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
        if self.launch_bound:
            return "launch-bound: eager kernel launches, not bytes, set its time"
        if a > 1.05:
            return "faster than the floor: the bandwidth or the byte model is wrong for this run"
        if a < FAR_FROM_FLOOR:
            return "far from the floor: small kernels, syncs or communication dominate"
        return ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(achieved=self.achieved, launch_bound=self.launch_bound, note=self.note)
        return d


@dataclass
class Explanation:
    throughput: ThroughputModel | None
    phases: list[PhaseRoofline]
    bandwidth: float
    bandwidth_source: str
    model: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    comm: list[CommShare] = field(default_factory=list)  # measured at TP > 1 (regdiag.comm)

    def physics_line(self) -> str | None:
        """verify vs decode: how much of the extra cost the bytes explain."""
        by = {p.phase: p for p in self.phases}
        v, d = by.get("verify"), by.get("decode")
        if not v or not d or not v.measured_ms or not d.measured_ms:
            return None
        return (
            f"verify costs {v.measured_ms / d.measured_ms:.2f}x a decode; its bytes account for "
            f"{v.bytes / d.bytes:.2f}x ({v.touched_experts or 0:.1f} vs {d.touched_experts or 0:.1f} experts touched "
            f"per layer); the rest, {v.measured_ms - d.measured_ms * v.bytes / d.bytes:+.3g} ms, is not explained by bytes"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": schema_id(EXPLANATION),
            "throughput": None if self.throughput is None else self.throughput.to_dict(),
            "phases": [p.to_dict() for p in self.phases],
            "bandwidth": self.bandwidth,
            "bandwidth_source": self.bandwidth_source,
            "model": self.model,
            "physics": self.physics_line(),
            "communication": [c.to_dict() for c in self.comm],
            "notes": self.notes,
        }


def check_given(cycle_ms: float | None, decode_ms: float | None, accept_len: float | None) -> None:
    """Numbers given on the command line, with or without a run: each a finite positive number."""
    for name, v in (("cycle", cycle_ms), ("accept length", accept_len), ("decode time", decode_ms)):
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise BadInput(f"{name} must be a positive number (got {v})")


def explain_numbers(
    cycle_ms: float, decode_ms: float | None, accept_len: float, batch: int = 1
) -> ThroughputModel:
    check_given(cycle_ms, decode_ms, accept_len)
    return ThroughputModel(accept_len, cycle_ms, decode_ms, batch, {"cycle": "given", "accept_len": "given"})


# --- from run records ---------------------------------------------------------------------------


def _ok_launches(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [la for la in run.get("launches", []) if usable(la)]


def _mean_of_launch_means(launches: list[dict[str, Any]], key: str, name: str) -> float | None:
    means = [float(np.mean(la[key][name])) for la in launches if la.get(key, {}).get(name)]
    return float(np.mean(means)) if means else None


def _median_center(launches: list[dict[str, Any]], name: str) -> float | None:
    xs = [la["samples"][name] for la in launches if la.get("samples", {}).get(name)]
    if not xs:
        return None
    c = stats.launch_centers(xs)
    return stats.geomean(c) if np.all(c > 0) else float(np.mean(c))


def _header(launches: list[dict[str, Any]]) -> dict[str, Any]:
    for la in launches:
        if isinstance(la.get("header"), dict) and la["header"]:
            return la["header"]
    return {}


def _check_run(run: Any, label: str) -> dict[str, Any]:
    try:
        run = check_record(run, label, RUN)
    except RecordError as e:
        raise BadInput(str(e)) from None
    if not _ok_launches(run):
        raise BadInput(f"{label}: the run has no launch with samples")
    return run


_COUNTS = ("batch", "layers", "shard", "tp", "context", "num_steps", "num_draft_tokens")


def _check_inputs(config: dict[str, Any], launches: list[dict[str, Any]], label: str) -> None:
    """The header fields the model reads, checked once: a malformed one is one line, not a crash."""
    for key in _COUNTS:
        v = config.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 10**7):
            raise BadInput(f"{label}: probe config {key} is {v!r}, not a count")
    for i, la in enumerate(launches):
        values = la.get("values")
        if values is None:
            continue
        if not isinstance(values, dict):
            raise BadInput(f"{label}: launch {i} values is a {type(values).__name__}, not an object")
        acc = values.get("accept_len", [])
        if not isinstance(acc, list) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and 0 < x < 1e6
            for x in acc
        ):
            raise BadInput(f"{label}: launch {i} accept_len values are not all finite positive numbers")


def explain_run(
    run: dict[str, Any],
    baseline: dict[str, Any] | None = None,
    *,
    bandwidth: float | None = None,
    decode_ms: float | None = None,
    accept_len: float | None = None,
    cycle_ms: float | None = None,
    model: str | None = None,
    label: str = "RUN",
    baseline_label: str = "BASELINE",
) -> Explanation:
    """What the run's cycle costs and why. decode_ms, accept_len and cycle_ms, when given, replace what
    the run (or the baseline) says."""
    check_given(cycle_ms, decode_ms, accept_len)
    run = _check_run(run, label)
    launches = _ok_launches(run)
    header = _header(launches)
    config = {**((run.get("probe") or {}).get("config") or {}), **(header.get("config") or {})}
    if (run.get("probe") or {}).get("name") == "engine":
        config = _engine_config(config, launches)
    _check_inputs(config, launches, label)
    notes: list[str] = []
    primary = run.get("primary") or "cycle"
    phases = [p for p in run.get("phases") or [] if isinstance(p, str)]
    batch = int(config.get("batch") or 1)

    # Throughput model: the cycle of this run, the decode of the baseline (or given).
    decode_src = "given"
    if decode_ms is None and baseline is not None:
        baseline = _check_run(baseline, baseline_label)
        decode_ms, decode_src = _baseline_decode(run, baseline, label, baseline_label, notes)
    if decode_ms is None and "decode" in phases and primary != "decode" and phases != ["decode"]:
        decode_ms = _mean_of_launch_means(launches, "samples", "decode")
        decode_src = "this run's decode phase"
    tput = None
    if phases != ["decode"]:
        tput = _throughput_model(
            launches, header, config, primary, accept_len, decode_ms, decode_src, batch, cycle_ms
        )
        if tput is None:
            notes.append("no accept_len in this run: pass --accept-len for the throughput model")
    elif decode_ms is None:
        # A plain-decode run explains itself: its cycle is t_decode.
        decode_ms = _mean_of_launch_means(launches, "samples", primary)

    # Roofline: bytes per phase at a bandwidth.
    bandwidth, bw_src = _bandwidth(launches, bandwidth)
    shape = _shape(header, config, model, notes)
    rows = (
        []
        if shape is None
        else _rooflines(shape, phases, config, header, launches, baseline, bandwidth, notes)
    )
    comm = [c for c in comm_shares(run) if c.phase != "cycle"]
    model_d = None if shape is None else {"name": shape.preset, **shape.to_dict()}
    return Explanation(tput, rows, bandwidth, bw_src, model_d, notes, comm)


def _engine_config(config: dict[str, Any], launches: list[dict[str, Any]]) -> dict[str, Any]:
    """An engine run's inputs to the model, from the record: its preset names an engine, not a model
    (so no shape: --model gives one), its TP is the number of processes that timed cycles (the ranks),
    and the tokens one verify took are what the engine's forward was given (values.verify_tokens)."""
    out = {k: v for k, v in config.items() if k != "preset"}
    out["engine_preset"] = config.get("preset")
    ranks: list[int] = [
        la["processes_timed"] for la in launches if isinstance(la.get("processes_timed"), int)
    ]
    if ranks:  # each rank holds 1/TP of the model: the shape --model gives is cut that way
        out["tp"] = max(ranks)
        out.setdefault("shard", max(ranks))
    tokens = [
        x
        for la in launches
        for x in (la.get("values") or {}).get("verify_tokens", [])
        if isinstance(x, int) and not isinstance(x, bool) and x > 0
    ]
    if tokens:
        out["num_draft_tokens"] = int(np.median(tokens)) // int(config.get("batch") or 1)
    return out


def _baseline_decode(
    run: dict[str, Any], baseline: dict[str, Any], label: str, baseline_label: str, notes: list[str]
) -> tuple[float | None, str]:
    """t_decode from a plain-decode run of the same probe: the mean of its launch means of its primary."""
    bp = baseline.get("primary") or "cycle"
    probe, bprobe = (run.get("probe") or {}).get("name"), (baseline.get("probe") or {}).get("name")
    if probe and bprobe and probe != bprobe:
        # A collectives sweep's latency is not a decode time: the "speedup" would be meaningless.
        raise BadInput(
            f"{baseline_label} is a {bprobe} run and {label} a {probe} run; --baseline takes a "
            f"plain-decode run of the same probe ({probe} --mode baseline)"
        )
    bphases = baseline.get("phases") or []
    if bphases and bphases != ["decode"]:
        notes.append(
            f"{baseline_label} is not a plain-decode run (phases {bphases}); its {bp} used as t_decode"
        )
    return _mean_of_launch_means(_ok_launches(baseline), "samples", bp), f"{baseline_label} mean {bp}"


def _throughput_model(
    launches: list[dict[str, Any]],
    header: dict[str, Any],
    config: dict[str, Any],
    primary: str,
    accept_len: float | None,
    decode_ms: float | None,
    decode_src: str,
    batch: int,
    cycle_ms: float | None = None,
) -> ThroughputModel | None:
    """tok/s of this run's cycle and accept length (each given or measured); None without either."""
    # A server run's primary is the inter-token latency; its speculative cycle, where the engine
    # reported an accept length, is recorded as the "cycle" series.
    cycle_metric = "cycle" if all("cycle" in (la.get("samples") or {}) for la in launches) else primary
    cycle, cycle_src = cycle_ms, "given"
    if cycle is None:
        cycle, cycle_src = _mean_of_launch_means(launches, "samples", cycle_metric), f"mean {cycle_metric}"
    acc, acc_src = accept_len, "given"
    if acc is None:
        acc = _mean_of_launch_means(launches, "values", "accept_len")
        acc_src = "mean accept_len of the run"
        if header.get("accept_len_simulated") or config.get("accept_mean") is not None:
            acc_src += " (simulated by the probe)"
    if cycle is None or acc is None:
        return None
    tput = ThroughputModel(acc, cycle, decode_ms, batch, {"cycle": cycle_src, "accept_len": acc_src})
    if decode_ms is not None:
        tput.sources["decode"] = decode_src
    return tput


def _bandwidth(launches: list[dict[str, Any]], given: float | None) -> tuple[float, str]:
    """The bandwidth of the floor and where it comes from: given, measured by the probe, or the default."""
    if given is not None:
        bandwidth, src = given, "--bandwidth"
    else:
        measured = [la["header"].get("copy_GBps") for la in launches if isinstance(la.get("header"), dict)]
        measured = [float(x) for x in measured if isinstance(x, (int, float)) and math.isfinite(x) and x > 0]
        if measured:
            bandwidth, src = (
                float(np.median(measured)) * 1e9,
                "copy bandwidth measured by the probe on this device",
            )
        else:
            bandwidth, src = DEFAULT_BANDWIDTH, "default: copy bandwidth measured on one H200"
    if not (math.isfinite(bandwidth) and bandwidth > 0):
        raise BadInput(f"bandwidth must be positive (got {bandwidth})")
    return bandwidth, src


def _rooflines(
    shape: Any,
    phases: list[str],
    config: dict[str, Any],
    header: dict[str, Any],
    launches: list[dict[str, Any]],
    baseline: dict[str, Any] | None,
    bandwidth: float,
    notes: list[str],
) -> list[PhaseRoofline]:
    """One roofline row per phase of the run (and the baseline's decode), with notes on what they cover."""
    rows: list[PhaseRoofline] = []
    elt = DTYPE_BYTES.get(str(config.get("dtype") or "bfloat16"), 2)
    graphs: dict[str, Any] = header["graphs"] if isinstance(header.get("graphs"), dict) else {}
    if config.get("device") == "cpu":
        graphs = {}  # no CUDA graphs on a CPU: "eager" says nothing about launch overhead there
    for ph in phases:
        row = _roofline(ph, shape, config, elt, bandwidth, _median_center(launches, ph), graphs.get(ph))
        if row is not None:
            rows.append(row)
    if baseline is not None and "decode" not in phases:
        bl = _ok_launches(baseline)
        bh = _header(bl)
        bgraphs: dict[str, Any] = bh["graphs"] if isinstance(bh.get("graphs"), dict) else {}
        center = _median_center(bl, baseline.get("primary") or "cycle")
        row = _roofline("decode", shape, config, elt, bandwidth, center, bgraphs.get("decode"))
        if row is not None:
            rows.append(row)
    if config.get("device") == "cpu":
        notes.append(
            "ran on CPU: the floor is against the CPU's copy bandwidth; the numbers are for shape, not speed"
        )
    if shape.layers < _full_layers(shape, header):
        notes.append(
            f"the probe ran {shape.layers} of {_full_layers(shape, header)} layers: bytes and floors are for those"
        )
    return rows


def _full_layers(shape: Any, header: dict[str, Any]) -> int:
    model = header.get("model")
    s = (model.get("shape") if isinstance(model, dict) else None) or {}
    v = s.get("layers_full")
    return int(v) if isinstance(v, int) else shape.layers


def _shape(header: dict[str, Any], config: dict[str, Any], model: str | None, notes: list[str]) -> Any | None:
    """The run's model shape (models.Shape): --model, else the header's own, else the config's preset."""
    hs = (header.get("model") or {}).get("shape") if isinstance(header.get("model"), dict) else None
    layers = int(config.get("layers") or 0) or None
    if model:
        return preset_shape(model, layers, int(config.get("shard") or 1))
    if isinstance(hs, dict):
        bad = [k for k, v in hs.items() if isinstance(v, float) and not (math.isfinite(v) and v >= 0)]
        bad += [k for k, v in hs.items() if isinstance(v, int) and not isinstance(v, bool) and v < 0]
        if bad:
            raise BadInput(f"the probe header's model shape has invalid {', '.join(sorted(bad))}")
        return shape_from_dict(hs)
    preset = config.get("preset")
    if isinstance(preset, str):
        return preset_shape(preset, layers, int(config.get("shard") or config.get("tp") or 1))
    if "engine_preset" in config:
        notes.append(
            f"an engine run (preset {config.get('engine_preset')!r} names the engine's functions, not a "
            "model): pass --model for the roofline"
        )
        return None
    notes.append("no model shape in the run (no header, no preset): pass --model for the roofline")
    return None


def _roofline(
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
    elif phase == "extend":
        tokens = batch * ndt
        parts = shape.draft_breakdown(tokens, batch, ctx + ndt, with_fc=True, elt=elt)
    else:
        return None
    total = sum(parts.values())
    return PhaseRoofline(
        phase=phase,
        tokens=tokens,
        bytes=total,
        breakdown=parts,
        touched_experts=touched,
        floor_ms=total / bandwidth * 1e3,
        measured_ms=measured,
        graph=graph if isinstance(graph, bool) else None,
    )
