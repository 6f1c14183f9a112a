"""`regdiag clean`: remove the environments bisect built, here or on a remote host."""

from __future__ import annotations

import shutil
from typing import Any

import typer

from regdiag.cli.common import (
    JsonOpt,
    err_console,
    format_opt,
    pick_format,
    show,
)
from regdiag.cli.target import TARGET, Target, target_options
from regdiag.errors import error_line

HELP = (
    "Remove the environments `regdiag bisect` built (venvs, git worktrees) and their cache.\n\n"
    "With --host H: regdiag's cache directory on H (${XDG_CACHE_HOME:-~/.cache}/regdiag), and the worktrees "
    "it registered in H's checkouts are pruned. The profile traces `probe --profile` kept on H "
    "(~/.regdiag/traces) are results, not cache: they are counted and left. Without --host: $REGDIAG_HOME/envs on this machine (run "
    "`git worktree prune` in the engine checkout afterwards); an environment a running bisect uses is "
    "kept and named; and the profile traces in $REGDIAG_HOME/runs whose run record is gone "
    "(`probe spec-decode --profile` keeps one beside its record), each named. Exit 0, or 4 when a host "
    "cannot be reached."
)


@target_options()
def clean(
    json_out: bool = JsonOpt,
    fmt: str | None = format_opt("clean"),
    target: Target = TARGET,
) -> None:
    out_fmt = pick_format("clean", fmt, json_out)
    results: list[dict[str, Any]] = []
    failed = []
    if not target.hosts:
        results.append(clean_local())
        for path, why in results[-1]["in_use"].items():
            err_console.print(f"kept {path}: {why}", highlight=False, soft_wrap=True)
    else:
        from regdiag.bisect.remote_envs import clean_remote

        for o in target.for_each(clean_remote):
            if o.ok and o.value is not None:
                results.append(o.value)
            else:
                failed.append(o)
                results.append({"host": o.spec, "error": str(o.error)})
    show("clean", out_fmt, results)
    for o in failed:
        err_console.print(error_line(str(o.error)).rstrip("\n"), highlight=False, soft_wrap=True)
    if failed:
        raise typer.Exit(max(o.error.exit_code for o in failed if o.error is not None))


def clean_local() -> dict[str, Any]:
    """$REGDIAG_HOME/envs removed, but for the environments a running bisect holds a lease on (each is
    taken exclusively, without waiting, while it is removed): those are kept and said so."""
    from regdiag.bisect.envs import envs_dir
    from regdiag.files import FileLock, RecordError, lease_of

    d = envs_dir()
    existed = d.is_dir()
    in_use: dict[str, str] = {}
    for env in sorted(d.iterdir()) if existed else []:
        if not env.is_dir() or env.is_symlink():
            continue
        try:
            lease = FileLock(lease_of(env), "this environment")
        except RecordError as e:
            pid = str(e).partition("(pid ")[2].partition(")")[0] or "?"
            in_use[str(env)] = f"in use by a running bisect (pid {pid})"
            continue
        try:
            shutil.rmtree(env, ignore_errors=True)
        finally:
            lease.release()
    if existed and not in_use:
        shutil.rmtree(d, ignore_errors=True)
    return {
        "host": "local",
        "path": str(d),
        "existed": existed,
        "pruned": [],
        "in_use": in_use,
        "orphan_traces": remove_orphan_traces(),
    }


def remove_orphan_traces() -> list[str]:
    """The profile traces in $REGDIAG_HOME/runs whose record is gone, removed (regdiag.runs.orphan_traces)."""
    from regdiag.runs import orphan_traces

    removed = []
    for trace in orphan_traces():
        try:
            trace.unlink()
        except (
            OSError
        ):  # gone meanwhile, or not ours to remove (a shared home): `regdiag runs` still lists it
            continue
        removed.append(str(trace))
    return removed


def register(app: typer.Typer) -> None:
    app.command("clean", help=HELP)(clean)
