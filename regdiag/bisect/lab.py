"""Points of a bisect and their measurements: build the environment, run launches, journal them.

A point gives every factor a value (its good value, its bad value, or for an ordered factor a value
in between). Its key is a hash of those values and of the build inputs, so the journal of one
bisect names each point the same way in every session.

`samples(point, n)` is the only way the search sees data: the first n launches of that point. A
resumed search asks the same questions in the same order, finds the answers in the journal, and
measures only what was never finished.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
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
from regdiag.bisect.measure import Launch, launch_argv, run_launch
from regdiag.bisect.remote_envs import RemoteBuilder
from regdiag.errors import BadInput, RegdiagError
from regdiag.host_phantom import OthersLoad
from regdiag.hosts.base import Host
from regdiag.measure.warm import WarmPool

Point = tuple[str | None, ...]  # one value per factor, in factor order
ArgvFor = Callable[[Built, int], list[str]]  # (environment, launch index) -> argv
Progress = Callable[[dict[str, Any]], None]
EnvBuilder = Builder | RemoteBuilder  # builds on this machine, or on a host over SSH


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
        remote = RemoteBuilder(
            host,
            repo=repo,
            setup=req.setup,
            find_links=req.find_links,
            index_url=req.index_url,
            installer=req.installer,
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
        # The share of this machine's CPUs other work took during each launch run here (None: not
        # told); launches on another host are not counted (host_phantom.OthersLoad).
        self.others_pct: list[float | None] = []
        self.points_used: set[str] = set()
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
        return Sample(key, [la.medians[self.metric] for la in have[:n]])

    def better(self) -> str:
        """The metric's direction as a measured launch declared it, else the unit/name fallback."""
        ways = {la.better for lst in self.journal.launches.values() for la in lst if la.better}
        return ways.pop() if len(ways) == 1 else direction.inferred(self.metric, "")

    def launches(self, p: Point, n: int | None = None) -> list[Launch]:
        have = self.journal.launches.get(self.key(p), [])
        return [la for la in (have if n is None else have[:n]) if la.status == "ok"]

    def ensure(self, targets: Sequence[tuple[Point, int]]) -> None:
        """Measure until each point has n launches (or is SKIP), taking turns: A B C A B C ..."""
        while True:
            pending = []
            for p, n in targets:
                key = self.key(p)
                have = len(self.journal.launches.get(key, []))
                if have < n and self._failure(key, have) is None and (p, n) not in pending:
                    pending.append((p, n))
            if not pending:
                return
            self._prestart([p for p, _ in pending])
            for p, n in pending:
                key = self.key(p)
                if len(self.journal.launches.get(key, [])) < n and self._failure(key, n) is None:
                    self._launch_one(p, key)

    def environment(self, p: Point) -> Built | None:
        """The point's environment, built (or found built) now; None when it cannot be (SKIP)."""
        return self._environment(p, self.key(p))

    def _environment(self, p: Point, key: str) -> Built | None:
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

    def _rebuild(self, p: Point, key: str, built: Built) -> None:
        """Build the point's environment again and run the launch there, once."""
        why = "was removed while in use (a `regdiag clean`?); building it again"
        self.progress({"event": "note", "text": f"{self.label(p)}: its environment {built.root} {why}"})
        self.built.pop(key, None)
        self._launch_one(p, key, again=True)

    def _vanished(self, built: Built) -> bool:
        """The environment's interpreter is gone from where it was built (asked of its builder)."""
        if built.root is None:
            return False
        try:
            return not self.builder.present(built.python)
        except RegdiagError:
            return False  # cannot tell: the launch's own failure stands

    def _skip_point(self, p: Point, key: str, why: StepFailed) -> None:
        """A point that cannot be set up: journalled as its environment's SKIP, never tried again."""
        self.journal.env(
            key, {"label": self.label(p), "values": self.values(p), "status": "skip", "reason": str(why)}
        )
        self.progress({"event": "skip", "label": self.label(p), "reason": str(why)})

    def _run_launch(
        self, key: str, built: Built, index: int, env: dict[str, str], unset: list[str]
    ) -> Launch:
        """Launch `index` of point `key` in its environment `built`, timed, on the node it runs on:
        forked from the point's warm parent where it has one (the warm parent's start is not timed)."""
        node = self.host.for_launch(index)  # launch i of every point on one node: a block
        argv, how = launch_argv(self.warm, self.argv_for, key, node, built, index, env, unset)
        t0 = time.monotonic()
        cwd, timeout = built.worktree, self.launch_timeout
        own = getattr(self.argv_for, "regdiag_code", False)  # a regdiag probe (bisect.run.ProbeArgv)
        with OthersLoad() as load:
            launch = run_launch(
                node, argv, self.metric, env=env, unset=unset, cwd=cwd, timeout=timeout, regdiag_code=own
            )
        if node.builds_here and launch.status == "ok":
            self.others_pct.append(load.pct)
        launch.duration_s = time.monotonic() - t0
        launch.placement = node.placement()
        launch.start = how
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
            node = self.host.for_launch(index)
            where = {"cwd": built.worktree, "python": built.python}
            wanted.append({"key": key, "host": node, "script": script, "env": env, "unset": unset, **where})
        self.warm.prestart(wanted)

    def _launch_one(self, p: Point, key: str, again: bool = False) -> None:
        built = self._environment(p, key)
        if built is None:
            return
        if not again and self._vanished(built):
            # Removed since it was built (a `regdiag clean` beside this bisect). A bare `python` in a
            # --command would fall through PATH to the base interpreter and measure the wrong packages.
            self._rebuild(p, key, built)
            return
        index = len(self.journal.launches.get(key, []))
        env = self._env(key, built, index)
        self.progress({"event": "launch", "label": self.label(p), "index": index, "run": self.launches_run})
        try:
            with LaunchSetup(dict(self.fixed_env)) as setup:
                for f, v in zip(self.factors, p, strict=True):
                    kind_of(f).apply(f, v, setup)
                env.update({k: v for k, v in setup.variables.items() if v is not None})
                unset = [k for k, v in setup.variables.items() if v is None]
                launch = self._run_launch(key, built, index, env, unset)
        except StepFailed as e:
            self._skip_point(p, key, e)
            return
        if launch.status != "ok" and not again and self._vanished(built):
            self._rebuild(p, key, built)  # removed during the launch: that failure is not evidence
            return
        self.journal.launch(key, index, launch, self.label(p))
        self.launches_run += 1
        if launch.failure == MetricMissing.kind and launch.medians:
            # The probe ran and spoke the protocol but has no such metric: a typo in --metric, not an
            # environment that fails. Say so now rather than after measuring both endpoints.
            have = ", ".join(sorted(launch.medians))
            raise BadInput(f"--metric {self.metric!r}: the probe reports {have}")
        if launch.status != "ok":
            self.progress({"event": "skip", "label": self.label(p), "reason": launch.error})
        elif self.on_endpoint is not None and p in (self.good(), self.bad()):
            self.on_endpoint("good" if p == self.good() else "bad", launch)
