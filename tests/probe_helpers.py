"""Helpers for the probe tests: run a probe script directly and split its JSON-lines stream."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROBES = ROOT / "probes"

# Small and quick on a shared 2-core machine, yet every mechanism runs: MLA, dense + MoE layers,
# the draft, warm-up, interleaved bare blocks.
TINY = ["--preset", "tiny", "--context", "64", "--cycles", "6", "--warmup", "2", "--block", "3"]


@dataclass
class ProbeOutput:
    returncode: int
    lines: list[dict[str, Any]]
    stderr: str

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [ln for ln in self.lines if ln.get("type") == kind]

    @property
    def header(self) -> dict[str, Any]:
        return self.of("header")[0]

    @property
    def footer(self) -> dict[str, Any]:
        return self.of("footer")[0]

    def measured(self) -> list[dict[str, Any]]:
        return [
            c for c in self.of("cycle") if not c.get("warmup") and not c.get("bare") and not c.get("nocomm")
        ]

    def min(self, metric: str) -> float:
        return min(c["t"][metric] for c in self.measured())

    def median(self, metric: str) -> float:
        vals = sorted(c["t"][metric] for c in self.measured())
        return vals[len(vals) // 2]


def run_probe_script(
    name: str, *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> ProbeOutput:
    """Run probes/<name>.py as regdiag does locally; every stdout line must be JSON."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REGDIAG_PROBE_")}
    full_env.update(env or {})
    r = subprocess.run(
        [sys.executable, str(PROBES / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    return ProbeOutput(r.returncode, lines, r.stderr)


def load_run(path: Path) -> dict[str, Any]:
    from regdiag.records import RUN, load_record

    return load_record(path, RUN)
