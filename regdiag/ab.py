"""`regdiag ab`: two environments measured in one run, launches interleaved A B B A A B B A ...

Two runs measured one after the other differ by whatever the machine did in between (warming up,
filling its page cache, a neighbour starting): `compare` cannot tell that drift from a change
(docs/statistics.md, "Drift"). Interleaving puts the two launches of each pair side by side in time,
so a drift moves both and the paired comparison sees only the difference.

A side is a spec like bisect's (`'sgl-kernel==0.3.5 NCCL_PROTO=LL commit=bba2fc4'`, a snapshot or a
run record): its environment is built by bisect's Builder (a git worktree per commit, a venv per
package set, cached) and its env vars are set per launch. The output is one `regdiag.run/1` record
per side, each launch written as it finishes, with the launch's place in the run (`order`), its pair
(`pair`) and the run's `design` (docs/records.md); `compare` recognises the two halves and uses the
pairing.

Library code: no typer, no rich. The launch records are made by regdiag.probe_runner's own helpers,
so a launch here is exactly a launch of `regdiag probe`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regdiag import probe_runner as pr
from regdiag.bisect import ranges
from regdiag.bisect.envs import BuildFailed, Built
from regdiag.bisect.factors import COMMIT, ENV, PACKAGE, Spec, diff, load_side
from regdiag.bisect.lab import EnvBuilder, builder_for
from regdiag.bisect.measure import wrap_env
from regdiag.bisect.run import Request as BisectRequest
from regdiag.bisect.run import argv_builder
from regdiag.errors import BadInput, ProbeError
from regdiag.hosts.base import CommandResult, Host
from regdiag.runs import RunWriter
from regdiag.snapshot.redact import scrub_text
from regdiag.stats import abba_order

SIDES = ("A", "B")
Progress = Callable[[dict[str, Any]], None]


@dataclass
class AbRequest:
    a: str
    b: str
    probe: str | None = None
    command: str | None = None
    probe_args: list[str] = field(default_factory=list)
    launches: int = 8  # per side
    repo: str | None = None
    setup: str | None = None
    find_links: str | None = None
    index_url: str | None = None
    python: str | None = None
    installer: str = "auto"
    launch_timeout: float | None = 600.0
    output: str | None = None  # PREFIX: PREFIX-a.json and PREFIX-b.json
    snapshot: bool = True


@dataclass
class Side:
    label: str
    spec: Spec
    packages: dict[str, str]
    commit: str | None
    env: dict[str, str | None]
    built: Built | None = None


@dataclass
class AbResult:
    paths: dict[str, Path]
    runs: dict[str, dict[str, Any]]


def _sides(req: AbRequest) -> tuple[Side, Side, str | None]:
    # An empty spec is this environment as it is (the usual A of "does this one change matter?").
    a = load_side(req.a, "--a") if req.a.strip() else Spec(source="this environment")
    b = load_side(req.b, "--b") if req.b.strip() else Spec(source="this environment")
    if (a.commit is None) != (b.commit is None):
        raise BadInput("commit= is given for one side only: give the engine commit of both sides")
    d = diff(a, b)
    if d.notes:
        # A difference that cannot be reproduced here: measuring anyway would compare something else.
        raise BadInput(f"--a and --b: {d.notes[0]}")
    repo = req.repo or a.repo or b.repo
    out = []
    for label, spec, pick in (("A", a, 0), ("B", b, 1)):
        packages: dict[str, str] = {}
        commit = None
        env: dict[str, str | None] = dict(d.same_env)
        for f in d.factors:
            v = (f.good, f.bad)[pick]
            if f.kind == PACKAGE and v is not None:
                packages[f.name] = v
            elif f.kind == COMMIT:
                if not repo:
                    raise BadInput("the engine commit differs; give --repo PATH (the engine's git checkout)")
                if not Path(repo).is_dir():
                    raise BadInput(f"--repo {repo}: no such directory")
                commit = ranges.resolve_commit(repo, v or "")
            elif f.kind == ENV:
                env[f.name] = v
        out.append(Side(label, spec, packages, commit, env))
    return out[0], out[1], repo


def _check(req: AbRequest, host: Host, sides: tuple[Side, Side]) -> None:
    if req.launches < 2:
        raise BadInput("--launches must be at least 2 per side (a paired comparison needs two pairs)")
    if req.find_links and not Path(req.find_links).is_dir():
        raise BadInput(f"--find-links {req.find_links}: no such directory")
    if host.via != "local":
        if req.command:
            raise BadInput("--host runs --probe only (a --command runs on this machine)")
        for s in sides:
            if s.packages or s.commit:
                raise BadInput(
                    "--host compares env-var specs only: package sets and commits are built on this machine"
                )
            if any(v is None for v in s.env.values()):
                raise BadInput("--host cannot unset a variable (-NAME); give it a value instead")


def run_ab(req: AbRequest, host: Host | None = None, progress: Progress | None = None) -> AbResult:
    """Measure A and B interleaved (ABBA), one record per side; see the module docstring."""
    from regdiag.hosts.local import LocalHost

    emit = progress or (lambda ev: None)
    host = host or LocalHost(req.python)
    a, b, repo = _sides(req)
    _check(req, host, (a, b))
    argv_for = argv_builder(
        BisectRequest(good=req.a, bad=req.b, command=req.command, probe=req.probe, probe_args=req.probe_args)
    )
    if host.via == "local":
        _build((a, b), builder_for(req, repo), emit)
    writers = _writers(req, host, (a, b))
    emit({"event": "start", "paths": {k: str(w.path) for k, w in writers.items()}})
    try:
        _measure(req, host, {"A": a, "B": b}, writers, argv_for, emit)
    except _UsageAbort:
        for w in writers.values():
            w.path.unlink(missing_ok=True)  # nothing was measured: leave no record behind
        raise
    except KeyboardInterrupt:
        for w in writers.values():
            w.finish("interrupted")
        raise
    except BaseException:
        for w in writers.values():
            ok = any(la["status"] == "ok" for la in w.run["launches"])
            w.finish("partial" if ok else "failed")
        raise
    for w in writers.values():
        w.finish()
    return AbResult({k: w.path for k, w in writers.items()}, {k: w.run for k, w in writers.items()})


def _build(sides: tuple[Side, Side], builder: EnvBuilder, emit: Progress) -> None:
    """Each side's environment on this machine; one that cannot be built is bad input (exit 2)."""
    for s in sides:
        emit({"event": "build", "side": s.label})
        try:
            s.built = builder.build(s.packages, s.commit)
        except BuildFailed as e:
            raise BadInput(f"side {s.label}: cannot build its environment: {e}") from None


