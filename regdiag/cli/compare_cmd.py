"""`regdiag compare`, `regdiag baseline`: parse, call the library, render (explain: explain_cmd.py).

Library imports (numpy, scipy) are deferred into the command bodies: every module imported here is
paid by every regdiag command.
"""

from __future__ import annotations

from pathlib import Path

import typer

from regdiag.cli.common import (
    JsonOpt,
    console,
    err_console,
    format_opt,
    output_file,
    pick_format,
    print_json,
    refuse_input_as_output,
    show,
)
from regdiag.errors import BadInput
from regdiag.records import listed

COMPARE_HELP = (
    "Is the change between two runs real, where does it live, and what changed?\n\n"
    "OLD and NEW are run records (files from `regdiag probe ... -o FILE`), names of stored baselines "
    "(`regdiag baseline save`), or ids of stored runs. For the primary metric (e.g. cycle) and every "
    "phase: the median of each launch, the ratio new/old of those medians with a 95 % CI (Welch's t on "
    "log launch medians; cycles are never pooled), and a verdict against the margin: REGRESSED (worse, "
    "significantly and by at least the margin), IMPROVED, UNCHANGED (the CI lies inside +-margin) or "
    "INCONCLUSIVE (with how many more launches per side would likely settle it). Phases are "
    "Holm-corrected. Then: the change of the primary split into its phases (each with a CI), tok/s split "
    "into accept length and cycle, PHANTOM warnings when the two sides ran at different clocks, power "
    "caps or throttle states, and the environment diff of the two snapshots, most likely culprit first.\n\n"
    "Exit status (for CI gates): 0 unchanged or improved, 1 regressed, 2 bad input, 3 inconclusive. "
    "See docs/compare.md and docs/statistics.md."
)


def parse_margin(text: str) -> float:
    """'2%' or '0.02' -> 0.02; a bare number >= 1 is ambiguous and refused."""
    t = text.strip()
    try:
        if t.endswith("%"):
            v = float(t[:-1].strip()) / 100.0
        else:
            v = float(t)
            if v >= 1:
                raise BadInput(f"--margin {text}: write {t}% or {v / 100:g} (a fraction)")
    except ValueError:
        raise BadInput(f"--margin {text!r} is not a number: write 2% or 0.02") from None
    if not 0 < v < 1:
        raise BadInput(f"--margin {text}: must be between 0 and 100 %")
    return v


def compare(
    old: str = typer.Argument(None, help="The reference: a run file, a baseline name or a stored run id."),
    new: str = typer.Argument(
        None, help="The run under suspicion: a run file, a baseline name or a stored run id."
    ),
    olds: list[str] = typer.Option(
        None,
        "--old",
        help="One more file of the reference side (repeat it): the files' launches are pooled as one run, "
        "e.g. three `vllm bench serve` files of one server. With --old and --new, OLD and NEW may be left out.",
    ),
    news: list[str] = typer.Option(
        None, "--new", help="One more file of the side under suspicion (repeat it)."
    ),
    margin: str = typer.Option(
        "2%", "--margin", "-m", help="Smallest change that matters, as 2% or 0.02 (default 2%)."
    ),
    method: str = typer.Option(
        "welch",
        "--method",
        help="welch: Welch's t on log launch medians (default; valid from 2 launches a side). "
        "bootstrap: hierarchical bootstrap, launches then cycles (needs >= 8 launches a side to hold its level).",
    ),
    seed: int = typer.Option(
        0, "--seed", min=0, help="Seed of the bootstrap resampling (default 0: reproducible)."
    ),
    allow_mismatch: bool = typer.Option(
        False,
        "--allow-mismatch",
        help="Compare runs of different probes or configs, or with metrics on one side only (left out), "
        "with a warning. Default: refuse.",
    ),
    metric: str = typer.Option(
        None,
        "--metric",
        help="Judge this one metric (one size of a sweep: ar_64KiB). Default: the primary; a sweep "
        "(nccl-tests, probe collectives) is judged per size, its verdict the worst size beyond the margin.",
    ),
    json_out: bool = JsonOpt,
    markdown: bool = typer.Option(
        False, "--markdown", help="Print Markdown (for an issue or a PR) instead of the terminal view."
    ),
    html: Path = typer.Option(
        None,
        "--html",
        help="Also write a self-contained HTML report with plots to this file.",
        callback=output_file,
    ),
    fmt: str = format_opt("compare"),
    exclude_flagged: bool = typer.Option(
        False,
        "--exclude-flagged",
        help="Leave out of the verdict the launches whose host stood out (other processes' CPU, context "
        "switches, steal, pressure); the report names them and shows the verdict with them too. "
        "Default: every launch counts, the flagged ones are named.",
    ),
    git_bisect: bool = typer.Option(
        False,
        "--git-bisect",
        help="Exit as `git bisect run` reads it: 0 unchanged or improved, 1 regressed, 125 (skip this "
        "commit) for inconclusive, a failed measurement, unusable input or an unreachable host; 128 "
        "(stop) for a command line that cannot be parsed. Default: regdiag's own exit codes.",
    ),
) -> None:
    # --git-bisect changes only how the exit status reads; regdiag.cli.main translates it (errors too).
    from regdiag import baselines
    from regdiag.compare import compare_runs

    chosen = pick_format("compare", fmt, json_out, markdown)
    m = parse_margin(margin)
    if method not in ("welch", "bootstrap"):
        raise BadInput(f"--method {method!r}: use welch or bootstrap")
    from regdiag.compare.pool import pooled

    old_refs = [r for r in [old, *(olds or [])] if r]
    new_refs = [r for r in [new, *(news or [])] if r]
    if not old_refs or not new_refs:
        raise BadInput("compare needs two sides: OLD NEW, or --old FILE ... --new FILE ...")
    old_run, old_name = pooled([baselines.resolve(r) for r in old_refs], "OLD")
    new_run, new_name = pooled([baselines.resolve(r) for r in new_refs], "NEW")
    refuse_input_as_output(html, [*old_refs, *new_refs, old_name, new_name], "--html")
    result = compare_runs(
        old_run,
        new_run,
        margin=m,
        method=method,
        seed=seed,
        allow_mismatch=allow_mismatch,
        old_label=old_name,
        new_label=new_name,
        exclude_flagged=exclude_flagged,
        metric=metric,
    )
    from regdiag.report.registry import Out, render

    labels, runs = (old_name, new_name), {"runs": (old_run, new_run)}
    if html is not None:
        from regdiag.records import atomic_write_text

        page: list[str] = []
        render("compare", "html", result, Out(console, labels, runs, page.append))
        atomic_write_text(html, "".join(page))
    render("compare", chosen, result, Out(console, labels, runs))
    if html is not None and chosen != "json":
        err_console.print(f"wrote {html}", style="dim", soft_wrap=True, highlight=False)
    raise typer.Exit(result.exit_code)


