"""hyperfine `--export-json`: one run record per command of the file.

hyperfine starts a fresh process for every timing, so each of a command's `times` is one launch here
with one sample of `time` (wall clock, lower is better); compare's test on launches is then a test on
hyperfine's runs, as its own `Summary` is. A run whose exit code was not 0 (kept by `-i`) is a failed
launch. A file of several commands (`hyperfine -n old A -n new B`) is picked from as FILE#NAME:
`regdiag compare hf.json#old hf.json#new`. hyperfine writes no version, host or date into the file.

hyperfine's other exports (`--export-csv`, `--export-markdown`, `--export-asciidoc`,
`--export-orgmode`) hold one summary line per command (mean, stddev, min, max), not its runs' times:
they are recognised, and refused in one line that says to export JSON, since compare's test is on
the per-run times (two means without their runs say nothing of the noise between runs).
"""

from __future__ import annotations

import csv
import json
import re
from typing import Any

from regdiag.direction import LOWER, declare
from regdiag.errors import BadInput
from regdiag.importers import launch, new_import
from regdiag.records import UnusableJSON, loads_json
from regdiag.snapshot.redact import scrub_text

NAME = "hyperfine"
TITLE = "hyperfine --export-json"
METRIC = "time"
# The summary-only exports, by their first lines: a Markdown or org-mode table's header row
# ("| Command | Mean [ms] | Min [ms] | ..."), an AsciiDoc table's ("[cols=...]", "|===", "| Command").
_TABLE_HEADER = re.compile(r"^\|\s*Command\s*\|\s*Mean \[[^\]]+\]\s*\|")
_CSV_COLUMNS = {"mean", "stddev", "min", "max"}


MAX_TIMES = 20_000


def sniff(text: str) -> bool:
    head = text.lstrip()
    if summary_export(text):
        return True
    return head.startswith("{") and '"results"' in head and '"command"' in head and '"times"' in head


def summary_export(text: str) -> str | None:
    """Which of hyperfine's summary-only exports the text is (its option's name), or None."""
    lines = [ln.strip() for ln in text.lstrip("\ufeff").splitlines()[:8] if ln.strip()]
    if not lines:
        return None
    first = lines[0]
    if first.startswith("command,"):
        cols = next(csv.reader([first]))
        return "csv" if _CSV_COLUMNS <= set(cols) else None
    if _TABLE_HEADER.match(first):
        return "orgmode" if len(lines) > 1 and lines[1].startswith("|-") and "+" in lines[1] else "markdown"
    if first.startswith("[cols=") and lines[1:2] == ["|==="] and len(lines) > 3:
        if lines[2] == "| Command" and lines[3].startswith("| Mean ["):
            return "asciidoc"
    return None


def parse(text: str, source: str) -> list[dict[str, Any]]:
    if kind := summary_export(text):
        raise BadInput(
            f"{source}: hyperfine's --export-{kind} holds only each command's summary (mean, min, max), "
            "not its per-run times, which are what compare tests: export with `hyperfine --export-json FILE`"
        )
    try:
        doc = loads_json(text)
    except UnusableJSON as e:  # a key twice, a number no float64 holds, a lone surrogate
        raise BadInput(f"{source}: {e}") from None
    except json.JSONDecodeError as e:
        raise BadInput(
            f"{source}: malformed hyperfine JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from None
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, list):
        raise BadInput(f'{source}: not a hyperfine export (no "results" list)')
    return [_command(r, source, i) for i, r in enumerate(results)]


def _command(r: Any, source: str, i: int) -> dict[str, Any]:
    if not isinstance(r, dict) or not isinstance(r.get("times"), list) or not r["times"]:
        raise BadInput(f'{source}: result {i} has no "times" list')
    command = str(r.get("command") or f"command {i}")
    times = r["times"]
    if len(times) > MAX_TIMES:  # each time is a launch: millions of them would stall every compare
        raise BadInput(
            f"{source}: result {i} holds {len(times)} times; regdiag imports at most {MAX_TIMES} a command "
            "(each is one launch): run hyperfine with fewer --runs"
        )
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in times):
        raise BadInput(f"{source}: result {command!r} holds a time that is not a number of seconds")
    codes: list[Any] = r["exit_codes"] if isinstance(r.get("exit_codes"), list) else [0] * len(times)
    run = new_import(NAME, source, tool="hyperfine", config={}, primary=METRIC, select=command)
    run["probe"]["command"] = scrub_text(command)  # a benchmarked command line can hold a token
    params = r.get("parameters")
    if isinstance(params, dict) and params:
        run["labels"] = {str(k): str(v) for k, v in params.items()}
    declare(run, {METRIC: ("s", LOWER)})  # as hyperfine wrote them; import_text makes them ms
    for k, t in enumerate(times):
        code = codes[k] if k < len(codes) else 0
        if t > 0 and code == 0:
            run["launches"].append(launch(k, {METRIC: [t]}, duration_s=t))
        else:
            why = f"exit code {code}" if code != 0 else "timed at 0 s"
            run["launches"].append(launch(k, {}, status="error", error=why, duration_s=t))
    return run
