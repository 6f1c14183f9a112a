"""The bisect report: culprits with milliseconds per phase, the share of the regression each explains,
the unexplained rest, and what the search cost. A plain dict (--json), Markdown, and the terminal.

Milliseconds are differences of the mean launch medians between the two points that bracket a
change (the change is measured where it was found, with everything else held as it was there),
with a Welch 95 % CI (regdiag.stats, as compare's attribution); the share is that difference over
the whole regression (all-bad minus all-good) of the metric. Measured at different points, the
shares need not add up to exactly 100 %: the unexplained rest says by how much they do not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from regdiag import stats
from regdiag.bisect.lab import Lab, Point
from regdiag.bisect.search import Culprit, Outcome

REPORT_KIND = "regdiag.bisect-report/1"


def _means(lab: Lab, p: Point) -> dict[str, float]:
    las = lab.launches(p)
    names = [k for k in (las[0].medians if las else {}) if all(k in la.medians for la in las)]
    return {k: round(sum(la.medians[k] for la in las) / len(las), 4) for k in names}


def _effect(lab: Lab, lo: Point, hi: Point) -> tuple[dict[str, float], dict[str, list[float] | None]]:
    """ms added going lo -> hi, per metric: difference of mean launch medians, with a Welch 95 % CI."""
    a, b = lab.launches(lo), lab.launches(hi)
    ms: dict[str, float] = {}
    ci: dict[str, list[float] | None] = {}
    for k in _means(lab, hi):
        x = [la.medians[k] for la in a if k in la.medians]
        y = [la.medians[k] for la in b if k in la.medians]
        if not x or not y:
            continue
        if len(x) >= 2 and len(y) >= 2:
            d, lo_ci, hi_ci = stats.diff_welch(np.asarray(x), np.asarray(y))
            ci[k] = [round(lo_ci, 4), round(hi_ci, 4)]
        else:
            d, ci[k] = sum(y) / len(y) - sum(x) / len(x), None
        ms[k] = round(d, 4)
    return ms, ci


def _change(c: Culprit) -> str:
    return " + ".join(f.label() for f in c.factors)


def _subjects(c: dict[str, Any]) -> str:
    subjects = [f["subject"] for f in c["factors"] if f.get("subject")]
    return "; ".join(subjects)


def build_report(outcome: Outcome, lab: Lab, metric: str, notes: list[str], wall_s: float) -> dict[str, Any]:
    good, bad = lab.good(), lab.bad()
    good_ms, bad_ms = _means(lab, good), _means(lab, bad)
    total, total_ci = _effect(lab, good, bad)
    culprits = []
    explained: dict[str, float] = {k: 0.0 for k in total}
    for c in outcome.culprits:
        ms, ms_ci = _effect(lab, c.lo, c.hi)
        for k in explained:
            explained[k] += ms.get(k, 0.0)
        share = ms.get(metric, 0.0) / total[metric] if total.get(metric) else None
        culprits.append(
            {
                "change": _change(c),
                "factors": [f.to_dict() for f in c.factors],
                "interaction": c.interaction,
                "alone": c.alone,
                "within": c.within.label() if c.within else None,
                "ms": ms,
                "ms_ci": ms_ci,
                "share": None if share is None else round(share, 4),
                "from": lab.label(c.lo),
                "to": lab.label(c.hi),
                "skipped": c.skipped,
                "exact": not c.skipped,
            }
        )
    rest = {k: round(total[k] - explained[k], 4) for k in total} if culprits else dict(total)
    ends = outcome.endpoints
    keys_used = lab.points_used
    journal = lab.journal
    launches_total = sum(len(journal.launches.get(k, [])) for k in keys_used)
    return {
        "kind": REPORT_KIND,
        "verdict": outcome.verdict,
        "statement": outcome.statement or _statement(outcome.verdict, culprits, metric),
        "metric": metric,
        "factors": [f.to_dict() for f in lab.factors],
        "notes": notes,
        "endpoints": {
            **(ends.to_dict() if ends else {}),
            "good": good_ms,
            "bad": bad_ms,
        },
        "regression_ms": total,
        "regression_ms_ci": total_ci,
        "culprits": culprits,
        "unexplained_ms": rest,
        "unexplained_share": round(rest[metric] / total[metric], 4) if total.get(metric) else None,
        "skipped": outcome.skipped,
        "unresolved": outcome.unresolved,
        "cost": {
            "environments_built": lab.builder.built_now,
            "points_measured": len(keys_used),
            "launches_run": lab.launches_run,
            "launches_reused": launches_total - lab.launches_run,
            "launches_total": launches_total,
            "measured_s": round(journal.measured_s, 2),
            "wall_s": round(wall_s, 2),
        },
        "resumed": journal.resumed,
        "replay_mismatches": journal.mismatches,
    }


def _statement(verdict: str, culprits: list[dict[str, Any]], metric: str) -> str:
    if not culprits:
        return "no culprit could be named"
    parts = []
    for c in culprits:
        ms = c["ms"].get(metric)
        share = c["share"]
        tail = f" ({ms:+.2f} ms {metric}" + (
            f", {share:.0%} of the regression)" if share is not None else ")"
        )
        parts.append(c["change"] + tail)
    return ("culprit: " if len(parts) == 1 else f"{len(parts)} culprits: ") + "; ".join(parts)


def _phases(report: dict[str, Any]) -> list[str]:
    metric = report["metric"]
    names = [metric] + [k for k in report["regression_ms"] if k != metric]
    return names


def _ms(x: float | None) -> str:
    return "" if x is None else f"{x:+.2f}"


def _cell(c: dict[str, Any], name: str, metric: str) -> str:
    """The metric's column carries its CI; the phases' columns the plain difference."""
    ms = c["ms"].get(name)
    ci = (c.get("ms_ci") or {}).get(name)
    if name == metric and ms is not None and ci:
        return f"{ms:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]"
    return _ms(ms)


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.0%}"


def headline(report: dict[str, Any]) -> str:
    e = report["endpoints"]
    metric = report["metric"]
    if "ratio" not in e:
        return report["statement"]
    g, b = e["good"].get(metric), e["bad"].get(metric)
    ends = f"{metric} {g:.2f} -> {b:.2f} ms" if g is not None and b is not None else metric
    ci = f"x{e['ratio']:.3f} (95 % CI {e['lo']:.3f}..{e['hi']:.3f})"
    return f"{report['verdict']}: {ends}, {ci}"


def cost_line(report: dict[str, Any]) -> str:
    c = report["cost"]
    return (
        f"environments built {c['environments_built']} · points {c['points_measured']} · "
        f"launches {c['launches_run']} run, {c['launches_reused']} reused · "
        f"{c['wall_s']:.1f} s (measuring {c['measured_s']:.1f} s)"
    )


def to_markdown(report: dict[str, Any]) -> str:
    names = _phases(report)
    lines = [f"### regdiag bisect: {headline(report)}", "", report["statement"], ""]
    if report["culprits"]:
        lines.append("| change | " + " | ".join(f"{n} (ms)" for n in names) + " | share |")
        lines.append("| --- | " + " | ".join("---:" for _ in names) + " | ---: |")
        for c in report["culprits"]:
            tag = " (only together)" if c["interaction"] else ""
            tag += "" if c["exact"] else " (range: points in between SKIP)"
            cells = " | ".join(_cell(c, n, report["metric"]) for n in names)
            subject = f" ({_subjects(c)})" if _subjects(c) else ""
            lines.append(f"| {c['change']}{subject}{tag} | {cells} | {_pct(c['share'])} |")
        rest = report["unexplained_ms"]
        cells = " | ".join(_ms(rest.get(n)) for n in names)
        lines.append(f"| unexplained rest | {cells} | {_pct(report['unexplained_share'])} |")
        lines.append("")
    for s in report["skipped"]:
        lines.append(f"- SKIP {s['point']}: {s['reason']}")
    for u in report["unresolved"]:
        lines.append(f"- unresolved between {u['between'][0]} and {u['between'][1]}: {u['why']}")
    for n in report["notes"]:
        lines.append(f"- note: {n}")
    lines += ["", cost_line(report), ""]
    return "\n".join(lines)


def render(report: dict[str, Any], console: Any) -> None:
    """Terminal output with rich: the verdict first, then one row per culprit."""
    from rich.markup import escape as e
    from rich.table import Table

    verdict = report["verdict"]
    style = {"CULPRIT": "bold red", "NOT-REPRODUCED": "bold yellow"}.get(verdict, "bold yellow")
    console.print(f"[{style}]{e(headline(report))}[/]")
    console.print(e(report["statement"]))
    names = _phases(report)
    if report["culprits"]:
        t = Table(box=None, pad_edge=False)
        t.add_column("change")
        for n in names:
            t.add_column(f"{n} ms", justify="right")
        t.add_column("share", justify="right")
        for c in report["culprits"]:
            label = e(c["change"])
            if _subjects(c):
                label += f"\n[dim]{e(_subjects(c))}[/]"
            if c["interaction"]:
                label += " [dim](only together)[/]"
            if not c["exact"]:
                label += " [dim](range: points in between SKIP)[/]"
            t.add_row(label, *[_cell(c, n, report["metric"]) for n in names], _pct(c["share"]))
        rest = report["unexplained_ms"]
        t.add_row(
            "[dim]unexplained rest[/]", *[_ms(rest.get(n)) for n in names], _pct(report["unexplained_share"])
        )
        console.print(t)
    for s in report["skipped"]:
        console.print(f"[yellow]SKIP[/] {e(s['point'])}: {e(s['reason'])}")
    for u in report["unresolved"]:
        console.print(
            f"[yellow]unresolved[/] between {e(u['between'][0])} and {e(u['between'][1])}: {e(u['why'])}"
        )
    for n in report["notes"]:
        console.print(f"[dim]note: {e(n)}[/]")
    if report.get("replay_mismatches"):
        for m in report["replay_mismatches"]:
            console.print(f"[red]resume: {e(m)}[/]")
    console.print(f"[dim]{cost_line(report)}[/]")
    console.print(f"[dim]journal: {e(str(report.get('journal')))}[/]")
