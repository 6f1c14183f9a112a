"""Run every benchmark script and assemble docs/benchmarks.md from their sections.

Each bench/bench_*.py writes its own section to docs/bench/<name>.md (so one can be re-run alone);
sections measured on the lent GPU (docs/bench/gpu_*.md) are kept as they are, with the commands that
made them. This script re-runs the CPU benchmarks and concatenates every section.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ROOT / "docs" / "bench"


def main(argv: list[str]) -> int:
    only = set(argv)
    failed = []
    for script in sorted((ROOT / "bench").glob("bench_*.py")):
        name = script.stem[len("bench_") :]
        if only and name not in only:
            continue
        print(f"== {script.name}", flush=True)
        rc = subprocess.call([sys.executable, str(script)], cwd=ROOT)
        if rc != 0:
            failed.append(script.name)
    assemble()
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


def assemble() -> None:
    parts = [
        "# Benchmarks\n\n"
        "Every number here was measured by a script in `bench/` (or, for GPU sections, by the command "
        "quoted in the section) and written by it; `nox -s bench` re-runs the CPU ones and rebuilds "
        "this file. Medians and ratios are measured side by side in one run on one machine.\n"
    ]
    for section in sorted(SECTIONS.glob("*.md")):
        parts.append(section.read_text(encoding="utf-8").rstrip() + "\n")
    (ROOT / "docs" / "benchmarks.md").write_text("\n".join(parts), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
