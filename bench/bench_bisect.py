"""What a bisect costs and whether its steps are right, on real processes, repos and environments.

1. Cost: environments built, points measured and launches run to find one culprit among 16 commits
   (a real git history, a worktree and a --setup per commit) and among 8 env-var factors, for several
   culprit positions, next to ceil(log2 N).
2. Reliability: 20 repeated bisections of each CPU case (one culprit among 8 factors, one among 16
   commits, two independent culprits, an interaction); every journaled step is checked against the
   truth known from the planted work (misclassified = BAD where the truth is below 1/2, GOOD above,
   PARTIAL outside (0, 1), REPRODUCED without a regression), and every final answer too.

The probe is tests/bisect_helpers.PROBE (real busy work per phase, 1 / 2 / 1 ms, +4 ms verify or
+2 ms draft for a culprit). PROBE_CLOCK selects how phases are timed: `wall` (perf_counter, what the
CPU probe does; the default here) or `cpu` (thread CPU time).

3. Before and after (--held-out): held-out-style cases (4 factors with a x2 effect under a wide
   launch-to-launch spread; a factor that does a third of its effect alone and the rest with a
   partner) bisected by this tree's regdiag and by an older commit's (--before REV, checked out in a
   temporary git worktree, run in a child process), interleaved case by case: launches and machine
   time per bisection, and whether the answer was right.

    python bench/bench_bisect.py [--repeats 20] [--clock wall|cpu]   # writes docs/bench/bisect.md
    python bench/bench_bisect.py --held-out 10 --before f123e0b      # writes docs/bench/bisect-held-out.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The regdiag that bisects: this tree's, or (in the child of --held-out --before) an older checkout's.
sys.path.insert(0, os.environ.get("BENCH_REGDIAG_ROOT", str(ROOT)))
sys.path.insert(0, str(ROOT / "tests"))

from bisect_helpers import make_repo, write_probe  # noqa: E402

from regdiag.bisect import Request, run_bisect  # noqa: E402

BASE = {"draft": 1.0, "verify": 2.0, "extend": 1.0}
LAUNCHES, MAX_LAUNCHES = 3, 9


def cycle_ms(extra: dict[str, float]) -> float:
    return sum(BASE.values()) + sum(extra.values())


class Case:
    """A bisect with a known truth: `truth(values)` is the planted cycle time of a point."""

    def __init__(
        self,
        name: str,
        good: str,
        bad: str,
        truth: Callable[[dict[str, Any]], float],
        expect: set[str],
        repo: Path | None = None,
    ) -> None:
        self.name, self.good, self.bad, self.truth, self.expect, self.repo = (
            name,
            good,
            bad,
            truth,
            expect,
            repo,
        )


def env_value(values: dict[str, Any], name: str) -> Any:
    return values.get(f"env:{name}", {}).get("value")


def eight_factors(k: int) -> Case:
    names = [f"F{i}" for i in range(8)]
    fixed = f"PROBE_TOGETHER=F{k}=verify:4"
    good = fixed + " " + " ".join(f"{n}=0" for n in names)
    bad = fixed + " " + " ".join(f"{n}=1" for n in names)
    return Case(
        f"8 factors, culprit F{k}",
        good,
        bad,
        lambda v: cycle_ms({"verify": 4.0} if env_value(v, f"F{k}") == "1" else {}),
        {f"F{k}"},
    )


def two_culprits() -> Case:
    good = "A=0 B=0 NCCL_PROTO=LL OMP_NUM_THREADS=2"
    bad = "A=1 B=1 NCCL_PROTO=Simple OMP_NUM_THREADS=4 PROBE_EXTRA_1=verify:4 PROBE_EXTRA_2=draft:2"

    def truth(v: dict[str, Any]) -> float:
        extra = {}
        if env_value(v, "PROBE_EXTRA_1"):
            extra["verify"] = 4.0
        if env_value(v, "PROBE_EXTRA_2"):
            extra["draft"] = 2.0
        return cycle_ms(extra)

    return Case("two independent culprits", good, bad, truth, {"PROBE_EXTRA_1", "PROBE_EXTRA_2"})


def interaction() -> Case:
    fixed = "PROBE_TOGETHER=FEAT_X,FEAT_Z=verify:4"
    good = f"{fixed} FEAT_X=0 FEAT_Y=0 FEAT_Z=0 NCCL_PROTO=LL"
    bad = f"{fixed} FEAT_X=1 FEAT_Y=1 FEAT_Z=1 NCCL_PROTO=Simple"
    return Case(
        "interaction (slow only together)",
        good,
        bad,
        lambda v: cycle_ms(
            {"verify": 4.0} if env_value(v, "FEAT_X") == env_value(v, "FEAT_Z") == "1" else {}
        ),
        {"FEAT_X+FEAT_Z"},
    )


def sixteen_commits(workdir: Path, p: int) -> Case:
    d = workdir / f"repo-{p}"
    d.mkdir()
    repo, shas = make_repo(d, 16, slow={p: {"verify": 4.0}})
    index = {s: i for i, s in enumerate(shas)}
    return Case(
        f"16 commits, culprit #{p}",
        f"commit={shas[0]}",
        f"commit={shas[15]}",
        lambda v: cycle_ms({"verify": 4.0} if index[v["commit:commit"]["value"]] >= p else {}),
        {shas[p]},
        repo,
    )


def found(report: dict[str, Any]) -> set[str]:
    out = set()
    for c in report["culprits"]:
        f = c["factors"]
        if f[0]["kind"] == "commit":
            out.add(f[0]["bad"])
        else:
            out.add("+".join(sorted(x["name"] for x in f)))
    return out


def check_steps(journal: Path, truth: Callable[[dict[str, Any]], float]) -> tuple[int, int, int, list[str]]:
    """(steps, misclassified, unresolved, what was wrong) for every decision in the journal."""
    events = [json.loads(x) for x in journal.read_text().splitlines()]
    values = {e["point"]: e["values"] for e in events if e["type"] == "env"}
    t = {k: math.log(truth(v)) for k, v in values.items()}
    steps = wrong = unresolved = 0
    residuals = [0, 0]  # checks of a bracket's rest, and how many of them were wrong
    bad: list[str] = []
    for e in events:
        if e["type"] != "decision":
            continue
        steps += 1
        p, v = e["points"], e["verdict"]
        if v in ("INCONCLUSIVE", "SKIP", "MORE") and "residual" not in e["what"]:
            unresolved += 1
            continue
        if "good" in p:  # an endpoints check, or whether the rest of a bracket is worth searching
            ok = (t[p["bad"]] - t[p["good"]] > math.log1p(0.02)) == (v == "REPRODUCED")
            if "residual" in e["what"]:
                steps -= 1  # a "no" here (NOT-REPRODUCED or INCONCLUSIVE) is the usual answer, not a step
                residuals[0] += 1
                residuals[1] += not ok
                continue
        else:
            if "x" in p:
                num, den = t[p["x"]] - t[p["lo"]], t[p["hi"]] - t[p["lo"]]
            else:
                num, den = t[p["x_hi"]] - t[p["x_lo"]], t[p["ref_hi"]] - t[p["ref_lo"]]
            theta = num / den
            # SMALLER (a partner shown necessary): without it the effect is below 1 - min_share
            ok = {
                "BAD": theta > 0.5,
                "GOOD": theta < 0.5,
                "PARTIAL": 0.0 < theta < 1.0,
                "SMALLER": theta < 0.9,
            }[v]
        if not ok:
            wrong += 1
            bad.append(f"{e['what']}: {v}")
    wrong += residuals[1]
    if residuals[1]:
        bad.append(f"{residuals[1]} of {residuals[0]} residual checks wrong")
    return steps + residuals[0], wrong, unresolved, bad


def run_case(case: Case, probe: Path, journal: Path) -> dict[str, Any]:
    req = Request(
        good=case.good,
        bad=case.bad,
        command=f"python {probe}",
        repo=str(case.repo) if case.repo else None,
        setup="sh build.sh" if case.repo else None,
        launches=LAUNCHES,
        max_launches=MAX_LAUNCHES,
        journal=str(journal),
    )
    return run_bisect(req)


# -- held-out-style cases, before and after ----------------------------------------------------------

# PROBE_JITTER per case: 8 % between launches (launches of one configuration 10-15 % apart), and 20 %
# (the eager GPU verify launches seen: 10.3 and 13.7 ms, or 15.1, 10.3 and 10.1 ms)
SPREAD, WIDE = "0.08,0.03", "0.2,0.03"


def four_factors_x2() -> Case:
    fixed = "PROBE_TOGETHER=F2=verify:4"  # 4 ms cycle -> 8 ms: x2
    good = f"{fixed} F0=0 F1=0 F2=0 F3=0"
    bad = f"{fixed} F0=1 F1=1 F2=1 F3=1"
    return Case("4 factors, x2, F2", good, bad, lambda v: 0.0, {"F2"})


def partial_with_partner() -> Case:
    """FEAT_B alone does a third of the effect, FEAT_A alone nothing, both together all of it (x2.5)."""
    fixed = "PROBE_TOGETHER=FEAT_B=verify:2;FEAT_A,FEAT_B=verify:4"
    good = f"{fixed} FEAT_A=0 FEAT_B=0 NCCL_PROTO=LL NCCL_ALGO=Ring"
    bad = f"{fixed} FEAT_A=1 FEAT_B=1 NCCL_PROTO=Simple NCCL_ALGO=Tree"
    return Case("a third alone, the rest with a partner", good, bad, lambda v: 0.0, {"FEAT_A+FEAT_B"})


HELD_OUT = {
    "x2": (four_factors_x2, SPREAD),
    "x2-wide": (four_factors_x2, WIDE),
    "partner": (partial_with_partner, SPREAD),
}


def held_out_child(case: str, workdir: str) -> int:
    """One bisection of a held-out case with the regdiag on sys.path; one JSON line on stdout."""
    c = HELD_OUT[case][0]()
    work = Path(workdir)
    probe = write_probe(work)
    t0 = time.monotonic()
    r = run_case(c, probe, work / f"j-{case}-{time.monotonic_ns()}.jsonl")
    cost = r["cost"]
    print(
        json.dumps(
            {
                "launches": cost["launches_run"],
                "measured_s": cost["measured_s"],
                "wall_s": round(time.monotonic() - t0, 2),
                "right": found(r) == c.expect,
                "found": sorted(found(r)),
                "unresolved": len(r["unresolved"]),
            }
        )
    )
    return 0


def held_out(a: argparse.Namespace) -> int:
    import statistics
    import subprocess

    t_start, load0 = time.monotonic(), os.getloadavg()[0]
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-bisect-held-out-") as tmp:
        before = Path(tmp) / "before"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(before), a.before], check=True
        )
        try:
            for i in range(a.held_out):
                for case in HELD_OUT:
                    for label, root in (("before", before), ("after", ROOT)):
                        work = Path(tmp) / f"{label}-{case}-{i}"
                        work.mkdir()
                        env = {
                            **os.environ,
                            "BENCH_REGDIAG_ROOT": str(root),
                            "PROBE_CLOCK": a.clock,
                            "PROBE_CYCLES": "10",
                            "PROBE_JITTER": HELD_OUT[case][1],
                            "REGDIAG_HOME": str(Path(tmp) / f"home-{label}"),
                        }
                        res = subprocess.run(
                            [sys.executable, __file__, "--child", case, str(work)],
                            capture_output=True,
                            text=True,
                            env=env,
                        )
                        if res.returncode != 0:
                            print(res.stderr[-2000:], file=sys.stderr)
                            return 1
                        got = json.loads(res.stdout.strip().splitlines()[-1])
                        rows.setdefault((case, label), []).append(got)
                        print(i, case, label, got, flush=True)
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)], check=False
            )
    lines = [
        "## bisect: held-out-style cases, before and after",
        "",
        f"Measured by `python bench/bench_bisect.py --held-out {a.held_out} --before {a.before} --clock "
        f"{a.clock}` on {os.cpu_count()} cores (load average {load0:.1f} at the start, shared with other "
        f"work); {(time.monotonic() - t_start) / 60:.1f} min in all. Before: regdiag at {a.before}; "
        "after: this tree. The same probe (tests/bisect_helpers, thread CPU clock) with a wide "
        "launch-to-launch spread (PROBE_JITTER: sd of log between launches, within a launch), "
        f"{LAUNCHES} launches per point first, at most "
        f"{MAX_LAUNCHES}; the two take turns case by case.",
        "",
        "| case | PROBE_JITTER | regdiag | bisections | right answer | launches (median, max) "
        "| machine s (median) |",
        "| --- | --- | --- | ---: | ---: | --- | ---: |",
    ]
    for case, (make, jitter) in HELD_OUT.items():
        for label in ("before", "after"):
            got = rows.get((case, label), [])
            if not got:
                continue
            ls = sorted(g["launches"] for g in got)
            right = sum(g["right"] for g in got)
            secs = statistics.median(g["measured_s"] for g in got)
            lines.append(
                f"| {make().name} | {jitter} | {label} | {len(got)} | {right}/{len(got)} | "
                f"{ls[len(ls) // 2]}, {ls[-1]} | {secs:.1f} |"
            )
    out = Path(a.out or ROOT / "docs" / "bench" / "bisect-held-out.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        return held_out_child(argv[1], argv[2])
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="cpu")
    ap.add_argument("--jitter", default="0.02,0.03", help="between-launch, within-launch spread (sd of log)")
    ap.add_argument("--out", default=None, help="default docs/bench/bisect.md (bisect-held-out.md)")
    ap.add_argument("--held-out", type=int, default=0, metavar="N", help="N rounds of the before/after cases")
    ap.add_argument("--before", default="f123e0b", help="the older commit --held-out compares with")
    a = ap.parse_args(argv)
    if a.held_out:
        return held_out(a)
    a.out = a.out or str(ROOT / "docs" / "bench" / "bisect.md")
    os.environ["PROBE_CLOCK"] = a.clock
    os.environ["PROBE_CYCLES"] = "10"
    os.environ["PROBE_JITTER"] = a.jitter
    t_start = time.monotonic()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-bisect-") as tmp:
        work = Path(tmp)
        os.environ["REGDIAG_HOME"] = str(work / "home")
        probe = write_probe(work)
        n = 0

        def journal() -> Path:
            nonlocal n
            n += 1
            return work / f"j{n}.jsonl"

        cost_rows = []
        repos = {p: sixteen_commits(work, p) for p in (2, 6, 10, 14)}
        for case, size in [
            *[(repos[p], 16) for p in (2, 10, 14)],
            *[(eight_factors(k), 8) for k in (0, 3, 7)],
        ]:
            r = run_case(case, probe, journal())
            c = r["cost"]
            ok = found(r) == case.expect
            cost_rows.append((case.name, size, math.ceil(math.log2(size)), c, ok))
            print(case.name, c, ok, flush=True)

        rel_rows = []
        kinds = [
            ("one culprit among 8 factors", lambda i: eight_factors(i % 8)),
            ("one culprit among 16 commits", lambda i: repos[(2, 6, 10, 14)[i % 4]]),
            ("two independent culprits", lambda i: two_culprits()),
            ("interaction (slow only together)", lambda i: interaction()),
        ]
        for label, make in kinds:
            steps = wrong = unresolved = right = 0
            launches: list[int] = []
            wrong_steps: list[str] = []
            t0 = time.monotonic()
            for i in range(a.repeats):
                case = make(i)
                j = journal()
                r = run_case(case, probe, j)
                s, w, u, what = check_steps(j, case.truth)
                steps, wrong, unresolved = steps + s, wrong + w, unresolved + u
                wrong_steps += what
                right += found(r) == case.expect
                launches.append(r["cost"]["launches_run"])
            rel_rows.append(
                (label, a.repeats, steps, wrong, unresolved, right, launches, time.monotonic() - t0)
            )
            print(label, rel_rows[-1][:6], wrong_steps[:5], flush=True)

    total = time.monotonic() - t_start
    write(Path(a.out), a, cost_rows, rel_rows, total, load0)
    return 0 if all(r[3] == 0 and r[5] == r[1] for r in rel_rows) else 1


def write(
    out: Path, a: argparse.Namespace, cost_rows: list, rel_rows: list, total: float, load0: float
) -> None:
    lines = [
        "## bisect: cost and reliability",
        "",
        f"Measured by `python bench/bench_bisect.py --repeats {a.repeats} --clock {a.clock}` on "
        f"{os.cpu_count()} cores (load average {load0:.1f} at the start, shared with other work); "
        f"{total / 60:.1f} min in all. Each launch is a fresh process of a probe doing real busy work "
        f"(1 / 2 / 1 ms phases; a culprit adds 4 ms to verify or 2 ms to draft), timed on the "
        f"{'wall' if a.clock == 'wall' else 'thread CPU'} clock, with a random spread of the work "
        f"(PROBE_JITTER={a.jitter}: sd of log between launches, within a launch; the noise model of "
        f"docs/statistics.md); {LAUNCHES} launches per point, at most {MAX_LAUNCHES}. Commits are "
        "real worktrees of a git history made by the script, each with a `--setup` run in it. Why "
        "not the wall clock here: on this shared 2-core machine (load average ~6) a 4 ms cycle's "
        "launch medians ranged from 5.6 to 11.8 ms on the wall clock — noise no quiet GPU box has; "
        "`--clock wall` runs the same benchmark on it.",
        "",
        "### Cost of one culprit",
        "",
        "| case | N | ceil(log2 N) | points measured | environments built | launches run | found |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, size, lg, c, ok in cost_rows:
        lines.append(
            f"| {name} | {size} | {lg} | {c['points_measured']} | {c['environments_built']} | "
            f"{c['launches_run']} | {'yes' if ok else 'NO'} |"
        )
    lines += [
        "",
        "Points measured = the two endpoints + the bisection steps (+ for a factor after the first in "
        "the chain, one more point: the factor tried alone, which is how an interaction is told apart). "
        "For 16 commits: the factor step is free (one factor), then ceil(log2 15) = 4 commits in the "
        "range. Environments built counts worktrees (the good endpoint's included).",
        "",
        "### Repeated bisections: every step checked against the planted truth",
        "",
        "| case | bisections | steps | misclassified | unresolved steps | right answer | launches per bisection "
        "(median, max) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for label, reps, steps, wrong, unresolved, right, launches, _secs in rel_rows:
        launches = sorted(launches)
        med = launches[len(launches) // 2]
        lines.append(
            f"| {label} | {reps} | {steps} | {wrong} | {unresolved} | {right}/{reps} | {med}, {max(launches)} |"
        )
    lines += [
        "",
        "A step is misclassified when its verdict contradicts the truth computed from the planted work "
        "(theta = where the point's true cycle time lies between its bracket's, on a log scale): BAD "
        "with theta <= 1/2, GOOD with theta >= 1/2, PARTIAL outside (0, 1), REPRODUCED without a "
        "regression beyond the margin. Unresolved steps (INCONCLUSIVE, SKIP) are not counted as wrong "
        "but listed. Steps include the checks of a bracket's rest (is the residual a regression of its "
        "own, to be searched?): right when they say yes exactly where a second culprit lies.",
        "",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
