"""`probe server` and `ingest-log` results on the terminal: medians of the launches, one line each."""

from __future__ import annotations

from typing import Any

from regdiag.report.registry import Out


def fmt(v: Any, unit: str = "", digits: int = 2) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}{unit}"


def terminal(summary: dict[str, Any], out: Out) -> None:
    out.console.print(
        f"median of {summary['ok_launches']} launches: itl {fmt(summary['itl_ms_median'], ' ms')}"
        f" ({fmt(summary['tok_s_per_request'], ' tok/s', 1)} per stream), ttft {fmt(summary['ttft_ms_median'], ' ms', 1)},"
        f" accept len {fmt(summary['accept_len_mean'])}",
    )  # wrapped between words, a number kept with its unit (report.layout.hanging)
    out.console.print(f"record: {summary['path']}", soft_wrap=True)


def ingest_terminal(result: dict[str, Any], out: Out) -> None:
    """`result`: {"path", "launches": [{file, engine, formats, counts, scalars, error}]} (ingest-log --json)."""
    console = out.console
    for la in result["launches"]:
        c, sc = la["counts"], la["scalars"]
        console.print(
            f"{la['file']}: {la['engine']} ({', '.join(la['formats'])}); "
            f"{c['lines']} lines, {c['intervals']} intervals ({c['warmup']} warm-up dropped), "
            f"{c['skipped']} other lines skipped"
            + (f", {c['malformed']} malformed" if c["malformed"] else ""),
        )
        console.print(
            f"  itl {fmt(sc.get('itl_ms_median'), ' ms')} ({fmt(sc.get('tok_s_per_request'), ' tok/s', 1)} per request), "
            f"gen throughput {fmt(sc.get('gen_tok_s_median'), ' tok/s', 1)}, accept len {fmt(sc.get('accept_len_mean'))}"
            + (f", accept rate {fmt(sc['accept_rate'])}" if "accept_rate" in sc else ""),
        )
        if la["error"]:
            console.print(f"  [red]{la['error']}[/]")
    console.print(f"record: {result['path']}", soft_wrap=True)