def _writers(req: AbRequest, host: Host, sides: tuple[Side, Side]) -> dict[str, RunWriter]:
    """One run record per side, written at once: its design names the pair, the side and the other
    side's record, so either half leads to the whole A/B run."""
    pair_id = secrets.token_hex(6)
    name = req.probe or "command"
    writers: dict[str, RunWriter] = {}
    for s in sides:
        run = pr.new_probe_run(name, host)
        run["probe"]["args"] = list(req.probe_args)
        if req.command:
            run["probe"]["command"] = scrub_text(req.command)
        run["design"] = {
            "kind": "interleaved",
            "order": "ABBA",
            "pair_id": pair_id,
            "side": s.label,
            "spec": _spec_for_record(s.spec),
            "launches_per_side": req.launches,
        }
        run["env"] = pr._env_for_record({k: v for k, v in s.env.items() if v is not None})
        path = f"{req.output}-{s.label.lower()}.json" if req.output else None
        writers[s.label] = RunWriter(path, run)
    a, b = sides
    for s, other in ((a, b), (b, a)):
        writers[s.label].run["design"]["other"] = str(writers[other.label].path)
        writers[s.label].flush()
    return writers


class _UsageAbort(BadInput):
    """The probe refused its arguments in the first launch: nothing was measured."""


