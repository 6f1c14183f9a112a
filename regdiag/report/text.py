"""The sentences and numbers every renderer shows, built once from a Comparison."""

from __future__ import annotations

import math

from regdiag import stats
from regdiag.attribution import Attribution, Term, Throughput
from regdiag.compare import Comparison, MetricResult
from regdiag.compare.design import POSSIBLY_DRIFT
from regdiag.sizes import Cell, SizeRow, human_bytes


def num(x: float | None, digits: int = 4) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    if abs(x) >= 10**digits:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def decimals(*values: float | None) -> int:
    """Decimals that show ~4 significant digits of the largest value, the same for all of them."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    if not finite:
        return 2
    return int(min(6, max(0, 3 - math.floor(math.log10(max(finite))))))


def fixed(x: float | None, d: int, sign: bool = False) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    s = f"{x:+.{d}f}" if sign else f"{x:.{d}f}"
    if s.lstrip("+-").strip("0.") == "":  # -0.00 reads as a change; it is none
        s = ("+" if sign else "") + s.lstrip("+-")
    return s


def pct(ratio: float | None, digits: int = 1) -> str:
    """1.052 -> '+5.2 %'."""
    if ratio is None or not math.isfinite(ratio):
        return "-"
    return f"{100 * (ratio - 1):+.{digits}f} %"


def ci(lo: float | None, hi: float | None, digits: int = 1) -> str:
    if lo is None or hi is None:
        return "no CI"
    return f"[{100 * (lo - 1):+.{digits}f}, {100 * (hi - 1):+.{digits}f}]"


def pval(p: float | None) -> str:
    if p is None or not math.isfinite(p):
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


# How the old and new of every report are made (stats.run_value), said once, in the method line.
RUN_CENTRES = "old and new: geometric means of the launch medians (of launch means for per-cycle values)"


def method_txt(c: Comparison) -> str:
    """The method line under every comparison: the test, the levels, the margin, what old and new are."""
    method = "Welch's t on log launch medians" if c.method == stats.WELCH else "hierarchical bootstrap"
    if getattr(c, "design", {}).get("kind") == "interleaved" and c.method == stats.WELCH:
        method = "interleaved run: paired t on the A/B pairs of log launch medians"
    return (
        f"{method}; primary at {100 * c.level:g} %, other metrics Holm-adjusted; margin {margin_txt(c.margin)}; "
        f"{RUN_CENTRES}"
    )


def margin_txt(margin: float) -> str:
    return f"\u00b1{100 * margin:g} %"


def more_txt(m: MetricResult) -> str:
    if m.verdict != stats.INCONCLUSIVE:
        return ""
    if m.estimate is None or m.estimate.lo is None:
        return m.note or "not enough launches for a CI"
    if m.more_launches is None:
        return f"more than {stats.PLAN_CAP} launches per side: the change sits at the margin"
    return f"about {m.more_launches} more launch{'es' if m.more_launches != 1 else ''} per side would likely settle it"


def headline(c: Comparison) -> str:
    """The verdict sentence: what, how much, how sure, against which margin."""
    note = getattr(c, "verdict_note", None)
    why = f"; {note}" if note and note != POSSIBLY_DRIFT else ""  # not the metrics' own verdict: why
    if c.sweep and not c.judged_by:
        return f"{c.verdict} per size: {c.sweep} (margin {margin_txt(c.margin)}){why}"
    m = next((x for x in c.metrics if x.name == (c.judged_by or c.primary)), None)
    if m is None:
        worst = [x for x in c.metrics if x.verdict == c.verdict]
        n = len(worst)
        return f"{c.verdict}: {n} of {len(c.metrics)} metrics {c.verdict.lower()} (margin {margin_txt(c.margin)}){why}"
    e = m.estimate
    if e is None:
        return f"{c.verdict}: {m.name} not compared ({m.note})"
    unit = f" {m.unit}" if m.unit else ""
    d = decimals(e.old_center, e.new_center)
    core = (
        f"{m.name} {pct(e.ratio)} {ci(e.lo, e.hi)}, {fixed(e.old_center, d)} \u2192 {fixed(e.new_center, d)}{unit}, "
        f"{e.n_old} vs {e.n_new} launches"
    )
    own = c.verdict if note in (None, POSSIBLY_DRIFT) else (m.verdict or c.verdict)  # the metric's own
    tail = {
        stats.REGRESSED: f"beyond the {margin_txt(c.margin)} margin",
        stats.IMPROVED: f"beyond the {margin_txt(c.margin)} margin",
        stats.UNCHANGED: f"CI inside the {margin_txt(c.margin)} margin",
        stats.INCONCLUSIVE: more_txt(m),
    }[own]
    if own == stats.UNCHANGED and e.p is not None and e.p < 1 - c.level:
        tail += " (a real but smaller change)"
    if note == POSSIBLY_DRIFT:
        tail += f"; {note} (see DRIFT below)"
    tail += why  # a verdict that is not the metric's own (wrong results, more failed requests)
    return f"{c.verdict}: {core}; {tail}"


def attribution_decimals(a: Attribution) -> int:
    return decimals(a.total.old, a.total.new, a.total.delta) if a.total.delta else decimals(a.total.old)


def term_txt(t: Term, d: int) -> str:
    rng = "" if t.lo is None else f" [{fixed(t.lo, d, True)}, {fixed(t.hi, d, True)}]"
    return f"{t.name} {fixed(t.delta, d, True)}{rng}"


def attribution_line(a: Attribution) -> str:
    d = attribution_decimals(a)
    parts = " + ".join(term_txt(t, d) for t in a.terms)
    return f"\u0394{a.primary} {term_txt(a.total, d).split(' ', 1)[1]} {a.unit} = {parts}"


def dominant_line(a: Attribution) -> str | None:
    if a.dominant is None:
        return None
    t = next(x for x in a.terms if x.name == a.dominant)
    d = attribution_decimals(a)
    share = 100 * (t.share or 0)
    lead = "Nearly all" if share >= 80 else "Most"
    return (
        f"{lead} of the change is in {t.name}: {fixed(t.delta, d, True)} {a.unit} of "
        f"{fixed(a.total.delta, d, True)} {a.unit} ({share:.0f} %)."
    )


def throughput_line(t: Throughput) -> str:
    # tok/s counts every cycle, so its cycle is the mean; only its ratio is shown, the run's cycle
    # number being the one of the table (RUN_CENTRES), never a second one beside it.
    d = max(decimals(t.old.tok_s, t.new.tok_s) - 1, 1)
    return (
        f"tok/s {fixed(t.old.tok_s, max(d, 0))} \u2192 {fixed(t.new.tok_s, max(d, 0))} ({pct(t.ratio)} {ci(t.lo, t.hi)}) "
        f"= accept_len \u00d7{t.accept_ratio:.3f} / mean cycle \u00d7{t.cycle_ratio:.3f} "
        f"(accept_len {t.old.accept_len:.3g} \u2192 {t.new.accept_len:.3g})"
    )


def crosscheck_line(t: Throughput) -> str | None:
    parts = []
    for label, side in (("old", t.old), ("new", t.new)):
        if side.mismatch is not None:
            parts.append(f"{label} {100 * side.mismatch:.1f} %")
    if not parts:
        return None
    return "measured tok/s matches accept_len / cycle within " + ", ".join(parts)


def noise_line(c: Comparison) -> str | None:
    m = next((x for x in c.metrics if x.name == c.primary), c.metrics[0] if c.metrics else None)
    if m is None:
        return None

    def f(x: float) -> str:
        return "-" if not math.isfinite(x) else f"{100 * x:.1f} %"

    o, n = m.noise_old, m.noise_new
    line = (
        f"noise ({m.name}): cycle-to-cycle {f(o.within)} old / {f(n.within)} new, "
        f"launch-to-launch {f(o.between)} / {f(n.between)}"
    )
    if m.estimate is not None and m.estimate.lo is not None and math.isfinite(m.estimate.sd_log):
        mde = stats.minimum_detectable(m.estimate.sd_log, m.estimate.n_old, m.estimate.n_new, c.level)
        line += f"; these launches detect a {100 * mde:.1f} % change with 95 % power"
    return line


def clocks_line(c: Comparison) -> str | None:
    parts = []
    for label, s in (("old", c.old.clocks), ("new", c.new.clocks)):
        if not s.samples:
            continue
        rng = f" ({num(s.sm_mhz_lo)}–{num(s.sm_mhz_hi)})" if s.sm_mhz_lo != s.sm_mhz_hi else ""
        bits = [f"SM {num(s.sm_mhz)} MHz{rng}"]
        if s.mem_mhz:
            bits.append(f"mem {num(s.mem_mhz)} MHz")
        if s.power_w:
            bits.append(f"{num(s.power_w, 3)} W")
        if s.throttle:
            bits.append("throttled: " + ", ".join(f"{r} {100 * v:.0f} %" for r, v in s.throttle.items()))
        parts.append(f"{label} " + ", ".join(bits))
    if not parts:
        return None
    return "clocks while measuring: " + "; ".join(parts)


def env_item(item: dict[str, object]) -> str:
    why = f"  ({item.get('why')})" if item.get("why") else ""
    return f"{item.get('group')}.{item.get('field')}: {item.get('old')} \u2192 {item.get('new')}{why}"


def config_txt(config: dict[str, object], limit: int = 6) -> str:
    items = [f"{k}={v}" for k, v in list(config.items())[:limit]]
    return " ".join(items) + (" ..." if len(config) > limit else "")


def covered(c: Comparison) -> set[str]:
    """The metrics the per-size rows of a collectives comparison already show."""
    return {n for r in c.sizes for n in r.metrics}


def listed(c: Comparison) -> list[MetricResult]:
    """The metrics of the flat table: all of them, less those a per-size row shows."""
    skip = covered(c)
    return [m for m in c.metrics if m.name not in skip]


def size_txt(c: Comparison, r: SizeRow) -> str:
    """The first cell of a per-size row: 4 MiB, with the op and the mode where the sweep has several."""
    out = human_bytes(r.bytes)
    if len({x.op for x in c.sizes}) > 1:
        out = f"{r.op} {out}"
    if len({x.mode for x in c.sizes}) > 1:
        out += f" {r.mode}"
    return out


def cell_txt(cell: Cell | None) -> tuple[str, str, str, str]:
    """old, new, change, verdict of one side of a per-size row ("-" where there is nothing)."""
    if cell is None or cell.old is None or cell.new is None:
        return "-", "-", "-", "-" if cell is None else str(cell.verdict)
    d = decimals(cell.old, cell.new)
    ratio = None if cell.change is None else 1.0 + cell.change
    return fixed(cell.old, d), fixed(cell.new, d), pct(ratio), str(cell.verdict)


def context_txt(m: MetricResult) -> tuple[str, str, str]:
    """old, new and change of a context metric (a setting: no CI, no verdict)."""
    e = m.estimate
    if e is None:
        return "-", "-", m.note
    unit = f" {m.unit}" if m.unit else ""
    d = decimals(e.old_center, e.new_center)
    return fixed(e.old_center, d) + unit, fixed(e.new_center, d) + unit, pct(e.ratio)
