"""`regdiag demo`: a whole diagnosis on this machine, with the tiny CPU preset of the spec-decode probe.

Two environments that differ in four factors: three NCCL variables (harmless here: no NCCL runs on
CPU) and REGDIAG_PROBE_SLOW=verify:MS, the probe's hook that adds real busy work to the verify
phase (docs/probes.md) and stands in for the sgl-kernel that made verify slower. The demo

1. probes each environment (`regdiag probe spec-decode`, a snapshot before each: the environment
   is set in this process while its snapshot is taken, and given to every launch);
2. compares the two runs (`regdiag compare`): is it real, which phase;
3. bisects the factors (`regdiag bisect --good GOOD.json --bad BAD.json --probe spec-decode`) on
   the phase compare found regressed, the two probe runs serving as the endpoints' first launches;
4. explains the slow run (`regdiag explain`): throughput, break-even accept length.

Everything it writes goes to $REGDIAG_HOME/demo/<time>/ (the two runs and the bisect journal), so
each step can be re-run by hand with the commands it prints. Library code: no typer, no rich.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from regdiag.files import make_private_dirs
from regdiag.runs import regdiag_home

if TYPE_CHECKING:
    from regdiag.bisect import Request

PROBE = "spec-decode"
# Few cycles and launches: the demo must finish in about a minute and a half on 2 cores.
PROBE_ARGS = ["--preset", "tiny", "--cycles", "12", "--warmup", "3", "--device", "cpu"]
GOOD_ENV = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "OMP_NUM_THREADS": "1"}
BAD_ENV = {
    "NCCL_PROTO": "Simple",
    "NCCL_ALGO": "Tree",
    "NCCL_P2P_LEVEL": "NVL",
    "OMP_NUM_THREADS": "1",
    "REGDIAG_PROBE_SLOW": "verify:20",
}
Stage = Callable[[str, dict[str, Any]], None]


@contextlib.contextmanager
def environment(values: Mapping[str, str], drop: tuple[str, ...]) -> Iterator[None]:
    """This process's environment for one side, restored after (the snapshot reads os.environ)."""
    saved = {k: os.environ.get(k) for k in [*values, *drop]}
    try:
        for k in drop:
            os.environ.pop(k, None)
        os.environ.update(values)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_demo(
    on_stage: Stage,
    *,
    launches: int = 3,
    bisect_launches: int = 2,
    slow_ms: float = 20.0,
    workdir: Path | None = None,
    on_probe_event: Callable[[str, dict[str, Any]], None] | None = None,
    on_bisect_event: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    from regdiag.bisect import run_bisect
    from regdiag.compare import compare_runs
    from regdiag.explain import explain_run

    t0 = time.monotonic()
    work = workdir or regdiag_home() / "demo" / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    make_private_dirs(work)
    runs, paths = probe_sides(side_envs(slow_ms), work, launches, on_stage, on_probe_event)

    on_stage("compare", {})
    comparison = compare_runs(runs["good"], runs["bad"], old_label="good", new_label="bad")
    on_stage("compared", {"comparison": comparison})

    metric = regressed_phase(comparison)
    on_stage("bisect", {"metric": metric})
    report = run_bisect(bisect_request(runs, paths, work, metric, bisect_launches), progress=on_bisect_event)
    on_stage("bisected", {"report": report})

    on_stage("explain", {})
    explanation = explain_run(runs["bad"], label="bad")
    on_stage("explained", {"explanation": explanation})
    return {
        "workdir": str(work),
        "runs": {k: str(v) for k, v in paths.items()},
        "comparison": comparison,
        "bisect": report,
        "explanation": explanation,
        "seconds": time.monotonic() - t0,
        "commands": commands(paths, work, metric),
    }


def side_envs(slow_ms: float) -> dict[str, dict[str, str]]:
    """The two environments: the bad one's verify made `slow_ms` slower by the probe's own hook."""
    return {"good": GOOD_ENV, "bad": {**BAD_ENV, "REGDIAG_PROBE_SLOW": f"verify:{slow_ms:g}"}}


def probe_sides(
    sides: Mapping[str, Mapping[str, str]],
    work: Path,
    launches: int,
    on_stage: Stage,
    on_probe_event: Callable[[str, dict[str, Any]], None] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, Path]]:
    """`regdiag probe` of each side, its environment set in this process for the snapshot (every
    variable of either side dropped first) and given to each launch: (runs, record paths)."""
    from regdiag.hosts.local import LocalHost
    from regdiag.measure.probe import run_probe

    every = tuple(sorted({k for env in sides.values() for k in env}))
    runs: dict[str, dict[str, Any]] = {}
    paths: dict[str, Path] = {}
    for side, env in sides.items():
        on_stage("probe", {"side": side, "env": env})
        with environment(env, drop=every):
            res = run_probe(
                LocalHost(),
                PROBE,
                PROBE_ARGS,
                launches=launches,
                output=work / f"{side}.json",
                env=dict(env),
                on_event=on_probe_event,
            )
        runs[side], paths[side] = res.run, res.path
        on_stage("probed", {"side": side, "path": str(res.path), "run": res.run})
    return runs, paths


def bisect_request(
    runs: Mapping[str, dict[str, Any]], paths: Mapping[str, Path], work: Path, metric: str, launches: int
) -> Request:
    """The bisect of the two probed sides on `metric`, their probe runs seeding the endpoints."""
    from regdiag.bisect import Request

    return Request(
        good=str(paths["good"]),
        bad=str(paths["bad"]),
        probe=PROBE,
        probe_args=list(PROBE_ARGS),
        metric=metric,
        launches=launches,
        max_launches=3 * launches,
        journal=str(work / "bisect.jsonl"),
        seed_endpoints={side: run["launches"] for side, run in runs.items()},
        # the demo wrote these two records itself a moment ago: its test hook (REGDIAG_PROBE_SLOW, which
        # no allow-list of settings admits) is the difference it plants on purpose
        allow_code_from_record=True,
    )


def regressed_phase(comparison: Any) -> str:
    """Bisect the phase where compare found the regression — the attribution's dominant term (the
    phase holding most of a real change), else the most regressed phase — so that the other
    phases' noise stays out; the cycle when no phase stands out."""
    from regdiag import stats

    phases = {m.name for m in comparison.metrics if m.role == "phase"}
    att = comparison.attribution
    if att is not None and att.dominant in phases:
        return str(att.dominant)
    regressed = [
        m for m in comparison.metrics if m.name in phases and m.verdict == stats.REGRESSED and m.estimate
    ]
    if not regressed:
        return "cycle"
    return max(regressed, key=lambda m: m.estimate.ratio).name


def commands(paths: Mapping[str, Path], work: Path, metric: str = "cycle") -> list[str]:
    """The same diagnosis, step by step, as a user would type it."""
    g, b = paths["good"], paths["bad"]
    args = " ".join(PROBE_ARGS)
    return [
        f"regdiag compare {g} {b}",
        f"regdiag bisect --good {g} --bad {b} --metric {metric} --probe {PROBE} "
        f"--journal {work / 'again.jsonl'} -- {args}",
        f"regdiag explain {b}",
    ]
