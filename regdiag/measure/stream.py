"""The JSON-lines stream protocol a probe speaks (docs/probes.md), read as it arrives, and the parts of
a launch record that come from it.

stdout carries protocol lines (a header, one line per cycle, a footer or an error, a teardown line);
stderr carries progress (`regdiag-progress {...}`) and messages. The first header's resolved values
(preset 'auto' -> the real one, layers that fit) define the run (`adopt_header`).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from regdiag.host_phantom import scrub_host
from regdiag.hosts.base import CommandResult
from regdiag.probe_modules import load
from regdiag.snapshot.redact import scrub_lines, scrub_record, scrub_text

PROGRESS_PREFIX = "regdiag-progress "
# The protocol version, declared once: by the probe kit (probes/_protocol.py), which every probe speaks.
PROTOCOL: int = load("_protocol").PROTOCOL


@dataclass
class LaunchStream:
    """Parses one launch's stdout (protocol lines) and stderr (progress and messages) as they arrive."""

    on_progress: Callable[[dict[str, Any]], None] | None = None
    header: dict[str, Any] | None = None
    footer: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    teardown: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None  # the engine hook's "profile" line (engine/profiled.py)
    cycles: list[dict[str, Any]] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)
    # Raw in memory only: scrubbed as one text when read (a private key spans lines), never stored raw.
    raw_stderr: deque[str] = field(default_factory=lambda: deque(maxlen=20))
    bad_lines: int = 0

    def stdout_line(self, line: str) -> None:
        if not line.strip():
            return
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict) or "type" not in obj:
            self.bad_lines += 1
            if len(self.stray) < 5:
                self.stray.append(line[:200])
            return
        kind = obj["type"]
        if kind == "header":
            self.header = obj
        elif kind == "cycle":
            self.cycles.append(obj)
        elif kind == "footer":
            self.footer = obj
        elif kind == "error":
            self.error = obj
        elif kind == "teardown":
            self.teardown = obj
        elif kind == "profile" and isinstance(obj.get("profile"), dict):
            self.profile = obj["profile"]

    def stderr_line(self, line: str) -> None:
        if line.startswith(PROGRESS_PREFIX):
            try:
                obj = json.loads(line[len(PROGRESS_PREFIX) :])
            except json.JSONDecodeError:
                return
            if self.on_progress is not None and isinstance(obj, dict):
                self.on_progress(obj)
            return
        if line.strip():
            self.raw_stderr.append(line)

    @property
    def stderr_tail(self) -> list[str]:
        """The last stderr lines, scrubbed together (regdiag.snapshot.redact.scrub_lines)."""
        return [line for line in scrub_lines(self.raw_stderr) if line.strip()]

    def failure(self, res: CommandResult | None, timeout: float | None) -> str | None:
        """The one-line reason this launch failed, or None when it succeeded."""
        if res is not None and res.timed_out:
            return f"the probe did not finish within {timeout:g} s (stopped it)"
        if self.error is not None:
            return scrub_text(str(self.error.get("message") or "the probe reported an error"))
        if res is not None and res.returncode != 0:
            tail = self.stderr_tail[-1] if self.stderr_tail else ""
            return f"the probe exited with status {res.returncode}" + (f": {tail}" if tail else "")
        if self.footer is None:
            return "the probe ended without a footer line" + (
                f" ({self.bad_lines} lines were not protocol)" if self.bad_lines else ""
            )
        return None

    def to_launch(self) -> dict[str, Any]:
        """The parts of a launch record that come from the stream (docs/records.md)."""
        samples: dict[str, list[float]] = {}
        values: dict[str, list[Any]] = {}
        naive: dict[str, list[float]] = {}
        bare: dict[str, list[float]] = {}
        nocomm: dict[str, list[float]] = {}
        warm = 0
        for c in self.cycles:
            if c.get("warmup"):
                warm += 1
                continue
            t = c.get("t") or {}
            if c.get("bare") or c.get("nocomm"):
                side = bare if c.get("bare") else nocomm
                for k, v in t.items():
                    side.setdefault(k, []).append(v)
                continue
            for k, v in t.items():
                samples.setdefault(k, []).append(v)
            for k, v in (c.get("values") or {}).items():
                values.setdefault(k, []).append(v)
            for k, v in (c.get("naive") or {}).items():
                naive.setdefault(k, []).append(v)
        footer = dict(self.footer) if self.footer else None
        clocks = footer.pop("clocks", []) if footer else []
        loaded = footer.pop("loaded", None) if footer else None
        host = footer.pop("host", None) if footer else None
        profile = footer.pop("profile", None) if footer else None
        engine_config = footer.pop("engine_config", None) if footer else None
        launch: dict[str, Any] = {
            "header": redacted_header(self.header),
            "warmup_dropped": (footer or {}).get("warmup_dropped", warm),
            "samples": samples,
            "values": values,
            "scalars": dict((footer or {}).get("scalars") or {}),
            "clocks": clocks,
            "footer": footer,
            "loaded": loaded,  # the distributions the measured process loaded (None: not told)
        }
        if host is not None:  # what the host's CPUs did beside the ranks (probes/_hoststat.py)
            launch["host"] = scrub_host(host)
        if isinstance(engine_config, dict):  # `probe engine --protocol`: the engine's configuration in effect
            launch["engine_config"] = engine_config
        if isinstance(profile, dict):  # --profile: per-phase figures after the window (probes/_profile.py)
            launch["profile"] = profile
        if naive:
            launch["naive_samples"] = naive
        if bare:
            launch["bare_samples"] = bare
        if nocomm:
            launch["nocomm_samples"] = nocomm
        if self.teardown is not None:
            launch["teardown"] = {k: v for k, v in self.teardown.items() if k != "type"}
        if self.error is not None and self.error.get("kind") == "hang":
            launch["hang"] = {k: self.error.get(k) for k in ("rank", "stage", "stacks")}
        if self.stray:
            launch["stray_stdout"] = scrub_lines(self.stray)
        return launch


