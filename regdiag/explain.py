"""`regdiag explain`: the throughput model of speculative decoding and an MoE roofline per phase.

Regression or physics? Two questions with arithmetic answers:

1. Does speculation pay? tok/s = accept_len / (cycle + overhead); plain decoding gives
   1 / (t_decode + decode overhead); regdiag.throughput has the break-even and the step bounds.
   Times are medians (the geometric mean of launch medians, as compare reads a run), accept
   lengths means (a count per cycle: its median is a whole number).
2. How far is each phase from the floor that its bytes set? A forward over t tokens of an MoE
   reads the attention and dense weights once, the shared experts, and the routed experts those t
   tokens touch, E * (1 - (1 - k/E)^t) per layer (regdiag.models). At a bandwidth B the phase
   cannot beat bytes / B; the achieved fraction is floor / measured. A phase run eagerly far from
   its floor is paying kernel launches, not moving bytes: flagged launch-bound. With a
   `probe collectives` record the floor also holds the phase's collectives, count x measured
   latency at their message sizes (regdiag.collective_costs).

Library code: no typer, no rich.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from regdiag import units
from regdiag.bandwidth import DEFAULT_BANDWIDTH, bandwidth_for
from regdiag.collective_costs import Latencies
from regdiag.comm import CommShare, comm_shares
from regdiag.engine.acceptance import tokens_distribution, varies
from regdiag.explain_engine import VLLM_DRAFT_NOTE, all_reduce_path, engine_said, run_engine
from regdiag.errors import BadInput
from regdiag.explain_rows import (
    graph_note,
    graph_of,
    header_of,
    median_center,
    ok_launches,
    rooflines,
    shape_of,
)
from regdiag.importers.vllm_bench import ACCEPT_LENGTH_KEYS
from regdiag.models import preset_shape
from regdiag.records import EXPLANATION, RUN, RecordError, check_record, schema_id
from regdiag.roofline import PhaseRoofline, add_comm, bytes_ratio, roofline
from regdiag.throughput import ThroughputModel, check_accept, check_given, check_per_position

__all__ = [
    "DEFAULT_BANDWIDTH",
    "Explanation",
    "PhaseRoofline",
    "ThroughputModel",
    "check_given",
    "explain_model",
    "explain_numbers",
    "explain_run",
]


@dataclass
class Explanation:
    throughput: ThroughputModel | None
    phases: list[PhaseRoofline]
    bandwidth: float
    bandwidth_source: str
    model: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    comm: list[CommShare] = field(default_factory=list)  # measured at TP > 1 (regdiag.comm)
    bytes_ratio_verify_decode: float | None = None  # verify's bytes over a decode's, this model
    comm_label: str | None = None  # the collectives record that priced them (--collectives)
    comm_path: str | None = None  # the all-reduce the engine ran, where its log said (engine_config)

    def comm_refused(self) -> str | None:
        """Why no remainder is given: the priced collectives of a decode or a verify exceed the phase's
        own measured time, so the latencies they were priced at are not the ones this engine paid (the
        record measured another path: NCCL where the engine ran a custom all-reduce, eager where it
        replayed graphs, another TP or interconnect)."""
        for p in self.phases:
            over = p.comm_ms is not None and p.measured_ms and p.comm_ms > p.measured_ms
            if p.phase in ("decode", "verify") and over:
                path = f" (the engine's all-reduce: {self.comm_path})" if self.comm_path else ""
                rec = self.comm_label or "the collectives record"
                return (
                    f"no remainder: {p.phase}'s collectives priced at {p.comm_ms:.3g} ms exceed the "
                    f"{p.phase} itself, {p.measured_ms:.3g} ms: {rec} is not the path this engine used{path}"
                )
        return None

    def remainder(self) -> tuple[float, float, bool] | None:
        """(verify's time not explained by bytes in ms, the bytes ratio, collectives priced). With the
        collectives priced, a decode's own collectives are taken out before its time is scaled by the
        bytes ratio (they do not grow with the bytes) and verify's are added: v - [(d - d_comm) x ratio
        + v_comm]; without, v - d x ratio."""
        by = {p.phase: p for p in self.phases}
        v, d = by.get("verify"), by.get("decode")
        if not v or not d or not v.measured_ms or not d.measured_ms or d.bytes <= 0 or self.comm_refused():
            return None
        ratio = v.bytes / d.bytes
        if v.comm_ms is not None and d.comm_ms is not None:
            return v.measured_ms - ((d.measured_ms - d.comm_ms) * ratio + v.comm_ms), ratio, True
        return v.measured_ms - d.measured_ms * ratio, ratio, False

    def physics_line(self) -> str | None:
        """verify vs decode: how much of the extra cost the bytes explain."""
        if refused := self.comm_refused():
            return refused
        by = {p.phase: p for p in self.phases}
        v, d = by.get("verify"), by.get("decode")
        rem = self.remainder()
        if rem is None or v is None or d is None or not v.measured_ms or not d.measured_ms:
            return None
        rest, ratio, priced = rem
        line = (
            f"verify costs {v.measured_ms / d.measured_ms:.2f}x a decode; its bytes account for "
            f"{ratio:.2f}x ({v.touched_experts or 0:.1f} vs {d.touched_experts or 0:.1f} experts touched "
            f"per layer); the rest, {rest:+.3g} ms, is not explained by bytes"
        )
        if priced:
            line += (
                f" or collectives (verify's {v.comm_ms:.3g} ms added, a decode's {d.comm_ms:.3g} ms "
                "not scaled by the bytes)"
            )
        return line

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": schema_id(EXPLANATION),
            "tok_s": None if self.throughput is None else self.throughput.tok_s,
            "bytes_ratio_verify_decode": self.bytes_ratio_verify_decode,
            "throughput": None if self.throughput is None else self.throughput.to_dict(),
            "phases": [p.to_dict() for p in self.phases],
            "bandwidth": self.bandwidth,
            "bandwidth_source": self.bandwidth_source,
            "model": self.model,
            "physics": self.physics_line(),
            "physics_remainder_ms": None if (r := self.remainder()) is None else r[0],
            "physics_refused": self.comm_refused(),
            "communication": [c.to_dict() for c in self.comm],
            "notes": self.notes,
        }


@dataclass
class Given:
    """What the command line gives beside a run (each replaces what the run says)."""

    cycle_ms: float | None = None
    decode_ms: float | None = None
    accept_len: float | None = None
    overhead_ms: float | None = None
    decode_overhead_ms: float | None = None
    num_steps: int | None = None
    bandwidth: float | None = None
    gpu: str | None = None
    model: str | None = None
    collectives: Latencies | None = None
    sampling: bool = False  # temperature > 0: the engine's sampling broadcasts per cycle
    engine: str | None = None  # "sglang" or "vllm": how the phases are priced (None: the run's, else sglang)
    per_position: list[float] | None = None  # an acceptance curve, draft position 1, 2, ...
    verify_ms: float | None = None  # a verify's GPU time, for the physics line without a run
    graph: bool | None = None  # --graph on|off: the phases ran as CUDA graphs (None: as the engine does)

    def check(self) -> None:
        if self.engine is not None and self.engine not in ("sglang", "vllm"):
            raise BadInput(f"--engine must be sglang or vllm, not {self.engine!r}")
        if self.verify_ms is not None and not 1e-6 <= self.verify_ms <= 1e9:
            raise BadInput(f"--verify-ms {self.verify_ms}: must be within 1e-06..1e+09 ms")
        check_given(
            self.cycle_ms,
            self.decode_ms,
            self.accept_len,
            overhead_ms=self.overhead_ms,
            decode_overhead_ms=self.decode_overhead_ms,
            num_steps=self.num_steps,
        )


def explain_numbers(
    cycle_ms: float,
    decode_ms: float | None,
    accept_len: float,
    batch: int = 1,
    *,
    overhead_ms: float | None = None,
    decode_overhead_ms: float | None = None,
    num_steps: int | None = 2,
) -> ThroughputModel:
    """The model from numbers alone (num_steps bounds the accept length: SGLang's default 2 unless given)."""
    Given(cycle_ms, decode_ms, accept_len, overhead_ms, decode_overhead_ms, num_steps).check()
    sources = {"cycle": "given", "accept_len": "given"}
    overheads = (overhead_ms or 0.0, decode_overhead_ms or 0.0)
    t = ThroughputModel(accept_len, cycle_ms, decode_ms, batch, sources, *overheads, num_steps)
    if overhead_ms:
        t.sources["overhead"] = "given"
    t.check_finite()
    return t


def explain_model(
    model: str,
    tp: int = 1,
    *,
    context: int = 4096,
    batch: int = 1,
    layers: int | None = None,
    given: Given | None = None,
    draft: str = "eagle3",
) -> Explanation:
    """A model's floors per phase without a run: the preset at TP=`tp` in its checkpoint's formats, one
    cycle at `num_steps` (default 2), and the throughput model when a cycle and an accept length are given."""
    g = given or Given()
    g.check()
    if not 1 <= tp <= 1024 or not 0 <= context <= 10**7 or not 1 <= batch <= 10**6:
        raise BadInput("--tp must be 1..1024, --context 0..1e7 and the batch 1..1e6")
    shape = preset_shape(model, layers, tp, draft=draft)
    steps = g.num_steps or 2
    engine = g.engine or "sglang"
    config = {"batch": batch, "context": context, **_steps(steps), "shard": tp, "tp": tp, "engine": engine}
    bandwidth, bw_src = bandwidth_for([], g.bandwidth, g.gpu)
    notes: list[str] = [f"no run: floors for {model} at TP={tp}, context {context}, {steps} steps"]
    measured = {"decode": g.decode_ms, "verify": g.verify_ms}
    phases = ("decode", "draft", "verify") if engine == "vllm" else ("decode", "draft", "verify", "extend")
    rows = [
        r
        for ph in phases
        if (r := roofline(ph, shape, config, 2, bandwidth, measured.get(ph), graph_of(ph, g))) is not None
    ]
    if engine == "vllm":
        notes.append(VLLM_DRAFT_NOTE)
    if g.collectives is not None and tp > 1:
        notes.append(graph_note(g))
    add_comm(rows, shape, config, notes, g.collectives, g.sampling, engine)
    tput = None
    if g.cycle_ms is not None and g.accept_len is not None:
        tput = explain_numbers(
            g.cycle_ms,
            g.decode_ms,
            g.accept_len,
            batch,
            overhead_ms=g.overhead_ms,
            decode_overhead_ms=g.decode_overhead_ms,
            num_steps=steps,
        )
    model_d = {"name": shape.preset, **shape.to_dict()}
    out = Explanation(tput, rows, bandwidth, bw_src, model_d, notes, [], bytes_ratio(shape, config))
    out.comm_label = g.collectives.label if g.collectives is not None else None
    return out


def _steps(n: int) -> dict[str, int]:
    """A config's draft steps: `n` of them, n + 1 tokens verified a cycle."""
    return {"num_steps": n, "num_draft_tokens": n + 1}


# --- from run records ---------------------------------------------------------------------------


def _mean_of_launch_means(launches: list[dict[str, Any]], key: str, name: str) -> float | None:
    means = [float(np.mean(la[key][name])) for la in launches if la.get(key, {}).get(name)]
    return float(np.mean(means)) if means else None


# Latencies that are per output token, not per cycle: a step yields accept-length tokens, so its cycle
# is the time per token x the accept length. vllm bench serve and bench_serving define tpot so, as
# (latency - ttft) / (tokens - 1); their itl is the gap between stream chunks, one chunk a step.
PER_TOKEN = {
    "tpot": "median {m} {t:.3g} ms x accept length {a:.3g} ({m} is per token; a cycle yields that many)"
}
NOT_A_CYCLE = {"e2e": "a whole request's time"}


def _bench_accept(launches: list[dict[str, Any]]) -> tuple[str | None, float | None]:
    """The mean accept length of a bench file (vllm bench serve, bench_serving), in an imported launch's
    scalars under the keys compare judges it by (one number per benchmark run)."""
    for key in ACCEPT_LENGTH_KEYS:
        xs = [
            float(v)
            for la in launches
            if isinstance(v := (la.get("scalars") or {}).get(key), (int, float))
            and not isinstance(v, bool)
            and v > 0
        ]
        if xs:
            return key, float(np.mean(xs))
    return None, None


def _check_run(run: Any, label: str) -> dict[str, Any]:
    try:
        run = check_record(run, label, RUN)
    except RecordError as e:
        raise BadInput(str(e)) from None
    if not ok_launches(run):
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
    given: Given | None = None,
) -> Explanation:
    """What the run's cycle costs and why. What `given` (or the keywords) holds replaces what the run
    (or the baseline) says."""
    g = given or Given()
    passed = dict(
        bandwidth=bandwidth, decode_ms=decode_ms, accept_len=accept_len, cycle_ms=cycle_ms, model=model
    )
    for k, v in passed.items():
        if v is not None:
            setattr(g, k, v)
    g.check()
    run = _check_run(units.canonical(run), label)  # times in ms, whatever unit the record was written in
    if baseline is not None:
        baseline = units.canonical(baseline)
    launches = ok_launches(run)
    header = header_of(launches)
    config = {**((run.get("probe") or {}).get("config") or {}), **(header.get("config") or {})}
    notes: list[str] = []
    if (run.get("probe") or {}).get("name") == "engine":
        config = _engine_config(config, launches)
        notes += _acceptance_notes(config, launches)
    notes += engine_said(launches)
    _check_inputs(config, launches, label)
    config["engine"] = g.engine or run_engine(config, launches)
    if config["engine"] == "vllm" and "draft" in (run.get("phases") or []):
        notes.append(VLLM_DRAFT_NOTE)
    if g.num_steps is not None:
        config.update(_steps(g.num_steps))
    steps = config.get("num_steps") if isinstance(config.get("num_steps"), int) else None
    check_accept(g.accept_len, steps, "" if g.num_steps is not None else " (the run's)")
    phases = [p for p in run.get("phases") or [] if isinstance(p, str)]
    if baseline is not None and g.decode_ms is None:
        baseline = _check_run(baseline, baseline_label)
    tput = _throughput(run, baseline, launches, header, config, phases, g, label, baseline_label, notes)
    bandwidth_v, bw_src = bandwidth_for(launches, g.bandwidth, g.gpu)
    shape = shape_of(header, config, g.model, notes, (run.get("probe") or {}).get("name"))
    rows = (
        []
        if shape is None
        else rooflines(shape, phases, config, header, launches, baseline, bandwidth_v, notes, g)
    )
    if shape is not None:
        add_comm(rows, shape, config, notes, g.collectives, g.sampling, config["engine"])
    comm = [c for c in comm_shares(run) if c.phase != "cycle"]
    model_d = None if shape is None else {"name": shape.preset, **shape.to_dict()}
    ratio = None if shape is None else bytes_ratio(shape, config)
    out = Explanation(tput, rows, bandwidth_v, bw_src, model_d, notes, comm, ratio)
    out.comm_label = g.collectives.label if g.collectives is not None else None
    out.comm_path = all_reduce_path(launches)
    return out


