"""What a launch costs, warm against cold, side by side in one run; and whether warm launches vary from
launch to launch as cold ones do (the statistics rely on that spread being sampled honestly).

    python bench/bench_launch.py --runs 2 --launches 8 -- --preset tiny --cycles 5        # 2 CPU cores
    python bench/bench_launch.py --runs 2 --launches 8 --out DIR -- --preset kimi-k2 --tp-slice 8 \
        --layers 8 --cycles 30                                                              # one H200
    mkdir /tmp/before && git archive OLD_COMMIT | tar -x -C /tmp/before
    python bench/bench_launch.py --baseline /tmp/before --runs 3 --launches 8 -- --preset tiny --cycles 5

Runs alternate warm, cold, warm, cold... (`regdiag probe spec-decode ARGS -L N`, each run a record),
so drift hits both alike; with --baseline DIR, warm launches of the regdiag in DIR (an older commit's
tree: `before`) alternate with this tree's warm and cold ones, so a change is measured side by side.
Per launch, from its record: the wall time regdiag saw (`duration_s`) and
its stages: `start` (interpreter start, import torch and CUDA init up to the build: for warm, the fork),
`build`, `capture+warmup`, `measure`, `gather`, `teardown`, and regdiag's own share (the rest).
Then per mode: the launch-to-launch spread of the cycle median (coefficient of variation, with a
bootstrap 95 % interval), and the A/A verdicts of `regdiag compare` between runs of one mode (any
verdict but UNCHANGED is a false alarm). Markdown on stdout; every number as JSON in DIR/launch.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from regdiag.measure.launch import stages as launch_stages  # noqa: E402


def _probe(out: Path, launches: int, cold: bool, args: list[str], root: Path = ROOT) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "regdiag", "probe", "spec-decode", *args, "--launches", str(launches),
           "--no-snapshot", "-o", str(out), "--format", "json"] + (["--cold"] if cold else [])  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(root)}  # that tree's regdiag, and its probes
    t0 = time.monotonic()
    res = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    if res.returncode != 0:
        sys.exit(f"bench_launch: {' '.join(cmd)} failed (exit {res.returncode}): {res.stderr[-800:]}")
    run = json.loads(out.read_text())
    return {"run": run, "wall_s": wall}


def stages(la: dict[str, Any]) -> dict[str, float]:
    """One launch's stages in seconds: its record's `stages_s`, or (a record from before it had them)
    the same reckoning from its footer and header (regdiag.measure.launch.stages)."""
    return dict(la.get("stages_s") or launch_stages(la))


def spread(medians: list[float], reps: int = 2000) -> dict[str, float]:
    """The coefficient of variation of the launch medians, with a bootstrap 95 % interval."""

    def cv(xs: list[float]) -> float:
        return statistics.stdev(xs) / statistics.fmean(xs) if len(xs) > 1 else 0.0

    rng = random.Random(0)
    boots = sorted(cv([rng.choice(medians) for _ in medians]) for _ in range(reps))
    return {"cv": cv(medians), "lo": boots[int(0.025 * reps)], "hi": boots[int(0.975 * reps) - 1]}


def compare_verdict(a: Path, b: Path) -> str:
    """`regdiag compare A B`'s verdict (an error and its exit code when there is none)."""
    res = subprocess.run([sys.executable, "-m", "regdiag", "compare", str(a), str(b), "--json"], cwd=ROOT,
                         capture_output=True, text=True)  # fmt: skip
    try:
        return str(json.loads(res.stdout)["verdict"])
    except (ValueError, KeyError):
        return f"error (exit {res.returncode})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2, help="runs per mode (default 2)")
    ap.add_argument("--launches", type=int, default=8, help="launches per run (default 8)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/bench-launch")))
    ap.add_argument("--baseline", type=Path, help="also warm launches of the regdiag tree in this directory")
    ap.add_argument("--no-cold", action="store_true", help="leave out the cold runs")
    ap.add_argument("args", nargs="*", help="the probe's arguments, after --")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    modes = {"warm": (False, ROOT), "cold": (True, ROOT)}
    if a.no_cold:
        del modes["cold"]
    if a.baseline is not None:
        modes = {"before": (False, a.baseline.resolve()), **modes}
    records: dict[str, list[Path]] = {m: [] for m in modes}
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for i in range(a.runs):
        for mode, (cold, root) in modes.items():
            path = a.out / f"{mode}-{i}.json"
            got = _probe(path, a.launches, cold, a.args, root)
            records[mode].append(path)
            runs[mode].append(got)
            print(f"run {i} {mode}: {got['wall_s']:.2f} s for {a.launches} launches", file=sys.stderr)
    report: dict[str, Any] = {"args": a.args, "launches": a.launches, "runs": a.runs, "modes": {}}
    if a.baseline is not None:
        report["baseline"] = str(a.baseline)
    for mode in modes:
        las = [la for r in runs[mode] for la in r["run"]["launches"]]
        st = [stages(la) for la in las]
        med = {k: statistics.median(s[k] for s in st) for k in st[0]}
        per_run = [
            [statistics.median(la["samples"]["cycle"]) for la in r["run"]["launches"]] for r in runs[mode]
        ]
        starts = [r["run"]["probe"].get("start", {}) for r in runs[mode]]
        aa = [compare_verdict(records[mode][j], records[mode][j + 1]) for j in range(len(records[mode]) - 1)]
        report["modes"][mode] = {
            "stage_medians_s": med,
            "run_wall_s": [round(r["wall_s"], 3) for r in runs[mode]],
            "start": starts,
            "spread": [spread(m) for m in per_run],
            "launch_medians_ms": per_run,
            "aa_verdicts": aa,
        }
    (a.out / "launch.json").write_text(json.dumps(report, indent=1))
    _markdown(report)


def _markdown(report: dict[str, Any]) -> None:
    modes = report["modes"]
    names = list(modes)
    keys = list(modes[names[0]]["stage_medians_s"])
    print(
        f"probe spec-decode {' '.join(report['args'])}, "
        f"{report['runs']} runs x {report['launches']} launches per mode"
        + (f"; before: {report['baseline']}" if report.get("baseline") else "")
        + "\n"
    )
    print("| stage (median s) | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{modes[m]['stage_medians_s'][k]:.3f}" for m in names) + " |")
    w = modes["warm"]["stage_medians_s"]["launch"]
    for m in names:
        if m != "warm":
            print(f"\nlaunch cost, {m} / warm: {modes[m]['stage_medians_s']['launch'] / w:.2f}x")
    print("\n| mode | run wall s | warm start (s) | cycle CV per run [95 % CI] | A/A verdicts |")
    print("|---|---|---|---|---|")
    for mode, m in modes.items():
        ws = ", ".join(str(s.get("warm_start_s", "-")) for s in m["start"])
        cvs = "; ".join(
            f"{s['cv'] * 100:.1f} % [{s['lo'] * 100:.1f}, {s['hi'] * 100:.1f}]" for s in m["spread"]
        )
        print(
            f"| {mode} | {', '.join(map(str, m['run_wall_s']))} | {ws} | {cvs} "
            f"| {', '.join(m['aa_verdicts'])} |"
        )


if __name__ == "__main__":
    main()
