"""Rank 0's output of a spec-decode launch: the gathered (slowest-rank) numbers as cycle lines and the
footer (medians, the probe's paired overhead, the communication share, the HBM floor). Part of the
probe kit (probes/_spec_runner.py gathers and hands them over)."""

from __future__ import annotations

# zip(strict=) is 3.10+; the probes run on the target host's python, which may be 3.9 (noqa: B905 below).
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from _protocol import Emitter, summary
from _spec_setup import Setup


@dataclass
class Report:
    """Rank 0 turns the gathered (slowest-rank) numbers into cycle lines and the footer."""

    s: Setup
    order: list[str]
    schedule: list[str]
    rows: list[list[float]]
    bare: list[float]
    nocomm: list[list[float]]
    experts: list[float]
    acc_len: torch.Tensor
    window: tuple[float, float]
    canary: dict[str, Any] | None = None  # the host's speed around the window (_canary.py)
    kept: dict[str, list[float]] = field(default_factory=dict)
    naive_kept: dict[str, list[float]] = field(default_factory=dict)

    def emit(self, profile: dict[str, Any] | None = None) -> None:
        em = Emitter()
        stats = self._cycle_lines(em)
        footer = self._footer(*stats)
        if profile is not None:  # --profile: per-phase figures of the profiled cycles (probes/_profile.py)
            footer["profile"] = profile
        em.emit(footer)

    def _cycle_lines(self, em: Emitter) -> tuple[list[float], list[float], list[float]]:
        a, P = self.s.a, len(self.order)
        self.kept = {k: [] for k in ["cycle", *self.order]}
        self.naive_kept = {k: [] for k in [*self.order, "cycle"]} if a.naive_timer else {}
        gaps: list[float] = []
        accept: list[float] = []
        exp_kept: list[float] = []
        inst_i = [i for i, k in enumerate(self.schedule) if k in ("i", "w")]
        for j, (ci, row) in enumerate(zip(inst_i, self.rows)):  # noqa: B905
            warm = self.schedule[ci] == "w"
            t = {"cycle": round(row[0], 5), **{ph: round(row[1 + k], 5) for k, ph in enumerate(self.order)}}
            line: dict[str, Any] = {"type": "cycle", "i": ci, "t": t}
            if warm:
                line["warmup"] = True
            if a.naive_timer:
                line["naive"] = {**{ph: round(row[1 + P + k], 5) for k, ph in enumerate(self.order)},
                                 "cycle": round(row[1 + 2 * P], 5)}  # fmt: skip
            vals: dict[str, Any] = {f"experts_{self.s.target_phase}": round(self.experts[j], 3)}
            if self.s.eagle:
                vals["accept_len"] = float(self.acc_len[ci].float().mean())
                line["accept_len_simulated"] = True
            line["values"] = vals
            em.emit(line)
            if warm:
                continue
            for k_, v in t.items():
                self.kept[k_].append(v)
            for k_, v in line.get("naive", {}).items():
                self.naive_kept[k_].append(v)
            gaps.append(abs(row[0] - sum(row[1 : 1 + P])) / row[0] * 100 if row[0] > 0 else 0.0)
            exp_kept.append(self.experts[j])
            if self.s.eagle:
                accept.append(vals["accept_len"])
        for ci, v in zip([i for i, k in enumerate(self.schedule) if k == "b"], self.bare):  # noqa: B905
            em.emit({"type": "cycle", "i": ci, "bare": True, "t": {"cycle": round(v, 5)}})
        for ci, row in zip([i for i, k in enumerate(self.schedule) if k == "n"], self.nocomm):  # noqa: B905
            t = {"cycle": round(row[0], 5), **{ph: round(row[1 + k], 5) for k, ph in enumerate(self.order)}}
            em.emit({"type": "cycle", "i": ci, "nocomm": True, "t": t})
        return gaps, accept, exp_kept

    def _footer(self, gaps: list[float], accept: list[float], exp_kept: list[float]) -> dict[str, Any]:
        s, a = self.s, self.s.a
        med = {k_: summary(v) for k_, v in self.kept.items()}
        inst_med, bare_med = med["cycle"]["median"], summary(self.bare)["median"]
        inst_cycles = self.kept["cycle"]
        paired = paired_overhead(inst_cycles, self.bare, a.cycles, a.block)
        accept_mean = sum(accept) / len(accept) if accept else 1.0
        unique = sum(exp_kept) / len(exp_kept) if exp_kept else 0.0
        tp = s.target_phase
        tokens = a.batch * s.t_in
        floor_bytes = s.shape.target_bytes(
            tokens, a.batch, s.ctx + s.t_in, s.elt, unique if s.shape.n_moe else 0.0
        )
        floor_ms = floor_bytes / (s.copy_gbps * 1e9) * 1e3
        scalars: dict[str, Any] = {
            "overhead_pct": paired, "copy_GBps": s.copy_gbps,
            f"experts_{tp}_mean": round(unique, 3),
            f"experts_{tp}_expected": round(s.shape.expected_unique(tokens), 3),
            f"bytes_{tp}": floor_bytes, f"hbm_floor_ms_{tp}": round(floor_ms, 5),
            f"floor_fraction_{tp}": round(floor_ms / med[tp]["median"], 4),
            "tok_s": round(a.batch * accept_mean / inst_med * 1e3, 3),
        }  # fmt: skip
        if s.eagle:
            scalars.update({"accept_len_mean": round(accept_mean, 4), "accept_len_simulated": True,
                            "tok_s_simulated": True})  # fmt: skip
        for ph in self.order if a.naive_timer else []:
            nmed = summary(self.naive_kept[ph])["median"]
            scalars[f"naive_over_event_{ph}"] = (
                round(nmed / med[ph]["median"], 4) if med[ph]["median"] else None
            )
        comm = self._comm()
        for ph, c in comm.items():
            scalars[f"comm_ms_{ph}"] = c["comm_ms"]
            scalars[f"comm_share_{ph}"] = c["share"]
        return {
            "type": "footer", "cycles": len(self.kept["cycle"]), "warmup_dropped": self.schedule.count("w"),
            "bare_cycles": len(self.bare), "nocomm_cycles": len(self.nocomm), "summary": med,
            "naive_summary": {k_: summary(v) for k_, v in self.naive_kept.items()} if a.naive_timer else None,
            "bare_summary": summary(self.bare),
            "overhead": {"instrumented_median_ms": inst_med, "bare_median_ms": bare_med,
                         "pct": paired, "unpaired_pct": round((inst_med - bare_med) / bare_med * 100, 3),
                         "pairs": math.ceil(a.cycles / a.block)},
            "comm": comm or None,
            "fidelity": {"phase_sum_gap_pct": summary(gaps)},
            "scalars": scalars, "measure_window_s": [round(self.window[0], 3), round(self.window[1], 3)],
            "canary": self.canary,
            "duration_s": round(time.time() - s.t_rank0, 3),
        }  # fmt: skip

    def _comm(self) -> dict[str, dict[str, Any]]:
        """Per phase (and the cycle): median with and without communication, and the communication
        time as the median over adjacent (I, N) block pairs of the difference of their medians."""
        if not self.nocomm:
            return {}
        a = self.s.a
        out = {}
        for k, name in enumerate(["cycle", *self.order]):
            with_ = self.kept[name]
            without = [row[k] for row in self.nocomm]
            diffs = []
            for b in range(math.ceil(a.cycles / a.block)):
                wi, wo = with_[b * a.block : (b + 1) * a.block], without[b * a.block : (b + 1) * a.block]
                if wi and wo:
                    diffs.append(summary(wi)["median"] - summary(wo)["median"])
            w_med, wo_med = summary(with_)["median"], summary(without)["median"]
            comm_ms = summary(diffs)["median"] if diffs else w_med - wo_med
            out[name] = {"with_ms": round(w_med, 5), "without_ms": round(wo_med, 5), "comm_ms": round(comm_ms, 5),
                         "share": round(comm_ms / w_med, 4) if w_med > 0 else None, "pairs": len(diffs)}  # fmt: skip
        return out


def paired_overhead(inst: list[float], bare: list[float], cycles: int, block: int) -> float | None:
    """The probe's overhead in %: median over adjacent (instrumented, bare) block pairs of
    (median instrumented - median bare) / median bare. Pairing cancels slow drifts that a comparison
    of the two overall medians would mistake for overhead."""
    pcts = []
    for b in range(math.ceil(cycles / block)):
        n = min(block, cycles - b * block)
        i_blk, b_blk = inst[b * block : b * block + n], bare[b * block : b * block + n]
        if i_blk and b_blk:
            mb = summary(b_blk)["median"]
            pcts.append((summary(i_blk)["median"] - mb) / mb * 100)
    return round(summary(pcts)["median"], 3) if pcts else None
