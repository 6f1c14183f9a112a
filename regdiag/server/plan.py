"""`probe server` as asked (a request) and as it will run (a plan): options checked, turned into the
endpoint, prompts, launch command, run record and ServerProbe. No typer here: the CLI fills a
ServerRequest from its options and calls `plan_probe`; bad input raises BadInput (exit 2), one line.
"""

from __future__ import annotations

import ipaddress
import math
import os
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from regdiag.errors import BadInput
from regdiag.hosts.base import Host
from regdiag.run_view import usable
from regdiag.server.client import APIS, Endpoint, EndpointError
from regdiag.server.launch import LaunchError, split_launch_cmd
from regdiag.server.load import BUILTIN_PROMPTS, LoadSpec, load_prompts
from regdiag.server.measure import ServerProbe
from regdiag.server.record import redact_argv, server_run


@dataclass(frozen=True)
class ServerRequest:
    """The options of `probe server`, as given (their defaults are declared once, by the CLI)."""

    url: str
    api: str
    model: str | None
    launches: int
    requests: int
    concurrency: int
    max_tokens: int
    prompts: str | None  # a prompt file; None: the built-in prompts
    warmup: int
    stream: bool
    ignore_eos: bool
    connect_timeout: float
    read_timeout: float
    api_key_env: str | None  # the NAME of a variable: the key itself is never stored
    launch_cmd: str | None
    startup_timeout: float
    stop_grace: float
    host: str | None  # where --launch-cmd starts the server
    cold: bool = False  # --cold: a server start per launch (else launches share starts)


@dataclass
class ServerPlan:
    """A checked request: what the launches need and what the record says about them."""

    request: ServerRequest
    ep: Endpoint
    prompts: list[str]
    prompts_desc: str
    argv: list[str] | None  # the --launch-cmd words; None: measure a running server
    env: dict[str, str]

    @property
    def needs_host(self) -> bool:
        """A host to open: where the server is started, or the --host the user named."""
        return self.argv is not None or bool(self.request.host)

    def load(self) -> LoadSpec:
        r = self.request
        return LoadSpec(
            requests=r.requests,
            concurrency=r.concurrency,
            max_tokens=r.max_tokens,
            stream=r.stream,
            ignore_eos=r.ignore_eos,
        )

    def config(self) -> dict[str, Any]:
        """The run's probe config: every option that shapes the measurement, secrets redacted."""
        r = self.request
        launch_cmd = None
        if self.argv:
            launch_cmd = redact_argv([*(f"{k}={v}" for k, v in self.env.items()), *self.argv])
        return {
            "url": self.ep.display,
            "api": r.api,
            "model": r.model,
            "launches": r.launches,
            "requests": r.requests,
            "concurrency": r.concurrency,
            "max_tokens": r.max_tokens,
            "stream": r.stream,
            "ignore_eos": r.ignore_eos,
            "warmup": r.warmup,
            "temperature": 0.0,
            "prompts": self.prompts_desc,
            "prompt_count": len(self.prompts),
            "launch_cmd": launch_cmd,
        }

    def run_record(self, target: Host | None) -> dict[str, Any]:
        where = {"name": self.ep.host, "url": self.ep.display, "via": target.via if target else "http"}
        return server_run(self.config(), host=where, stream=self.request.stream)

    def probe(self, target: Host | None) -> ServerProbe:
        r = self.request
        return ServerProbe(
            ep=self.ep,
            load=self.load(),
            prompts=self.prompts,
            launches=r.launches,
            warmup=r.warmup,
            launch_argv=self.argv,
            launch_env=self.env,
            host=target,
            startup_timeout_s=r.startup_timeout,
            stop_grace_s=r.stop_grace,
            cold=r.cold,
        )

    def can_snapshot(self, target: Host | None) -> bool:
        """The server's environment can be recorded: on the opened host, or here when the URL is local."""
        return target is not None or is_local_url(self.request.url)


def is_local_url(url: str) -> bool:
    host = urlsplit(url if "://" in url else f"http://{url}").hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _endpoint(r: ServerRequest, environ: Mapping[str, str]) -> Endpoint:
    if r.api not in APIS:
        raise BadInput(f"--api {r.api!r}: choose one of {', '.join(APIS)}")
    api_key = None
    if r.api_key_env:
        api_key = environ.get(r.api_key_env)
        if not api_key:
            raise BadInput(f"--api-key-env {r.api_key_env}: that variable is not set")
    try:
        return Endpoint(
            r.url,
            api=r.api,
            model=r.model,
            connect_timeout=r.connect_timeout,
            read_timeout=r.read_timeout,
            api_key=api_key,
        )
    except EndpointError as e:
        raise BadInput(str(e)) from None


def _prompts(r: ServerRequest) -> tuple[list[str], str]:
    if r.prompts is None:
        return list(BUILTIN_PROMPTS), "built-in"
    try:
        return load_prompts(r.prompts), r.prompts
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise BadInput(str(e)) from None


def plan_probe(r: ServerRequest, environ: Mapping[str, str] | None = None) -> ServerPlan:
    """Check the request, in the order the options are read; BadInput names the first bad one."""
    ep = _endpoint(r, os.environ if environ is None else environ)
    prompts, desc = _prompts(r)
    # NaN passes a `<= 0` test and then stops the launch mid-way (a wait that refuses it).
    if not 0 < r.startup_timeout < math.inf:
        raise BadInput(f"--startup-timeout {r.startup_timeout}: must be a positive number of seconds")
    if not 0 <= r.stop_grace < math.inf:
        raise BadInput(f"--stop-grace {r.stop_grace}: must be a number of seconds, 0 or more")
    argv: list[str] | None = None
    env: dict[str, str] = {}
    if r.launch_cmd is not None:
        try:
            argv, env = split_launch_cmd(r.launch_cmd)
        except LaunchError as e:
            raise BadInput(str(e)) from None
    elif r.host:
        raise BadInput("--host is where --launch-cmd starts the server; without --launch-cmd give only --url")
    return ServerPlan(r, ep, prompts, desc, argv, env)


def run_summary(run: dict[str, Any]) -> dict[str, Any]:
    """The run at a glance: medians over the launches that count (run_view.usable) of their scalars."""
    ok = [la for la in run["launches"] if usable(la)]

    def med(key: str) -> float | None:
        xs = [la["scalars"][key] for la in ok if key in la.get("scalars", {})]
        return statistics.median(xs) if xs else None

    return {
        "id": run["id"],
        "status": run["status"],
        "launches": len(run["launches"]),
        "ok_launches": len(ok),
        "primary": run["primary"],
        "itl_ms_median": med("itl_ms_median"),
        "tok_s_per_request": med("tok_s_per_request"),
        "ttft_ms_median": med("ttft_ms_median"),
        "tok_s": med("tok_s"),
        "accept_len_mean": med("accept_len_mean"),
    }


def failed_launches(run: dict[str, Any]) -> str | None:
    """One line when a launch did not end ok (the CLI exits 5 with it), else None."""
    bad = [la for la in run["launches"] if la.get("status") != "ok"]
    if not bad:
        return None
    return f"{len(bad)} of {len(run['launches'])} launches failed; first: {bad[0].get('error')}"
