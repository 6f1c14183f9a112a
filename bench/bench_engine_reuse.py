"""Launches of one engine start against launches of their own starts: what a launch costs, and whether
launches that share a start vary from launch to launch as fresh starts do (engine/reuse.py).

    python bench/bench_engine_reuse.py --runs 2 --launches 8 -- --launch-cmd '...' --url URL ...
    python bench/bench_engine_reuse.py --fake --runs 3 --launches 8        # tests/engine_fake, 2 workers

Runs alternate reused, fresh, reused, fresh... (`regdiag probe engine ARGS -L N`, then the same with
--cold), so drift hits both alike. Per mode: the median wall time per launch (regdiag's `duration_s`
plus, for a launch that started the engine, its start), the launch-to-launch CV of the cycle median
per run with a bootstrap 95 % interval, the within-start and between-start spread of the reused runs
(`probe.start.check`), and the A/A verdicts of `regdiag compare` between runs of one mode (any verdict
but UNCHANGED is a false alarm). Markdown on stdout, every number as JSON in DIR/engine_reuse.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_launch import compare_verdict, spread  # noqa: E402

FAKE = "tests/engine_fake"
FAKE_ARGS = [
    "--phase", "draft=fake_spec:SpecWorker.draft", "--phase", "verify=fake_spec:SpecWorker.verify",
    "--phase", "extend=fake_spec:SpecWorker.extend", "--sync", "fake_spec:SpecWorker.commit",
    "-R", "2", "--max-tokens", "90",
]  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fake_args() -> list[str]:
    port = free_port()
    cmd = f"PYTHONPATH={FAKE}/site python3 {FAKE}/fake_engine.py --port {port} --workers 2"
    return ["--launch-cmd", cmd, "--url", f"http://127.0.0.1:{port}", *FAKE_ARGS]


def probe(out: Path, launches: int, cold: bool, args: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "regdiag", "probe", "engine", *args, "-L", str(launches), "--no-snapshot",
           "-o", str(out), "--format", "json"] + (["--cold"] if cold else [])  # fmt: skip
    t0 = time.monotonic()
    res = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    wall = time.monotonic() - t0
    if res.returncode != 0:
        sys.exit(f"bench_engine_reuse: {' '.join(cmd)} failed (exit {res.returncode}): {res.stderr[-800:]}")
    return {"run": json.loads(out.read_text()), "wall_s": wall}


def launch_cost(la: dict[str, Any]) -> float:
    return float(la.get("duration_s") or 0.0) + float(la.get("engine_start_s") or 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2, help="runs per mode (default 2)")
    ap.add_argument("--launches", type=int, default=8, help="launches per run (default 8)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/bench-engine-reuse")))
    ap.add_argument("--fake", action="store_true", help="the test suite's fake engine (tests/engine_fake)")
    ap.add_argument("args", nargs="*", help="probe engine's arguments, after --")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    modes = {"reused": False, "fresh": True}
    paths: dict[str, list[Path]] = {m: [] for m in modes}
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for i in range(a.runs):
        for mode, cold in modes.items():
            path = a.out / f"{mode}-{i}.json"
            got = probe(path, a.launches, cold, fake_args() if a.fake else a.args)
            paths[mode].append(path)
            runs[mode].append(got)
            print(f"run {i} {mode}: {got['wall_s']:.1f} s for {a.launches} launches", file=sys.stderr)
    report: dict[str, Any] = {"args": "fake" if a.fake else a.args, "launches": a.launches, "modes": {}}
    for mode in modes:
        las = [la for r in runs[mode] for la in r["run"]["launches"]]
        per_run = [
            [statistics.median(la["samples"]["cycle"]) for la in r["run"]["launches"]] for r in runs[mode]
        ]
        report["modes"][mode] = {
            "launch_cost_s_median": round(statistics.median(launch_cost(la) for la in las), 3),
            "run_wall_s": [round(r["wall_s"], 1) for r in runs[mode]],
            "starts": [sum(la.get("start") == "fresh" for la in r["run"]["launches"]) for r in runs[mode]],
            "spread": [spread(m) for m in per_run],
            "check": [r["run"]["probe"].get("start", {}).get("check") for r in runs[mode]],
            "launch_medians_ms": per_run,
            "aa_verdicts": [
                compare_verdict(paths[mode][j], paths[mode][j + 1]) for j in range(len(paths[mode]) - 1)
            ],
        }
    (a.out / "engine_reuse.json").write_text(json.dumps(report, indent=1))
    print(
        f"probe engine ({'the fake engine' if a.fake else ' '.join(a.args)}), {a.runs} runs x {a.launches} launches per mode\n"
    )
    print(
        "| mode | engine starts per run | launch cost (median s) | run wall s | cycle CV per run [95 % CI] | A/A verdicts |"
    )
    print("|---|---|---:|---|---|---|")
    for mode, m in report["modes"].items():
        cvs = "; ".join(
            f"{s['cv'] * 100:.1f} % [{s['lo'] * 100:.1f}, {s['hi'] * 100:.1f}]" for s in m["spread"]
        )
        print(f"| {mode} | {', '.join(map(str, m['starts']))} | {m['launch_cost_s_median']:.2f} | "
              f"{', '.join(map(str, m['run_wall_s']))} | {cvs} | {', '.join(m['aa_verdicts']) or '-'} |")  # fmt: skip
    checks = [c for c in report["modes"]["reused"]["check"] if c]
    if checks:
        print("\nreused runs, log cycle medians: within one start (pooled CV) against between the two starts")
        for c in checks:
            print(f"- within {c['within_start_cv_pct']} %, between {c['between_starts_pct']} % "
                  f"(allowed {c['allowed_pct']} %; launches per start {c['launches_per_start']})")  # fmt: skip


if __name__ == "__main__":
    main()
