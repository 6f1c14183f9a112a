"""A bisect report (regdiag.bisect.report's dict) on the terminal (rich) and in Markdown."""

from __future__ import annotations

from typing import Any

from regdiag.report.registry import Out


def _subjects(c: dict[str, Any]) -> str:
    subjects = [f["subject"] for f in c["factors"] if f.get("subject")]
    return "; ".join(subjects)


def _phases(report: dict[str, Any]) -> list[str]:
    metric = report["metric"]
    names = [metric] + [k for k in report["regression_ms"] if k != metric]
    return names


def _ms(x: float | None) -> str:
    return "" if x is None else f"{x:+.2f}".replace("-0.00", "+0.00")


def _cell(c: dict[str, Any], name: str, metric: str) -> str:
    """The metric's column carries its CI; the phases' columns the plain difference."""
    ms = c["ms"].get(name)
    ci = (c.get("ms_ci") or {}).get(name)
    if name == metric and ms is not None and ci:
        return f"{ms:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]"
    return _ms(ms)


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.0%}".replace("-0%", "0%")


def _together(c: dict[str, Any]) -> str:
    """An interaction's tag: its factors act only together, or one does a part alone."""
    if not c["interaction"]:
        return ""
    return " (only together)" if c.get("alone") in (None, "GOOD") else " (interaction)"


def interaction_line(c: dict[str, Any]) -> str:
    """ "interaction: A with B: A alone +1.31 ms [+1.10, +1.52] (33 %), ..., together ..." (95 % CIs)."""

    def one(name: str, part: dict[str, Any]) -> str:
        ci = part.get("ms_ci")
        ms = "" if part["ms"] is None else f" {_ms(part['ms'])} ms"
        ci_s = f" [{_ms(ci[0])}, {_ms(ci[1])}]" if ci else ""
        share = f" ({_pct(part['share'])})" if part["share"] is not None else ""
        return f"{name}{ms}{ci_s}{share}"

    parts = [one(f"{m['name']} alone", m) for m in c["members"]] + [one("together", c["together"])]
    return f"{c['interaction_of']}: " + ", ".join(parts)


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
            tag = _together(c)
            tag += "" if c["exact"] else " (range: points in between SKIP)"
            cells = " | ".join(_cell(c, n, report["metric"]) for n in names)
            subject = f" ({_subjects(c)})" if _subjects(c) else ""
            lines.append(f"| {c['change']}{subject}{tag} | {cells} | {_pct(c['share'])} |")
        rest = report["unexplained_ms"]
        cells = " | ".join(_ms(rest.get(n)) for n in names)
        lines.append(f"| unexplained rest | {cells} | {_pct(report['unexplained_share'])} |")
        lines.append("")
        lines += [f"- {interaction_line(c)}" for c in report["culprits"] if c.get("members")]
    lines += [f"- {x}" for x in engine_lines(report)]
    lines += [f"    {x}" for x in profile_lines(report)]
    for s in report["skipped"]:
        lines.append(f"- SKIP {s['point']}: {s['reason']}")
    for c in report.get("cleared", []):
        lines.append(f"- {c['why']}")
    for u in report["unresolved"]:
        lines.append(f"- unresolved between {u['between'][0]} and {u['between'][1]}: {u['why']}")
    for n in report["notes"]:
        lines.append(f"- note: {n}")
    lines += ["", cost_line(report), ""]
    return "\n".join(lines)


def render(report: dict[str, Any], console: Any) -> None:
    """Terminal output with rich: the verdict first, then one row per culprit."""
    from rich.markup import escape as e

    verdict = report["verdict"]
    style = {"CULPRIT": "bold red", "NOT-REPRODUCED": "bold yellow"}.get(verdict, "bold yellow")
    console.print(f"[{style}]{e(headline(report))}[/]")
    console.print(e(report["statement"]))
    names = _phases(report)
    if report["culprits"]:
        console.print(_culprits(report, names, console.width), crop=False)
        for c in report["culprits"]:
            if c.get("members"):
                console.print(e(interaction_line(c)))
    for line in engine_lines(report):
        console.print(e(line), highlight=False, crop=False)
    for line in profile_lines(report):
        console.print(e(line), highlight=False, crop=False)
    for s in report["skipped"]:
        console.print(f"[yellow]SKIP[/] {e(s['point'])}: {e(s['reason'])}")
    for c in report.get("cleared", []):
        console.print(f"[dim]{e(c['why'])}[/]")
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


def _culprits(report: dict[str, Any], names: list[str], width: int) -> Any:
    """One row per culprit (its phases' ms and share), then the unexplained rest: a table where every
    cell fits whole, else one block per culprit (report.layout)."""
    from rich.text import Text

    from regdiag.report import layout as L

    cols = [L.Col("change"), *(L.Col(f"{n} ms", right=True, label=n, unit="ms") for n in names)]
    cols.append(L.Col("share", right=True))
    rows: list[list[L.Cell]] = []
    for c in report["culprits"]:
        label = Text(c["change"])
        if _subjects(c):
            label.append(f"\n{_subjects(c)}", style="dim")
        if c["interaction"]:
            label.append(_together(c), style="dim")
        if not c["exact"]:
            label.append(" (range: points in between SKIP)", style="dim")
        rows.append([label, *[_cell(c, n, report["metric"]) for n in names], _pct(c["share"])])
    rest = report["unexplained_ms"]
    rows.append(
        [
            Text("unexplained rest", style="dim"),
            *[_ms(rest.get(n)) for n in names],
            _pct(report["unexplained_share"]),
        ]
    )
    return L.fit(cols, rows, width)


# -- behind the registry (regdiag.report.registry) -----------------------------------------------


def terminal(report: dict[str, Any], out: Out) -> None:
    render(report, out.console)


def markdown(report: dict[str, Any], out: Out) -> None:
    out.text(to_markdown(report) + "\n")


def engine_lines(report: dict[str, Any]) -> list[str]:
    """--probe engine: what the engine chose differently at start together with each culprit."""
    out = []
    for c in report.get("culprits") or []:
        for d in c.get("engine_config") or []:
            *outer, last = str(d["field"]).split(
                "."
            )  # attention_backend.verify: the verify attention backend
            field = " ".join([last, *reversed(outer)] if outer else [last]).replace("_", " ")
            out.append(f"with {c['change']} the engine's {field} changed from {d['old']} to {d['new']}")
    return out


def profile_lines(report: dict[str, Any]) -> list[str]:
    """`-- --profile`: each culprit's change per phase as GPU work and GPU idle (regdiag/profiles.py)."""
    from regdiag.profiles import split_lines

    out = []
    for c in report.get("culprits") or []:
        if lines := split_lines(c.get("profile")):
            out += [f"{c['change']}: {lines[0]}", *lines[1:]]
    return out
