"""`regdiag ab`: two environments measured in one run, launches interleaved A B B A A B B A ...

Two runs measured one after the other differ by whatever the machine did in between (warming up,
filling its page cache, a neighbour starting): `compare` cannot tell that drift from a change
(docs/statistics.md, "Drift"). Interleaving puts the two launches of each pair side by side in time,
so a drift moves both and the paired comparison sees only the difference.

A side is a spec like bisect's (`'sgl-kernel==0.3.5 NCCL_PROTO=LL commit=bba2fc4'`, a snapshot or a
run record). The sides' differences are factors of bisect's kinds (regdiag/bisect/kinds/), asked as
the lab asks them: `check` refuses what cannot be measured here (one line, exit 2), `prepare` says
what a side needs built (bisect's builder, cached), `apply` sets what a launch needs (variables, GPU
clocks) and undoes it after. No kind is named here. The output is one `regdiag.run/1` record per
side, each launch written as it finishes, with its place in the run (`order`), its pair (`pair`),
where it ran (`node`, on a host of several nodes) and the run's `design`, which names every
difference between the sides (docs/records.md); `compare` recognises the two halves and uses the
pairing.

On a host of several nodes (a Slurm allocation, docs/fleet.md) pair p runs on node p mod n, A and B
back to back on that node in an order balanced per node, the nodes in parallel; a node that fails
costs only its own pairs.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regdiag.bisect.envs import BuildFailed, Built
from regdiag.bisect.factors import Factor, Spec, checkout, diff, load_side, select
from regdiag.bisect.kinds import KINDS, BuildPlan, LaunchSetup, Where, kind_of
from regdiag.bisect.lab import EnvBuilder, builder_for
from regdiag.bisect.loaded import check_before, check_launch
from regdiag.bisect.measure import launch_argv
from regdiag.bisect.node_envs import NodeBuilder, each_node, on_node
from regdiag.bisect.run import Request as BisectRequest
from regdiag.bisect.run import argv_builder
from regdiag.engine.keeper import LaunchPools
from regdiag.errors import BadInput, HostError, ProbeError
from regdiag.hosts.base import CommandResult, Host
from regdiag.measure.launch import UsageAbort, launch, measure_launch
from regdiag.measure.nodes import NodeFailed
from regdiag.measure.probe import new_probe_run, trace_args
from regdiag.measure.session import Session, warn
from regdiag.measure.starts import note_start_check
from regdiag.measure.stream import LaunchStream, adopt_header, env_for_record
from regdiag.measure.warm import WarmPool
from regdiag.runs import RunWriter
from regdiag.snapshot.redact import scrub_text

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
    allow_code_from_record: bool = False  # a side's record may set PYTHONPATH, LD_PRELOAD, ...
    allow_unloaded: bool = False  # measure package factors the measurement never loads (bisect/loaded.py)
    ignore: list[str] = field(default_factory=list)  # --ignore PATTERN: differences set as A has them
    only: list[str] = field(default_factory=list)  # --only PATTERN: the differences measured
    cold: bool = False  # --cold: every launch a fresh interpreter (else forked from its side's warm one)


@dataclass
class Side:
    label: str
    spec: Spec
    values: list[str | None]  # one per factor: the good (A) or bad (B) value
    built: Built | None = None


@dataclass
class AbPlan:
    factors: list[Factor]
    fixed_env: dict[str, str | None]  # what both sides set alike: set so in every launch
    sides: dict[str, Side]
    repo: str | None


@dataclass
class AbResult:
    paths: dict[str, Path]
    runs: dict[str, dict[str, Any]]


def make_plan(req: AbRequest, host: Host) -> AbPlan:
    """The two sides as factors of bisect's kinds, each kind checking its own (exit 2 for what cannot be
    measured here: a GPU clock without NVML, a commit without --repo)."""
    a, b, d = _sides(req)
    if d.factors and (req.ignore or req.only):
        d = select(d, req.ignore, req.only)
    here = host.builds_here
    # A record's checkout path is never taken on its own (factors.checkout); on a host it is not a path there.
    repo = checkout(req.repo, d.factors, a, b) if here else req.repo
    python = (req.python or host.python) if here else host.python
    where = Where(repo, req.find_links, req.index_url, python, None if here else host)
    factors = [
        g for name, kind in KINDS.items() for g in kind.check([f for f in d.factors if f.kind == name], where)
    ]
    sides = {
        "A": Side("A", a, [f.good for f in factors]),
        "B": Side("B", b, [f.bad for f in factors]),
    }
    return AbPlan(factors, dict(d.same_env), sides, repo)


def _sides(req: AbRequest) -> tuple[Spec, Spec, Any]:
    """The two specs as given (files read, specs parsed) and their difference; bad input refused."""
    # An empty spec is this environment as it is (the usual A of "does this one change matter?").
    allow = req.allow_code_from_record
    a = load_side(req.a, "--a", allow) if req.a.strip() else Spec(source="this environment")
    b = load_side(req.b, "--b", allow) if req.b.strip() else Spec(source="this environment")
    if (a.commit is None) != (b.commit is None):
        raise BadInput("commit= is given for one side only: give the engine commit of both sides")
    d = diff(a, b)
    if d.notes:
        # A difference that cannot be reproduced here: measuring anyway would compare something else.
        raise BadInput(f"--a and --b: {d.notes[0]}")
    return a, b, d


def precheck(req: AbRequest) -> None:
    """What can be refused before any host is opened (no Slurm allocation is asked for bad input): the
    launches, --probe / --command, both sides' specs."""
    _check_launches(req)
    argv_builder(_measured(req), None)
    _sides(req)


