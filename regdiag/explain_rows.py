"""explain's rows per phase: the roofline of each phase a run (or a model without one) has, with its
measured time, its CUDA-graph flag and its model shape. Library code: no typer, no rich."""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

from regdiag import stats
from regdiag.errors import BadInput
from regdiag.models import DTYPE_BYTES, preset_shape, shape_from_dict
from regdiag.profiles import side_profile
from regdiag.roofline import PhaseRoofline, roofline
from regdiag.run_view import usable


def ok_launches(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [la for la in run.get("launches", []) if usable(la)]


def median_center(launches: list[dict[str, Any]], name: str) -> float | None:
    """A run's time: the geometric mean of its launch medians, the centre compare reads."""
    xs = [la["samples"][name] for la in launches if la.get("samples", {}).get(name)]
    if not xs:
        return None
    c = stats.launch_centers(xs)
    return stats.geomean(c) if np.all(c > 0) else float(np.mean(c))


def header_of(launches: list[dict[str, Any]]) -> dict[str, Any]:
    for la in launches:
        if isinstance(la.get("header"), dict) and la["header"]:
            return la["header"]
    return {}


# The phases both engines run as CUDA graphs by default (SGLang 0.5.x: the target's decode and
# verify through CudaGraphRunner; vLLM 0.33: the target's forward under the cudagraph dispatcher).
# The draft's and draft-extend's graphs depend on the engine's version and flags: eager unless --graph on.
ENGINE_GRAPHS = ("decode", "verify")


def graph_of(phase: str, g: Any) -> bool | None:
    """Whether the phase ran as a CUDA graph, without a run: --graph on|off, else as the engines do."""
    if g.graph is not None:
        return g.graph
    return True if phase in ENGINE_GRAPHS else None


def graph_note(g: Any) -> str:
    if g.graph is not None:
        return f"collectives priced {'as CUDA-graph replays' if g.graph else 'eager'} (--graph)"
    return (
        "collectives of decode and verify priced as CUDA-graph replays (both engines graph them by "
        "default; --graph off for eager), draft and extend eager"
    )


def rooflines(
    shape: Any,
    phases: list[str],
    config: dict[str, Any],
    header: dict[str, Any],
    launches: list[dict[str, Any]],
    baseline: dict[str, Any] | None,
    bandwidth: float,
    notes: list[str],
    g: Any,
) -> list[PhaseRoofline]:
    """One roofline row per phase of the run (and the baseline's decode), with notes on what they cover.
    A phase's graph flag: --graph, else the probe header's, else the engine's (most of its cycles)."""
    rows: list[PhaseRoofline] = []
    elt = DTYPE_BYTES.get(str(config.get("dtype") or "bfloat16"), 2)
    graphs = _graphs(header, launches)
    if config.get("device") == "cpu":
        graphs = {}  # no CUDA graphs on a CPU: "eager" says nothing about launch overhead there
    given = {"decode": g.decode_ms, "verify": g.verify_ms}
    for ph in phases:
        measured = given.get(ph) or median_center(launches, ph)
        graph = g.graph if g.graph is not None else graphs.get(ph)
        row = _weighted(ph, shape, config, elt, bandwidth, measured, graph)
        if row is not None:
            rows.append(row)
    prof = side_profile(launches)  # --profile: which of kernels and idle time keeps a phase off its floor
    for row in rows:
        row.profile = (prof or {}).get("phases", {}).get(row.phase)
    if "decode" not in phases and (baseline is not None or g.decode_ms is not None):
        bl = [] if baseline is None else ok_launches(baseline)
        bgraphs = _graphs(header_of(bl), bl)
        center = g.decode_ms
        if center is None and baseline is not None:
            center = median_center(bl, baseline.get("primary") or "cycle")
        graph = g.graph if g.graph is not None else bgraphs.get("decode")
        row = roofline("decode", shape, config, elt, bandwidth, center, graph)
        if row is not None:
            rows.append(row)
    if "verify" not in phases and g.verify_ms is not None:  # a decode run, and a verify time given
        row = _weighted("verify", shape, config, elt, bandwidth, g.verify_ms, g.graph)
        if row is not None:
            rows.append(row)
    if config.get("device") == "cpu":
        notes.append(
            "ran on CPU: the floor is against the CPU's copy bandwidth; the numbers are for shape, not speed"
        )
    if shape.layers < _full_layers(shape, header):
        notes.append(
            f"the probe ran {shape.layers} of {_full_layers(shape, header)} layers: "
            "bytes and floors are for those"
        )
    return rows


def _weighted(
    phase: str, shape: Any, config: dict[str, Any], elt: int, bandwidth: float, measured: Any, graph: Any
) -> PhaseRoofline | None:
    """A phase's row; a verify whose size varied in the run (`num_draft_tokens_dist`: {tokens: share of
    cycles}, adaptive speculation) reads the mean of its sizes' bytes, weighted by their shares."""
    dist = config.get("num_draft_tokens_dist")
    if phase != "verify" or not isinstance(dist, dict) or len(dist) < 2:
        return roofline(phase, shape, config, elt, bandwidth, measured, graph)
    parts = [
        (roofline(phase, shape, {**config, "num_draft_tokens": n}, elt, bandwidth, measured, graph), w)
        for n, w in dist.items()
    ]
    rows = [(r, w) for r, w in parts if r is not None]
    total = sum(w for _, w in rows)
    if not rows or total <= 0:
        return roofline(phase, shape, config, elt, bandwidth, measured, graph)
    base = roofline(phase, shape, config, elt, bandwidth, measured, graph) or rows[0][0]
    keys = {k for r, _ in rows for k in r.breakdown}
    base.breakdown = {k: sum(r.breakdown.get(k, 0.0) * w for r, w in rows) / total for k in keys}
    base.bytes = sum(r.bytes * w for r, w in rows) / total
    base.bytes_floor_ms = base.floor_ms = sum(r.floor_ms * w for r, w in rows) / total
    base.touched_experts = sum((r.touched_experts or 0.0) * w for r, w in rows) / total
    return base


def _graphs(header: dict[str, Any], launches: list[dict[str, Any]]) -> dict[str, bool]:
    """Which phases ran as CUDA graphs: the probe header's flags, else an engine run's share of cycles
    that replayed a graph (median over launches; more than half is a graph)."""
    if isinstance(header.get("graphs"), dict):
        return {k: v for k, v in header["graphs"].items() if isinstance(v, bool)}
    shares: dict[str, list[float]] = {}
    for la in launches:
        for ph, x in (la.get("graph_share") or {}).items():
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                shares.setdefault(ph, []).append(float(x))
    return {ph: statistics.median(xs) > 0.5 for ph, xs in shares.items()}


def _full_layers(shape: Any, header: dict[str, Any]) -> int:
    model = header.get("model")
    s = (model.get("shape") if isinstance(model, dict) else None) or {}
    v = s.get("layers_full")
    return int(v) if isinstance(v, int) else shape.layers


def shape_of(
    header: dict[str, Any], config: dict[str, Any], model: str | None, notes: list[str], probe: Any = None
) -> Any | None:
    """The run's model shape (models.Shape): --preset, else the header's own, else the config's preset.
    --preset on a probe run takes the weights the probe ran; on an engine run the checkpoint's."""
    hs = (header.get("model") or {}).get("shape") if isinstance(header.get("model"), dict) else None
    layers = int(config.get("layers") or 0) or None
    if model:
        weights = str(config.get("weights") or "bf16") if probe == "spec-decode" else "preset"
        return preset_shape(model, layers, int(config.get("shard") or 1), weights)
    if isinstance(hs, dict):
        bad = [k for k, v in hs.items() if isinstance(v, float) and not (math.isfinite(v) and v >= 0)]
        bad += [k for k, v in hs.items() if isinstance(v, int) and not isinstance(v, bool) and v < 0]
        if bad:
            raise BadInput(f"the probe header's model shape has invalid {', '.join(sorted(bad))}")
        return shape_from_dict(hs)
    preset = config.get("preset")
    if isinstance(preset, str):
        weights = str(config.get("weights") or "bf16")
        return preset_shape(preset, layers, int(config.get("shard") or config.get("tp") or 1), weights)
    if "engine_preset" in config:
        notes.append(
            f"an engine run (preset {config.get('engine_preset')!r} names the engine's functions, not a "
            "model): pass --preset for the roofline"
        )
        return None
    notes.append("no model shape in the run (no header, no preset): pass --preset for the roofline")
    return None
