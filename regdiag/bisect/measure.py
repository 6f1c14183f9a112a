"""One launch: one process of the probe (or the user's --command) in one environment, reduced.

The process speaks the probe protocol on stdout (docs/probes.md): a header line, one
{"type": "cycle", "t": {metric: ms}} line per cycle (warm-up and bare cycles are marked and left
out), a footer, or an error line. Parsing and the failure rules are regdiag.measure's
(LaunchStream), so a launch here means exactly what it means in `regdiag probe`. A launch is reduced
to the median of each metric over its kept cycles: that is all a bisect keeps of it.

Exit status 125 means "this environment cannot be tested" (git bisect's convention): the point is
SKIP, like one that fails to build.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from regdiag import direction
from regdiag.bisect.envs import Built
from regdiag.bisect.failures import (
    CannotTest,
    LaunchFailed,
    MetricMissing,
    ProbeUsage,
    StepFailed,
    failure,
)
from regdiag.hosts.base import Host
from regdiag.measure.launch import launch
from regdiag.measure.stream import LaunchStream
from regdiag.measure.warm import WarmPool
from regdiag.snapshot.redact import scrub_text

SKIP_EXIT = 125
STARTS = ("warm", "cold", "fresh", "reused")  # how a launch started (see launch_argv)
USAGE = "probe usage: "


@dataclass
class Launch:
    """What the journal keeps of one launch: per-metric medians (ms) over its kept cycles."""

    status: str  # "ok" | "error" | "skip"
    medians: dict[str, float]
    cycles: int
    duration_s: float
    returncode: int
    error: str | None = None
    failure: str | None = None  # the kind of regdiag.bisect.failures class of a failed launch
    better: str | None = None  # the metric's direction as the probe declared it (regdiag/direction.py)
    # The distributions the measured process loaded, as its footer says ({name, version, path});
    # None when it did not say (a --command of the user's, an old journal).
    loaded: list[dict[str, str]] | None = None
    placement: dict[str, Any] | None = None  # where it ran beyond the host (Slurm: node, allocation)
    profile: dict[str, Any] | None = (
        None  # `-- --profile`: the probe's per-phase profile (probes/_profile.py)
    )
    # "warm" (forked from its environment's warm parent) or "cold"; an engine's "fresh" or "reused"
    start: str | None = None
    engine_config: dict[str, Any] | None = None  # --probe engine: what the engine chose at start
    lane: str | None = None  # the lane it ran on (a Slurm node, a GPU group: bisect/lanes.py)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "medians": self.medians,
            "cycles": self.cycles,
            "duration_s": round(self.duration_s, 4),
            "returncode": self.returncode,
            "error": self.error,
            "failure": self.failure,
            "better": self.better,
            "loaded": self.loaded,
            **({"placement": self.placement} if self.placement else {}),
            **({"profile": self.profile} if self.profile else {}),
            **({"start": self.start} if self.start else {}),
            **({"engine_config": self.engine_config} if self.engine_config else {}),
            **({"lane": self.lane} if self.lane else {}),
        }

    def failed(self) -> StepFailed | None:
        """Why this launch gives no value, as the exception the search handles; None when it does."""
        if self.status == "ok":
            return None
        return failure(
            self.failure or (CannotTest.kind if self.status == "skip" else None), self.error or self.status
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Launch:
        return cls(
            status=str(d.get("status")),
            medians={str(k): float(v) for k, v in (d.get("medians") or {}).items()},
            cycles=int(d.get("cycles") or 0),
            duration_s=float(d.get("duration_s") or 0.0),
            returncode=int(d.get("returncode") or 0),
            error=d.get("error"),
            failure=d.get("failure"),
            better=d.get("better"),
            loaded=loaded_list(d.get("loaded")),
            placement=d.get("placement") if isinstance(d.get("placement"), dict) else None,
            profile=d.get("profile") if isinstance(d.get("profile"), dict) else None,
            start=d.get("start") if d.get("start") in STARTS else None,
            engine_config=d.get("engine_config") if isinstance(d.get("engine_config"), dict) else None,
            lane=d.get("lane") if isinstance(d.get("lane"), str) else None,
        )


def loaded_list(value: Any) -> list[dict[str, str]] | None:
    """A footer's or journal's `loaded` list, kept only in its documented shape."""
    if not isinstance(value, list):
        return None
    return [
        {k: str(d[k]) for k in ("name", "version", "path") if isinstance(d.get(k), str)}
        for d in value
        if isinstance(d, dict) and isinstance(d.get("name"), str)
    ]


def medians(samples: Mapping[str, Sequence[float]]) -> dict[str, float]:
    return {k: float(statistics.median(v)) for k, v in samples.items() if v}


def launch_argv(
    pool: WarmPool | None,
    argv_for: Callable[[Built, int], list[str]],
    key: str,
    node: Host,
    built: Built,
    index: int,
    env: Mapping[str, str],
    unset: Sequence[str],
    extra: Sequence[str] = (),
) -> tuple[list[str], str]:
    """The argv of launch `index` in environment `built` (named `key`) on `node`, and how it starts: a
    regdiag probe (bisect.run.ProbeArgv) forks from the environment's warm parent in `pool` ("warm");
    `--probe engine` (bisect.run.EngineArgv) is a window of the environment's engine, started for it
    ("fresh") or shared with its earlier launches ("reused"; engine/keeper.py); a --command, or a
    parent that could not start, runs as a fresh process ("cold"). `extra`:
    options of this launch's own (where its profile's trace goes)."""
    script = getattr(argv_for, "script", None)
    keeper_args = getattr(argv_for, "keeper_args", None)
    engines = getattr(pool, "engines", None)  # engine.keeper.LaunchPools
    if engines is not None and keeper_args is not None and getattr(argv_for, "reusable", False):
        # --probe engine with --url: launches share engine starts
        argv, how = engines.argv(
            key, node, keeper_args(built), index, env=env, unset=unset, cwd=built.worktree
        )
        if argv is not None:
            return argv, how
    if pool is not None and script is not None:
        args = [*getattr(argv_for, "args", []), "--launch-index", str(index), *extra]
        argv, how = pool.argv(
            key, node, script, args, env=env, unset=unset, cwd=built.worktree, python=built.python
        )
        if argv is not None:
            return argv, how
    on = getattr(argv_for, "on", None)  # a regdiag probe: run from the lane's own copy of regdiag's code
    return [*(on(node) if on is not None else argv_for)(built, index), *extra], "cold"


def run_launch(
    host: Host,
    argv: Sequence[str],
    metric: str,
    *,
    env: Mapping[str, str] | None = None,
    unset: Sequence[str] = (),
    cwd: str | None = None,
    timeout: float | None = None,
    regdiag_code: bool = False,
) -> Launch:
    stream = LaunchStream()
    t0 = time.monotonic()
    res = launch(
        host, argv, stream, env=env, unset=unset, cwd=cwd, timeout=timeout, regdiag_code=regdiag_code
    )
    took = time.monotonic() - t0
    got = stream.to_launch()
    samples = got["samples"]
    meds = medians(samples)
    n = len(samples.get(metric, []))
    rc = res.returncode
    if rc == SKIP_EXIT and not res.timed_out:
        return Launch("skip", meds, n, took, rc, "exited 125 (cannot be tested)", CannotTest.kind)
    why = stream.failure(res, timeout)
    if why is not None:
        if (stream.error or {}).get("kind") == "usage":
            return Launch("error", meds, n, took, rc, scrub_text(USAGE + why), ProbeUsage.kind)
        return Launch("error", meds, n, took, rc, scrub_text(why), LaunchFailed.kind)
    if metric not in meds:
        have = ", ".join(meds) or "none"
        why = f"no metric {metric!r} in the output (has {have})"
        return Launch("error", meds, 0, took, rc, why, MetricMissing.kind)
    loaded = loaded_list((stream.footer or {}).get("loaded"))
    better = direction.of_header(metric, stream.header)
    return Launch(
        "ok",
        meds,
        n,
        took,
        rc,
        better=better,
        loaded=loaded,
        profile=got.get("profile"),
        engine_config=got.get("engine_config"),
    )