baseline_app = typer.Typer(
    help="Named baselines: keep a run under a name and compare against it (regdiag compare NAME RUN).",
    no_args_is_help=True,
)


@baseline_app.command("save")
def baseline_save(
    name: str = typer.Argument(..., help="Letters, digits, '.', '_', '-'."),
    run: str = typer.Argument(..., help="The run file (or stored run id) to keep."),
    force: bool = typer.Option(False, "--force", help="Replace an existing baseline of that name."),
) -> None:
    """Keep RUN as baseline NAME (under $REGDIAG_HOME/baselines, default ~/.regdiag/baselines)."""
    from regdiag import baselines

    p = baselines.save(name, run, force=force)
    console.print(f"saved baseline {name} -> {p}", highlight=False)


@baseline_app.command("list")
def baseline_list(json_out: bool = JsonOpt, fmt: str | None = format_opt("baselines")) -> None:
    """The stored baselines: name, probe, config, launches, the primary's run value, when saved."""
    from regdiag import baselines
    from regdiag.errors import escape_controls

    chosen = pick_format("baselines", fmt, json_out)
    items = baselines.list_baselines()
    if chosen == "json":
        print_json(listed("baseline-list", "baselines", items))
        return
    for b in items:
        if "problem" in b:  # one bad file never hides the rest of the store
            why = escape_controls(f"skipped baseline {b['name']}: {b['problem']}")
            err_console.print(f"warning: {why}", soft_wrap=True, markup=False, highlight=False)
    good = [b for b in items if "problem" not in b]
    show("baselines", chosen, {"dir": str(baselines.baselines_dir()), "baselines": good})


@baseline_app.command("rm")
def baseline_rm(name: str = typer.Argument(...)) -> None:
    """Delete baseline NAME."""
    from regdiag import baselines

    p = baselines.remove(name)
    console.print(f"removed baseline {name} ({p})", highlight=False)


EXPORT_FORMATS = ("pyperf",)


def export(
    run: str = typer.Argument(
        ..., help="A run file, baseline name or stored run id (or another tool's file)."
    ),
    to: str = typer.Option("pyperf", "--to", help="The format to write: pyperf (JSON 1.0; default pyperf)."),
    output: Path = typer.Option(
        None,
        "-o",
        "--output",
        help="Write to this file (atomically) instead of stdout.",
        callback=output_file,
    ),
) -> None:
    """Write a run in another tool's format, e.g. for `python -m pyperf compare_to`: every time metric a
    benchmark, every usable launch one of its runs (docs/compare.md, "Other tools' files")."""
    from regdiag import baselines
    from regdiag.importers.pyperf import to_pyperf

    if to not in EXPORT_FORMATS:
        raise BadInput(f"--to {to!r}: regdiag writes {', '.join(EXPORT_FORMATS)}")
    rec, name = baselines.resolve(run)
    refuse_input_as_output(output, [run, name], "-o")
    doc = to_pyperf(rec)
    if output is None:
        print_json(doc)
        return
    import json

    from regdiag.records import atomic_write_text

    atomic_write_text(output, json.dumps(doc, indent=1) + "\n")
    err_console.print(f"wrote {output}", style="dim", soft_wrap=True, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("compare", help=COMPARE_HELP)(compare)
    app.command("export")(export)
    app.add_typer(baseline_app, name="baseline")
