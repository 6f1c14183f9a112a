"""Points of a bisect and their measurements: build the environment, run launches, journal them.

A point gives every factor a value (its good value, its bad value, or for an ordered factor a value
in between). Its key is a hash of those values and of the build inputs, so the journal of one
bisect names each point the same way in every session.

`samples(point, n)` is the only way the search sees data: the first n launches of that point. A
resumed search asks the same questions in the same order, finds the answers in the journal, and
measures only what was never finished.

Lanes (bisect/lanes.py): launch i of every point runs on lane i mod L (a Slurm node, a GPU group, this
machine alone). `ensure` runs a round's launches at once, one thread per lane (bisect/rounds.py); a
launch lost to its lane (a node gone DOWN, a cancelled step: the host raises a HostError while the run
goes on) is journalled as a fault, not as the point's launch, and runs again on another lane; a lane is
dropped after FAULTS_PER_LANE faults, or at once when its node went DOWN.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from regdiag import direction
from regdiag.bisect.envs import Builder, Built
from regdiag.bisect.factors import Factor
from regdiag.bisect.failures import BuildFailed, MetricMissing, StepFailed
from regdiag.bisect.journal import Journal
from regdiag.bisect.kinds import BuildPlan, LaunchSetup, kind_of
from regdiag.bisect.lanes import blocked, levels, slow_lane
from regdiag.bisect.measure import Launch, launch_argv, run_launch
from regdiag.bisect.node_envs import NodeBuilder, on_node, per_node, present_on
from regdiag.bisect.remote_envs import RemoteBuilder
from regdiag.bisect.rounds import Round, run_round
from regdiag.errors import BadInput, HostError, RegdiagError
from regdiag.host_phantom import OthersLoad
from regdiag.hosts.base import Host
from regdiag.measure.warm import WarmPool

Point = tuple[str | None, ...]  # one value per factor, in factor order
ArgvFor = Callable[[Built, int], list[str]]  # (environment, launch index) -> argv
Progress = Callable[[dict[str, Any]], None]
EnvBuilder = Builder | RemoteBuilder | NodeBuilder  # here, on a host over SSH, or on each node of one
Job = tuple[Point, str, int]  # a point, its key, the index of its launch
FAULTS_PER_LANE = 2  # a lane is dropped after this many launches lost to it


class BuildInputs(Protocol):
    """What a request (bisect's, an A/B run's) says about building its environments."""

    setup: str | None
    find_links: str | None
    index_url: str | None
    python: str | None
    installer: str


def builder_for(req: BuildInputs, repo: str | None, host: Host | None = None) -> EnvBuilder:
    """The builder of a request's environments: on `host` over SSH, checked there before anything is
    measured (exit 2 for what cannot work on it), or on this machine (host None), layered on the
    request's --python (default: this interpreter)."""
    if host is not None:
        remote = per_node(
            RemoteBuilder(
                host,
                repo=repo,
                setup=req.setup,
                find_links=req.find_links,
                index_url=req.index_url,
                installer=req.installer,
            ),
            host,
        )
        remote.check()
        return remote
    return Builder(
        base_python=req.python or sys.executable,
        repo=repo,
        setup=req.setup,
        find_links=req.find_links,
        index_url=req.index_url,
        installer=req.installer,
    )


@dataclass
class Sample:
    """What the search gets back for one point: n launch values of the metric, or why there are none."""

    key: str
    values: list[float] | None
    failure: StepFailed | None = None
    lanes: list[str | None] | None = None  # the lane of each value (None: one lane)


def lane_free(groups: Mapping[str, Sample]) -> dict[str, list[float]]:
    """The samples' values with their lanes' levels taken out (bisect/lanes.py: each comparison paired
    within a lane); samples that carry no lanes as they are."""
    return blocked(
        {
            g: (s.values or [], s.lanes if s.lanes is not None else [None] * len(s.values or []))
            for g, s in groups.items()
        }
    )


