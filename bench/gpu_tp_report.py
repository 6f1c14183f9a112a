"""Write docs/bench/gpu_probe_tp2.md from the records bench/gpu_tp.sh made on two GPUs.

    python bench/gpu_tp_report.py [DIR]   (default baselines/, files h200x2-kimi-tp2-*.json; or the OUT
                                           directory of bench/gpu_tp.sh, files tp2-*.json)
Every number on the page is computed here from the records (and `regdiag compare` on them).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from regdiag.comm import comm_shares  # noqa: E402
from regdiag.compare import compare_runs  # noqa: E402

TP2 = "--preset kimi-k2 --tp 2 --launches 3 --cycles 50"
RUNS = [  # (file stem, what, extra flags / environment)
    ("eagle-vgraph-on", "EAGLE, verify in a CUDA graph (default NCCL)", ""),
    ("eagle-vgraph-off", "EAGLE, verify eager", "--verify-graph off"),
    ("baseline", "one-token decode", "--mode baseline"),
    ("eagle-NCCL_P2P_DISABLE-1", "EAGLE, graph, `NCCL_P2P_DISABLE=1`", "NCCL_P2P_DISABLE=1 … --no-snapshot"),
    ("eagle-NCCL_PROTO-LL", "EAGLE, graph, `NCCL_PROTO=LL`", "NCCL_PROTO=LL … --no-snapshot"),
    ("eagle-NCCL_PROTO-Simple", "EAGLE, graph, `NCCL_PROTO=Simple`", "NCCL_PROTO=Simple … --no-snapshot"),
    ("eagle-NCCL_ALGO-Ring", "EAGLE, graph, `NCCL_ALGO=Ring`", "NCCL_ALGO=Ring … --no-snapshot"),
    ("eagle-NCCL_ALGO-Tree", "EAGLE, graph, `NCCL_ALGO=Tree`", "NCCL_ALGO=Tree … --no-snapshot"),
    ("eagle-NCCL_ALGO-allreduce-Tree", "EAGLE, graph, `NCCL_ALGO=allreduce:Tree`", "bench/gpu_tp_bisect.sh"),
]


def load(d: Path, stem: str) -> dict[str, Any] | None:
    for name in (f"h200x2-kimi-tp2-{stem}.json", f"tp2-{stem}.json"):
        if (d / name).is_file():
            return json.loads((d / name).read_text(encoding="utf-8"))
    return None


def ok(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [la for la in run["launches"] if la["status"] == "ok"]


def med(run: dict[str, Any], metric: str) -> str:
    per = [statistics.median(la["samples"][metric]) for la in ok(run) if la["samples"].get(metric)]
    if not per:
        return "-"
    return f"{statistics.median(per):.3f} ({min(per):.3f}–{max(per):.3f})"


def main(argv: list[str]) -> int:
    d = Path(argv[0]) if argv else ROOT / "baselines"
    runs = {stem: load(d, stem) for stem, _, _ in RUNS}
    ref = runs["eagle-vgraph-on"]
    assert ref is not None, f"no eagle-vgraph-on record in {d}"
    h = ok(ref)[0]["header"]
    L = [
        "## spec-decode at TP=2 on two H200s (NVLink)",
        "",
        "Made by `OUT=DIR bash bench/gpu_tp.sh` on the lent `nvidia-h200-x2` machine (2026-11-30), rebuilt by",
        "`python bench/gpu_tp_report.py`; records in [baselines/](../../baselines/) as `h200x2-kimi-tp2-*.json`.",
        f"Two H200s joined by NV18 (18 NVLinks), torch {h['torch']}, NCCL {h['nccl']}, NVLink multicast off",
        f"(`NCCL_NVLS_ENABLE=0`). Kimi-K2's per-rank shapes at TP=2: {h['config']['layers']} full-size layers of",
        f"{h['config']['layers_full']} (as many as fit in 141 GB per GPU), context {h['config']['context']}, batch 1,",
        "accept length simulated (mean 2.0). Each run: `regdiag probe spec-decode " + TP2 + " …`.",
        "",
        "### Per-phase times (ms, median of launch medians, range over 3 launches)",
        "",
        "| run | cycle | draft | verify | extend / decode | launches ok |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for stem, what, _ in RUNS:
        r = runs[stem]
        if r is None:
            continue
        if not ok(r):
            err = r["launches"][0]["error"] if r["launches"] else r["status"]
            L.append(f"| {what} | — | — | — | — | 0/{len(r['launches'])}: {err[:150]}… |")
            continue
        last = "decode" if "decode" in r["phases"] else "extend"
        L.append(f"| {what} | {med(r, 'cycle')} | {med(r, 'draft')} | {med(r, 'verify')} | {med(r, last)} "
                 f"| {len(ok(r))}/{len(r['launches'])} |")  # fmt: skip
    L += [
        "",
        "### Communication share, measured",
        "",
        "Within each launch the probe also runs every phase with its collectives left out (same per-rank",
        "shapes, graphs captured the same way, blocks interleaved I N B / B N I); the communication time of",
        "a phase is the paired difference, its mean over launches with a 95 % t-interval.",
        "",
        "| run | phase | with comm | without | communication | share | collectives per forward |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for stem, what, _ in RUNS:
        r = runs[stem]
        if r is None or not ok(r):
            continue
        for c in comm_shares(r):
            if c.phase == "cycle":
                continue
            ci = f" [{c.ci_ms[0]:.3f}, {c.ci_ms[1]:.3f}]" if c.ci_ms else ""
            L.append(f"| {what} | {c.phase} | {c.with_ms:.3f} | {c.without_ms:.3f} | {c.comm_ms:.3f}{ci} "
                     f"| {100 * (c.share or 0):.1f} % | {c.collectives_text()} |")  # fmt: skip
    L += [
        "",
        "### `regdiag compare` against the default (verify graph on, default NCCL)",
        "",
        "| new side | verdict (cycle) | cycle change [95 % CI] | verify change [95 % CI] | verify verdict |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for stem, what, _ in RUNS[1:]:
        r = runs[stem]
        if r is None or not ok(r) or stem == "baseline":
            continue
        c = compare_runs(ref, r, allow_mismatch=True)
        by = {m.name: m for m in c.metrics}

        def cell(name: str, by: dict[str, Any] = by) -> str:
            m = by[name]
            e = m.estimate
            return f"{100 * (e.ratio - 1):+.1f} % [{100 * (e.lo - 1):+.1f}, {100 * (e.hi - 1):+.1f}]"

        L.append(f"| {what} | {c.verdict} | {cell('cycle')} | {cell('verify')} | {by['verify'].verdict} |")
    L += [
        "",
        "### Launches end on time",
        "",
        "Teardown (footer to the last rank gone), per launch, in seconds: "
        + ", ".join(
            f"{stem} {'/'.join(str(la['teardown']['s']) for la in ok(r))}"
            for stem, r in runs.items()
            if r is not None and ok(r) and all("teardown" in la for la in ok(r))
        )
        + f". Forced teardowns: {sum(1 for r in runs.values() if r for la in ok(r) if la.get('teardown', {}).get('forced'))}."
        " Before this probe kit, every TP=2 launch hung for good in",
        "`destroy_process_group()` while its captured graphs were alive.",
        "",
    ]
    bisect = d / "h200x2-tp2-bisect.md"
    if bisect.is_file():
        L += [
            "### bisect at TP=2: which of four NCCL differences costs verify?",
            "",
            "`OUT=DIR bash bench/gpu_tp_bisect.sh` (same machine, later call; kimi-k2 at TP=2 with 2 layers so each",
            "launch is a few seconds): `regdiag bisect --good 'NCCL_PROTO=LL NCCL_ALGO=allreduce:Ring",
            "NCCL_BUFFSIZE=4194304 NCCL_NTHREADS=256' --bad 'NCCL_PROTO=Simple NCCL_ALGO=allreduce:Tree",
            "NCCL_BUFFSIZE=8388608 NCCL_NTHREADS=512' --probe spec-decode --metric verify --markdown -- --preset",
            "kimi-k2 --tp 2 --layers 2 --cycles 30`. Its report, verbatim (journal: `baselines/h200x2-tp2-bisect.jsonl`):",
            "",
            *[
                "> " + ln if ln.strip() else ">"
                for ln in bisect.read_text(encoding="utf-8").strip().splitlines()
            ],
            "",
            "The whole bisect took as long as its 15 launches: no launch waited on a teardown.",
            "",
        ]
    out = ROOT / "docs" / "bench" / "gpu_probe_tp2.md"
    out.write_text("\n".join(L), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
