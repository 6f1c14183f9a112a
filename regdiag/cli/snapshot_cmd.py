"""`regdiag snapshot` and `regdiag diff`: parse, call regdiag.snapshot, render.

Imports of the collector and of the rich report are deferred to the command bodies: `regdiag
snapshot --json` must stay within 0.3 s, and every module imported here is paid by every command.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import typer

from regdiag.cli.common import (
    JsonOpt,
    OutputOpt,
    format_opt,
    input_dir,
    pick_format,
    show,
)
from regdiag.cli.target import TARGET, Target, target_options
from regdiag.errors import EXIT_HOST, EXIT_REGRESSED, BadInput, error_line

SNAPSHOT_HELP = (
    "Record this machine's environment: engine checkout, packages, GPUs, env vars, host.\n\n"
    "Groups: engine (git commit, branch, dirty + diff hash, describe, commit date); packages (torch, "
    "sgl-kernel, flashinfer, NCCL, ... and a hash of all installed); gpu (per GPU through NVML: clocks, "
    "clock-event reasons, throttle counters, power limit, PCIe link, persistence, ECC, MIG, topology); "
    "env (every variable; a sensitive value is recorded as a keyed hash, the key in $REGDIAG_HOME); startup "
    "(sitecustomize.py, usercustomize.py and .pth files the interpreter runs, the variables they set, "
    "nccl.conf files); host (CPU governor, boost, frequencies, memory, THP, limits, cgroup quota, "
    "hypervisor). Every field carries a status (ok, unsupported, error, timeout); a failing source never "
    "fails the snapshot.\n\n"
    "With --pid: a running engine's process instead of this shell: its effective environment (its "
    "/proc/PID/environ plus what its start-up files and nccl.conf set, each with where it came from), "
    "command line (secrets hashed), cwd, interpreter, children, and the shared libraries it mapped with "
    "their build ids and owning distributions (groups process, libraries).\n\n"
    "With --check: exit 1 and list the reasons when the machine is not fit for benchmarking (GPU busy, "
    "throttled, power-capped, PCIe link degraded, CPU governor not performance), 0 when it is."
)


def _validate_repo(repo: Path | None) -> str | None:
    if repo is None:
        return None
    if not repo.exists():
        raise BadInput(f"--repo {repo}: no such directory")
    if not repo.is_dir():
        raise BadInput(f"--repo {repo}: not a directory")
    return str(repo)


def _take(
    hosts: list[str] | None,
    repo: str | None,
    all_packages: bool,
    timeout: float,
    python: str | None,
    ssh_config: Path | None,
    pid: int | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The snapshots that could be taken, and one line per host that failed."""
    if not hosts and python is None:
        from regdiag.snapshot import collect  # this interpreter, in-process: the fast path
        from regdiag.snapshot.process import ProcessError

        try:
            return [collect(repo=repo, all_packages=all_packages, timeout_s=timeout, pid=pid)], []
        except ProcessError as e:
            raise BadInput(str(e)) from None
    # Another interpreter (the engine's venv) or other machines: the collector travels as a bundle.
    from regdiag.hosts.remote import collect_snapshots
    from regdiag.hosts.resolve import open_hosts

    opened = open_hosts(hosts or None, python=python, ssh_config=ssh_config)
    with contextlib.ExitStack() as stack:
        for h in opened:
            stack.callback(h.close)
        outcomes = collect_snapshots(opened, repo=repo, all_packages=all_packages, timeout_s=timeout, pid=pid)
    if len(outcomes) == 1 and outcomes[0].error is not None:
        raise outcomes[0].error
    records = [o.value for o in outcomes if o.ok and o.value is not None]
    errors = [f"{o.host.name}: {o.error}" for o in outcomes if o.error is not None]
    return records, errors


def _output_path(output: Path, record: dict[str, Any], several: bool) -> Path:
    if not several:
        return output
    origin = record.get("origin", {})
    # The name the user gave (--host gpu-3) rather than what the machine calls itself.
    host = str(origin.get("target") or origin.get("host") or "host").replace("/", "_")
    return output.with_name(f"{output.stem}-{host}{output.suffix}")


def _load(path: Path) -> dict[str, Any]:
    from regdiag.records import load_record

    return load_record(path, expect=("snapshot", "run"))


def _snapshot_in(record: dict[str, Any], source: str) -> dict[str, Any]:
    from regdiag.snapshot import snapshot_of

    try:
        return snapshot_of(record)
    except ValueError as e:
        raise BadInput(f"{source}: {e}") from None


