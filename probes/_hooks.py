"""Test hooks, documented in docs/probes.md: they do real work (slow), really kill a rank (crash) or
really hang one (hang), so the failure paths are exercised by the real code on CPU and GPU alike."""

from __future__ import annotations

from _protocol import UsageError

SLOW_ENV = "REGDIAG_PROBE_SLOW"  # "verify:2.0,draft:0.5" = add that many ms of busy work to the phase
CRASH_ENV = "REGDIAG_PROBE_CRASH"  # "RANK@LAUNCH" = that rank exits abruptly in that launch
HANG_ENV = "REGDIAG_PROBE_HANG"  # "RANK@STAGE" = that rank sleeps forever when it reaches STAGE
HANG_STAGES = ("build", "measure", "teardown")


def parse_crash(spec: str | None, env: str | None) -> tuple[int, int] | None:
    """'--crash-rank R --crash-at-launch L' or REGDIAG_PROBE_CRASH='R@L' -> (R, L)."""
    text = spec or env
    if not text:
        return None
    try:
        r, _, la = text.partition("@")
        return int(r), int(la or 0)
    except ValueError:
        raise UsageError(f"crash hook {text!r}: expected RANK@LAUNCH, e.g. 1@2") from None


def parse_hang(env: str | None) -> tuple[int, str] | None:
    """REGDIAG_PROBE_HANG='R@STAGE' -> (R, STAGE)."""
    if not env:
        return None
    r, _, stage = env.partition("@")
    if not r.strip().isdigit() or stage not in HANG_STAGES:
        raise UsageError(f"hang hook {env!r}: expected RANK@STAGE with STAGE one of {', '.join(HANG_STAGES)}")
    return int(r), stage


def parse_slow(items: list[str] | None, env: str | None, phases: list[str]) -> dict[str, float]:
    """'verify:2.0' (repeatable, or comma-separated in REGDIAG_PROBE_SLOW) -> {'verify': 2.0} in ms."""
    out: dict[str, float] = {}
    specs = list(items or [])
    if env:
        specs += [s for s in env.split(",") if s.strip()]
    for spec in specs:
        name, _, ms = spec.strip().partition(":")
        if name not in phases:
            raise UsageError(f"slow-phase {spec!r}: phase must be one of {', '.join(phases)}")
        try:
            val = float(ms)
        except ValueError:
            raise UsageError(f"slow-phase {spec!r}: expected PHASE:MS, e.g. verify:2.0") from None
        if not 0 <= val <= 10_000:  # NaN too: it failed the launch writing its record
            raise UsageError(f"slow-phase {spec!r}: milliseconds must be within 0..10000")
        out[name] = out.get(name, 0.0) + val
    return out


def hang_here(hang: tuple[int, str] | None, rank: int, stage: str) -> None:
    """The hang hook: block this rank for good (the supervisor must notice, name it and kill it)."""
    if hang is not None and hang[0] == rank and hang[1] == stage:
        import sys
        import time

        sys.stderr.write(f"rank {rank}: hanging on purpose (test hook {HANG_ENV}) at {stage}\n")
        sys.stderr.flush()
        while True:
            time.sleep(3600)


HOST_SLOW_ENV = "REGDIAG_PROBE_HOST_SLOW"  # "verify:5" = 5 ms of busy host work spread between verify's ops
EXTRA_OP_ENV = "REGDIAG_PROBE_EXTRA_OP"  # "verify:20" or "verify:20x1024" = 20 extra square matmuls in verify


def parse_phase_values(env_name: str, env: str | None, phases: list[str]) -> dict[str, str]:
    """'verify:5,draft:1' -> {'verify': '5', 'draft': '1'} (values checked by the caller)."""
    out: dict[str, str] = {}
    for spec in (env or "").split(","):
        if not spec.strip():
            continue
        name, _, val = spec.strip().partition(":")
        if name not in phases:
            raise UsageError(f"{env_name} {spec!r}: phase must be one of {', '.join(phases)}")
        out[name] = val
    return out


def parse_host_slow(env: str | None, phases: list[str]) -> dict[str, float]:
    """REGDIAG_PROBE_HOST_SLOW='verify:5' -> {'verify': 5.0}: ms of host busy work in the phase."""
    out = {}
    for ph, val in parse_phase_values(HOST_SLOW_ENV, env, phases).items():
        try:
            ms = float(val)
        except ValueError:
            ms = -1.0
        if not 0 <= ms <= 10_000:
            raise UsageError(f"{HOST_SLOW_ENV} {ph}:{val}: expected PHASE:MS with MS within 0..10000")
        out[ph] = ms
    return out


def parse_extra_op(env: str | None, phases: list[str]) -> dict[str, list[int]]:
    """REGDIAG_PROBE_EXTRA_OP='verify:20x512' -> {'verify': [20, 512]}: N extra square matmuls of SIZE
    (default 512) in the phase, real work on its device."""
    out = {}
    for ph, val in parse_phase_values(EXTRA_OP_ENV, env, phases).items():
        n, _, size = val.partition("x")
        try:
            nums = [int(n), int(size or 512)]
        except ValueError:
            nums = [0, 0]
        if not (1 <= nums[0] <= 10_000 and 1 <= nums[1] <= 16_384):
            raise UsageError(f"{EXTRA_OP_ENV} {ph}:{val}: expected PHASE:N or PHASE:NxSIZE (N 1..10000)")
        out[ph] = nums
    return out
