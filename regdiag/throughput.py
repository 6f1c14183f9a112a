"""The throughput arithmetic of speculative decoding, with the engine's time around the GPU cycle.

Per sequence (a batch multiplies both sides alike):

    tok/s (speculation) = accept_len / (cycle + overhead)
    tok/s (plain)       = 1 / (decode + decode_overhead)
    speedup             = accept_len * (decode + decode_overhead) / (cycle + overhead)
    break-even          accept_len = (cycle + overhead) / (decode + decode_overhead)
                        GPU cycle  = accept_len * (decode + decode_overhead) - overhead

`cycle` and `decode` are GPU times (a probe's, or an engine's cycle between CUDA events); `overhead` is
what the engine adds per cycle around them (scheduling, sampling, streaming: an engine record's
period minus its cycle), `decode_overhead` the same per plain-decode token. At `num_steps` draft
steps a cycle yields at most num_steps + 1 tokens, so an accept length outside 1..steps+1 is refused,
and a break-even above steps + 1 cannot be reached at those steps.

A per-position acceptance curve p_1..p_k (vLLM's "Per-position acceptance rate", the share of drafts
whose i-th token was accepted) gives the accept length at any step count s <= k: 1 + p_1 + ... + p_s.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from regdiag.errors import BadInput

# Bounds of what the command line may give: inside them every number explain prints is finite.
MIN_MS, MAX_MS = 1e-6, 1e9
MAX_STEPS = 64
MAX_BATCH = 10**6


# What ThroughputModel.to_dict() adds to its fields: the properties derived from them.
_DERIVED = (
    "period_ms",
    "tok_s",
    "baseline_tok_s",
    "speedup",
    "breakeven_accept",
    "breakeven_cycle_ms",
    "max_tokens",
)


@dataclass
class ThroughputModel:
    accept_len: float
    cycle_ms: float
    decode_ms: float | None
    batch: int = 1
    sources: dict[str, str] = field(default_factory=dict)
    overhead_ms: float = 0.0
    decode_overhead_ms: float = 0.0
    num_steps: int | None = None
    per_position: list[float] | None = None  # acceptance rate of draft position 1, 2, ...

    @property
    def period_ms(self) -> float:
        return self.cycle_ms + self.overhead_ms

    @property
    def token_ms(self) -> float | None:
        return None if self.decode_ms is None else self.decode_ms + self.decode_overhead_ms

    @property
    def tok_s(self) -> float:
        return self.batch * self.accept_len / self.period_ms * 1e3

    @property
    def baseline_tok_s(self) -> float | None:
        t = self.token_ms
        return None if t is None else self.batch / t * 1e3

    @property
    def speedup(self) -> float | None:
        t = self.token_ms
        return None if t is None else self.accept_len * t / self.period_ms

    @property
    def breakeven_accept(self) -> float | None:
        t = self.token_ms
        return None if t is None else self.period_ms / t

    @property
    def breakeven_cycle_ms(self) -> float | None:
        t = self.token_ms
        return None if t is None else self.accept_len * t - self.overhead_ms

    @property
    def max_tokens(self) -> int | None:
        return None if self.num_steps is None else self.num_steps + 1

    def sweep(self) -> list[dict[str, float]]:
        """Per step count of the acceptance curve: its accept length, and the GPU cycle at which
        speculation would break even with that accept length (None without a decode time)."""
        out: list[dict[str, Any]] = []
        acc = 1.0
        for s, p in enumerate(self.per_position or [], 1):
            acc += p
            t = self.token_ms
            out.append(
                {
                    "steps": s,
                    "accept_len": acc,
                    "breakeven_cycle_ms": None if t is None else acc * t - self.overhead_ms,
                }
            )
        return out

    def summary(self) -> list[str]:
        """The model's lines, the verdict last."""
        oh = f" + {self.overhead_ms:.3g} ms overhead" if self.overhead_ms else ""
        lines = [
            f"speculation: {self.accept_len:.3g} tokens per {self.cycle_ms:.3g} ms cycle{oh} -> {self.tok_s:.0f} tok/s"
            + (f" (batch {self.batch})" if self.batch != 1 else "")
        ]
        for row in self.sweep():
            be = row["breakeven_cycle_ms"]
            lines.append(
                f"at {row['steps']} step{'' if row['steps'] == 1 else 's'} the acceptance curve gives "
                f"accept_len {row['accept_len']:.3g}"
                + ("" if be is None else f"; it pays while the cycle <= {be:.3g} ms")
            )
        if self.decode_ms is None:
            lines.append(
                "no plain-decode time: pass --decode-ms or --baseline RUN for the speedup and break-even"
            )
            return lines
        doh = f" + {self.decode_overhead_ms:.3g} ms overhead" if self.decode_overhead_ms else ""
        lines.append(
            f"plain decode: {self.decode_ms:.3g} ms per token{doh} -> {self.baseline_tok_s:.0f} tok/s baseline"
        )
        lines.append(self._verdict())
        return lines

    def _verdict(self) -> str:
        assert self.speedup is not None and self.breakeven_accept is not None
        be_cycle = self.breakeven_cycle_ms
        assert be_cycle is not None
        head = f"speedup {self.speedup:.2f}x: {self.tok_s:.0f} tok/s vs {self.baseline_tok_s:.0f} baseline; "
        cyc = (
            f"cycle <= {be_cycle:.3g} ms"
            if be_cycle > 0
            else "no cycle is short enough (the overhead alone is longer)"
        )
        if self.speedup >= 1:
            return head + f"speculation pays while accept_len >= {self.breakeven_accept:.3g} and {cyc}"
        top = self.max_tokens
        if top is not None and self.breakeven_accept > top:
            need = math.ceil(self.breakeven_accept - 1 - 1e-9)
            return head + (
                f"speculation cannot pay at {self.num_steps} steps: it needs accept_len >= "
                f"{self.breakeven_accept:.3g} and {self.num_steps} steps give at most {top}; it pays at this "
                f"accept length with a {cyc}, or at >= {need} steps if the draft's acceptance holds there"
            )
        return head + f"speculation loses until accept_len >= {self.breakeven_accept:.3g} or {cyc}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in _DERIVED:
            d[k] = getattr(self, k)
        d["sweep"] = self.sweep()
        return d

    def check_finite(self) -> None:
        """Every number the model prints is finite, or one line (numbers at the bounds overflow)."""
        for k, v in self.to_dict().items():
            if isinstance(v, float) and not math.isfinite(v):
                raise BadInput(
                    f"these numbers give a {k} of {v}: give times within {MIN_MS:g}..{MAX_MS:g} ms"
                )