def _records(
    from_file: Path | None,
    hosts: list[str] | None,
    repo: str | None,
    all_packages: bool,
    timeout: float,
    python: str | None,
    ssh_config: Path | None,
    pid: int | None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The snapshots to show: the stored one (--from), or those taken now; and one line per failed host."""
    if from_file is not None:
        if hosts or python or repo:
            raise BadInput("--from reads a stored snapshot; it takes no --host, --python or --repo")
        return [_snapshot_in(_load(from_file), str(from_file))], []
    from regdiag.cli.common import err_console

    # A local snapshot takes ~0.2 s; remote ones take seconds: show progress on a terminal only.
    spinner = (
        err_console.status(f"taking snapshot{'s' if hosts and len(hosts) > 1 else ''}…")
        if err_console.is_terminal
        else contextlib.nullcontext()
    )
    with spinner:
        return _take(hosts, repo, all_packages, timeout, python, ssh_config, pid)


def _save(output: Path, records: list[dict[str, Any]]) -> None:
    from regdiag.records import save_record

    for rec in records:
        path = _output_path(output, rec, len(records) > 1)
        try:
            save_record(path, rec)
        except OSError as e:
            raise BadInput(f"-o {path}: cannot write ({e.strerror or e})") from None


@target_options()
def snapshot(
    repo: Path | None = typer.Option(
        None,
        "--repo",
        help="Engine git checkout to record. Default: the source tree of an editable sglang or vllm "
        "install, else the current directory when it is a git repository.",
        callback=input_dir,
    ),
    all_packages: bool = typer.Option(
        False,
        "--all-packages",
        help="Record every installed distribution, not only the key ones (default: off).",
    ),
    check: bool = typer.Option(
        False,
        "--check",
        help="Exit 1 and list the reasons when the machine is not fit for benchmarking; exit 0 when it is.",
    ),
    from_file: Path | None = typer.Option(
        None,
        "--from",
        help="Show (or --check) a stored snapshot or run record instead of taking a new snapshot.",
        dir_okay=True,
    ),
    timeout: float = typer.Option(
        10.0,
        "--timeout",
        min=0.5,
        max=86400.0,  # beyond, a thread's wait overflows the platform's time_t (a traceback)
        help="Seconds before a slow source is recorded as timed out (default 10, at most a day).",
    ),
    pid: int | None = typer.Option(
        None,
        "--pid",
        min=1,
        help="Snapshot this running process (an engine server: its environment, start-up files, "
        "command line, loaded libraries, children) instead of this shell. Local only (default: off).",
    ),
    json_out: bool = JsonOpt,
    fmt: str = format_opt("snapshot"),
    output: Path | None = OutputOpt,
    target: Target = TARGET,
) -> None:
    host, python, ssh_config = list(target.hosts), target.python, target.ssh_config
    if pid is not None and (from_file is not None or len(host) > 1):
        raise BadInput("--pid names a process of one machine: it takes one --host at most, and no --from")
    chosen = pick_format("check" if check else "snapshot", fmt, json_out)  # before minutes of work
    # With --host, --repo names a directory on that host: it is checked there, not here.
    repo_s = str(repo) if (repo is not None and host) else _validate_repo(repo)
    records, host_errors = _records(from_file, host, repo_s, all_packages, timeout, python, ssh_config, pid)
    if output is not None and from_file is None:
        _save(output, records)
    unfit = False
    if check:
        from regdiag.snapshot.check import check_records

        results = check_records(records)
        unfit = not all(r["fit"] for r in results)
        show("check", chosen, results)
    else:
        show("snapshot", chosen, records)
    from regdiag.cli.common import err_console

    if output is not None and from_file is None and chosen != "json":
        err_console.print(
            f"wrote {output}" if len(records) == 1 else f"wrote {len(records)} snapshots next to {output}"
        )
    for line in host_errors:
        err_console.print(error_line(line).rstrip("\n"), markup=False)
    if host_errors:
        raise typer.Exit(EXIT_HOST)
    if unfit:
        raise typer.Exit(EXIT_REGRESSED)


def diff(
    old: Path = typer.Argument(
        ...,
        help="Snapshot or run record (a run stands for its engine section and its snapshot_before).",
        dir_okay=True,
    ),
    new: Path = typer.Argument(..., help="Snapshot or run record to compare against OLD.", dir_okay=True),
    all_fields: bool = typer.Option(
        False,
        "--all",
        help="Also show momentary readings (current clocks, power draw, load) (default: off).",
    ),
    exit_code: bool = typer.Option(
        False,
        "--exit-code",
        help="Exit 1 when there are differences, like git diff --exit-code (default: exit 0).",
    ),
    json_out: bool = JsonOpt,
    fmt: str = format_opt("diff"),
) -> None:
    """Differences between two snapshots, grouped, most likely culprits of a slowdown first.

    Order: the engines' configuration in effect (two runs' engine sections);
    engine commit; sgl-kernel / flashinfer / torch / NCCL / GPU driver versions; NCCL_* variables; other variables; GPU clocks, power limit, PCIe link; other packages; host.
    """
    from regdiag.snapshot.diff import diff_records, engine_config_of

    chosen = pick_format("diff", fmt, json_out)
    ra, rb = _load(old), _load(new)
    if engine_config_of(ra) is None or engine_config_of(rb) is None:
        _snapshot_in(ra, str(old)), _snapshot_in(rb, str(new))  # one line naming the side without one
    items = diff_records(ra, rb, include_volatile=all_fields)
    show("diff", chosen, items, (str(old), str(new)))
    if exit_code and items:
        raise typer.Exit(EXIT_REGRESSED)


def register(app: typer.Typer) -> None:
    app.command("snapshot", help=SNAPSHOT_HELP)(snapshot)
    app.command("diff")(diff)
