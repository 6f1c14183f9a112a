"""One bisect, end to end: sides -> factors -> environments -> search -> report (a plain dict).

This is what `regdiag bisect` calls and what other code (the demo, the benchmark) calls too; it
knows nothing of typer or rich. Progress goes to an optional callback as small dicts.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regdiag.bisect.envs import Built
from regdiag.bisect.factors import Factor, checkout, diff, load_side, select
from regdiag.bisect.journal import Journal, default_path
from regdiag.bisect.kinds import KINDS, Where, kind_of
from regdiag.bisect.lab import Lab, builder_for
from regdiag.bisect.loaded import (
    check_before,
    clear_or_refuse,
    cleared_line,
    measured_by,
    package_factors,
    unloaded,
)
from regdiag.bisect.measure import Launch
from regdiag.bisect.node_envs import NodeBuilder, each_node
from regdiag.bisect.report import build_report
from regdiag.bisect.search import Options, Outcome, Search
from regdiag.engine.keeper import LaunchPools, refuse_reuse_args
from regdiag.errors import BadInput
from regdiag.hosts.base import Host
from regdiag.hosts.local import LocalHost
from regdiag.measure.probes import probe_loads
from regdiag.measure.starts import start_check, start_warning
from regdiag.run_view import usable
from regdiag.snapshot.redact import redact_tree


@dataclass
class Request:
    good: str
    bad: str
    command: str | None = None  # a shell-like command line speaking the probe protocol
    probe: str | None = None  # a probe name, e.g. "spec-decode"
    probe_args: list[str] = field(default_factory=list)
    metric: str = "cycle"
    repo: str | None = None
    setup: str | None = None
    find_links: str | None = None
    index_url: str | None = None
    python: str | None = None
    installer: str = "auto"
    launches: int = 3
    max_launches: int = 9
    margin: float = 0.02
    min_share: float = 0.1
    launch_timeout: float = 600.0
    allow_unloaded: bool = False  # measure package factors the measurement never loads (see bisect/loaded.py)
    journal: str | None = None
    resume: bool = False
    allow_code_from_record: bool = False  # a side's record may set PYTHONPATH, LD_PRELOAD, ...
    # Launches of the two endpoints measured moments ago by `regdiag probe` with this very probe and
    # these args (the demo does this): {"good": [launch records], "bad": [...]}. Never from old runs:
    # the endpoints are measured here and now precisely to check that the regression reproduces.
    seed_endpoints: dict[str, list[dict[str, Any]]] | None = None
    ignore: list[str] = field(default_factory=list)  # --ignore PATTERN: differences not bisected
    only: list[str] = field(default_factory=list)  # --only PATTERN: the differences bisected
    cold: bool = False  # --cold: every launch a fresh interpreter (else forked from its point's warm one)
    # --lanes: "auto" (the host's nodes, each a lane, at once; this machine or an SSH host: one lane),
    # "serial" (the same lanes, one launch at a time), "gpu" (this machine's GPU groups: bisect/lanes.py)
    lanes: str = "auto"

    def sides(self) -> dict[str, Any]:
        """What `--resume --journal J` alone reads back from the journal to make the same plan."""
        return {"good": self.good, "bad": self.bad, "ignore": list(self.ignore), "only": list(self.only)}

    def inputs(
        self, factors: Sequence[Factor], fixed_env: dict[str, str | None], host: str | None = None
    ) -> dict[str, Any]:
        """What a resumed bisect must agree on with the journal it continues (`host`: the remote host
        the bisect runs on, None for this machine)."""
        out = {
            "factors": [f.to_dict() for f in factors],
            "fixed_env": fixed_env,
            "command": self.command,
            "probe": self.probe,
            "probe_args": list(self.probe_args),
            "metric": self.metric,
            "repo": os.path.realpath(self.repo) if self.repo else None,
            "setup": self.setup,
            "find_links": os.path.realpath(self.find_links) if self.find_links else None,
            "index_url": self.index_url,
            "python": self.python,
            "launches": self.launches,
            "max_launches": self.max_launches,
            "margin": self.margin,
            "min_share": self.min_share,
        }
        if self.lanes != "auto":  # the rounds' shape: a resume plans alike (absent: the journals before it)
            out["lanes"] = self.lanes
        if host is not None:
            # Paths (--repo, --find-links) are the host's: kept as given, not resolved here.
            out.update({"host": host, "repo": self.repo, "find_links": self.find_links})
        return out


def argv_builder(req: Request, host: Host | None = None) -> Callable[[Built, int], list[str]]:
    """(environment, launch index) -> argv of one launch; on a remote host a --probe runs from the
    bundle regdiag uploads there (`PYTHON BUNDLE probe NAME ARGS`)."""
    if bool(req.command) == bool(req.probe):
        raise BadInput("give exactly one of --probe NAME or --command CMD")
    if req.command:
        try:
            template = shlex.split(req.command)
        except ValueError as e:
            raise BadInput(f"--command: cannot split {req.command!r}: {e}") from None
        if not template:
            raise BadInput("--command is empty")
        return lambda built, index: [built.python if tok == "{python}" else tok for tok in template]
    if req.probe in MEASURED_BY_REGDIAG:
        if host is not None and is_remote(host):
            raise BadInput(
                f"--probe {req.probe} over --host: run regdiag on that host (its --host does the SSH)"
            )
        return engine_argv(req)
    from regdiag.measure.probes import probe_script

    args = list(req.probe_args)
    script = probe_script(str(req.probe)).name  # an unknown probe is refused here, before anything runs
    where = host or LocalHost(req.python)
    # Each launch gets its own index, as in `regdiag probe` (the probe seeds its inputs with it); the
    # host says how its launches run regdiag's probes (a local script, the bundle it was sent).
    return ProbeArgv(where, script, args)


class ProbeArgv:
    """The argv of launch `index` of a regdiag probe in environment `built`: regdiag's own code, so the
    launch checks that the host's interpreter started (measure.launch.launch, `regdiag_code`)."""

    regdiag_code = True

    def __init__(self, where: Host, script: str, args: list[str]) -> None:
        self.where, self.script, self.args = where, script, args

    def __call__(self, built: Built, index: int) -> list[str]:
        entry = ["probe", self.script, *self.args, "--launch-index", str(index)]
        return self.where.regdiag_argv(entry, built.python)

    def on(self, node: Host) -> ProbeArgv:
        """The same launches on `node`, one of the host's lanes (an SSH host's bundle is its own)."""
        return ProbeArgv(node, self.script, self.args)


