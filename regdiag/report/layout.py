"""Tables that never cut a cell: a table where the console is wide enough, one block per row where not.

A CI log or a nohup file is 80 columns; a split pane is 60 or 40. rich fits a table to any width by
folding, wrapping or eliding cells ("9.6…", "PYTHONDONTWRITEBYTECOD" / "E"), and a unit that wraps
onto a line of its own reads as one more row. Here every cell is kept whole: `fit` measures the
width the table needs (its widest cell per column, the gaps between them) and, below it, lays each
row out as a block: the row's first cell on a line, then "header value" items packed onto the lines
under it, an item never split. An item wider than the console sticks out past it, whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rich._wrap import divide_line
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

Cell = str | Text
INDENT = "  "
# The space between a number and its unit, where a line is never broken.
_UNIT_SPACE = re.compile(r"(?<=\d) (?=(?:%|ms|us|\u00b5s|s|ns|MHz|W|GB/s|GiB|MiB|KiB|B|tok/s|x)(?![\w/]))")
SEP = " \u00b7 "


@dataclass(frozen=True)
class Col:
    """One column: its header; `right` to right-justify it in the table; `bare` to show only the value
    in a block (a verdict needs no "verdict" before it); `label` and `unit` what a block shows before
    and after the value where the table's header says both ("old us": "old 12.16 us")."""

    header: str
    right: bool = False
    bare: bool = False
    style: str = ""
    label: str | None = None
    unit: str = ""


def _breaks(plain: str, width: int, *, units_whole: bool = False) -> list[int]:
    """The offsets at which rich wraps `plain` to `width` between words, no word split; with
    `units_whole`, a number and its unit ("9.44 ms") break as one word."""
    return divide_line(_UNIT_SPACE.sub("_", plain) if units_whole else plain, width, fold=False)


def _text(cell: Cell) -> Text:
    return cell if isinstance(cell, Text) else Text(cell)


def needed_width(cols: Sequence[Col], rows: Sequence[Sequence[Cell]], gap: int, header: bool = True) -> int:
    """The width a table of these rows needs with no cell folded, wrapped or elided."""
    if not cols:
        return 0
    widths = [len(c.header) if header else 0 for c in cols]
    for r in rows:
        for i, cell in enumerate(r):
            widths[i] = max(widths[i], max((len(ln) for ln in _text(cell).plain.split("\n")), default=0))
    return sum(widths) + gap * (len(cols) - 1)


def fit(
    cols: Sequence[Col],
    rows: Sequence[Sequence[Cell]],
    width: int,
    *,
    title: str | None = None,
    gap: int = 1,
    header: bool = True,
    header_style: str = "bold",
    head_style: str = "bold",
) -> RenderableType:
    """A borderless table when `width` holds it whole, else one block per row (`blocks`)."""
    if needed_width(cols, rows, gap, header) <= width:
        return table(cols, rows, title=title, gap=gap, header=header, header_style=header_style)
    return blocks(cols, rows, width, title=title, head_style=head_style)


def table(
    cols: Sequence[Col],
    rows: Sequence[Sequence[Cell]],
    *,
    title: str | None = None,
    gap: int = 1,
    header: bool = True,
    header_style: str = "bold",
) -> Table:
    t = Table(
        box=None,
        pad_edge=False,
        padding=(0, gap, 0, 0),
        header_style=header_style,
        show_header=header,
        title=title,
        title_justify="left",
        title_style="bold",
    )
    for c in cols:
        t.add_column(c.header, justify="right" if c.right else "left", no_wrap=True, style=c.style or None)
    for r in rows:
        t.add_row(*(_text(x) for x in r))
    return t


def blocks(
    cols: Sequence[Col],
    rows: Sequence[Sequence[Cell]],
    width: int,
    *,
    title: str | None = None,
    head_style: str = "bold",
) -> Group:
    """Each row as its first cell on a line, then its other cells as "header value" items, as many to
    a line as fit in `width` (an empty or "-" cell left out)."""
    lines: list[Text] = []
    if title:
        lines.append(_line(Text(title, style="bold"), width))
    for r in rows:
        head = _text(r[0]).copy()
        if not head.style:
            head.stylize(head_style)
        lines.append(_line(head, width))
        items = []
        for c, cell in zip(cols[1:], r[1:], strict=True):
            value = _text(cell)
            if value.plain.strip() in ("", "-"):
                continue
            if c.unit and value.plain != "-":
                value = value + Text(f" {c.unit}")
            label = c.header if c.label is None else c.label
            items.append(value if c.bare or not label else Text(f"{label} ", style="dim") + value)
        lines += pack(items, width, INDENT)
    return Group(*lines)


