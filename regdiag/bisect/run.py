"""One bisect, end to end: sides -> factors -> environments -> search -> report (a plain dict).

This is what `regdiag bisect` calls and what other code (the demo, the benchmark) calls too; it
knows nothing of typer or rich. Progress goes to an optional callback as small dicts.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regdiag.bisect.envs import Builder, Built
from regdiag.bisect.factors import Factor, diff, load_side
from regdiag.bisect.journal import Journal, default_path
from regdiag.bisect.kinds import KINDS, Where, kind_of
from regdiag.bisect.lab import Lab
from regdiag.bisect.remote_envs import RemoteBuilder
from regdiag.bisect.report import build_report
from regdiag.bisect.search import Options, Search
from regdiag.errors import BadInput
from regdiag.hosts.base import Host
from regdiag.hosts.local import LocalHost
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
    journal: str | None = None
    resume: bool = False
    # Launches of the two endpoints measured moments ago by `regdiag probe` with this very probe and
    # these args (the demo does this): {"good": [launch records], "bad": [...]}. Never from old runs:
    # the endpoints are measured here and now precisely to check that the regression reproduces.
    seed_endpoints: dict[str, list[dict[str, Any]]] | None = None

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
    from regdiag.probe_runner import probe_script

    args = list(req.probe_args)
    if host is not None and is_remote(host):
        from regdiag.hosts.remote import bundle_path

        probe_script(str(req.probe))  # an unknown probe is refused here, before connecting to anything
        bundle = bundle_path(host)
        name = str(req.probe)
        return lambda built, index: [built.python, bundle, "probe", name, *args, "--launch-index", str(index)]
    script = str(probe_script(str(req.probe)))
    # Each launch gets its own index, as in `regdiag probe` (the probe seeds its inputs with it).
    return lambda built, index: [built.python, script, *args, "--launch-index", str(index)]


def is_remote(host: Host | None) -> bool:
    return host is not None and not isinstance(host, LocalHost)


def _check(req: Request, remote: bool = False) -> None:
    if req.launches < 2:
        raise BadInput("--launches must be at least 2 (a spread needs two launches)")
    if req.max_launches < req.launches:
        raise BadInput("--max-launches must be at least --launches")
    if not 0 <= req.margin < 1:
        raise BadInput("--margin must be a fraction in [0, 1), e.g. 0.02")
    if req.find_links and not remote and not Path(req.find_links).is_dir():
        raise BadInput(f"--find-links {req.find_links}: no such directory")


def run_bisect(
    req: Request,
    progress: Callable[[dict[str, Any]], None] | None = None,
    host: Host | None = None,
) -> dict[str, Any]:
    t0 = time.monotonic()
    remote = is_remote(host)
    _check(req, remote)
    good = load_side(req.good, "--good")
    bad = load_side(req.bad, "--bad")
    d = diff(good, bad)
    factors = d.factors
    if not factors:
        raise BadInput(
            "--good and --bad do not differ in any package, env var or commit that a bisect can change"
        )
    repo = req.repo or good.repo or bad.repo
    if remote:
        repo = req.repo  # a snapshot's checkout path is not a path on the host unless --repo says so
    base_python = host.python if (remote and host is not None) else (req.python or sys.executable)
    where = Where(repo, req.find_links, req.index_url, base_python, host if remote else None)
    # Each kind refuses what cannot be bisected here (and may normalize), before anything is measured.
    factors = [
        g for name, kind in KINDS.items() for g in kind.check([f for f in factors if f.kind == name], where)
    ]
    argv_for = argv_builder(req, host)
    builder: Builder | RemoteBuilder
    if remote and host is not None:
        builder = RemoteBuilder(
            host, repo=repo, setup=req.setup, find_links=req.find_links, index_url=req.index_url,
            installer=req.installer,
        )  # fmt: skip
        builder.check()
    else:
        builder = Builder(
            base_python=req.python or sys.executable,
            repo=repo,
            setup=req.setup,
            find_links=req.find_links,
            index_url=req.index_url,
            installer=req.installer,
        )
    path = Path(req.journal) if req.journal else default_path()
    notes = list(d.notes)
    if d.same_packages:
        base = builder.base_versions()
        for name, version in sorted(d.same_packages.items()):
            here = base.get(name)
            if here != version:
                notes.append(
                    f"{name} is {version} on both sides but {here or 'not installed'} here; "
                    "the bisect runs with " + ("that host's" if remote else "this machine's")
                )
    journal = Journal(
        path, req.inputs(factors, d.same_env, host.name if remote and host else None), req.resume
    )
    try:
        if progress:
            progress(
                {
                    "event": "start",
                    "journal": str(path),
                    "factors": [f.label() for f in factors],
                    "resumed": journal.resumed,
                }
            )
        lab = Lab(
            factors,
            builder,
            host or LocalHost(req.python),
            argv_for,
            journal,
            req.metric,
            launch_timeout=req.launch_timeout,
            progress=progress,
            fixed_env=d.same_env,
        )

        if req.seed_endpoints and not journal.resumed:
            _seed(lab, req.seed_endpoints)

        options = Options(req.launches, req.max_launches, req.margin, req.min_share)
        outcome = Search(lab, options, lambda f: kind_of(f).values_between(f, where)).run()
        report = build_report(outcome, lab, req.metric, notes, wall_s=time.monotonic() - t0)
        report["fixed_env"] = d.same_env
        for c in report["culprits"]:
            for f in c["factors"]:
                KINDS[f["kind"]].annotate(f, where)
        report["journal"] = str(path)
        report = redact_tree(report)
        journal.end(report)
        return report
    finally:
        journal.close()  # a --resume, in this process or another, may open it now


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