def _measured(req: AbRequest) -> BisectRequest:
    """The measurement of both sides, as a bisect's request says it (argv_builder reads it)."""
    return BisectRequest(
        good=req.a,
        bad=req.b,
        command=req.command,
        probe=req.probe,
        probe_args=req.probe_args,
        python=req.python,
    )


def _check_launches(req: AbRequest) -> None:
    if req.launches < 2:
        raise BadInput("--launches must be at least 2 per side (a paired comparison needs two pairs)")


def _check(req: AbRequest, host: Host) -> None:
    _check_launches(req)
    if req.find_links and host.builds_here and not Path(req.find_links).is_dir():
        raise BadInput(f"--find-links {req.find_links}: no such directory")
    if req.command and not (host.builds_here or host.shares_files):
        raise BadInput(f"a --command runs on this machine; on {host.name} give --probe")


def run_ab(req: AbRequest, host: Host | None = None, progress: Progress | None = None) -> AbResult:
    """Measure A and B interleaved (ABBA), one record per side; see the module docstring."""
    from regdiag.hosts.local import LocalHost

    emit = progress or (lambda ev: None)
    host = host or LocalHost(req.python)
    _check(req, host)
    plan = make_plan(req, host)
    argv_for = argv_builder(_measured(req), host)
    builder = builder_for(req, plan.repo, None if host.builds_here else host)
    _build(plan, builder, emit)
    b = plan.sides["B"].built
    if not req.allow_unloaded and host.builds_here and b is not None:
        env = {**b.process_env(), **{k: v for k, v in plan.fixed_env.items() if v is not None}}
        check_before(plan.factors, req.probe, b.python, env, host, emit)
    writers = _writers(req, host, plan)
    # The paths shown and returned: -o PREFIX's copies when asked for (the names the user chose), else the store's.
    emit({"event": "start", "paths": {k: str(w.also or w.path) for k, w in writers.items()}})
    try:
        with Session(
            host, list(writers.values()), req.snapshot, lambda when: emit({"event": "snapshot", "when": when})
        ):
            # each side's warm parent (its engine's keeper), stopped on every way out
            with LaunchPools(enabled=not req.cold) as pool:
                try:
                    Pairs(req, host, plan, writers, argv_for, builder, emit, pool).run()
                finally:
                    for label, w in writers.items():
                        if label in pool.starts:
                            w.run["probe"]["start"] = pool.starts[label]
                        if label in pool.engines.starts:  # --probe engine: shared engine starts
                            w.run["probe"]["start"] = pool.engines.starts[label]
                            note_start_check(w.run)
    except UsageAbort:
        for w in writers.values():
            w.discard()  # nothing was measured: leave no record behind
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
        w.finish("partial" if w.run["design"].get("ended") else None)  # cut short: both halves say so
    return AbResult({k: w.also or w.path for k, w in writers.items()}, {k: w.run for k, w in writers.items()})