def pack(items: Sequence[Text], width: int, indent: str = "") -> list[Text]:
    """`items` joined by " · " onto as few lines as `width` allows, each item whole on one line."""
    lines: list[Text] = []
    cur: Text | None = None
    for it in items:
        if cur is not None and cur.cell_len + len(SEP) + it.cell_len <= width:
            cur.append(SEP, style="dim")
            cur.append_text(it)
            continue
        if cur is not None:
            lines.append(_line(cur, width))
        cur = Text(indent) + it
    if cur is not None:
        lines.append(_line(cur, width))
    return lines


def _line(t: Text, width: int) -> Text:
    """One packed line; an item wider than `width` by itself wraps between its words (`hanging`)."""
    return _whole(hanging(t, width) if t.cell_len > width else t)


def _whole(t: Text) -> Text:
    """A line rich must neither wrap nor crop: it is kept whole even where it is wider than the console."""
    t.no_wrap = True
    t.overflow = "ignore"
    t.end = "\n"
    return t


def kv(
    pairs: Sequence[tuple[Cell, Cell]],
    width: int,
    *,
    gap: int = 1,
    indent: str = INDENT,
    label_style: str = "",
) -> RenderableType:
    """Label and value pairs (a snapshot group): two columns where every value fits whole beside its
    label, else each value on the lines under its label, wrapped between words (a hash or a path never
    split)."""
    cols = [Col("", style=label_style), Col("")]
    rows = [[Text(indent) + _text(k), _text(v)] for k, v in pairs]
    if needed_width(cols, rows, gap, header=False) <= width:
        return table(cols, rows, gap=gap, header=False)
    # A row that fits beside the labels' column stays there; one that does not (a long path) has its
    # value on the lines under its label: one long value does not turn the whole group into blocks.
    label_w = max(r[0].cell_len for r in rows)
    lines: list[Text] = []
    for (_k, v), row in zip(pairs, rows, strict=True):
        label = row[0].copy()
        if label_style:
            label.stylize(label_style)
        value = _text(v)
        if label_w + gap + value.cell_len <= width:
            lines.append(label + Text(" " * (label_w - label.cell_len + gap)) + value)
            continue
        colw = max(width - label_w - gap, 1)
        parts = value.divide(_breaks(value.plain, colw)) if value.plain else [value]
        pad = Text(" " * (label_w - label.cell_len + gap))
        for i, part in enumerate(parts):
            part = part.copy()
            part.rstrip()
            if i:
                part = part[len(part.plain) - len(part.plain.lstrip(" ")) :]
            lines.append((label + pad if i == 0 else Text(" " * (label_w + gap))) + part)
    return Group(*lines)


def kv_table(t: Table, width: int) -> RenderableType:
    """A two-column label/value rich Table (as the snapshot view builds them) through `kv`: unchanged
    where it fits, else label and value on lines of their own."""
    if len(t.columns) != 2 or t.show_header:
        return t
    labels, values = ([c if isinstance(c, Text) else Text(str(c)) for c in col._cells] for col in t.columns)
    style = str(t.columns[0].style or "")
    return kv(list(zip(labels, values, strict=True)), width, gap=3, indent="  ", label_style=style)


def hanging(text: Text, width: int) -> Text:
    """`text` wrapped between words to `width`, each wrapped line indented two more than the line it
    continues, so that a sentence the width breaks reads as one item; no word is split, a word wider
    than the width sticks out whole. Lines of the text's own stay as they are."""
    out: list[Text] = []
    for para in text.split("\n", allow_blank=True):
        lead = len(para.plain) - len(para.plain.lstrip(" "))
        pad = " " * (lead + 2)
        offsets = _breaks(para.plain, width, units_whole=True)
        if not offsets or para.cell_len <= width:
            out.append(para)
            continue
        first = para.divide(offsets)[0]
        out.append(first)
        rest = para[len(first.plain) :]
        rest = rest[len(rest.plain) - len(rest.plain.lstrip(" ")) :]
        for line in rest.divide(_breaks(rest.plain, max(width - len(pad), 10), units_whole=True)):
            line.rstrip()
            out.append(Text(pad) + line)
    for ln in out:
        ln.rstrip()
    return Text("\n").join(out)
