"""How fast and how small `regdiag snapshot --json` is, next to the collectors people use today.

Times, in one run on this machine, interleaved round by round (so background load hits every
command alike), each command N times after one warm-up:

    regdiag snapshot --json                      the console script
    python -m regdiag snapshot --json            the same through -m
    python -m regdiag.snapshot                   the collector alone (what runs on remote hosts)
    python -m regdiag.snapshot --pid PID         the same, of a running python process (started here;
                                                 it imports psutil, so it maps a package's library)
    python -m torch.utils.collect_env            PyTorch's environment report
    python -m pyperf collect_metadata            pyperf's metadata (installed here if missing)

Wall time per launch (perf_counter around the process) and the process's peak RSS (wait4's
ru_maxrss). Writes docs/bench/snapshot.md. Usage: python bench/bench_snapshot.py [N] (default 10).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "bench" / "snapshot.md"
TARGET_S = 0.3
TARGET_RATIO = 0.1
TARGET_MIB = 50.0


def ensure_pyperf() -> None:
    try:
        import pyperf  # noqa: F401
    except ImportError:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "pyperf"])


def regdiag_script() -> str:
    here = Path(sys.executable).parent / "regdiag"
    if here.exists():
        return str(here)
    found = shutil.which("regdiag")
    if not found:
        sys.exit("the regdiag console script is not installed (pip install -e .)")
    return found


def launch(argv: list[str]) -> tuple[float, float, bytes, int]:
    """(wall seconds, peak RSS MiB, stdout, exit status) of one process."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return wall, usage.ru_maxrss / 1024.0, out.read(), proc.returncode


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 10
    ensure_pyperf()
    py = sys.executable
    engine = subprocess.Popen(
        [py, "-c", "import psutil, sys, time; print('ready', flush=True); time.sleep(3600)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert engine.stdout is not None and engine.stdout.readline().strip() == "ready"
        return measure(n, py, engine.pid)
    finally:
        engine.kill()
        engine.communicate()


def measure(n: int, py: str, pid: int) -> int:
    commands = {
        "regdiag snapshot --json": [regdiag_script(), "snapshot", "--json"],
        "python -m regdiag snapshot --json": [py, "-m", "regdiag", "snapshot", "--json"],
        "python -m regdiag.snapshot": [py, "-m", "regdiag.snapshot"],
        "python -m regdiag.snapshot --pid PID": [py, "-m", "regdiag.snapshot", "--pid", str(pid)],
        "python -m torch.utils.collect_env": [py, "-m", "torch.utils.collect_env"],
        "python -m pyperf collect_metadata": [py, "-m", "pyperf", "collect_metadata"],
    }
    walls: dict[str, list[float]] = {k: [] for k in commands}
    rss: dict[str, list[float]] = {k: [] for k in commands}
    last_record = None
    load_start = os.getloadavg()[0]
    for k, cmd in commands.items():  # warm-up: page cache, .pyc files
        _, _, _, rc = launch(cmd)
        if rc != 0:
            sys.exit(f"{k} failed with exit status {rc}")
    for r in range(n):
        for k, cmd in commands.items():
            w, m, out, rc = launch(cmd)
            if rc != 0:
                sys.exit(f"{k} failed with exit status {rc} in round {r}")
            walls[k].append(w)
            rss[k].append(m)
            if k == "regdiag snapshot --json":
                last_record = json.loads(out)
        print(f"round {r + 1}/{n} done", flush=True)
    assert last_record is not None
    med = {k: statistics.median(v) for k, v in walls.items()}
    peak = {k: max(v) for k, v in rss.items()}
    ref = med["python -m torch.utils.collect_env"]
    rows = []
    for k in commands:
        v = sorted(walls[k])
        rows.append(
            f"| `{k}` | {med[k]:.3f} | {v[0]:.3f} | {v[-1]:.3f} | {statistics.median(rss[k]):.1f} | {peak[k]:.1f} "
            f"| {med[k] / ref:.3f} |"
        )
    main_k = "regdiag snapshot --json"
    checks = [
        (f"median <= {TARGET_S} s", med[main_k] <= TARGET_S, f"{med[main_k]:.3f} s"),
        (
            f"<= {TARGET_RATIO:g} x collect_env",
            med[main_k] <= TARGET_RATIO * ref,
            f"{med[main_k] / ref:.3f} x",
        ),
        (f"peak RSS <= {TARGET_MIB:g} MiB", peak[main_k] <= TARGET_MIB, f"{peak[main_k]:.1f} MiB"),
    ]
    groups = ", ".join(f"{g}: {v.get('status')}" for g, v in last_record["groups"].items())
    load = os.getloadavg()
    text = "\n".join(
        [
            "## Snapshot: `regdiag snapshot --json` against the usual collectors",
            "",
            f"Command: `python bench/bench_snapshot.py {n}` (also run by `nox -s bench`). "
            f"{n} launches of each command after one warm-up, interleaved round by round; wall time per launch "
            "and the process's peak RSS (`wait4` ru_maxrss).",
            "",
            f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, "
            f"{last_record['groups']['host']['fields'].get('cpu_model', {}).get('value')}, "
            f"Python {platform.python_version()}, load average {load_start:.2f} at the start and {load[0]:.2f} at the end "
            "(other work on the machine inflates every row alike; the ratios hold); no GPU unless the gpu group "
            f"says so. Groups recorded by regdiag in the last launch: {groups}.",
            "",
            "| command | median s | min s | max s | RSS MiB (median) | RSS MiB (max) | median / collect_env |",
            "| --- | --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
            "Targets for `regdiag snapshot --json`: "
            + "; ".join(f"{name}: {'met' if ok else 'NOT met'} ({val})" for name, ok, val in checks)
            + ".",
            "",
        ]
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(text)
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
