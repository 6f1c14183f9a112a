"""Human output for snapshots, fitness checks and snapshot diffs (rich).

What looks wrong is highlighted from the same reasons `snapshot --check` gives (regdiag.snapshot.
check), so the screen and the exit code never disagree: red for what makes the machine unfit,
yellow for warnings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Span, Text

from regdiag.report import layout as L
from regdiag.report.registry import Out
from regdiag.snapshot import fields as F
from regdiag.snapshot.check import ERROR, check_snapshot, gpu_indices, is_fit

STYLE = {ERROR: "bold red", "warning": "yellow"}
DIM = "dim"


_fv = F.field_value


def _cell(group: dict[str, Any], name: str) -> Text:
    """One field as text; failures say their status, dimmed."""
    f = group.get("fields", {}).get(name)
    if not isinstance(f, dict):
        return Text("—", style=DIM)
    if f.get("status") != F.OK:
        return Text(f"[{f.get('status')}]", style=DIM if f.get("status") == F.UNSUPPORTED else "red")
    v = f.get("value")
    if name == "cgroup_cpu_quota" and isinstance(v, dict):
        cpus = v.get("cpus")
        return Text(("unlimited" if cpus is None else f"{cpus:g} CPUs") + f" ({v.get('source')})")
    if name == "open_files_limit" and isinstance(v, dict):
        return Text(f"{v.get('soft')} (hard {v.get('hard')})")
    return Text(_plain(v))


def _plain(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, list):
        return ", ".join(_plain(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k} {_plain(x)}" for k, x in v.items())
    return str(v)


def _marks(reasons: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for r in reasons:
        key = (r["group"], r["field"])
        if out.get(key) != ERROR:
            out[key] = r["severity"]
    return out


def _styled(text: Text, severity: str | None) -> Text:
    if severity:
        text.stylize(STYLE[severity])
    return text


def _group_header(console: Console, name: str, group: dict[str, Any], extra: str = "") -> bool:
    status = group.get("status", "?")
    head = Text(f"{name:<9}", style="bold")
    if status != F.OK:
        head.append(f"{status}: {group.get('note', '')}", style=DIM if status == F.UNSUPPORTED else "red")
        console.print(head)
        return False
    if extra:
        head.append(extra)
    console.print(head)
    return True


def _kv_table(
    group: dict[str, Any], gname: str, names: list[str], marks: dict[tuple[str, str], str]
) -> Table:
    t = Table(show_header=False, box=None, padding=(0, 1, 0, 2))
    t.add_column(style="cyan", no_wrap=True)
    t.add_column(overflow="fold")
    for n in names:
        if n in group.get("fields", {}):
            t.add_row(n, _styled(_cell(group, n), marks.get((gname, n))))
    return t


def render_snapshot(
    record: dict[str, Any], console: Console, reasons: list[dict[str, Any]] | None = None
) -> None:
    reasons = check_snapshot(record) if reasons is None else reasons
    marks = _marks(reasons)
    origin = record.get("origin", {})
    console.print(
        Text.assemble(
            ("snapshot ", "bold"),
            f"{origin.get('host', '?')} via {origin.get('via', '?')} · python {origin.get('python', '?')} · "
            f"{record.get('created', '?')[:19].replace('T', ' ')} UTC · took {record.get('duration_s', '?')} s",
        )
    )
    groups = record.get("groups", {})
    _render_engine(console, groups.get("engine", {}), marks)
    _render_packages(console, groups.get("packages", {}))
    _render_gpu(console, groups.get("gpu", {}), marks)
    _render_process(console, groups)
    _render_env(console, groups.get("env", {}))
    _render_startup(console, groups.get("startup", {}))
    _render_host(console, groups.get("host", {}), marks)


def _render_engine(console: Console, g: dict[str, Any], marks: dict[tuple[str, str], str]) -> None:
    extra = f"{_fv(g, 'path') or ''}  ({g.get('selected_by', '')})"
    if _group_header(console, "engine", g, extra):
        names = [
            "commit",
            "branch",
            "describe",
            "commit_date",
            "subject",
            "dirty",
            "changed_files",
            "diff_hash",
            "remote",
        ]
        console.print(L.kv_table(_kv_table(g, "engine", names, marks), console.width), crop=False)


def _render_packages(console: Console, g: dict[str, Any]) -> None:
    from regdiag.snapshot.packages import KEY_PACKAGES, SELF, metadata_value, split

    versions, metadata = split(g)
    count, digest = metadata_value(g, "count"), metadata_value(g, "hash")
    if not _group_header(console, "packages", g, f"{count} installed ({digest})"):
        return
    t = Table(show_header=False, box=None, padding=(0, 1, 0, 2))
    t.add_column(style="cyan", no_wrap=True)
    t.add_column(overflow="fold")
    missing = []
    sources = metadata_value(g, "sources") or {}
    shown = [(name, _fv({"fields": versions}, name)) for name in KEY_PACKAGES]
    for name, v in [*shown, (SELF, metadata_value(g, SELF))]:
        if v is None:
            missing.append(name)
            continue
        src = sources.get(name) or {}
        note = (
            " (editable)" if src.get("editable") else f" ({src['commit'][:10]})" if src.get("commit") else ""
        )
        t.add_row(name, v + note)
    nccl = metadata.get("nccl") or {}
    if nccl.get("status") == F.OK:
        val = nccl["value"]
        t.add_row("nccl", f"{val['version']}  from {val['source']}: {val['path']}")
    else:
        t.add_row("nccl", Text(nccl.get("error", "unknown"), style=DIM))
    if missing:
        t.add_row(Text("not installed", style=DIM), Text(", ".join(missing), style=DIM))
    console.print(L.kv_table(t, console.width), crop=False)


# GPU rows: (label, fields shown, formatter of their values)
def _fmt_pair(a: Any, b: Any) -> str:
    return f"{_plain(a)} / {_plain(b)}"


GPU_ROWS: list[tuple[str, tuple[str, ...], Callable[..., str]]] = [
    ("name", ("name",), _plain),
    ("pci bus", ("pci_bus_id",), _plain),
    ("vbios", ("vbios_version",), _plain),
    ("SM MHz now / max", ("clock_sm_mhz", "clock_sm_max_mhz"), _fmt_pair),
    ("SM app / default", ("clock_sm_app_mhz", "clock_sm_default_app_mhz"), _fmt_pair),
    ("mem MHz now / max", ("clock_mem_mhz", "clock_mem_max_mhz"), _fmt_pair),
    ("pstate", ("pstate",), _plain),
    ("clock events", ("clock_event_reasons",), _plain),
    ("power W / limit", ("power_draw_w", "power_limit_w"), _fmt_pair),
    ("default limit W", ("power_default_limit_w",), _plain),
    ("temp C / slowdown", ("temperature_c", "temperature_slowdown_c"), _fmt_pair),
    ("PCIe gen / max", ("pcie_gen", "pcie_gen_max"), _fmt_pair),
    ("PCIe width / max", ("pcie_width", "pcie_width_max"), _fmt_pair),
    ("PCIe replays", ("pcie_replay_count",), _plain),
    ("persistence", ("persistence_mode",), _plain),
    ("ECC / MIG", ("ecc_mode", "mig_mode"), _fmt_pair),
    ("compute mode", ("compute_mode",), _plain),
    ("util % sm / mem", ("utilization_gpu_pct", "utilization_mem_pct"), _fmt_pair),
    ("memory MiB used / total", ("memory_used_mib", "memory_total_mib"), _fmt_pair),
    ("processes", ("compute_processes",), _plain),
    ("NUMA node", ("numa_node",), _plain),
    (
        "NVLink",
        ("nvlink",),
        lambda v: f"{v['active']} active of {len(v['links'])}" if isinstance(v, dict) else _plain(v),
    ),
    (
        "throttled ms",
        ("violation_time_ns",),
        lambda v: (
            _plain({k: round(x / 1e6) for k, x in v.items() if x}) or "0"
            if isinstance(v, dict)
            else _plain(v)
        ),
    ),
]


def _gpu_cell(
    g: dict[str, Any],
    i: int,
    names: tuple[str, ...],
    fmt: Callable[..., str],
    marks: dict[tuple[str, str], str],
) -> Text:
    fs = [g.get("fields", {}).get(f"gpu{i}.{n}") for n in names]
    if all(not isinstance(f, dict) for f in fs):
        return Text("—", style=DIM)
    if all(isinstance(f, dict) and f.get("status") != F.OK for f in fs):
        status = fs[0].get("status") if isinstance(fs[0], dict) else "?"
        return Text(f"[{status}]", style=DIM if status == F.UNSUPPORTED else "red")
    values = [f.get("value") if isinstance(f, dict) and f.get("status") == F.OK else None for f in fs]
    sev = None
    for n in names:
        s = marks.get(("gpu", f"gpu{i}.{n}"))
        if s == ERROR or (s and sev is None):
            sev = s
    return _styled(Text(fmt(*values)), sev)


def _render_gpu(console: Console, g: dict[str, Any], marks: dict[tuple[str, str], str]) -> None:
    extra = (
        f"{_fv(g, 'count')} GPU(s) · driver {_fv(g, 'driver_version')} · CUDA driver {_fv(g, 'cuda_driver_version')}"
        f" · via {g.get('source', '?')}"
    )
    if not _group_header(console, "gpu", g, extra):
        return
    idx = gpu_indices(g)
    t = Table(box=None, padding=(0, 1, 0, 2), show_header=True, header_style="bold")
    t.add_column("", style="cyan", no_wrap=True)
    for i in idx:
        t.add_column(f"GPU {i}", overflow="fold")
    for label, names, fmt in GPU_ROWS:
        t.add_row(label, *[_gpu_cell(g, i, names, fmt, marks) for i in idx])
    console.print(L.kv_table(t, console.width), crop=False)
    topo = _fv(g, "topology")
    if isinstance(topo, dict) and topo:
        console.print(Text("  topology (nvidia-smi topo -m notation)", style="cyan"))
        m = Table(box=None, padding=(0, 1, 0, 2))
        m.add_column("")
        for i in idx:
            m.add_column(f"GPU{i}")
        for a in idx:
            row = []
            for b in idx:
                pair = topo.get(f"{min(a, b)},{max(a, b)}", {})
                row.append("X" if a == b else str(pair.get("link") or "?"))
            m.add_row(f"GPU{a}", *row)
        console.print(m)


def _render_env(console: Console, g: dict[str, Any]) -> None:
    from regdiag.snapshot.env import family

    redacted = g.get("redacted", [])
    names = sorted(g.get("fields", {}))
    sources = g.get("sources") or {}
    shown = [n for n in names if family(n) in ("nccl", "perf") or n in sources]
    others = [n for n in names if n not in shown]
    who = f"pid {g['pid']}" if g.get("pid") else "this shell"
    extra = (
        f"{len(names)} variable(s) of {who}, {len(redacted)} not in clear (keyed hash or redacted); "
        f"{len(shown)} that steer NCCL, kernels, threads, allocators or the engine shown"
    )
    if not _group_header(console, "env", g, extra):
        return
    t = Table(show_header=False, box=None, padding=(0, 1, 0, 2))
    t.add_column(style="cyan", no_wrap=True)
    t.add_column(overflow="fold")
    t.add_column(overflow="fold", style=DIM)
    for name in shown:
        t.add_row(name, _cell(g, name), f"from {sources[name]}" if name in sources else "")
    console.print(L.kv_table(t, console.width), crop=False)
    if others:
        console.print(Text(f"  and {len(others)} more (--json has them): " + ", ".join(others), style=DIM))


def _render_startup(console: Console, g: dict[str, Any]) -> None:
    if not g or not _group_header(console, "startup", g, "files Python runs before the engine; nccl.conf"):
        return
    t = Table(show_header=False, box=None, padding=(0, 1, 0, 2))
    t.add_column(style="cyan", no_wrap=True)
    t.add_column(overflow="fold")
    files = []
    for kind in ("sitecustomize", "usercustomize"):
        v = _fv(g, kind)
        if isinstance(v, dict):
            files.append((kind, v))
    for v in (_fv(g, "pth") or {}).values():
        if isinstance(v, dict) and (v.get("sets") or v.get("unparsed")):
            files.append(("pth", v))
    for c in _fv(g, "nccl_conf") or []:
        files.append(
            ("nccl.conf", {"path": c.get("path"), "sha256": c.get("sha256"), "sets": c.get("settings")})
        )
    for kind, v in files:
        sets = v.get("sets") or {}
        line = f"{v.get('path')}  {v.get('sha256') or v.get('error', '')}"
        if sets:
            line += "  sets " + " ".join(
                f"{k}={_plain(x) if x is not None else '(unset)'}" for k, x in sets.items()
            )
        if v.get("unparsed"):
            line += "  (not literal: " + ", ".join(v["unparsed"]) + ")"
        t.add_row(kind, line)
    if not files:
        t.add_row(
            "", Text("no sitecustomize.py, usercustomize.py, variable-setting .pth or nccl.conf", style=DIM)
        )
    console.print(L.kv_table(t, console.width), crop=False)


def _render_process(console: Console, groups: dict[str, Any]) -> None:
    g = groups.get("process")
    if not g or not _group_header(console, "process", g, f"pid {_fv(g, 'pid')}  {_fv(g, 'exe') or ''}"):
        return
    t = Table(show_header=False, box=None, padding=(0, 1, 0, 2))
    t.add_column(style="cyan", no_wrap=True)
    t.add_column(overflow="fold")
    t.add_row("cmdline", _plain(" ".join(_fv(g, "cmdline") or [])))
    t.add_row("cwd", _cell(g, "cwd"))
    t.add_row("python", _cell(g, "python"))
    kids = _fv(g, "children") or {}
    procs = kids.get("processes") or []
    if procs:
        t.add_row("children", f"{len(procs)}: " + ", ".join(str(k["pid"]) for k in procs))
    for name, vals in (kids.get("differ_between_workers") or {}).items():
        t.add_row(Text("workers differ", style="yellow"), f"{name}: " + _plain(vals))
    console.print(L.kv_table(t, console.width), crop=False)
    lib = groups.get("libraries")
    extra = f" {(lib or {}).get('count', 0)} shared objects mapped; shown: those that set speed or came with a package"
    if not lib or not _group_header(console, "libraries", lib, extra):
        return
    t = Table(show_header=False, box=None, padding=(0, 1, 0, 2))
    t.add_column(style="cyan", no_wrap=True)
    t.add_column(overflow="fold")
    for name, f in lib.get("fields", {}).items():
        v = f.get("value") if isinstance(f, dict) else None
        if not isinstance(v, dict) or not (v.get("role") or v.get("distribution")):
            continue
        owner = f"{v['distribution']} {v.get('version')}" if v.get("distribution") else "no distribution"
        ident = v.get("build_id") or v.get("sha256") or ("deleted" if v.get("deleted") else "")
        ver = v.get("nccl_version") or v.get("file_version")
        t.add_row(name, f"{v['path']}  ({owner}{', ' + ver if ver else ''})  {ident}")
    console.print(L.kv_table(t, console.width), crop=False)


def _render_host(console: Console, g: dict[str, Any], marks: dict[tuple[str, str], str]) -> None:
    extra = f"{_fv(g, 'hostname')} · {_fv(g, 'os')} · kernel {_fv(g, 'kernel')}"
    if _group_header(console, "host", g, extra):
        names = [n for n in g.get("fields", {}) if n not in ("hostname", "os", "kernel")]
        console.print(L.kv_table(_kv_table(g, "host", names, marks), console.width), crop=False)


def render_check(reasons: list[dict[str, Any]], console: Console) -> None:
    errors = [r for r in reasons if r["severity"] == ERROR]
    warnings = [r for r in reasons if r["severity"] != ERROR]
    if is_fit(reasons):
        head = Text("fit for benchmarking", style="bold green")
    else:
        head = Text(f"NOT fit for benchmarking: {len(errors)} problem(s)", style="bold red")
    if warnings:
        head.append(f", {len(warnings)} warning(s)", style="yellow")
    console.print(head)
    if not reasons:
        return
    t = Table(show_header=False, box=None, padding=(0, 1, 0, 2))
    t.add_column(no_wrap=True)
    t.add_column(overflow="fold")
    for r in reasons:
        line = Text(r["message"])
        if r.get("fix"):
            line.append(f"  → {r['fix']}", style=DIM)
        t.add_row(Text("✗" if r["severity"] == ERROR else "!", style=STYLE[r["severity"]]), line)
    console.print(L.kv_table(t, console.width), crop=False)


RANK_TITLES = {
    0: ("the engine's configuration in effect", "what the engine printed it chose at start"),
    1: ("engine code", "any kernel path, scheduler or default may differ"),
    2: ("kernels, libraries, driver", "loaded library files, kernel, communication and driver versions"),
    3: ("NCCL variables", "collective algorithms, protocols, channels; nccl.conf"),
    4: ("runtime variables", "engine, kernel, thread, allocator and loader switches; start-up files"),
    5: ("GPU configuration", "what the hardware is and is allowed to deliver"),
    6: ("other packages, variables, libraries", ""),
    7: ("host", "CPU-side latency and launch overhead; where the snapshot was taken"),
    8: ("momentary readings", "not configuration: they move from second to second"),
}


def render_diff(items: list[dict[str, Any]], console: Console, old_name: str, new_name: str) -> None:
    if not items:
        console.print(Text(f"no differences between {old_name} and {new_name}", style="green"))
        return
    console.print(
        Text.assemble(
            (f"{len(items)} difference(s)", "bold"), f", most likely culprits first: {old_name} → {new_name}"
        )
    )
    rank = None
    rows: list[list[Text]] = []
    for it in items:
        if it["rank"] != rank:
            _diff_rows(console, rows)
            rows = []
            rank = it["rank"]
            title, note = RANK_TITLES.get(rank, ("", ""))
            console.print(Text(f"{rank}. {title}", style="bold") + Text(f"  {note}", style=DIM))
        new = Text(_plain(it["new"]), style="green")
        src = it.get("source") or {}
        if src.get("new") or src.get("old"):
            new.append(f"  (from {src.get('new') or 'the environment'}", style=DIM)
            new.append(f"; was from {src['old']})" if src.get("old") else ")", style=DIM)
        name = f"{it['group']}.{it['field']}" if it["group"] != "env" else it["field"]
        rows.append(
            [Text("  " + name, style="cyan"), Text(_plain(it["old"]), style="red"), Text("\u2192"), new]
        )
    _diff_rows(console, rows)


def _diff_rows(console: Console, rows: list[list[Text]]) -> None:
    """One rank's differences: name, old, arrow, new in columns where every cell fits whole; else each
    name on its line and "old -> new" under it, wrapped between words (a name or a hash never split)."""
    if not rows:
        return
    cols = [L.Col(""), L.Col(""), L.Col(""), L.Col("")]
    widths = [max(r[k].cell_len for r in rows) for k in range(4)]
    fits = sum(widths) + 2 * 3 <= console.width
    if len(rows) <= MANY_ROWS and L.needed_width(cols, rows, 2, header=False) <= console.width:
        console.print(L.table(cols, rows, gap=2, header=False), crop=False)
        return
    # Many rows (a snapshot of 50 000 variables): one text of padded lines, its styles as spans, printed
    # once; a table, or a print a row, costs seconds per ten thousand rows.
    parts: list[str] = []
    spans: list[Span] = []
    pos = 0
    styled = console.color_system is not None or console.record  # else spans only cost time

    def put(cell: Text, pad: int = 0) -> None:
        nonlocal pos
        if not styled:
            parts.append(cell.plain + " " * pad)
            return
        if cell.style:
            spans.append(Span(pos, pos + len(cell.plain), cell.style))
        spans.extend(Span(pos + sp.start, pos + sp.end, sp.style) for sp in cell.spans)
        parts.append(cell.plain + " " * pad)
        pos += len(cell.plain) + pad

    sep = Text(" ")
    for name, old, arrow, new in rows:
        if fits:
            for cell, w in ((name, widths[0]), (old, widths[1]), (arrow, widths[2])):
                put(cell, w - cell.cell_len + 2)
            put(new)
        else:
            put(name)
            put(Text("\n      "))
            for cell in (old, sep, arrow, sep, new):
                put(cell)
        put(Text("\n"))
    console.print(Text("".join(parts), spans=spans), crop=False, end="", soft_wrap=fits)


MANY_ROWS = 200


# -- behind the registry (regdiag.report.registry) -----------------------------------------------


def render_snapshots(records: list[dict[str, Any]], out: Out) -> None:
    for rec in records:
        render_snapshot(rec, out.console)


def render_checks(results: list[dict[str, Any]], out: Out) -> None:
    """`results`: one {"host", "fit", "reasons"} per snapshot, the host named when there are several."""
    for r in results:
        if len(results) > 1:
            out.console.print(f"[bold]{r['host']}[/bold]")
        render_check(r["reasons"], out.console)


def render_diff_out(items: list[dict[str, Any]], out: Out) -> None:
    render_diff(items, out.console, *out.labels)