# Measurements that are regdiag commands of their own, run once per launch in the environment's
# interpreter: `regdiag probe engine --protocol` (the user's engine, its phases timed by the hook).
MEASURED_BY_REGDIAG = ("engine",)


def engine_argv(req: Request) -> EngineArgv:
    """One launch of `regdiag probe engine` with the environment's interpreter as the engine's: its
    --python, and `{python}` (or the base interpreter's path) in --launch-cmd, become the built one."""
    args = list(req.probe_args)
    if any(a.split("=")[0] in ("--host", "--python", "-L", "--launches", "--protocol") for a in args):
        raise BadInput(
            "--probe engine: --host, --python, --launches and --protocol are the bisect's to set; "
            "give --python to bisect itself and {python} in --launch-cmd"
        )
    refuse_reuse_args(args)
    base = req.python or sys.executable
    return EngineArgv(args, {base, os.path.realpath(base)})


class EngineArgv:
    """Launch `index` of `probe engine` in environment `built` (a fresh engine start each: `__call__`),
    or the options of its environment's keeper, whose launches share engine starts (engine/keeper.py,
    through engine.keeper.LaunchPools.engines)."""

    def __init__(self, args: list[str], bases: set[str]) -> None:
        self.args, self.bases = args, bases
        # a served engine (--url) takes launches as windows; a command that runs to its end cannot
        self.reusable = any(a == "--url" or a.startswith("--url=") for a in args)

    def keeper_args(self, built: Built) -> list[str]:
        def sub(arg: str) -> str:
            words = [built.python if w in self.bases else w for w in arg.split(" ")]
            return " ".join(words).replace("{python}", built.python)

        return ["--python", built.python, *[sub(a) for a in self.args]]

    def __call__(self, built: Built, index: int) -> list[str]:
        own = ["probe", "engine", "--protocol", "-L", "1"]
        return [sys.executable, "-m", "regdiag", *own, *self.keeper_args(built)]


def is_remote(host: Host | None) -> bool:
    """Environments for `host` are built there, and paths given are its (the host says)."""
    return host is not None and not host.builds_here