def _number(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BadInput(f"{name} must be a positive number (got {v})")
    return float(v)


def check_time(name: str, v: float | None, zero_ok: bool = False) -> None:
    """A time in ms from the command line: finite, positive (or zero where allowed), within the bounds."""
    if v is None:
        return
    x = _number(name, v)
    if zero_ok and x == 0:
        return
    if not MIN_MS <= x <= MAX_MS:
        what = "a non-negative" if zero_ok else "a positive"
        raise BadInput(f"{name} must be {what} number of ms within {MIN_MS:g}..{MAX_MS:g} (got {v})")


def check_steps(steps: int | None) -> None:
    if steps is not None and (
        isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS
    ):
        raise BadInput(f"--num-steps must be a whole number within 1..{MAX_STEPS} (got {steps})")


def check_accept(accept_len: float | None, steps: int | None, where: str = "") -> None:
    """An accept length is 1..steps+1 tokens per cycle (the bonus token plus every draft token)."""
    if accept_len is None:
        return
    x = _number("accept length", accept_len)
    top = None if steps is None else steps + 1
    if x < 1 or (top is not None and x > top):
        span = f"1..{top}" if top is not None else "at least 1"
        at = f" at {steps} steps{where}" if steps is not None else ""
        pos = "a positive number, " if x <= 0 else ""
        raise BadInput(f"accept length must be {pos}{span} tokens per cycle{at} (got {accept_len})")


def check_given(
    cycle_ms: float | None,
    decode_ms: float | None,
    accept_len: float | None,
    *,
    overhead_ms: float | None = None,
    decode_overhead_ms: float | None = None,
    num_steps: int | None = None,
) -> None:
    """Numbers given on the command line, with or without a run (one line each, exit 2)."""
    check_time("cycle", cycle_ms)
    check_time("decode time", decode_ms)
    check_time("overhead", overhead_ms, zero_ok=True)
    check_time("decode overhead", decode_overhead_ms, zero_ok=True)
    check_steps(num_steps)
    check_accept(accept_len, num_steps)


def check_per_position(rates: Any) -> list[float] | None:
    """A per-position acceptance curve from a record: rates in 0..1, not rising (None when malformed)."""
    if not isinstance(rates, list) or not rates or len(rates) > MAX_STEPS:
        return None
    if not all(isinstance(r, (int, float)) and not isinstance(r, bool) and 0 <= r <= 1 for r in rates):
        return None
    return [float(r) for r in rates]