class Lab:
    def __init__(
        self,
        factors: Sequence[Factor],
        builder: EnvBuilder,
        host: Host,
        argv_for: ArgvFor,
        journal: Journal,
        metric: str,
        launch_timeout: float | None = None,
        progress: Progress | None = None,
        fixed_env: Mapping[str, str | None] | None = None,
        on_endpoint: Callable[[str, Launch], None] | None = None,
        lanes: Sequence[Host] | None = None,
        parallel: bool = True,
    ) -> None:
        self.factors = list(factors)
        self.builder = builder
        self.host = host
        self.argv_for = argv_for
        self.journal = journal
        self.metric = metric
        self.launch_timeout = launch_timeout
        self.progress = progress or (lambda ev: None)
        self.fixed_env = dict(fixed_env or {})
        # Called with ("good" | "bad", launch) after each endpoint launch that succeeded: the check
        # that the measurement loads every package factor (regdiag.bisect.loaded) raises there.
        self.on_endpoint = on_endpoint
        self.built: dict[str, Built] = {}
        # Each point's warm parent, its launches forked from it (measure/warm.py); None: all cold.
        # Whoever makes the Lab closes it (run_bisect: on every way out).
        self.warm: WarmPool | None = None
        self.launches_run = 0
        self.launches_started = 0  # the progress line's count: launches of one round start together
        # The share of this machine's CPUs other work took during each launch run here (None: not
        # told); launches on another host are not counted (host_phantom.OthersLoad).
        self.others_pct: list[float | None] = []
        self.points_used: set[str] = set()
        # Where launches run: the host's nodes (a Slurm allocation), GPU groups, or the host alone. The
        # rounds are planned for all of them (`width`), whatever faults drop on the way.
        self.lanes: list[Host] = list(lanes) if lanes is not None else list(host.nodes())
        self.width = len(self.lanes)
        self.parallel = parallel
        self.dropped: dict[str, str] = {}  # lane -> why it takes no more launches
        self.stopping = False  # an interruption is ending the round: a lane's failure then is ours
        self.lane_faults: dict[str, int] = {}
        self.rerun: dict[str, dict[str, int]] = {}  # lane -> {lane its launches ran on again: count}
        self._lock = threading.RLock()  # the journal, the counts and the builds, shared by the lanes
        # A remote builder names its interpreter by host and path (a path there means nothing here).
        identity = getattr(builder, "identity", None)
        python = identity() if identity is not None else os.path.abspath(builder.base_python)
        self._base = json.dumps(
            {"python": python, "repo": builder.repo, "setup": builder.setup}, sort_keys=True
        )
        base_path = getattr(builder, "base_path", None)
        self._base_path: Callable[[], str] = base_path or (lambda: os.environ.get("PATH", ""))

    # -- naming ----------------------------------------------------------------------------------

    def good(self) -> Point:
        return tuple(f.good for f in self.factors)

    def bad(self) -> Point:
        return tuple(f.bad for f in self.factors)

    def with_values(self, base: Point, changes: Mapping[str, str | None]) -> Point:
        return tuple(changes.get(f.key, v) for f, v in zip(self.factors, base, strict=True))

    def key(self, p: Point) -> str:
        blob = json.dumps([self._base, [[f.key, v] for f, v in zip(self.factors, p, strict=True)]])
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def label(self, p: Point) -> str:
        changed = [f.show(v) for f, v in zip(self.factors, p, strict=True) if v != f.good]
        return "good" if not changed else ("bad" if p == self.bad() else ", ".join(changed))

    def values(self, p: Point) -> dict[str, dict[str, Any]]:
        return {
            f.key: {"kind": f.kind, "name": f.name, "value": v} for f, v in zip(self.factors, p, strict=True)
        }

    def host_cpus(self) -> int | None:
        """The CPUs of the machine the counted launches ran on (this one), None when none did."""
        return (os.cpu_count() or None) if self.others_pct else None

    # -- measuring -------------------------------------------------------------------------------

    def _failure(self, key: str, n: int) -> StepFailed | None:
        if key in self.journal.env_skip:
            return BuildFailed(self.journal.env_skip[key])
        for la in self.journal.launches.get(key, [])[:n]:
            if (why := la.failed()) is not None:
                return why
        return None

    def samples(self, p: Point, n: int) -> Sample:
        key = self.key(p)
        self.points_used.add(key)
        have = self.journal.launches.get(key, [])
        why = self._failure(key, n)
        if why is not None:
            return Sample(key, None, why)
        if len(have) < n:
            raise RuntimeError("samples() before ensure()")
        lanes = [la.lane for la in have[:n]] if self.width > 1 else None
        return Sample(key, [la.medians[self.metric] for la in have[:n]], lanes=lanes)

    def better(self) -> str:
        """The metric's direction as a measured launch declared it, else the unit/name fallback."""
        ways = {la.better for lst in self.journal.launches.values() for la in lst if la.better}
        return ways.pop() if len(ways) == 1 else direction.inferred(self.metric, "")

    def launches(self, p: Point, n: int | None = None) -> list[Launch]:
        have = self.journal.launches.get(self.key(p), [])
        return [la for la in (have if n is None else have[:n]) if la.status == "ok"]

    def ensure(self, targets: Sequence[tuple[Point, int]]) -> None:
        """Measure until each point has n launches (or is SKIP): one round, taking turns (A B C A B C ...),
        launch i on lane i mod L, the lanes at once."""
        while True:
            jobs = self._pending(targets)
            if not jobs:
                return
            if self.width == 1:
                self._prestart(list(dict.fromkeys(p for p, _k, _i in jobs)))
            for p, key, _i in jobs:  # built here, one at a time, before the lanes start
                self._environment(p, key)
            rnd: Round[Job] = Round(
                [lane.name for lane in self.lanes], [(self.lane_for(i).name, (p, k, i)) for p, k, i in jobs]
            )
            run_round(rnd, functools.partial(self._work, rnd), self.parallel, self._stop)

    def _pending(self, targets: Sequence[tuple[Point, int]]) -> list[Job]:
        """The launches the targets still need, in the order they take turns: the j-th missing launch of
        every point before the (j+1)-th of any."""
        want: dict[str, tuple[Point, int]] = {}
        for p, n in targets:
            key = self.key(p)
            want[key] = (p, max(n, want.get(key, (p, 0))[1]))
        turns: list[tuple[int, int, Job]] = []
        for order, (key, (p, n)) in enumerate(want.items()):
            have = len(self.journal.launches.get(key, []))
            if have >= n or self._failure(key, have) is not None:
                continue
            missing = [i for i in range(have, n) if not self.journal.has(key, i)]
            turns += [(j, order, (p, key, i)) for j, i in enumerate(missing)]
        return [job for _j, _o, job in sorted(turns, key=lambda t: (t[0], t[1]))]

    def lane_for(self, index: int) -> Host:
        """The lane launch `index` of every point runs on: i mod L, a dropped lane's turn on the next live one."""
        lane = self.lanes[index % self.width]
        if lane.name not in self.dropped:
            return lane
        live = self._live()
        if not live:
            raise HostError("every lane was dropped: " + "; ".join(self.dropped.values()))
        return live[index % len(live)]

    def _live(self, but: str | None = None) -> list[Host]:
        return [la for la in self.lanes if la.name not in self.dropped and la.name != but]

    def _stop(self) -> None:
        """An interruption during a round: end every lane's process at once (the host's close)."""
        self.stopping = True
        for lane in self.lanes:
            kill = getattr(lane, "kill_running", None)
            if kill is not None:
                kill()
        self.host.close()

    def _work(self, rnd: Round[Job], lane_name: str, job: Job) -> None:
        """One launch of a round on its lane; a fault of the lane moves it to another."""
        p, key, index = job
        with self._lock:
            if self.journal.has(key, index) or self._failure(key, index) is not None:
                return  # the point failed meanwhile: the rest of its round is not evidence
        lane = next(la for la in self.lanes if la.name == lane_name)
        try:
            self._launch_one(p, key, index, lane)
        except HostError as e:
            if self.stopping:
                return  # ended by the interruption (the host closed under it): no fault, measured again on resume
            if getattr(self.host, "ended", None) is not None or not self._live(but=lane_name):
                self._lost(lane, job, e)
                raise  # the allocation ended, or no other lane: the run's failure, as before lanes
            self._fault(rnd, lane, job, e)

    def _lost(self, lane: Host, job: Job, e: HostError) -> None:
        """A launch lost as the run ends (its allocation's end: scancel, TIMEOUT): journalled as a fault,
        never as the point's launch, so `--resume` measures it again."""
        if not hasattr(e, "at"):
            return  # not a fault Slurm named (a dropped SSH connection): its line says it
        with self._lock:
            at = self.launches_run + 1
            what = e.at(f"at launch {at}")
            self.journal.fault({"point": job[1], "index": job[2], "lane": lane.name, "what": what, "at": at})

    def _fault(self, rnd: Round[Job], lane: Host, job: Job, e: HostError) -> None:
        """Launch `job` was lost to `lane`: journalled as a fault, run again on the next live lane; the
        lane is dropped after FAULTS_PER_LANE of them, or at once when its node went DOWN."""
        p, key, index = job
        with self._lock:
            at = self.launches_run + 1
            self.lane_faults[lane.name] = self.lane_faults.get(lane.name, 0) + 1
            others = self._live(but=lane.name)
            after = [la for la in others if self.lanes.index(la) > self.lanes.index(lane)]
            to = (after or others)[0]
            said = str(e) if str(e).startswith(f"{lane.name}: ") else f"{lane.name}: {e}"
            what = e.at(f"at launch {at}") if hasattr(e, "at") else f"{said} at launch {at}"
            record = {
                "point": key,
                "index": index,
                "lane": lane.name,
                "what": what,
                "at": at,
                "again_on": to.name,
            }
            self.journal.fault(record)
            self._count_rerun(lane.name, to.name)
            down = "went DOWN" in str(e) or lane.unavailable() is not None  # a node DOWN, a lost host
            dropped = down or self.lane_faults[lane.name] >= FAULTS_PER_LANE
            if dropped and lane.name not in self.dropped:
                self.dropped[lane.name] = what
                for dest in rnd.drop(lane.name, lambda i: others[i % len(others)].name):
                    self._count_rerun(lane.name, dest)
        self._say({"event": "note", "text": f"{what}; its launch runs again on {to.name}"})
        if dropped:
            self._say({"event": "note", "text": f"lane {lane.name} dropped: no more launches there"})
        rnd.move(job, to.name)

    def _count_rerun(self, lane: str, to: str) -> None:
        moved = self.rerun.setdefault(lane, {})
        moved[to] = moved.get(to, 0) + 1

    def _say(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.progress(event)

    def lanes_report(self) -> dict[str, Any] | None:
        """The lanes as the report names them: each lane's level, the slow one, the faults and where their
        launches ran again; None when the host itself was the one lane and nothing faulted."""
        if self.width <= 1 and not self.journal.faults and self.lanes[0] is self.host:
            return None  # the host alone: nothing to say about lanes
        rows = [
            (key, la.lane, la.medians[self.metric])
            for key in sorted(self.points_used)
            for la in self.journal.launches.get(key, [])
            if la.status == "ok" and la.lane and self.metric in la.medians
        ]
        slow = slow_lane(rows)
        notes = []
        if slow is not None:
            notes.append(
                f"lane {slow['lane']} ran {slow['slower']:.2f}x slower than the median lane: each comparison "
                "was paired within a lane, so it moved no point"
            )
        firsts: dict[str, str] = {}
        for f in self.journal.faults:
            firsts.setdefault(str(f.get("lane")), str(f.get("what")))
        for lane, what in firsts.items():
            moved = self.rerun.get(lane) or {}
            n = sum(moved.values())
            where = ", ".join(sorted(moved)) or "another lane"
            tail = f"; its {n} launch{'es' if n != 1 else ''} were run again on {where}" if n else ""
            notes.append(f"{what}{tail}")
        return {
            "count": self.width,
            "names": [la.name for la in self.lanes],
            "parallel": self.parallel and self.width > 1,
            "levels": levels(rows),
            "slow_lane": slow,
            "faults": [
                {k: f.get(k) for k in ("lane", "what", "point", "index", "at", "again_on")}
                for f in self.journal.faults
            ],
            "dropped": dict(self.dropped),
            "notes": notes,
        }

    def environment(self, p: Point) -> Built | None:
        """The point's environment, built (or found built) now; None when it cannot be (SKIP)."""
        return self._environment(p, self.key(p))

    def _environment(self, p: Point, key: str) -> Built | None:
        with self._lock:
            return self._build(p, key)

    def _build(self, p: Point, key: str) -> Built | None:
        if key in self.built:
            return self.built[key]
        plan = BuildPlan()
        for f, v in zip(self.factors, p, strict=True):
            kind_of(f).prepare(f, v, plan)
        self.progress({"event": "build", "label": self.label(p)})
        record: dict[str, Any] = {"label": self.label(p), "values": self.values(p)}
        try:
            built = self.builder.build(plan.packages, plan.commit)
        except BuildFailed as e:
            self.journal.env(key, {**record, "status": "skip", "reason": str(e)})
            self.progress({"event": "skip", "label": self.label(p), "reason": str(e)})
            return None
        self.journal.env(
            key,
            {**record, "status": "ok", "env": built.key, "cached": built.cached, "build_s": built.build_s},
        )
        self.built[key] = built
        return built

    def _rebuild(self, p: Point, key: str, built: Built, index: int, lane: Host) -> None:
        """Build the point's environment again and run the launch there, once."""
        why = "was removed while in use (a `regdiag clean`?); building it again"
        self._say({"event": "note", "text": f"{self.label(p)}: its environment {built.root} {why}"})
        with self._lock:
            self.built.pop(key, None)
        self._launch_one(p, key, index, lane, again=True)

    def _vanished(self, built: Built, lane: Host) -> bool:
        """The environment's interpreter is gone from where `lane` runs it (asked of its builder)."""
        if built.root is None:
            return False
        try:
            return not present_on(self.builder, built.python, lane)
        except RegdiagError:
            return False  # cannot tell: the launch's own failure stands

    def _skip_point(self, p: Point, key: str, why: StepFailed) -> None:
        """A point that cannot be set up: journalled as its environment's SKIP, never tried again."""
        with self._lock:
            if key in self.journal.env_skip:
                return
            self.journal.env(
                key, {"label": self.label(p), "values": self.values(p), "status": "skip", "reason": str(why)}
            )
            self.progress({"event": "skip", "label": self.label(p), "reason": str(why)})

    def _run_launch(
        self, key: str, built: Built, index: int, env: dict[str, str], unset: list[str], node: Host
    ) -> Launch:
        """Launch `index` of point `key` in its environment `built`, timed, on its lane `node`:
        forked from the point's warm parent where it has one (the warm parent's start is not timed)."""
        argv, how = launch_argv(self.warm, self.argv_for, key, node, built, index, env, unset)
        t0 = time.monotonic()
        cwd, timeout = built.worktree, self.launch_timeout
        own = getattr(self.argv_for, "regdiag_code", False)  # a regdiag probe (bisect.run.ProbeArgv)
        with OthersLoad() as load:
            launch = run_launch(
                node, argv, self.metric, env=env, unset=unset, cwd=cwd, timeout=timeout, regdiag_code=own
            )
        if node.builds_here and launch.status == "ok" and self.width == 1:
            self.others_pct.append(load.pct)  # beside other lanes, their launches are not "other work"
        launch.duration_s = time.monotonic() - t0
        launch.placement = node.placement()
        launch.start = how
        if self.width > 1:
            launch.lane = node.name
        return launch

    def _env(self, key: str, built: Built, index: int) -> dict[str, str]:
        """Launch `index` of point `key`'s variables, before its factors' own."""
        env = dict(built.process_env(self._base_path()))
        if "PATH" not in env and os.path.dirname(built.python):
            # `python` in a --command means the environment's interpreter, the base one included.
            env["PATH"] = os.pathsep.join([os.path.dirname(built.python), self._base_path()])
        env["REGDIAG_BISECT_POINT"] = key
        env["REGDIAG_LAUNCH_INDEX"] = str(index)
        if built.worktree:
            env["REGDIAG_BISECT_WORKTREE"] = built.worktree
        return env

    def _prestart(self, points: Sequence[Point]) -> None:
        """The warm parents of points measured in turn, started side by side before their launches
        (each imports torch once; in parallel that wait is paid once). A factor of a kind other than
        `variables_only` applies at the launch; should its variables differ, the pool starts that parent
        again."""
        script = getattr(self.argv_for, "script", None)
        if self.warm is None or script is None or len(points) < 2:
            return
        wanted = []
        for p in points:
            key = self.key(p)
            built = self._environment(p, key)
            if built is None:
                continue
            index = len(self.journal.launches.get(key, []))
            with LaunchSetup(dict(self.fixed_env)) as setup:
                for f, v in zip(self.factors, p, strict=True):
                    if kind_of(f).variables_only:
                        kind_of(f).apply(f, v, setup)
            variables = setup.variables
            env = {**self._env(key, built, index), **{k: v for k, v in variables.items() if v is not None}}
            unset = [k for k, v in variables.items() if v is None]
            node = self.lane_for(index)
            built = on_node(self.builder, built, node)
            where = {"cwd": built.worktree, "python": built.python}
            wanted.append({"key": key, "host": node, "script": script, "env": env, "unset": unset, **where})
        self.warm.prestart(wanted)

    def _launch_one(self, p: Point, key: str, index: int, lane: Host, again: bool = False) -> None:
        built = self._environment(p, key)
        if built is None:
            return
        try:
            built = on_node(self.builder, built, lane)  # its copy on the lane's node (node-local caches)
        except BuildFailed as e:
            self._skip_point(p, key, e)
            return
        if not again and self._vanished(built, lane):
            # Removed since it was built (a `regdiag clean` beside this bisect). A bare `python` in a
            # --command would fall through PATH to the base interpreter and measure the wrong packages.
            self._rebuild(p, key, built, index, lane)
            return
        env = self._env(key, built, index)
        with self._lock:
            self.launches_started += 1
            started = self.launches_started
        said = {"label": self.label(p), "index": index, "run": self.launches_run, "started": started}
        self._say({"event": "launch", **said, "lane": lane.name if self.width > 1 else None})
        try:
            with LaunchSetup(dict(self.fixed_env)) as setup:
                for f, v in zip(self.factors, p, strict=True):
                    kind_of(f).apply(f, v, setup)
                env.update({k: v for k, v in setup.variables.items() if v is not None})
                unset = [k for k, v in setup.variables.items() if v is None]
                launch = self._run_launch(key, built, index, env, unset, lane)
        except StepFailed as e:
            self._skip_point(p, key, e)
            return
        if launch.status != "ok" and not again and self._vanished(built, lane):
            self._rebuild(
                p, key, built, index, lane
            )  # removed during the launch: that failure is not evidence
            return
        with self._lock:
            self.journal.launch(key, index, launch, self.label(p))
            self.launches_run += 1
        if launch.failure == MetricMissing.kind and launch.medians:
            # The probe ran and spoke the protocol but has no such metric: a typo in --metric, not an
            # environment that fails. Say so now rather than after measuring both endpoints.
            have = ", ".join(sorted(launch.medians))
            raise BadInput(f"--metric {self.metric!r}: the probe reports {have}")
        if launch.status != "ok":
            self._say({"event": "skip", "label": self.label(p), "reason": launch.error})
        elif self.on_endpoint is not None and p in (self.good(), self.bad()):
            with self._lock:
                self.on_endpoint("good" if p == self.good() else "bad", launch)