def _check(req: Request, remote: bool = False) -> None:
    if req.launches < 2:
        raise BadInput("--launches must be at least 2 (a spread needs two launches)")
    if req.max_launches < req.launches:
        raise BadInput("--max-launches must be at least --launches")
    if not 0 <= req.margin < 1:
        raise BadInput("--margin must be a fraction in [0, 1), e.g. 0.02")
    if req.find_links and not remote and not Path(req.find_links).is_dir():
        raise BadInput(f"--find-links {req.find_links}: no such directory")


@dataclass
class Plan:
    """What a bisect works on, decided from the two sides before anything is built or measured."""

    factors: list[Factor]
    fixed_env: dict[str, str | None]  # env vars both sides set alike: set so in every launch
    same_packages: dict[str, str]  # packages at one version on both sides
    notes: list[str]
    where: Where  # the checkout, the package index and the interpreter the bisect builds from


def make_plan(req: Request, host: Host | None = None) -> Plan:
    """Check the request, load the two sides and turn their differences into factors; each kind refuses
    what cannot be bisected here (and may normalize). BadInput (exit 2) for what cannot be bisected."""
    remote = is_remote(host)
    _check(req, remote)
    good = load_side(req.good, "--good", req.allow_code_from_record)
    bad = load_side(req.bad, "--bad", req.allow_code_from_record)
    d = diff(good, bad)
    if d.factors:
        d = select(d, req.ignore, req.only)
    if not d.factors:
        raise BadInput(
            "--good and --bad do not differ in any package, env var or commit that a bisect can change"
        )
    # a record's checkout path is never taken on its own (factors.checkout); on a host it is not a path there
    repo = req.repo if remote else checkout(req.repo, d.factors, good, bad)
    base_python = host.python if (remote and host is not None) else (req.python or sys.executable)
    where = Where(repo, req.find_links, req.index_url, base_python, host if remote else None)
    factors = [
        g for name, kind in KINDS.items() for g in kind.check([f for f in d.factors if f.kind == name], where)
    ]
    return Plan(factors, d.same_env, d.same_packages, list(d.notes), where)


def version_notes(same: dict[str, str], base: dict[str, str], remote: bool) -> list[str]:
    """A package at one version on both sides but another where the bisect runs (`base`): the bisect
    runs with the one it finds, and the report says so."""
    notes = []
    for name, version in sorted(same.items()):
        here = base.get(name)
        if here != version:
            notes.append(
                f"{name} is {version} on both sides but {here or 'not installed'} here; "
                "the bisect runs with " + ("that host's" if remote else "this machine's")
            )
    return notes


def run_bisect(
    req: Request,
    progress: Callable[[dict[str, Any]], None] | None = None,
    host: Host | None = None,
) -> dict[str, Any]:
    t0 = time.monotonic()
    remote = is_remote(host)
    plan = make_plan(req, host)
    argv_for = argv_builder(req, host)
    builder = builder_for(req, plan.where.repo, host if remote else None)
    path = Path(req.journal) if req.journal else default_path()
    notes = list(plan.notes)
    if plan.same_packages:
        notes += version_notes(plan.same_packages, builder.base_versions(), remote)
    host_name = host.name if remote and host is not None else None
    inputs = req.inputs(plan.factors, plan.fixed_env, host_name)
    # how --resume reaches the same place: {} this machine, {"host": NAME}, {"slurm": N, "slurm_args": ...}
    inputs["target"] = host.reopen() if remote and host is not None else {}
    fewer = fewer_hosts(path, inputs) if req.resume else None
    if fewer:
        notes.append(fewer)
    where = host or LocalHost(req.python)
    lanes = lanes_for(req, where, remote)  # before the journal: --lanes gpu without a GPU leaves none
    journal = Journal(path, inputs, req.resume, req.sides(), req.allow_code_from_record)
    try:
        if progress:
            progress(
                {
                    "event": "start",
                    "journal": str(path),
                    "factors": [f.label() for f in plan.factors],
                    "resumed": journal.resumed,
                }
            )
        lab = Lab(
            plan.factors,
            builder,
            where,
            argv_for,
            journal,
            req.metric,
            launch_timeout=req.launch_timeout,
            progress=progress,
            fixed_env=plan.fixed_env,
            lanes=lanes,
            parallel=req.lanes != "serial",
        )
        if progress:
            progress({"event": "lanes", "text": lanes_line(lab)})
        clear = None
        if not req.allow_unloaded:
            lab.on_endpoint = _loaded_check(plan, req, notes)
            before = _preflight(lab, req, host or LocalHost(req.python), remote, progress)
            clear = _clearing(lab, req, before)
        if req.seed_endpoints and not journal.resumed:
            _seed(lab, req.seed_endpoints)
        outcome = _search(lab, req, plan, clear)
        notes += start_notes(lab)
        report = _final_report(outcome, lab, req, notes, plan, time.monotonic() - t0)
        journal.end(report)
        return report
    finally:
        journal.close()  # a --resume, in this process or another, may open it now


