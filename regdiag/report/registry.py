"""Every renderer behind one interface, found by (what, format).

A renderer is a function ``render(data, out: Out) -> None``: it lays `data` (a Comparison, an
Explanation, a snapshot list, a diff, a bisect report, a probe or server summary) out for one medium
and writes it through `out`. Commands never choose a renderer with ``if json / elif markdown``:
they call ``render(what, fmt, data, out)``, and ``formats(what)`` is what their ``--format`` offers.

Entries name "module:function" so that a command imports only the renderer it uses (rich, numpy
and the HTML plots stay unimported for ``--format json``). A new format is one new file plus one
line here: see report/csvout.py and docs/architecture.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from regdiag.errors import BadInput


@dataclass
class Out:
    """Where a renderer writes: `console` for rich output, `write` for plain text (JSON, CSV, ...).

    `labels` names the two sides of a comparison or diff ("old", "new"); `context` carries what a
    format needs beyond the data (the HTML report's raw runs)."""

    console: Any
    labels: tuple[str, str] = ("", "")
    context: dict[str, Any] = field(default_factory=dict)
    write: Callable[[str], Any] | None = None

    def text(self, s: str) -> None:
        if self.write is not None:
            self.write(s)
        else:
            self.console.file.write(s)
            self.console.file.flush()


Renderer = Callable[[Any, Out], None]

# (what, format) -> "module:function". The first format of each `what` is its default.
RENDERERS: dict[tuple[str, str], str] = {
    ("compare", "terminal"): "regdiag.report.terminal:render_out",
    ("compare", "json"): "regdiag.report.jsonout:render",
    ("compare", "markdown"): "regdiag.report.markdown:render_out",
    ("compare", "html"): "regdiag.report.html:render_out",
    ("compare", "csv"): "regdiag.report.csvout:compare",
    ("explain", "terminal"): "regdiag.report.explain_view:terminal_out",
    ("explain", "json"): "regdiag.report.jsonout:render",
    ("explain", "markdown"): "regdiag.report.explain_view:markdown_out",
    ("snapshot", "terminal"): "regdiag.report.snapshot:render_snapshots",
    ("snapshot", "json"): "regdiag.report.jsonout:one_or_many",
    ("check", "terminal"): "regdiag.report.snapshot:render_checks",
    ("check", "json"): "regdiag.report.jsonout:checks",
    ("diff", "terminal"): "regdiag.report.snapshot:render_diff_out",
    ("diff", "json"): "regdiag.report.jsonout:diff",
    ("bisect", "terminal"): "regdiag.report.bisect:terminal",
    ("bisect", "json"): "regdiag.report.jsonout:bisect",
    ("bisect", "markdown"): "regdiag.report.bisect:markdown",
    ("probe", "terminal"): "regdiag.report.probe:terminal",
    ("probe", "json"): "regdiag.report.jsonout:probe",
    ("probe", "csv"): "regdiag.report.csvout:probe",
    ("server", "terminal"): "regdiag.report.server:terminal",
    ("server", "json"): "regdiag.report.jsonout:server",
    ("ingest", "terminal"): "regdiag.report.server:ingest_terminal",
    ("ingest", "json"): "regdiag.report.jsonout:ingest",
    ("runs", "terminal"): "regdiag.report.lists:runs_terminal",
    ("runs", "json"): "regdiag.report.jsonout:render",
    ("runs", "csv"): "regdiag.report.lists:runs_csv",
    ("baselines", "terminal"): "regdiag.report.lists:baselines_terminal",
    ("baselines", "json"): "regdiag.report.jsonout:render",
    ("baselines", "csv"): "regdiag.report.lists:baselines_csv",
    ("trust", "terminal"): "regdiag.report.chores:trust_terminal",
    ("trust", "json"): "regdiag.report.chores:trust_json",
    ("host-check", "terminal"): "regdiag.report.chores:checks_terminal",
    ("host-check", "json"): "regdiag.report.chores:checks_json",
    ("host-check", "csv"): "regdiag.report.chores:checks_csv",
    ("clean", "terminal"): "regdiag.report.chores:clean_terminal",
    ("clean", "json"): "regdiag.report.chores:clean_json",
    ("clean", "csv"): "regdiag.report.chores:clean_csv",
    ("demo", "terminal"): "regdiag.report.chores:demo_terminal",
    ("demo", "json"): "regdiag.report.chores:demo_json",
    ("demo", "markdown"): "regdiag.report.chores:demo_markdown",
}


def formats(what: str) -> list[str]:
    return [fmt for (w, fmt) in RENDERERS if w == what]


def renderer(what: str, fmt: str) -> Renderer:
    target = RENDERERS.get((what, fmt))
    if target is None:
        raise BadInput(f"--format {fmt!r}: {what} can be shown as {', '.join(formats(what))}")
    module, _, name = target.partition(":")
    fn: Renderer = getattr(importlib.import_module(module), name)
    return fn


def render(what: str, fmt: str, data: Any, out: Out) -> None:
    renderer(what, fmt)(data, out)
