"""`probe engine` as asked (a request) and as it will run (a plan): targets resolved, the launch command
split, the endpoint checked, then the run record and the EngineProbe. No typer here: the CLI fills an
EngineRequest from its options; bad input raises BadInput (exit 2), one line.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from regdiag.direction import HIGHER, LOWER, declare
from regdiag.errors import BadInput
from regdiag.hosts.base import Host
from regdiag.run_view import usable
from regdiag.runs import new_run
from regdiag.server.client import APIS, Endpoint, EndpointError
from regdiag.server.launch import LaunchError, split_launch_cmd
from regdiag.server.load import BUILTIN_PROMPTS, LoadSpec
from regdiag.server.record import redact_argv

from .precheck import check as check_targets
from .presets import Targets, resolve
from .run import EngineProbe

ENGINE_PROBE_VERSION = "1"
# Beside the phases: start-to-start per cycle, on the timer's clock and (with CUDA events) the host's.
ENGINE_METRICS = {
    "period": ("ms", LOWER),
    "host_period": ("ms", LOWER),
    "accept_len": ("tokens/step", HIGHER),
}


@dataclass(frozen=True)
class EngineRequest:
    """The options of `probe engine`, as given (their defaults are declared once, by the CLI)."""

    launch_cmd: str
    preset: str | None
    phase: tuple[str, ...]
    sync: str | None
    cycle: str | None
    accept: str | None
    url: str | None
    api: str
    requests: int
    max_tokens: int
    launches: int
    warmup: int
    block: int
    timeout: float
    check: bool
    cold: bool = False  # --cold: every launch its own engine start (else launches share starts)
    profile_cycles: int = 0  # --profile: cycles after the warm-up under torch.profiler; 0: none


@dataclass
class EnginePlan:
    request: EngineRequest
    targets: Targets
    argv: list[str]
    env: dict[str, str]
    ep: Endpoint | None  # None: the command runs to its end, no requests

    @property
    def phases(self) -> list[str]:
        return self.targets.phase_names

    def config(self) -> dict[str, Any]:
        r = self.request
        return {
            "preset": r.preset,
            **self.targets.config(),
            "warmup": r.warmup,
            "block": r.block,
            "load": self.ep is not None,
            "requests": r.requests if self.ep else None,
            "max_tokens": r.max_tokens if self.ep else None,
            **({"profile_cycles": r.profile_cycles} if r.profile_cycles else {}),
        }

    def run_record(self, target: Host) -> dict[str, Any]:
        """The engine run's record, after checking every target in the installed engine's source
        (--check; BadInput names the first that does not exist)."""
        checked = (
            check_targets(target, self.targets.all(), self.argv, self.env, self.targets.readers())
            if self.request.check
            else []
        )
        run = new_run(
            kind="engine",
            probe_name="engine",
            probe_version=ENGINE_PROBE_VERSION,
            config=self.config(),
            primary="cycle",
            phases=self.phases,
            host=target.describe(),
        )
        declare(run, {**{k: ("ms", LOWER) for k in ["cycle", *self.phases]}, **ENGINE_METRICS})
        run["engine"] = {
            "url": self.ep.display if self.ep else None,
            "launch_cmd": redact_argv([*(f"{k}={v}" for k, v in self.env.items()), *self.argv]),
            "targets_checked": checked,
            "cycle": self.targets.cycle_definition(),
        }
        return run

    def probe(self, target: Host) -> EngineProbe:
        r = self.request
        return EngineProbe(
            host=target,
            argv=self.argv,
            env=self.env,
            targets=self.targets,
            launches=r.launches,
            warmup=r.warmup,
            block=r.block,
            ep=self.ep,
            timeout_s=r.timeout,
            prompts=list(BUILTIN_PROMPTS),
            load=LoadSpec(requests=r.requests, max_tokens=r.max_tokens, stream=False) if self.ep else None,
            reuse=not r.cold,
            profile_cycles=r.profile_cycles,
        )


def plan_engine(r: EngineRequest) -> EnginePlan:
    """Check the request, in the order the options are read; BadInput names the first bad one."""
    targets = resolve(r.preset, list(r.phase), r.sync, r.cycle, r.accept)
    try:
        argv, env = split_launch_cmd(r.launch_cmd)
    except LaunchError as e:
        raise BadInput(str(e)) from None
    # NaN and infinity too: a wait refuses them mid-launch, and a negative one stops the engine at once.
    if not 0 < r.timeout < math.inf:
        raise BadInput(f"--timeout {r.timeout}: must be a positive number of seconds")
    ep = None
    if r.url is not None:
        if r.api not in APIS:
            raise BadInput(f"--api {r.api!r}: choose one of {', '.join(APIS)}")
        try:
            ep = Endpoint(r.url, api=r.api)
        except EndpointError as e:
            raise BadInput(str(e)) from None
    return EnginePlan(r, targets, argv, env, ep)


def run_summary(run: dict[str, Any], phases: list[str]) -> dict[str, Any]:
    """Medians over the launches that count (run_view.usable) of each one's median per phase and scalars."""
    ok = [la for la in run["launches"] if usable(la)]
    summary: dict[str, Any] = {"launches": len(ok)}
    for k in ["cycle", "period", *phases]:
        meds = [statistics.median(la["samples"][k]) for la in ok if la["samples"].get(k)]
        summary[f"{k}_ms_median"] = round(statistics.median(meds), 4) if meds else None
    # A phase no launch ever called is absent (None above), not a zero.
    summary["phases_absent"] = [p for p in phases if all(p in (la.get("phases_absent") or []) for la in ok)]
    graphs: dict[str, list[float]] = {}
    for la in ok:
        for p, share in (la.get("graph_share") or {}).items():
            graphs.setdefault(p, []).append(share)
    summary["graph_share"] = {p: round(statistics.median(v), 4) for p, v in graphs.items()}
    for k in ("accept_len_mean", "overhead_pct", "phase_sum_gap_pct_median", "between_cycles_ms"):
        vals = [la["scalars"][k] for la in ok if la["scalars"].get(k) is not None]
        summary[k] = round(statistics.median(vals), 4) if vals else None
    summary["warnings"] = list(run.get("warnings") or [])
    return summary