def _search(
    lab: Lab, req: Request, plan: Plan, clear: Callable[[], list[tuple[Factor, str]]] | None
) -> Outcome:
    """The search, with each point's warm parent per lane (a GPU lane's parent is started pinned to its
    GPUs; CUDA is first touched in the forked child) and its engine's keeper, stopped on every way out.
    A round holds up to three points."""
    options = Options(req.launches, req.max_launches, req.margin, req.min_share)
    between = lambda f: kind_of(f).values_between(f, plan.where)  # noqa: E731
    with LaunchPools(keep=max(6, 3 * lab.width), enabled=not req.cold) as lab.warm:
        # --probe engine: the endpoints' launches include a second engine start (the independence
        # check); another point's launches share one start. Over several lanes each launch starts its
        # engine (one engine alive at a time: a keeper stopped for another lane's would end its launch).
        lab.warm.engines.checked = {lab.key(lab.good()), lab.key(lab.bad())}
        if lab.width > 1 and lab.warm.engines.enabled:
            lab.warm.engines.enabled = False
            lab.warm.engines.off_why = f"{lab.width} lanes: each launch starts its own engine"
        return Search(lab, options, between, clear).run()


LANES = ("auto", "serial", "gpu")


def lanes_for(req: Request, host: Host, remote: bool) -> list[Host]:
    """The lanes of the bisect's launches (bisect/lanes.py); BadInput for --lanes gpu off this machine or
    without a GPU."""
    if req.lanes not in LANES:
        raise BadInput(f"--lanes {req.lanes!r}: give one of {', '.join(LANES)}")
    if req.lanes != "gpu":
        return host.nodes()
    if remote:
        raise BadInput("--lanes gpu: this machine's GPUs only (under --slurm the lanes are its nodes)")
    from regdiag.hosts.gpu_lanes import gpu_lanes
    from regdiag.measure.needs import gpu_need

    return list(gpu_lanes(gpu_need(req.probe, req.probe_args).count, req.python))


