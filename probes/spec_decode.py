"""spec-decode probe: synchronized per-phase timing of a speculative-decoding cycle on a synthetic MoE.

Runs with the interpreter of the machine under test (stdlib + torch; pynvml optional for clock samples:
without it the footer's clock_sampler says "unavailable: ..." and clocks stay empty). Prints JSON lines
on stdout (header, one line per cycle, footer; or one error line) and progress on stderr. The protocol,
the model and the timing method are documented in docs/probes.md.

    python spec_decode.py --preset tiny --tp 2 --cycles 50
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _presets  # noqa: E402
from _dist import probe_main  # noqa: E402
from _hooks import (  # noqa: E402
    CRASH_ENV,
    EXTRA_OP_ENV,
    HANG_ENV,
    HOST_SLOW_ENV,
    SLOW_ENV,
    parse_crash,
    parse_extra_op,
    parse_hang,
    parse_host_slow,
    parse_slow,
)
from _protocol import (  # noqa: E402
    MAX_COUNT,
    MAX_RANKS,
    MAX_SECONDS,
    PROTOCOL,
    ProbeArgParser,
    UsageError,
    add_common_args,
    check_ranges,
    env_vars,
)

NAME = "spec-decode"
VERSION = "1"
# What a run record says before the first header arrives (regdiag reads these literals: measure/probes.py).
PRIMARY = "cycle"
PHASES = ("draft", "verify", "extend")
# What its processes import beyond the standard library (a bisect loads these before any launch).
LOADS = ("torch", "torch.distributed")
PROFILE_CYCLES = 3
WARM_IMPORTS = ("_spec_runner",)  # what a rank imports: a warm interpreter imports it once (_warm.py)


def build_parser() -> ProbeArgParser:
    p = ProbeArgParser(prog="spec_decode.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--preset",
        default="auto",
        choices=["auto", *_presets.PRESETS],
        help="model shapes (default auto: tiny without a GPU, kimi-k2 with one)",
    )
    p.add_argument(
        "--layers",
        type=int,
        default=None,
        help="full-size target layers to run (default: all of the preset's that fit in memory)",
    )
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks, one process each (default 1)")
    p.add_argument(
        "--tp-slice",
        type=int,
        default=None,
        help="with --tp 1: cut the weights as one rank of TP=N would hold them (no communication)",
    )
    p.add_argument(
        "--mode",
        choices=["eagle", "baseline"],
        default="eagle",
        help="eagle: draft -> verify -> extend; baseline: a one-token decode (default eagle)",
    )
    p.add_argument(
        "--verify-graph",
        choices=["on", "off"],
        default="on",
        help="run verify as a CUDA graph replay (on) or eagerly (off); default on",
    )
    p.add_argument("--num-steps", type=int, default=2, help="EAGLE speculative steps (default 2)")
    p.add_argument(
        "--num-draft-tokens",
        type=int,
        default=None,
        help="tokens verified per cycle; topk 1 requires num-steps + 1 (the default)",
    )
    p.add_argument(
        "--accept-mean",
        type=float,
        default=2.0,
        help="mean of the simulated accept length, 1..num-draft-tokens (default 2.0)",
    )
    p.add_argument("--batch", type=int, default=1, help="sequences decoded together (default 1)")
    p.add_argument(
        "--context",
        type=int,
        default=None,
        help=f"tokens already in the KV cache (default {_presets.DEFAULT_CONTEXT}; tiny: {_presets.CONTEXT['tiny']})",
    )
    p.add_argument(
        "--cycles",
        "-n",
        type=int,
        default=50,
        help="measured cycles per launch, as many bare ones run interleaved (default 50)",
    )
    p.add_argument("--warmup", type=int, default=5, help="cycles run first and dropped (default 5)")
    p.add_argument(
        "--block",
        type=int,
        default=1,
        help="instrumented and bare cycles alternate in blocks of this many, ABBA order (default 1)",
    )
    p.add_argument(
        "--naive-timer",
        action="store_true",
        help="also record unsynchronized perf_counter per phase, side by side",
    )
    p.add_argument(
        "--device",
        choices=["auto", "cuda", "cpu"],
        default="auto",
        help="auto (the default): CUDA when torch sees a GPU, else CPU",
    )
    p.add_argument(
        "--dtype",
        choices=["auto", "bfloat16", "float32"],
        default="auto",
        help="weights and activations (default auto: bfloat16 on CUDA, float32 on CPU)",
    )
    p.add_argument(
        "--weights",
        choices=list(_presets.WEIGHT_CHOICES),
        default="bf16",
        help="weight formats: bf16 (every weight in --dtype, the default), preset (the checkpoint's: FP8 "
        "blocks for kimi-k2/deepseek-v3, INT4 experts for kimi-k2.5), fp8, int4. Low-bit kernels on CUDA; "
        "on CPU only their bytes are modelled",
    )
    p.add_argument(
        "--draft",
        choices=list(_presets.DRAFTS),
        default="eagle3",
        help="eagle3 (an EAGLE-3 layer shaped like the trained drafts, the default) or mtp (the model's own "
        f"MTP layer: {', '.join(_presets.MTP)})",
    )
    p.add_argument(
        "--moe-impl",
        choices=["auto", "grouped_mm", "loop"],
        default="auto",
        help="auto: grouped_mm on CUDA, loop over hit experts on CPU",
    )
    p.add_argument("--seed", type=int, default=0, help="weights seed; inputs use seed + launch index")
    p.add_argument(
        "--slow-phase",
        action="append",
        metavar="PHASE:MS",
        help=f"test hook: add MS of real busy work to PHASE (also {SLOW_ENV}=PHASE:MS,...)",
    )
    p.add_argument(
        "--crash-rank",
        type=int,
        default=None,
        help=f"test hook: this rank exits abruptly (also {CRASH_ENV}=R@L)",
    )
    p.add_argument("--crash-at-launch", type=int, default=0, help="test hook: ... in this launch (default 0)")
    p.add_argument(
        "--profile",
        action="store_true",
        help="after the measured window, --profile-cycles more cycles under torch.profiler, read per "
        "phase: GPU busy and idle, host time, syncs, top kernels (rank 0; docs/probes.md, Profile)",
    )
    p.add_argument(
        "--profile-cycles",
        type=int,
        default=PROFILE_CYCLES,
        help=f"cycles profiled with --profile (default {PROFILE_CYCLES})",
    )
    p.add_argument(
        "--profile-trace",
        default=None,
        metavar="PATH",
        help="with --profile: write the Chrome/Perfetto trace here (.gz: compressed); default: not kept",
    )
    add_common_args(p)
    return p  # fmt: skip


def phases_for(mode: str) -> list[str]:
    return ["draft", "verify", "extend"] if mode == "eagle" else ["decode"]


def validate(a: Any) -> dict[str, Any]:
    """Checks that need no torch; returns the hooks. Raises UsageError."""
    # seed: torch's is 64-bit; seed + launch index must stay inside it
    check_ranges(
        a,
        tp=(1, MAX_RANKS),
        tp_slice=(1, MAX_RANKS),
        layers=(1, 1000),
        num_steps=(1, 64),
        batch=(1, 65_536),
        context=(1, 10_000_000),
        cycles=(1, MAX_COUNT),
        block=(1, MAX_COUNT),
        warmup=(0, MAX_COUNT),
        seed=(0, 2**31 - 1),
        crash_at_launch=(0, MAX_COUNT),
        hang_timeout=(0.001, MAX_SECONDS),
        profile_cycles=(1, 1000),
    )
    if a.tp_slice is not None and a.tp != 1:
        raise UsageError("--tp-slice N needs --tp 1 (it builds one rank's shapes of TP=N on one device)")
    if a.num_draft_tokens is None:
        a.num_draft_tokens = a.num_steps + 1
    if a.num_draft_tokens != a.num_steps + 1:
        raise UsageError("with topk 1, --num-draft-tokens must be --num-steps + 1 (as SGLang requires)")
    if a.mode == "eagle" and not 1.0 <= a.accept_mean <= a.num_draft_tokens:
        raise UsageError(f"--accept-mean must be within 1..{a.num_draft_tokens} (num-draft-tokens)")
    if a.crash_rank is not None:
        crash = (a.crash_rank, a.crash_at_launch)
    else:
        crash = parse_crash(None, os.environ.get(CRASH_ENV))
    if crash is not None and not 0 <= crash[0] < a.tp:
        raise UsageError(f"crash hook rank {crash[0]} is not a rank of --tp {a.tp}")
    slow = parse_slow(a.slow_phase, os.environ.get(SLOW_ENV), phases_for(a.mode))
    hang = parse_hang(os.environ.get(HANG_ENV))
    if hang is not None and not 0 <= hang[0] < a.tp:
        raise UsageError(f"hang hook rank {hang[0]} is not a rank of --tp {a.tp}")
    if a.preset != "auto":
        try:
            _presets.resolve_shape(a.preset, a.layers, a.tp_slice or a.tp, a.weights, a.draft)
        except ValueError as e:
            raise UsageError(f"{a.preset}: {e}") from None
    return {
        "slow_ms": slow,
        "crash": list(crash) if crash else None,
        "hang": list(hang) if hang else None,
        "host_slow_ms": parse_host_slow(os.environ.get(HOST_SLOW_ENV), phases_for(a.mode)),
        "extra_op": parse_extra_op(os.environ.get(EXTRA_OP_ENV), phases_for(a.mode)),
    }


def accept_alpha(mean: float, n: int) -> float:
    """Per-token acceptance probability a with 1 + a + ... + a^(n-1) = mean (chain acceptance)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**j for j in range(n)) < mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def run_rank(a: Any, hooks: dict[str, Any]) -> None:
    from _spec_runner import run_rank as run

    meta = {
        "name": NAME,
        "version": VERSION,
        "protocol": PROTOCOL,
        "phases": phases_for(a.mode),
        "env": env_vars(),
    }
    run(a, hooks, meta, accept_alpha)


def main(argv: list[str]) -> int:
    return probe_main(
        argv, build_parser, validate, run_rank, __file__, gpu_sampling=lambda a: a.device != "cpu"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
