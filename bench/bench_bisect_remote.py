"""The overhead of `regdiag bisect --host` against the same bisect run locally on the same machine.

Starts the test suite's real OpenSSH sshd on 127.0.0.1 and a login user with a bare bash (so the
numbers are SSH's cost, not a heavy ~/.bashrc's), puts the probe (tests/bisect_helpers.PROBE) and the
wheels in that user's home, then runs, interleaved local / remote, round by round:

- env vars: one culprit (PROBE_EXTRA=verify:4) among 4 factors;
- packages: slowpkg 1.0 -> 1.3 from a --find-links directory (the culprit is 1.2), every point a venv
  built with the same interpreter (/usr/bin/python3) and pip, --no-deps; each round starts with an empty
  environment cache on both sides.

Same interpreter, same probe, same launches (3 per point, at most 9), timed on the thread CPU clock.
Reports launches, points, environments built and wall time side by side, and the remote extra per
launch. Needs root (useradd) and sshd. Writes docs/bench/bisect_remote.md.

    python bench/bench_bisect_remote.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import sshd_helpers  # noqa: E402
from bisect_helpers import PROBE, make_wheel  # noqa: E402

from regdiag.bisect import Request, run_bisect  # noqa: E402
from regdiag.hosts.local import LocalHost  # noqa: E402
from regdiag.hosts.resolve import open_host  # noqa: E402

PY = "/usr/bin/python3"
CASES = {
    "env vars (4 factors)": (
        "NCCL_PROTO=LL OMP_NUM_THREADS=2 NCCL_ALGO=Ring",
        "NCCL_PROTO=Simple OMP_NUM_THREADS=4 NCCL_ALGO=Tree PROBE_EXTRA=verify:4",
        False,
    ),
    "packages (slowpkg 1.0 -> 1.3, wheels)": ("slowpkg==1.0", "slowpkg==1.3", True),
}


def one(case: str, where: str, srv: Any, user: str, home: Path, cfg: Path, scratch: Path) -> dict[str, Any]:
    good, bad, pkgs = CASES[case]
    journal = scratch / f"j-{time.monotonic_ns()}.jsonl"
    req = Request(
        good=good, bad=bad, command=f"{{python}} {home / 'probe.py'}", journal=str(journal), launches=3,
        max_launches=9, find_links=str(home / "wheels") if pkgs else None, installer="pip", python=PY,
    )  # fmt: skip
    # empty environment caches: both sides build every venv in every round
    shutil.rmtree(home / ".cache", ignore_errors=True)
    shutil.rmtree(Path(os.environ["REGDIAG_HOME"]) / "envs", ignore_errors=True)
    t0 = time.monotonic()
    if where == "local":
        r = run_bisect(req, host=LocalHost(PY))
    else:
        with open_host("regdiag-test", PY, str(cfg)) as h:
            r = run_bisect(req, host=h)
    wall = time.monotonic() - t0
    c = r["cost"]
    culprit = "; ".join(
        f["label"] if "label" in f else f["name"] for cu in r["culprits"] for f in cu["factors"]
    )
    return {
        "wall": wall,
        "launches": c["launches_run"],
        "points": c["points_measured"],
        "envs": c["environments_built"],
        "culprit": culprit,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    os.environ["PROBE_CLOCK"] = "cpu"
    scratch = Path(tempfile.mkdtemp(prefix="bench-bisect-remote-"))
    os.environ["REGDIAG_HOME"] = str(scratch / "home")
    srv = sshd_helpers.start_sshd()
    try:
        user = srv.shell_users.get("bash")
        if user is None:
            print("needs root (a bash login user)", file=sys.stderr)
            return 1
        home = srv.dir / "home-bash"
        (home / "probe.py").write_text(PROBE, encoding="utf-8")
        for v, extra in (("1.0", {}), ("1.1", {}), ("1.2", {"verify": 4.0}), ("1.3", {"verify": 4.0})):
            make_wheel(home / "wheels", "slowpkg", v, extra)
        subprocess.run(["chown", "-R", f"{user}:{user}", str(home)], check=True)
        cfg = srv.write_config(srv.dir / "cfg-bench", user=user)
        load = os.getloadavg()[0]
        t_all = time.monotonic()
        res: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for _ in range(args.rounds):
            for case in CASES:
                for where in ("local", "ssh"):
                    out = one(case, where, srv, user, home, cfg, scratch)
                    res.setdefault((case, where), []).append(out)
                    print(case, where, out, flush=True)
        minutes = (time.monotonic() - t_all) / 60
    finally:
        sshd_helpers.stop_sshd(srv)
        shutil.rmtree(scratch, ignore_errors=True)

    lines = [
        "## bisect --host: remote against local on the same machine\n",
        f"Measured by `python bench/bench_bisect_remote.py --rounds {args.rounds}` on {os.cpu_count()} cores "
        f"(load average {load:.1f} at the start, shared with other work); {minutes:.1f} min in all. The same "
        "bisect run locally and with `--host` over a real OpenSSH sshd on 127.0.0.1 (a login user with a bare "
        "bash), interleaved round by round; same interpreter (/usr/bin/python3), probe (tests/bisect_helpers, "
        "thread CPU clock) and launches (3 per point, at most 9); every round starts with empty environment "
        "caches. Medians over the rounds; the extra per launch is (remote wall - local wall) / launches.\n",
        "| case | where | culprit | points | launches | environments built | wall s (median, min-max) | "
        "extra per launch |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case in CASES:
        loc = statistics.median(x["wall"] for x in res[(case, "local")])
        for where in ("local", "ssh"):
            xs = res[(case, where)]
            walls = [x["wall"] for x in xs]
            med = statistics.median(walls)
            n = statistics.median(x["launches"] for x in xs)
            extra = "" if where == "local" else f"{1000 * (med - loc) / n:.0f} ms"
            culprits = sorted({x["culprit"] for x in xs})
            lines.append(
                f"| {case} | {where} | {', '.join(culprits)} | {statistics.median(x['points'] for x in xs):g} | "
                f"{n:g} | {statistics.median(x['envs'] for x in xs):g} | {med:.1f} ({min(walls):.1f}-{max(walls):.1f}) "
                f"| {extra} |"
            )
    lines.append(
        "\nOver SSH each launch also pays a channel, the login shell's start-up and the wrapper that stops "
        "the remote process tree (docs/remote.md); each environment pays its build commands one by one "
        "(mkdir, venv, pip, the ready marker), each a round trip.\n"
    )
    (ROOT / "docs" / "bench" / "bisect_remote.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