def _build(plan: AbPlan, builder: EnvBuilder, emit: Progress) -> None:
    """Each side's environment, as its kinds prepare it; one that cannot be built is bad input (exit 2)."""
    for s in plan.sides.values():
        bp = BuildPlan()
        for f, v in zip(plan.factors, s.values, strict=True):
            kind_of(f).prepare(f, v, bp)
        emit({"event": "build", "side": s.label})
        try:
            s.built = builder.build(bp.packages, bp.commit)
        except BuildFailed as e:
            raise BadInput(f"side {s.label}: cannot build its environment: {e}") from None
    if isinstance(builder, NodeBuilder) and any(s.built and s.built.root for s in plan.sides.values()):
        emit({"event": "note", "text": each_node(builder)})


def differences(plan: AbPlan) -> list[dict[str, Any]]:
    """Every difference between the two specs, of any kind, as both records name it (compare shows it)."""
    return [
        {"kind": f.kind, "name": f.name, "A": f.show(f.good), "B": f.show(f.bad), "label": f.label()}
        for f in plan.factors
    ]


def _writers(req: AbRequest, host: Host, plan: AbPlan) -> dict[str, RunWriter]:
    """One run record per side, written at once: its design names the pair, the side, every difference
    and the other side's record, so either half leads to the whole A/B run."""
    pair_id = secrets.token_hex(6)
    name = req.probe or "command"
    writers: dict[str, RunWriter] = {}
    for s in plan.sides.values():
        run = new_probe_run(name, host, req.probe_args)
        if req.command:
            run["probe"]["command"] = scrub_text(req.command)
        run["design"] = {
            "kind": "interleaved",
            "order": "ABBA",
            "pair_id": pair_id,
            "side": s.label,
            "spec": _spec_for_record(s.spec),
            "launches_per_side": req.launches,
            "differences": differences(plan),
        }
        run["env"] = {}
        path = f"{req.output}-{s.label.lower()}.json" if req.output else None
        writers[s.label] = RunWriter(None, run, also=path)  # -o PREFIX: a copy beside the stored run
    for label, other in (("A", "B"), ("B", "A")):
        writers[label].run["design"]["other"] = str(writers[other].path)
        writers[label].flush()
    return writers


def _spec_for_record(spec: Any) -> dict[str, Any]:
    """A side's spec as a record may hold it: env values through the snapshot's redaction rules."""
    d = spec.to_dict()
    given = {k: v for k, v in d["env"].items() if v is not None}
    kept = env_for_record(given)
    d["env"] = {k: (None if v is None else kept[k]) for k, v in d["env"].items()}
    return d


def pair_plan(pairs: int, nodes: int) -> list[list[tuple[int, str]]]:
    """Per node, its pairs in the order they run: pair p on node p mod n, and on each node the pairs
    alternate AB, BA, AB, ... so that the order is balanced on every node (one node: A B B A A B ...)."""
    lanes: list[list[tuple[int, str]]] = [[] for _ in range(nodes)]
    for p in range(pairs):
        lane = lanes[p % nodes]
        lane.append((p, "AB" if len(lane) % 2 == 0 else "BA"))
    return lanes


