"""Write docs/bench/gpu_probe.md from the records bench/gpu_probe.sh made on a GPU.

    python bench/gpu_probe_report.py [DIR]   (default baselines/: the stored records; or the OUT
                                              directory of bench/gpu_probe.sh, with extra.tar.gz)
Every number in the section is computed here from the records; nothing is typed in by hand.
"""

from __future__ import annotations

import json
import statistics
import sys
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SLICE = "--preset kimi-k2 --tp-slice 8 --layers 24 --launches 3 --cycles 50 --naive-timer"


def load(p: Path) -> dict[str, Any]:
    return json.loads(p.read_text(encoding="utf-8"))


def ok(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [la for la in run["launches"] if la["status"] == "ok"]


def med(run: dict[str, Any], metric: str, field: str = "samples") -> float:
    return statistics.median(x for la in ok(run) for x in la.get(field, {}).get(metric, []))


def launch_meds(run: dict[str, Any], metric: str) -> list[float]:
    return [statistics.median(la["samples"][metric]) for la in ok(run)]


def scalar(run: dict[str, Any], key: str) -> float:
    return statistics.median(la["scalars"][key] for la in ok(run))


def gaps(run: dict[str, Any]) -> list[float]:
    out = []
    for la in ok(run):
        s = la["samples"]
        for i, c in enumerate(s["cycle"]):
            out.append(abs(c - sum(s[p][i] for p in run["phases"])) / c * 100)
    return out


def clocks(run: dict[str, Any]) -> str:
    cs = [c for la in ok(run) for c in la.get("clocks", []) if isinstance(c.get("sm_mhz"), int)]
    if not cs:
        return "no samples"
    # Only the samples taken while the cycles ran: the launch also spans startup and idle moments.
    inside = []
    for la in ok(run):
        lo, hi = la["footer"].get("measure_window_s", [0, 1e9])
        inside += [c for c in la.get("clocks", []) if lo <= c["t"] <= hi and isinstance(c.get("sm_mhz"), int)]
    sm = [c["sm_mhz"] for c in inside] or [c["sm_mhz"] for c in cs]
    reasons = sorted({r for c in inside for r in (c.get("reasons") or [])})
    pw = [c["power_w"] for c in inside if isinstance(c.get("power_w"), (int, float))]
    pmax = f", power ≤ {max(pw):.0f} W" if pw else ""
    return f"SM {min(sm)}–{max(sm)} MHz over {len(sm)} samples while measuring{pmax}; reasons {', '.join(reasons)}"


def pick(d: Path, stored: str, fresh: str) -> Path:
    """A record under its name in baselines/, else under the name bench/gpu_probe.sh gives it in extra/."""
    return d / stored if (d / stored).exists() else d / "extra" / fresh


def f(x: float, d: int = 3) -> str:
    return f"{x:.{d}f}"


def main(argv: list[str]) -> int:
    d = Path(argv[0]) if argv else ROOT / "baselines"
    if not (d / "extra").is_dir() and (d / "extra.tar.gz").exists():
        with tarfile.open(d / "extra.tar.gz") as t:
            t.extractall(d, filter="data")
    a = load(d / "h200-kimi-slice-eagle-vgraph-on-a.json")
    b = load(d / "h200-kimi-slice-eagle-vgraph-on-b.json")
    off = load(d / "h200-kimi-slice-eagle-vgraph-off.json")
    base = load(d / "h200-kimi-slice-baseline.json")
    h = ok(a)[0]["header"]
    L: list[str] = []
    w = L.append
    w("## spec-decode probe on one H200\n")
    w(
        f"Measured with `bash bench/gpu_probe.sh` (commands below; records in `baselines/`, see "
        f"`baselines/README.md`), tables written by `python bench/gpu_probe_report.py DIR`. Device: "
        f"{h['device']['name']}, torch {h['torch']}, CUDA {h['cuda']}, NCCL {h['nccl']}; copy bandwidth "
        f"{f(scalar(a, 'copy_GBps'), 0)} GB/s (1 GiB device copy, read + write). Accept lengths are "
        f"SIMULATED (mean 2.0, chain acceptance), so tok/s here is arithmetic on measured cycle times.\n"
    )
    w(
        "Shapes: **kimi-k2 TP8 slice** = one rank of Kimi-K2 at TP=8 on one GPU (`--tp-slice 8`: 8 MLA heads, "
        "experts 7168×256, 384 experts top-8, lm_head 163840/8), first 24 of 61 layers, batch 1, context 4096, "
        "no communication. Each record: 3 launches × 50 measured cycles (+ 50 bare, 5 warm-up).\n"
    )
    w("```\n" + "\n".join(f"regdiag probe spec-decode {SLICE}{x}" for x in
                          ["  -o h200-kimi-slice-eagle-vgraph-on-a.json", "  -o h200-kimi-slice-eagle-vgraph-on-b.json",
                           " --verify-graph off  -o h200-kimi-slice-eagle-vgraph-off.json",
                           " --mode baseline  -o h200-kimi-slice-baseline.json"]) + "\n```\n")  # fmt: skip

    w("### Fidelity: do the phases add up to the cycle, and what does measuring cost?\n")
    recs = (a, b, off, base)
    allg = [x for r in recs for x in gaps(r)]
    ovs = [la["scalars"]["overhead_pct"] for r in recs for la in ok(r)]
    w(
        f"Over the four records: {sum(1 for x in allg if x <= 2.0)} of {len(allg)} cycles have Σ phases within 2 % "
        f"of the event-timed cycle (max {f(max(allg), 2)} %); the probe's overhead per launch lies between "
        f"{min(ovs):+.2f} % and {max(ovs):+.2f} % ({sum(1 for x in ovs if abs(x) <= 1.0)} of {len(ovs)} launches "
        "within ±1 %).\n"
    )
    w(
        "| record | cycle median ms | Σ phases vs event-timed cycle: median gap | max gap | cycles over 2 % | "
        "probe overhead vs bare cycles, per launch | unpaired (difference of overall medians), per launch |"
    )
    w("| --- | --- | --- | --- | --- | --- | --- |")
    for name, run in (("eagle, verify graph (A)", a), ("eagle, verify graph (A again)", b),
                      ("eagle, verify eager", off), ("baseline decode", base)):  # fmt: skip
        g = gaps(run)
        ov = " / ".join(f"{la['scalars']['overhead_pct']:+.2f} %" for la in ok(run))
        up = " / ".join(f"{la['footer']['overhead']['unpaired_pct']:+.2f} %" for la in ok(run))
        w(
            f"| {name} | {f(med(run, 'cycle'))} | {f(statistics.median(g), 2)} % | {f(max(g), 2)} % | "
            f"{sum(1 for x in g if x > 2.0)} of {len(g)} | {ov} | {up} |"
        )
    w(
        "\nThe gap is the host's time to issue the one input copy at the start of each cycle (the GPU is idle "
        "after the previous cycle's synchronize, so the copy and the first phase's event wait for Python): it "
        "belongs to no phase, and a host hiccup there shows up as a larger gap. Overhead: the "
        "launch runs as many bare cycles (no events between phases, no naive timer, one event pair around the "
        "cycle) as instrumented ones, alternating one by one in ABBA order; overhead = median over adjacent "
        "(instrumented, bare) pairs of (instrumented − bare) / bare. The unpaired column compares the two "
        "overall medians instead, which a drift during the launch (eager verify is bound by the host's "
        "Python and moves by tens of percent between stretches of cycles) turns into noise.\n"
    )

    w("### The naive timer next to the event timer, same cycles\n")
    w("| record | phase | CUDA events, median ms | perf_counter without sync, median ms | naive / events |")
    w("| --- | --- | --- | --- | --- |")
    for name, run in (("verify graph", a), ("verify eager", off), ("baseline", base)):
        for ph in [*run["phases"], "cycle"]:
            ev, nv = med(run, ph), med(run, ph, "naive_samples")
            label = ph if ph != "cycle" else "cycle (naive: wall incl. the sync)"
            w(f"| {name} | {label} | {f(ev)} | {f(nv)} | {f(nv / ev, 3)} |")
    w(
        "\nWith CUDA graphs a phase's launch call returns at once: the naive timer reports the replay call "
        "(microseconds), not the work, and the whole cycle's time lands in the synchronize after the last "
        "phase. Eager verify is bound by kernel launches, so its naive time happens to be close to the truth — "
        "which is why hand-timed eager phases look plausible and graph phases do not.\n"
    )

    w("### Verify eager vs in a CUDA graph; eagle vs baseline\n")
    vg, ve, dec = med(a, "verify"), med(off, "verify"), med(base, "decode")
    cg, ce, cb = med(a, "cycle"), med(off, "cycle"), med(base, "cycle")
    acc = scalar(a, "accept_len_mean")
    ntok = a["probe"]["config"]["num_draft_tokens"]
    k = h["model"]["shape"]["topk"]
    w("| | verify ms | cycle ms | tok/s (batch 1) | break-even accept length = cycle / decode |")
    w("| --- | --- | --- | --- | --- |")
    w(f"| baseline decode (graph) | — | {f(cb)} | {f(1e3 / cb, 1)} | — |")
    w(
        f"| eagle, verify graph | {f(vg)} | {f(cg)} | {f(acc * 1e3 / cg, 1)} (accept {f(acc, 2)}, simulated) | {f(cg / dec, 2)} |"
    )
    w(f"| eagle, verify eager | {f(ve)} | {f(ce)} | {f(scalar(off, 'accept_len_mean') * 1e3 / ce, 1)} (simulated) | {f(ce / dec, 2)} |")  # fmt: skip
    w(f"\nEager penalty on verify: **{f(ve - vg, 2)} ms per cycle ({f(ve / vg, 2)}×)**; eager verify / graph decode "
      f"= {f(ve / dec, 2)}× (3 tokens vs 1). Per-launch verify medians: graph "
      f"{', '.join(f(x) for x in launch_meds(a, 'verify'))}; graph again {', '.join(f(x) for x in launch_meds(b, 'verify'))}; "
      f"eager {', '.join(f(x) for x in launch_meds(off, 'verify'))}. With verify in a graph speculation wins at "
      f"accept length {f(cg / dec, 2)}; eager, it needs {f(ce / dec, 2)}"
      + (f" — more than the {ntok} tokens a cycle can accept: speculation cannot win, the seeds' situation "
         "(eager verify, speculation slower than the baseline).\n" if ce / dec > ntok else ".\n"))  # fmt: skip
    uniq = scalar(a, "experts_verify_mean")
    w(
        f"Experts touched by verify (3 tokens): {f(uniq, 2)} per layer, prediction E·(1−(1−k/E)^t) = "
        f"{f(scalar(a, 'experts_verify_expected'), 2)}; decode: {f(scalar(base, 'experts_decode_mean'), 2)} (k = {k}).\n"
    )
    w("Clocks while measuring: " + "; ".join(f"{n}: {clocks(r)}" for n, r in
                                              (("A", a), ("A again", b), ("eager", off), ("baseline", base))) + ".\n")  # fmt: skip

    tb, te = (
        pick(d, "h200-kimi-tp1-baseline.json", "tp1-baseline.json"),
        pick(d, "h200-kimi-tp1-eagle.json", "tp1-eagle.json"),
    )
    if tb.exists() and te.exists():
        rb, re_ = load(tb), load(te)
        hb = ok(rb)[0]["header"]
        lay = hb["config"]["layers"]
        dec1, ver1 = med(rb, "decode"), med(re_, "verify")
        floor_d, floor_v = scalar(rb, "hbm_floor_ms_decode"), scalar(re_, "hbm_floor_ms_verify")
        bd, bv = scalar(rb, "bytes_decode"), scalar(re_, "bytes_verify")
        e_t = scalar(re_, "experts_verify_mean")
        w("### Realism: Kimi-K2 at TP=1, full-size layers\n")
        w(
            "```\nregdiag probe spec-decode --preset kimi-k2 --launches 2 --cycles 50 --mode baseline\n"
            "regdiag probe spec-decode --preset kimi-k2 --launches 2 --cycles 50 --naive-timer\n```\n"
        )
        w(
            f"As many layers as fit in {hb['device'].get('memory_gib', '?')} GiB: **{lay}** of {hb['config']['layers_full']} "
            f"(1 dense + {lay - 1} MoE; one MoE layer is 384 experts × 88 MiB = 33 GiB in bf16), "
            f"{f(hb['model']['weight_bytes_rank'] / 2**30, 1)} GiB of weights.\n"
        )
        w("| phase | median ms | bytes it must read | HBM floor ms | measured / floor |")
        w("| --- | --- | --- | --- | --- |")
        w(
            f"| decode (1 token) | {f(dec1)} | {bd / 1e9:.2f} GB | {f(floor_d)} | **{f(dec1 / floor_d, 2)}×** |"
        )
        w(f"| verify (3 tokens) | {f(ver1)} | {bv / 1e9:.2f} GB | {f(floor_v)} | {f(ver1 / floor_v, 2)}× |")
        w(
            f"\nverify / decode = **{f(ver1 / dec1, 2)}×**. Prediction from expert touches: verify reads "
            f"E·(1−(1−k/E)^3) = {f(scalar(re_, 'experts_verify_expected'), 2)} experts per MoE layer (measured "
            f"{f(e_t, 2)}) against k = {k} for decode, {f(e_t / k, 2)}× the routed-expert bytes; with attention, "
            f"dense, shared experts and lm_head, which every forward reads once, the byte model predicts "
            f"{f(bv / bd, 2)}×. Floors use the measured copy bandwidth and count each weight once.\n"
        )
        w(
            f"Cycle: baseline {f(med(rb, 'cycle'))} ms, eagle {f(med(re_, 'cycle'))} ms "
            f"(draft {f(med(re_, 'draft'))}, verify {f(ver1)}, extend {f(med(re_, 'extend'))}). Clocks: {clocks(re_)}.\n"
        )
    others = [(p, load(p)) for p in (pick(d, "h200-deepseek-v2-lite.json", "v2lite.json"),
                                     pick(d, "h200-deepseek-v3-slice.json", "v3-slice.json")) if p.exists()]  # fmt: skip
    if others:
        w("### Other presets (code-path check, 1 launch each)\n")
        w("| preset | shapes | phases, median ms | experts touched by verify (predicted) |")
        w("| --- | --- | --- | --- |")
        for _p, run in others:
            c = run["probe"]["config"]
            shape = f"TP{c['shard']} slice, " if c.get("tp_slice") else ""
            phases = ", ".join(f"{m} {f(med(run, m))}" for m in ["cycle", *run["phases"]])
            w(
                f"| {c['preset']} | {shape}{c['layers']} layers | {phases} | "
                f"{f(scalar(run, 'experts_verify_mean'), 2)} ({f(scalar(run, 'experts_verify_expected'), 2)}) |"
            )
        w("")
    cp = pick(d, "h200-collectives-tp1.json", "collectives-tp1.json")
    if cp.exists():
        run = load(cp)
        la = ok(run)[0]
        w("### collectives at TP=1 (NCCL path check)\n")
        w(
            "One rank: NCCL's all-reduce is a local copy and busbw is 0 by definition; the multi-GPU sweep "
            "belongs to the multi-GPU issue. "
            + ", ".join(f"{r['metric']} {r['us']} µs" for r in la["footer"]["table"])
            + ".\n"
        )
    L += [
        "",
        "Two GPUs (kimi-k2 at TP=2, communication share, NCCL variants): [gpu_probe_tp2.md](gpu_probe_tp2.md).",
        "",
    ]
    out = ROOT / "docs" / "bench" / "gpu_probe.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(L), encoding="utf-8")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