def env_for_record(env: Mapping[str, str] | None) -> dict[str, str]:
    """Variables as a record may hold them: the snapshot's redaction rules, so no secret is stored."""
    if not env:
        return {}
    from regdiag.snapshot.redact import redact_env

    return redact_env(dict(env))[0]  # a hidden value is its keyed hash and length: a change still shows


def redacted_header(header: dict[str, Any] | None) -> dict[str, Any] | None:
    """The probe reports the NCCL_* variables each rank saw, raw (it knows no redaction rules)."""
    if header is None or not isinstance(header.get("env"), dict):
        return header
    return {**header, "env": env_for_record({str(k): str(v) for k, v in header["env"].items()})}


def same_config(header: dict[str, Any], run: dict[str, Any]) -> bool:
    """A later launch's header resolved the config the run adopted (compared as it is recorded)."""
    return bool(scrub_record(header.get("config", {}), "config") == run["probe"]["config"])


def adopt_header(run: dict[str, Any], header: dict[str, Any]) -> None:
    """The first header's resolved values (preset 'auto' -> the real one, layers that fit) define the run."""
    # The header's config and labels are the probe's words (a user's --label, a config's api_key or URL):
    # through the scrubber as every field a RunWriter is given, since they go into the record as they are.
    run["probe"]["version"] = str(header.get("version", "?"))
    run["probe"]["config"] = scrub_record(header.get("config", {}), "config")
    run["primary"] = header.get("primary", run["primary"])
    run["phases"] = list(header.get("phases", run["phases"]))
    run["units"] = dict(header.get("units", {}))
    if isinstance(header.get("better"), dict):  # which way is better per metric: regdiag/direction.py
        run["better"] = dict(header["better"])
    if isinstance(
        header.get("derived"), dict
    ):  # metric -> the one it is computed from (compare tests it once)
        run["derived"] = dict(header["derived"])
    if header.get("labels"):
        run["labels"] = scrub_record(header["labels"], "labels")
    if header.get("protocol") not in (None, PROTOCOL):
        run.setdefault("warnings", []).append(
            f"probe speaks protocol {header.get('protocol')}, regdiag {PROTOCOL}"
        )