class Pairs:
    """The launches of an A/B run: the pairs laid out over the host's nodes, run, and recorded."""

    def __init__(
        self,
        req: AbRequest,
        host: Host,
        plan: AbPlan,
        writers: dict[str, RunWriter],
        argv_for: Callable[[Built, int], list[str]],
        builder: EnvBuilder,
        emit: Progress,
        pool: WarmPool | None = None,
    ) -> None:
        self.req, self.host, self.plan, self.writers = req, host, plan, writers
        self.pool = pool
        self.how: dict[tuple[str, int], str] = {}  # (side, pair) -> how its launch started
        self.argv_for, self.emit = argv_for, emit
        self.builder = builder
        base_path = getattr(builder, "base_path", None)
        self.base_path: Callable[[], str] = base_path or (lambda: os.environ.get("PATH", ""))
        self.lock = threading.Lock()
        self.order = 0
        self.adopted: set[str] = set()
        self.loaded_checked = False  # B's first launch loaded every package factor (bisect/loaded.py)
        self.total = 2 * req.launches
        self.at: dict[str, int] = {}  # each node's latest launch (its place in the run, 0-based)
        self.ended_at: int | None = None  # the first launch that found the host's allocation ended

    def run(self) -> None:
        from regdiag.measure.nodes import fit_nodes, run_lanes

        nodes = self.host.nodes()
        if len(nodes) == 1:
            try:
                self.lane(nodes[0], pair_plan(self.req.launches, 1)[0], alone=True)
            except HostError:
                if self.host.ended is None:
                    raise
                self.cut_short()
            return
        nodes, unfit, snaps = fit_nodes(nodes, lambda ev: self.emit({"event": "health", **ev}))
        for w in self.writers.values():
            w.run["node_snapshots"] = snaps  # each node's own, taken on it before the design
        lanes = pair_plan(self.req.launches, len(nodes))
        jobs = [lambda n=n, lane=lane: self.lane(n, lane) for n, lane in zip(nodes, lanes, strict=True)]
        failed = run_lanes(nodes, jobs, stop=self.host.close, on_fail=self._node_failed)
        for w in self.writers.values():
            w.run["design"]["nodes"] = {
                n.name: [p for p, _ in lane] for n, lane in zip(nodes, lanes, strict=True)
            }
        end = self.host.ended
        if end is not None:  # scancel, TIMEOUT: the lanes still running ended with it
            what = str(getattr(end, "what", end))
            record_node_failures(
                self.writers, {**unfit, **{k: v for k, v in failed.items() if what not in v}}
            )
            self.cut_short()
            return
        record_node_failures(self.writers, {**unfit, **failed})
        if len(failed) == len(nodes):
            raise ProbeError(f"every node failed: {'; '.join(f'{k}: {v}' for k, v in failed.items())}")

    def _node_failed(self, name: str, why: str) -> None:
        """Said as it happens; the allocation's end (every lane's) is said once, by the run."""
        if self.host.ended is None:
            self.emit({"event": "node_failed", "node": name, "why": why})

    def lane(self, node: Host, pairs: list[tuple[int, str]], alone: bool = False) -> None:
        """One node's pairs, back to back. Alone (the only node), a failed launch ends the run as in
        `regdiag probe`; on a node of several it raises NodeFailed and costs only this node."""
        for pair, order in pairs:
            down = None if alone else node.unavailable()
            if down is not None:
                raise NodeFailed(f"{down} before pair {pair}")
            for label in order:
                try:
                    why = self.launch(node, label, pair)
                except HostError as e:  # the node went DOWN, the allocation ended: named by the host
                    at = self.at.get(node.name, 0)
                    with self.lock:
                        if self.host.ended is not None:
                            self.ended_at = min(at, self.ended_at if self.ended_at is not None else at)
                    raise HostError(at_launch(e, at)) from None
                if why is None:
                    continue
                if alone:
                    w = self.writers
                    raise ProbeError(
                        f"side {label}, launch {pair} failed: {why} (the launches before it are kept in "
                        f"{w['A'].path} and {w['B'].path})"
                    )
                raise NodeFailed(f"side {label}, launch {pair}: {why}")

    def launch(self, node: Host, label: str, pair: int) -> str | None:
        """One launch of side `label` as pair `pair`'s half, on `node`; why it failed, or None."""
        s, w = self.plan.sides[label], self.writers[label]
        with self.lock:
            pos, self.order = self.order, self.order + 1
            self.at[node.name] = pos
        where = node.placement()
        self.emit({"event": "launch", "side": label, "index": pair, "order": pos, "of": self.total, **where})

        def keep(la: dict[str, Any]) -> None:
            la["order"] = pos  # place in the whole A/B run, 0-based (the start order)
            la["pair"] = pair  # launch k of A and launch k of B ran back to back, on one node
            la.setdefault("start", self.how.get((label, pair), "cold"))  # warm: forked (measure/warm.py)
            with self.lock:
                w.add_launch(la)

        with LaunchSetup(dict(self.plan.fixed_env)) as setup:
            for f, v in zip(self.plan.factors, s.values, strict=True):
                kind_of(f).apply(f, v, setup)
            self._record_env(w, setup.variables)

            once = self._prepare(node, s, setup.variables, pair)  # a warm parent starts here, untimed

            def start(stream: LaunchStream) -> CommandResult:
                return once(stream)

            launch, stream, why = measure_launch(pair, start, self.req.launch_timeout, keep, None, where)
        with self.lock:
            measured = any(la["status"] == "ok" for x in self.writers.values() for la in x.run["launches"])
            if why is not None and (stream.error or {}).get("kind") == "usage" and not measured:
                raise UsageAbort(why)
            if stream.header is not None and label not in self.adopted:
                self.adopted.add(label)
                adopt_header(w.run, stream.header)
        keep(launch)
        self.emit({"event": "launch_end", "side": label, "index": pair, "launch": launch})
        if label == "B" and why is None and not self.req.allow_unloaded and not self.loaded_checked:
            self.loaded_checked = True
            note = check_launch(self.plan.factors, launch.get("loaded"), self.req.probe)
            if note:
                warn(self.writers["B"], note)
        return why

    def cut_short(self) -> None:
        """The allocation ended under the run (scancel, TIMEOUT): what was measured is the result, said
        so in both records, when it holds two complete pairs; fewer end the run (exit 4)."""
        ended = at_launch(self.host.ended, self.ended_at or 0)
        done = complete_pairs(self.writers)
        note = f"{ended}: the result is from the {done} complete pairs measured before it"
        for w in self.writers.values():
            warn(w, note)
            w.run["design"]["ended"] = ended
            w.flush()
        self.emit({"event": "ended", "why": note})
        if done < 2:
            w = self.writers
            raise HostError(
                f"{ended}; {done} complete pair(s) measured, too few to compare (kept in {w['A'].path} "
                f"and {w['B'].path})"
            )

    def _record_env(self, w: RunWriter, variables: dict[str, str | None]) -> None:
        """The variables a side's launches get, as its record says (redacted like a snapshot)."""
        with self.lock:
            w.run["env"] = env_for_record({k: v for k, v in variables.items() if v is not None})

    def _prepare(
        self, node: Host, s: Side, variables: dict[str, str | None], index: int
    ) -> Callable[[LaunchStream], CommandResult]:
        """Launch `index` of side `s` on `node`, ready to run: forked from the side's warm parent (started
        now at its first launch) where the measurement is a regdiag probe, else a fresh process."""
        assert s.built is not None
        built = on_node(self.builder, s.built, node)  # its copy on the node (node-local caches)
        env = dict(built.process_env(self.base_path()))
        if "PATH" not in env and os.path.dirname(built.python):
            # `python` in a --command means the environment's interpreter, the base one included.
            env["PATH"] = os.pathsep.join([os.path.dirname(built.python), self.base_path()])
        env.update({k: v for k, v in variables.items() if v is not None})
        env["REGDIAG_AB_SIDE"] = s.label
        env["REGDIAG_LAUNCH_INDEX"] = str(index)
        unset = [k for k, v in variables.items() if v is None]
        extra = trace_args(self.req.probe_args, Path(self.writers[s.label].path), index, node)
        argv, how = launch_argv(self.pool, self.argv_for, s.label, node, built, index, env, unset, extra)
        self.how[(s.label, index)] = how
        own = getattr(self.argv_for, "regdiag_code", False)
        cwd, timeout = built.worktree, self.req.launch_timeout
        return lambda stream: launch(
            node, argv, stream, env=env, unset=unset, cwd=cwd, timeout=timeout, regdiag_code=own
        )


def at_launch(fault: BaseException | None, pos: int) -> str:
    """A host's fault with where in the run it struck (hosts/slurm_state.py: "n3 went DOWN at launch 14
    (reason)"); `pos` is the launch's place in the run, 0-based."""
    where = f"at launch {pos + 1}"
    at = getattr(fault, "at", None)
    return at(where) if at is not None else f"{fault} {where}"


def complete_pairs(writers: dict[str, RunWriter]) -> int:
    """The pairs whose two halves both measured."""
    ok = [{la.get("pair") for la in w.run["launches"] if la.get("status") == "ok"} for w in writers.values()]
    return len(set.intersection(*ok) - {None})


def record_node_failures(writers: dict[str, RunWriter], failed: dict[str, str]) -> None:
    """Each failed node, named with why, in both records (its pairs are left out by the pairing)."""
    for w in writers.values():
        for node, why in failed.items():
            warn(w, f"node {node} failed: {why}; its pairs are left out")
        w.run["design"]["failed_nodes"] = dict(failed)
        w.flush()