def _snapshots(host: Host, writers: dict[str, RunWriter], when: str, emit: Progress) -> None:
    emit({"event": "snapshot", "when": when})
    snap, why = pr._snapshot(host)
    for w in writers.values():
        w.run[f"snapshot_{when}"] = snap
        if why:
            w.run.setdefault("warnings", []).append(f"snapshot {when}: {why}")
        w.flush()


def _measure(
    req: AbRequest,
    host: Host,
    sides: dict[str, Side],
    writers: dict[str, RunWriter],
    argv_for: Callable[[Built, int], list[str]],
    emit: Progress,
) -> None:
    if req.snapshot:
        _snapshots(host, writers, "before", emit)
    done = {"A": 0, "B": 0}
    order = abba_order(req.launches)
    for pos, label in enumerate(order):
        s, w = sides[label], writers[label]
        i = done[label]
        emit({"event": "launch", "side": label, "index": i, "order": pos, "of": len(order)})

        def start(stream: pr.LaunchStream, s: Side = s, i: int = i) -> CommandResult:
            return _run_once(req, host, s, argv_for, i, stream)

        def keep(la: dict[str, Any], w: RunWriter = w, pos: int = pos) -> None:
            _add(w, la, pos)

        launch, stream, why = pr.measure_launch(i, start, req.launch_timeout, keep)
        if why is not None and pos == 0 and (stream.error or {}).get("kind") == "usage":
            raise _UsageAbort(why)
        if i == 0 and stream.header is not None:
            pr._adopt_header(w.run, stream.header)
        _add(w, launch, pos)
        done[label] += 1
        emit({"event": "launch_end", "side": label, "index": i, "launch": launch})
        if why is not None:
            raise ProbeError(
                f"side {label}, launch {i} failed: {why} (the launches before it are kept in "
                f"{writers['A'].path} and {writers['B'].path})"
            )
    if req.snapshot:
        _snapshots(host, writers, "after", emit)


def _spec_for_record(spec: Any) -> dict[str, Any]:
    """A side's spec as a record may hold it: env values through the snapshot's redaction rules."""
    d = spec.to_dict()
    given = {k: v for k, v in d["env"].items() if v is not None}
    kept = pr._env_for_record(given)
    d["env"] = {k: (None if v is None else kept[k]) for k, v in d["env"].items()}
    return d


def _add(w: RunWriter, launch: dict[str, Any], pos: int) -> None:
    launch["order"] = pos  # place in the whole A/B run, 0-based
    launch["pair"] = launch["index"]  # launch k of A and launch k of B ran back to back
    w.add_launch(launch)


def _run_once(
    req: AbRequest,
    host: Host,
    s: Side,
    argv_for: Callable[[Built, int], list[str]],
    index: int,
    stream: pr.LaunchStream,
) -> CommandResult:
    values = {k: v for k, v in s.env.items() if v is not None}
    if host.via != "local":
        return pr._run_once(
            host,
            str(req.probe),
            [*req.probe_args, "--launch-index", str(index)],
            stream,
            values,
            req.launch_timeout,
        )
    built = s.built
    assert built is not None
    env = dict(built.process_env())
    if "PATH" not in env:
        # `python` in a --command means the environment's interpreter, the base one included.
        env["PATH"] = os.pathsep.join([os.path.dirname(built.python), os.environ.get("PATH", "")])
    env.update(values)
    env["REGDIAG_AB_SIDE"] = s.label
    env["REGDIAG_LAUNCH_INDEX"] = str(index)
    unset = [k for k, v in s.env.items() if v is None]
    return host.run(
        wrap_env(argv_for(built, index), unset),
        env=env,
        cwd=built.worktree,
        timeout=req.launch_timeout,
        on_stdout_line=stream.stdout_line,
        on_stderr_line=stream.stderr_line,
        keep_output=False,
    )