def fewer_hosts(path: Path, inputs: dict[str, Any]) -> str | None:
    """A resume on some of the hosts the journal's bisect ran on (`--host a` of a bisect over a and b, one
    of them gone): the journal's place kept in `inputs`, so that it is the same bisect, and the hosts
    left out said. None where the resume is on the same place (or on another, refused by the journal)."""
    try:
        with open(path, encoding="utf-8") as f:
            head = json.loads(f.readline())
        was = dict(head["inputs"]["target"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    had, now = was.get("hosts"), inputs["target"]
    given = now.get("hosts") or ([now["host"]] if isinstance(now.get("host"), str) else [])
    if not isinstance(had, list) or not given or set(given) == set(had) or not set(given) <= set(had):
        return None
    inputs["target"], inputs["host"] = was, head["inputs"].get("host")
    left = [h for h in had if h not in given]
    return f"resumed on {', '.join(given)}: {', '.join(left)} of the journal's hosts left out"


def lanes_line(lab: Lab) -> str:
    """ "1 lane (gpu0)", "4 lanes (n1, n2, n3, n4), at once": what the start of a bisect says."""
    names = ", ".join(la.name for la in lab.lanes)
    builds = f"; {each_node(lab.builder)}" if isinstance(lab.builder, NodeBuilder) else ""
    if lab.width == 1:
        return f"1 lane ({names}){builds}"
    return (
        f"{lab.width} lanes ({names}), "
        + ("at once" if lab.parallel else "one launch at a time (--lanes serial)")
        + builds
    )


def start_notes(lab: Lab) -> list[str]:
    """--probe engine: per endpoint, the independence check of its launches that shared engine starts
    (engine/reuse.py), a note when launches of one start varied less than launches of different starts."""
    notes = []
    for side, point in (("good", lab.good()), ("bad", lab.bad())):
        launches = [la.to_dict() for la in lab.launches(point)]
        if any(la.get("start") == "reused" for la in launches):
            warning = start_warning(start_check(launches, lab.metric))
            if warning:
                notes.append(f"the {side} endpoint: {warning}")
    return notes


def _preflight(
    lab: Lab, req: Request, host: Host, remote: bool, progress: Callable[..., None] | None
) -> list[Factor]:
    """Before any launch, in the bad endpoint's environment (built now): bisect/loaded.check_before,
    the package factors the probe's processes do not load (BadInput when that is every factor)."""
    if remote or probe_loads(req.probe) is None or not package_factors(lab.factors):
        return []  # the endpoints' own launches are checked instead (on a host: the bundle's probe)
    built = lab.environment(lab.bad())
    if built is None:
        return []  # the bad side cannot be built: the search says so in its own words
    env = {**built.process_env(), **{k: v for k, v in lab.fixed_env.items() if v is not None}}
    return check_before(lab.factors, req.probe, built.python, env, host, progress)


def _bad_loaded(lab: Lab) -> list[dict[str, str]] | None:
    """What the bad endpoint's first launch that succeeded loaded, as it (or the journal) says."""
    first = lab.launches(lab.bad())[:1]
    return first[0].loaded if first else None


def _loaded_check(plan: Plan, req: Request, notes: list[str]) -> Callable[[str, Launch], None]:
    """After the bad endpoint's first launch: refuse when no factor it loads is left (before any other
    launch is spent), a note when it does not say what it loaded. The bad endpoint has every factor at
    its bad value: what it loads is what counts."""
    told: list[bool] = []

    def check(side: str, launch: Launch) -> None:
        if side != "bad" or told:
            return
        told.append(True)
        names = ", ".join(f.name for f in package_factors(plan.factors))
        if names and not isinstance(launch.loaded, list):
            notes.append(
                f"{measured_by(req.probe)} does not say what it loaded: cannot tell whether it loads {names}"
            )
        elif names:
            clear_or_refuse(plan.factors, unloaded(plan.factors, launch.loaded or []), measured_by(req.probe))

    return check


def _clearing(lab: Lab, req: Request, before: list[Factor]) -> Callable[[], list[tuple[Factor, str]]]:
    """After the endpoints: the package factors cleared without a launch (bisect/loaded.py), those the
    probe's imports do not load (found before any launch) and those the bad endpoint's launch did not
    load (as journalled: a resumed bisect clears the same), each with the line the report shows."""
    by = measured_by(req.probe)

    def clear() -> list[tuple[Factor, str]]:
        loaded = _bad_loaded(lab)
        after = unloaded(lab.factors, loaded) if isinstance(loaded, list) else []
        keys = {f.key for f in [*before, *after]}
        gone = clear_or_refuse(lab.factors, [f for f in lab.factors if f.key in keys], by)
        return [(f, cleared_line(f, by)) for f in gone]

    return clear


def _final_report(
    outcome: Outcome, lab: Lab, req: Request, notes: list[str], plan: Plan, wall_s: float
) -> dict[str, Any]:
    """The report as it is journalled and returned: each culprit's factors annotated by their kind,
    redacted like a snapshot."""
    report = build_report(outcome, lab, req.metric, notes, wall_s=wall_s, max_launches=req.max_launches)
    report["fixed_env"] = plan.fixed_env
    for c in report["culprits"]:
        for f in c["factors"]:
            KINDS[f["kind"]].annotate(f, plan.where)
    report["journal"] = str(lab.journal.path)
    return redact_tree(report)


def _seed(lab: Lab, seed: dict[str, list[dict[str, Any]]]) -> None:
    from regdiag.bisect.measure import Launch, medians

    for side, point in (("good", lab.good()), ("bad", lab.bad())):
        key = lab.key(point)
        ok = [la for la in seed.get(side, []) if usable(la) and la["samples"].get(lab.metric)]
        for la in ok:
            samples = la["samples"]
            launch = Launch(
                "ok", medians(samples), len(samples[lab.metric]), float(la.get("duration_s") or 0.0), 0
            )
            index = len(lab.journal.launches.get(key, []))
            lab.journal.launch(
                key, index, launch, lab.label(point), source=f"{side} run, launch {la.get('index')}"
            )