def _throughput(
    run: dict[str, Any],
    baseline: dict[str, Any] | None,
    launches: list[dict[str, Any]],
    header: dict[str, Any],
    config: dict[str, Any],
    phases: list[str],
    g: Given,
    label: str,
    baseline_label: str,
    notes: list[str],
) -> ThroughputModel | None:
    """The throughput model of the run: its cycle and accept length, the decode of the baseline (or
    this run's decode phase, or given), the overheads (given, or the engine's period minus its cycle)."""
    primary = run.get("primary") or "cycle"
    batch = int(config.get("batch") or 1)
    decode_ms, decode_src = g.decode_ms, "given"
    decode_oh, decode_oh_src = g.decode_overhead_ms, "given"
    if decode_ms is None and baseline is not None:
        decode_ms, decode_src = _baseline_decode(run, baseline, label, baseline_label, notes)
        if decode_oh is None:
            decode_oh, decode_oh_src = _between_cycles(ok_launches(baseline), f"{baseline_label}'s")
    if decode_ms is None and "decode" in phases and primary != "decode" and phases != ["decode"]:
        decode_ms = median_center(launches, "decode")
        decode_src = "this run's decode phase (median)"
    if phases == ["decode"]:
        return None
    tput = _throughput_model(launches, header, config, primary, g, decode_ms, decode_src, batch, notes)
    if tput is None:
        return None
    if decode_oh is not None:
        tput.decode_overhead_ms = decode_oh
        tput.sources["decode_overhead"] = decode_oh_src
    tput.per_position = g.per_position or _per_position(launches)
    if tput.per_position:
        tput.sources["per_position"] = (
            "given" if g.per_position else "the engine's per-position acceptance rates (median over launches)"
        )
    tput.check_finite()
    return tput


