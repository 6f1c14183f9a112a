"""The small commands' results: trust, check-host, clean and the demo, for each --format.

Each takes the data its command computed (the same object --json prints, less its schema id) and
writes it through `out`; the registry (regdiag.report.registry) maps (what, format) here."""

from __future__ import annotations

import csv
import io
from typing import Any

from regdiag.records import listed, tagged
from regdiag.report.jsonout import render as json_render
from regdiag.report.registry import Out

CHECK_COLUMNS = ("host", "address", "python_version", "executable", "round_trip_s", "error")
CLEAN_COLUMNS = ("host", "path", "existed", "kib", "pruned", "orphan_traces", "traces_kept", "error")


def _csv(columns: tuple[str, ...], rows: list[dict[str, Any]], out: Out) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        cells = [r.get(c) for c in columns]
        w.writerow(["" if v is None else " ".join(map(str, v)) if isinstance(v, list) else v for v in cells])
    out.text(buf.getvalue())


# trust: one host's key, added or already there.
def trust_terminal(r: dict[str, Any], out: Out) -> None:
    if r["status"] == "added":
        line = f"added {r['key_type']} {r['fingerprint']} for {r['known_hosts_name']} to {r['file']}"
    else:
        line = f"{r['known_hosts_name']} is already trusted ({r['key_type']} {r['fingerprint']})"
    out.console.print(line, soft_wrap=True, markup=False)


def trust_json(r: dict[str, Any], out: Out) -> None:
    json_render(tagged("trust", r), out)


# check-host: one entry per host, the answer or why not ("name" and "error").
def checks_terminal(each: list[dict[str, Any]], out: Out) -> None:
    """The hosts that answered; the failures are one error line each on stderr, said by the command."""
    for v in each:
        if "error" not in v:
            out.console.print(
                f"{v['name']}  {v.get('address', 'local')}  python {v['python_version']} "
                f"({v['executable']})  round trip {v['round_trip_s']:.2f} s",
                soft_wrap=True,
                markup=False,
            )


def checks_json(each: list[dict[str, Any]], out: Out) -> None:
    json_render(listed("host-check-list", "hosts", each), out)


def checks_csv(each: list[dict[str, Any]], out: Out) -> None:
    _csv(CHECK_COLUMNS, [{"host": v.get("name"), **v} for v in each], out)


# clean: one entry per host, what was removed or why not.
def clean_terminal(results: list[dict[str, Any]], out: Out) -> None:
    for r in results:
        if "error" in r:
            continue  # said on stderr by the command, one line each
        size = f" ({r['kib'] / 1024:.1f} MiB)" if r.get("kib") else ""
        what = f"removed {r['path']}{size}" if r["existed"] else f"nothing to remove ({r['path']} absent)"
        out.console.print(f"{r['host']}: {what}", highlight=False, soft_wrap=True)
        for trace in r.get("orphan_traces") or []:
            line = f"{r['host']}: removed {trace} (a profile trace whose run record is gone)"
            out.console.print(line, highlight=False, soft_wrap=True, markup=False)
        if kept := r.get("traces_kept"):
            line = (
                f"{r['host']}: kept {kept['path']}: {kept['files']} profile trace(s), {kept['kib'] / 1024:.1f} MiB "
                "(`probe --profile` results, named by their run records; remove them by hand)"
            )
            out.console.print(line, highlight=False, soft_wrap=True, markup=False)


def clean_json(results: list[dict[str, Any]], out: Out) -> None:
    json_render(listed("clean", "hosts", results), out)


def clean_csv(results: list[dict[str, Any]], out: Out) -> None:
    def cell(kept: dict[str, Any] | None) -> str | None:
        return f"{kept['files']} files, {kept['kib']} KiB in {kept['path']}" if kept else None

    _csv(CLEAN_COLUMNS, [{**r, "traces_kept": cell(r.get("traces_kept"))} for r in results], out)


# demo: what run_demo returned (regdiag.demo).
def demo_terminal(result: dict[str, Any], out: Out) -> None:
    """What the demo found, how long it took, and each step as a user would type it (each step's own
    output was shown as it ran)."""
    c = out.console
    c.print(f"\n[bold]found:[/] {result['bisect']['statement']}")
    c.print(f"[dim]{result['seconds']:.0f} s in all; everything is in {result['workdir']}[/]")
    c.print("[dim]each step by hand:[/]")
    for cmd in result["commands"]:
        c.print(f"  {cmd}", soft_wrap=True, highlight=False)
    if busy := result["bisect"].get("busy"):
        # last, where it is read: an answer from a busy machine is worth less (or was none at all)
        c.print(f"[yellow]the machine was busy:[/] {busy}", soft_wrap=True, highlight=False)


def demo_dict(result: dict[str, Any]) -> dict[str, Any]:
    return tagged(
        "demo",
        {
            "workdir": result["workdir"],
            "runs": result["runs"],
            "compare": result["comparison"].to_dict(),
            "bisect": result["bisect"],
            "explain": result["explanation"].to_dict(),
            "seconds": round(result["seconds"], 1),
            "commands": result["commands"],
        },
    )


def demo_json(result: dict[str, Any], out: Out) -> None:
    json_render(demo_dict(result), out)


def demo_markdown(result: dict[str, Any], out: Out) -> None:
    """One page for a CI job summary: the finding, then compare, bisect and explain as their own
    --markdown shows them, then the commands."""
    from regdiag.report.bisect import to_markdown
    from regdiag.report.explain_view import markdown as explain_markdown
    from regdiag.report.markdown import render as compare_markdown

    parts = [
        "# regdiag demo",
        "",
        f"**found:** {result['bisect']['statement']}",
        "",
        f"{result['seconds']:.0f} s in all; everything is in `{result['workdir']}`.",
        "",
        "## compare good bad",
        "",
        compare_markdown(result["comparison"], "good", "bad").rstrip("\n"),
        "",
        "## bisect",
        "",
        to_markdown(result["bisect"]).rstrip("\n"),
        "",
        "## explain bad",
        "",
        explain_markdown(result["explanation"]).rstrip("\n"),
        "",
        "## each step by hand",
        "",
        "```sh",
        *result["commands"],
        "```",
    ]
    out.text("\n".join(parts) + "\n")
