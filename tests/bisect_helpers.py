"""Real parts for the bisect tests: a protocol-speaking probe, a git history, wheels of a small package.

The probe (PROBE) is a stdlib-only script that prints the probe protocol (docs/probes.md: header,
{"type": "cycle", "t": {metric: ms}} lines, footer) as a user's --command would. Each
cycle runs three phases of real CPU busy work (a spin loop of arithmetic until the phase's time is
up, timed with perf_counter like the CPU probe) whose length in ms comes from, in order:

- `work.json` in the current directory (a repo made by `make_repo` holds one per commit);
- the package `slowpkg`, when importable (wheels made by `make_wheel`): its EXTRA dict;
- PROBE_EXTRA="verify:4,draft:1" (any variable whose name starts PROBE_EXTRA adds work to phases);
- PROBE_TOGETHER="A,B=verify:4": adds that work only when every named variable is "1" (several such
  terms separated by ";": "B=verify:2;A,B=verify:4" is B alone +2 ms, A and B together +6 ms);
- PROBE_JITTER="0.02,0.03": random launch-to-launch and cycle-to-cycle spread of the work.

The work runs until the phase has used its ms of CPU time, and phases are timed on the thread's
CPU clock (PROBE_CLOCK=cpu, the default): on a 2-core machine shared with other test processes the
wall clock of a 2 ms phase often reads 5 ms (the scheduler's slices), which would drown the factor
under test in a neighbour's load. PROBE_CLOCK=wall spins and times on perf_counter instead (the
benchmark uses both).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

PROBE = r"""
import json, os, sys, time

clock = time.thread_time if os.environ.get("PROBE_CLOCK", "cpu") == "cpu" else time.perf_counter

def busy(ms):
    end = clock() + ms / 1000.0
    x = 0
    while clock() < end:
        x = (x * 31 + 7) % 1000003
    return x

work = {"draft": 1.0, "verify": 2.0, "extend": 1.0}
if os.path.exists("work.json"):
    with open("work.json") as f:
        work.update(json.load(f))
try:
    import slowpkg
    for k, v in slowpkg.EXTRA.items():
        work[k] = work.get(k, 0.0) + v
except ImportError:
    pass
for var in sorted(v for v in os.environ if v.startswith("PROBE_EXTRA")):
    for item in filter(None, os.environ[var].split(",")):
        k, _, v = item.partition(":")
        work[k] = work.get(k, 0.0) + float(v)
for together in filter(None, os.environ.get("PROBE_TOGETHER", "").split(";")):
    names, _, add = together.partition("=")
    k, _, v = add.partition(":")
    if all(os.environ.get(n) == "1" for n in names.split(",")):
        work[k] = work.get(k, 0.0) + float(v)
if os.environ.get("PROBE_FAIL"):
    print(json.dumps({"type": "error", "message": "asked to fail"}), flush=True)
    sys.exit(1)
cycles = int(os.environ.get("PROBE_CYCLES", "12"))
# PROBE_JITTER="0.02,0.03": log-normal noise on the work of each launch (sd 2 %) and of each cycle
# (sd 3 %), the noise model of docs/statistics.md, drawn from real randomness.
import random
between, _, within = os.environ.get("PROBE_JITTER", "0,0").partition(",")
rng = random.Random(os.urandom(8))
launch_factor = rng.lognormvariate(0.0, float(between or 0))
warm = 2
header = {"type": "header", "protocol": 1, "probe": "test-probe", "version": "1", "primary": "cycle"}
print(json.dumps({**header, "phases": list(work), "units": {m: "ms" for m in ["cycle", *work]}}), flush=True)
for i in range(warm + cycles):
    phases = {}
    c0 = clock()
    for name, ms in work.items():
        t0 = clock()
        busy(ms * launch_factor * rng.lognormvariate(0.0, float(within or 0)))
        phases[name] = (clock() - t0) * 1000.0
    cycle = (clock() - c0) * 1000.0
    line = {"type": "cycle", "i": i, "t": {"cycle": cycle, **phases}}
    if i < warm:
        line["warmup"] = True
    print(json.dumps(line), flush=True)
print(json.dumps({"type": "footer", "cycles": cycles, "warmup_dropped": warm}), flush=True)
"""


def write_probe(directory: Path) -> Path:
    p = directory / "probe.py"
    p.write_text(PROBE, encoding="utf-8")
    return p


def command(probe: Path) -> str:
    """The --command line for the probe: `{python}` is the environment's interpreter."""
    return f"{{python}} {probe}"


# ------------------------------------------------------------------------------------------- git


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    res = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return res.stdout.strip()


def make_repo(
    directory: Path,
    n: int,
    slow: dict[int, dict[str, float]] | None = None,
    broken: set[int] | frozenset[int] = frozenset(),
) -> tuple[Path, list[str]]:
    """A git repo of n commits (0..n-1). Commit i's work.json carries every slow-down of commits <= i;
    build.sh (the --setup) exits 1 at the commits in `broken`. The probe runs from the worktree."""
    repo = directory / "engine"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    work = {"draft": 1.0, "verify": 2.0, "extend": 1.0}
    shas = []
    for i in range(n):
        for phase, ms in (slow or {}).get(i, {}).items():
            work[phase] += ms
        (repo / "work.json").write_text(json.dumps(work), encoding="utf-8")
        (repo / "build.sh").write_text(
            "exit 1\n" if i in broken else "echo built > built.txt\n", encoding="utf-8"
        )
        (repo / "NOTES").write_text(f"commit {i}\n", encoding="utf-8")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"commit {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return repo, shas


# ----------------------------------------------------------------------------------------- wheels


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def make_wheel(dist: Path, name: str, version: str, extra: dict[str, float], corrupt: bool = False) -> Path:
    """A real, installable pure-Python wheel `name-version-py3-none-any.whl` whose module holds EXTRA."""
    dist.mkdir(parents=True, exist_ok=True)
    path = dist / f"{name}-{version}-py3-none-any.whl"
    if corrupt:
        path.write_bytes(b"this is not a zip file")
        return path
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"EXTRA = {extra!r}\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: bisect-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [_record_line(a, d) for a, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files.items():
            z.writestr(arc, data)
    return path


def run_probe_once(probe: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> list[dict]:
    res = subprocess.run(
        [sys.executable, str(probe)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
    return [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