def _between_cycles(launches: list[dict[str, Any]], whose: str) -> tuple[float | None, str]:
    """An engine record's time between cycles, period minus GPU cycle (median over launches)."""
    xs = [
        float(la["scalars"]["between_cycles_ms"])
        for la in launches
        if isinstance((la.get("scalars") or {}).get("between_cycles_ms"), (int, float))
        and math.isfinite(la["scalars"]["between_cycles_ms"])
        and la["scalars"]["between_cycles_ms"] >= 0
    ]
    if not xs:
        return None, ""
    return statistics.median(xs), f"{whose} period minus its GPU cycle (median between_cycles_ms)"


def _per_position(launches: list[dict[str, Any]]) -> list[float] | None:
    curves = [
        c
        for la in launches
        if (c := check_per_position((la.get("engine_counters") or {}).get("per_position_rate"))) is not None
    ]
    if not curves:
        return None
    n = min(len(c) for c in curves)
    return [statistics.median(c[i] for c in curves) for i in range(n)]


def _engine_config(config: dict[str, Any], launches: list[dict[str, Any]]) -> dict[str, Any]:
    """An engine run's inputs to the model, from the record: its preset names an engine, not a model
    (so no shape: --preset gives one), its TP is the number of processes that timed cycles (the ranks),
    and the tokens one verify took are what the engine's forward was given (values.verify_tokens)."""
    out = {k: v for k, v in config.items() if k != "preset"}
    out["engine_preset"] = config.get("preset")
    ranks: list[int] = [
        la["processes_timed"] for la in launches if isinstance(la.get("processes_timed"), int)
    ]
    if ranks:  # each rank holds 1/TP of the model: the shape --preset gives is cut that way
        out["tp"] = max(ranks)
        out.setdefault("shard", max(ranks))
    tokens = [
        x
        for la in launches
        for x in (la.get("values") or {}).get("verify_tokens", [])
        if isinstance(x, int) and not isinstance(x, bool) and x > 0
    ]
    if tokens:
        batch = int(config.get("batch") or 1)
        out["num_draft_tokens"] = int(np.median(tokens)) // batch
        dist = tokens_distribution(tokens)
        if varies(dist):  # adaptive speculation (or a batch that changed): weigh the sizes, not the median
            out["num_draft_tokens_dist"] = {max(k // batch, 1): w for k, w in dist.items()}
    return out


def _acceptance_notes(config: dict[str, Any], launches: list[dict[str, Any]]) -> list[str]:
    """What the accept length and the verify size did over the run (regdiag.engine.acceptance)."""
    out = []
    drifting = [la for la in launches if (((la.get("acceptance") or {}).get("series")) or {}).get("flagged")]
    if drifting:
        pct = ", ".join(f"{la['acceptance']['series']['drift_pct']:+.1f} %" for la in drifting)
        out.append(
            f"the accept length drifts within {len(drifting)} launch(es) ({pct} first third to last): "
            "the mean accept length averages over a moving draft"
        )
    dist = config.get("num_draft_tokens_dist")
    if isinstance(dist, dict):
        shares = ", ".join(f"{n} tokens {100 * w:.0f} %" for n, w in dist.items())
        out.append(
            f"the tokens a verify took varied ({shares} of cycles): verify's bytes are their weighted mean"
        )
    return out


def _baseline_decode(
    run: dict[str, Any], baseline: dict[str, Any], label: str, baseline_label: str, notes: list[str]
) -> tuple[float | None, str]:
    """t_decode from a plain-decode run of the same probe: the median centre of its primary."""
    bp = baseline.get("primary") or "cycle"
    probe, bprobe = (run.get("probe") or {}).get("name"), (baseline.get("probe") or {}).get("name")
    if probe and bprobe and probe != bprobe:
        # A collectives sweep's latency is not a decode time: the "speedup" would be meaningless.
        raise BadInput(
            f"{baseline_label} is a {bprobe} run and {label} a {probe} run; --baseline takes a "
            f"plain-decode run of the same probe ({probe} --mode baseline)"
        )
    co, cb = ((r.get("engine") or {}).get("cycle") for r in (run, baseline))
    if isinstance(co, dict) and isinstance(cb, dict) and co.get("kind") != cb.get("kind"):
        notes.append(
            f"{label} and {baseline_label} define a cycle differently ({co.get('text')}; {cb.get('text')}): "
            "t_decode is not the same instrument's"
        )
    bphases = baseline.get("phases") or []
    if bphases and bphases != ["decode"]:
        notes.append(
            f"{baseline_label} is not a plain-decode run (phases {bphases}); its {bp} used as t_decode"
        )
    return median_center(ok_launches(baseline), bp), f"{baseline_label} median {bp}"


def _throughput_model(
    launches: list[dict[str, Any]],
    header: dict[str, Any],
    config: dict[str, Any],
    primary: str,
    g: Given,
    decode_ms: float | None,
    decode_src: str,
    batch: int,
    notes: list[str],
) -> ThroughputModel | None:
    """tok/s of this run's cycle and accept length (each given or measured); None without either."""
    acc, acc_src = g.accept_len, "given"
    if acc is None:
        acc = _mean_of_launch_means(launches, "values", "accept_len")
        acc_src = "mean accept_len of the run"
        if acc is None:  # a bench file's (vllm bench serve, bench_serving): one number per launch
            key, acc = _bench_accept(launches)
            acc_src = f"mean {key} of the bench file" if key else acc_src
        if header.get("accept_len_simulated") or config.get("accept_mean") is not None:
            acc_src += " (simulated by the probe)"
    # A server run's primary is the inter-token latency; its speculative cycle, where the engine
    # reported an accept length, is recorded as the "cycle" series.
    cycle_metric = "cycle" if all("cycle" in (la.get("samples") or {}) for la in launches) else primary
    measured = median_center(launches, cycle_metric)
    cycle, cycle_src = g.cycle_ms, "given"
    if acc is None:
        notes.append("no accept_len in this run: pass --accept-len for the throughput model")
        return None
    if cycle is None and cycle_metric in NOT_A_CYCLE:
        notes.append(
            f"{cycle_metric} is {NOT_A_CYCLE[cycle_metric]}, not a cycle: pass --cycle-ms for the throughput model"
        )
        return None
    if cycle is None and measured is not None:
        cycle, cycle_src = measured, f"median {cycle_metric}"
        if cycle_metric in PER_TOKEN:
            cycle, cycle_src = cycle * acc, PER_TOKEN[cycle_metric].format(m=cycle_metric, t=cycle, a=acc)
    if cycle is None:
        notes.append(f"no {cycle_metric} in this run: pass --cycle-ms for the throughput model")
        return None
    steps = config.get("num_steps") if isinstance(config.get("num_steps"), int) else None
    sources = {"cycle": cycle_src, "accept_len": acc_src}
    tput = ThroughputModel(acc, cycle, decode_ms, batch, sources, num_steps=steps)
    if decode_ms is not None:
        tput.sources["decode"] = decode_src
    oh, oh_src = (
        (g.overhead_ms, "given") if g.overhead_ms is not None else _between_cycles(launches, "the engine's")
    )
    if (
        oh is None
        and g.cycle_ms is not None
        and measured is not None
        and cycle_metric == "cycle"
        and primary != "cycle"  # a server's cycle is itl x accept length: wall time, not GPU time
        and measured > cycle
    ):
        oh, oh_src = measured - cycle, "the server's cycle (itl x accept length) minus the given GPU cycle"
    if oh is not None:
        tput.overhead_ms, tput.sources["overhead"] = oh, oh_src
    return tput
