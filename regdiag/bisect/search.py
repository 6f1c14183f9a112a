"""The search: which factor (and which commit or version inside it) costs the milliseconds.

1. Endpoints. All-good and all-bad are measured first, interleaved. If the bad side is not
   slower beyond the margin (regdiag.stats' verdict), the regression does not reproduce here from
   these differences: say so and stop (the phantom case).
2. Factors. The factors are put in a chain c0 = all good, c1 = first factor bad, ..., cn = all bad
   and the chain is bisected: each point is classified against its bracket (classify.py), so one
   culprit among n factors costs ceil(log2 n) points. A factor found at step c(i-1) -> c(i) is then
   tried alone (c0 + that factor): when it does not do its whole effect alone, its partners among
   the factors before it are searched and confirmed (bisect/partners.py), and the group is named as
   one culprit with each member's share alone and the group's together.
3. Ranges. For a culprit that is a commit or a package, the same bisection runs along the commits
   (rev-list) or versions between its good and bad value, the other factors held as in context.
4. More than one culprit. Each classification leaves a residual: a point classified BAD at theta
   0.7 says 30 % of its bracket lies above it. When the CI says that residual is real and it is at
   least `min_share` of the whole regression, that side is searched too (with its own endpoints).
   A point that stays between its endpoints at the launch cap (PARTIAL) splits the search in two.
5. SKIP. A point whose environment does not build or whose launch fails is SKIP; the next nearest
   point of the bracket is tried instead, and a culprit that can only be narrowed to a range
   because of skipped points is reported with that range and the reasons.
6. Confirmation. Before a culprit is named, the two points of its step are measured again, fresh
   launches taking turns, and must differ by the endpoints' own test; one that does not is reported
   unresolved. The search measures each new point after its bracket: on a machine whose load changes
   from minute to minute, a point can look slower only because it ran later.

Sequential: a question is asked again after each launch added to its points, and stops as soon as
its CI decides it; a point already measured brings every launch the search has asked of it.
Everything is deterministic given the launches, so a resumed search takes the same path.

Rounds over lanes (bisect/lanes.py): with L lanes, a question's launches per point are filled up to a
multiple of L (launch i of every point on lane i mod L, so each lane carries every point of the
question alike), the round runs at once, then the question is asked; if it stays open, L more launches
per point. The values are compared within their lanes (lanes.blocked). With one lane: one launch at a
time, as a sequential search.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from regdiag.bisect import classify as C
from regdiag.bisect.factors import Factor
from regdiag.bisect.failures import MetricMissing, ProbeUsage, SideFailed, StepFailed
from regdiag.bisect.lab import Lab, Point, Sample, lane_free
from regdiag.bisect.measure import USAGE
from regdiag.bisect.outcome import Culprit, Options, Outcome, Step, Unresolved
from regdiag.bisect.partners import Interactions
from regdiag.errors import BadInput, ProbeError

ValuesBetween = Callable[[Factor], list[str | None]]


def order_from_middle(lo: int, hi: int) -> list[int]:
    mid = (lo + hi) // 2
    out = [mid]
    for d in range(1, hi - lo):
        for i in (mid + d, mid - d):
            if lo < i < hi and i not in out:
                out.append(i)
    return out


class Search(Interactions):
    def __init__(
        self,
        lab: Lab,
        options: Options,
        values_between: ValuesBetween | None = None,
        clear: Callable[[], list[tuple[Factor, str]]] | None = None,
    ) -> None:
        self.lab = lab
        self.o = options
        self.values_between = values_between or (lambda f: [f.good, f.bad])
        self.factors = lab.factors
        # After the endpoints: the factors no measured process loads, each with the line that says so
        # (bisect/loaded.py). They are held at their good value in every point but the bad endpoint.
        self.clear = clear or (lambda: [])
        self.cleared: list[tuple[Factor, str]] = []
        self.skipped: list[dict[str, str]] = []
        self.skip_known: dict[str, str] = {}
        self.unresolved: list[dict[str, Any]] = []  # found outside the ordered search (unconfirmed partners)
        # Launches this search has asked of each point (a resume asks the same), counting from the
        # seeded ones: those were measured before the search began, so a fresh re-measurement skips them.
        self.asked: dict[str, int] = dict(lab.journal.seeded)

    def _ensure(self, targets: Sequence[tuple[Point, int]]) -> None:
        for p, n in targets:
            key = self.lab.key(p)
            self.asked[key] = max(self.asked.get(key, 0), n)
        self.lab.ensure(targets)

    def _note(self, event: dict[str, Any]) -> None:
        self.lab.progress(event)

    def _fill(self, n: int) -> int:
        """`n` launches per point, up to a multiple of the lanes (one round fills them), at most the cap."""
        w = self.lab.width
        return min(self.o.max_launches, -(-n // w) * w)

    # -- measuring and classifying ---------------------------------------------------------------

    def _decide(
        self, what: str, verdict: str, est: C.Theta | C.Regression | None, points: dict[str, Point]
    ) -> None:
        rec: dict[str, Any] = {"what": what, "verdict": verdict}
        rec["points"] = {k: self.lab.key(p) for k, p in points.items()}
        if isinstance(est, C.Theta):
            rec.update(theta=_r(est.theta), lo=_r(est.lo), hi=_r(est.hi), launches=est.launches)
        elif isinstance(est, C.Regression):
            rec.update(ratio=_r(est.ratio), lo=_r(est.lo), hi=_r(est.hi), launches=list(est.launches))
        self.lab.journal.decision(rec)
        self._note({"event": "decision", "what": what, "verdict": verdict, "theta": rec.get("theta")})

    def differs(self, good: Point, bad: Point, what: str, start: tuple[int, int] = (0, 0)) -> C.Regression:
        """The phantom check for a bracket: REPRODUCED, NOT-REPRODUCED or INCONCLUSIVE; SideFailed when
        one side cannot be measured. `start`: the launches of (good, bad) to leave out, counted from
        the first: the question is then asked of launches taken after them only."""
        n = self._fill(self.o.launches)
        while True:
            self._note(
                {"event": "step", "what": what, "good": self.lab.label(good), "bad": self.lab.label(bad)}
            )
            self._ensure([(good, start[0] + n), (bad, start[1] + n)])
            g, b = self.lab.samples(good, start[0] + n), self.lab.samples(bad, start[1] + n)
            for side, got in (("good", g), ("bad", b)):
                if got.failure is not None:
                    self._decide(what, C.SKIP, None, {"good": good, "bad": bad})
                    raise SideFailed(side, got.failure)
            assert g.values is not None and b.values is not None  # a Sample has values or a failure
            final = n >= self.o.max_launches
            vals = lane_free({"good": _after(g, start[0]), "bad": _after(b, start[1])})
            r = C.regression(vals["good"], vals["bad"], self.o.margin, final, better=self.lab.better())
            if r.verdict != C.MORE:
                self._decide(what, r.verdict, r, {"good": good, "bad": bad})
                return r
            n = self._fill(n + 1)

    def _classify(
        self,
        what: str,
        points: dict[str, Point],
        theta: Callable[[dict[str, list[float]]], C.Theta],
        decide: Callable[[C.Theta, bool], str] = C.classify,
    ) -> tuple[str, C.Theta | None]:
        """Classify the first of `points` (BAD / GOOD / PARTIAL / INCONCLUSIVE / SKIP), adding launches.

        Sequential: the question is asked again after each launch added to its new points, and stops as
        soon as the CI decides it. A point measured before for another question brings every launch
        this search has asked of it (the count a resume replays alike), not only the first n."""
        n = self._fill(self.o.launches)
        first = next(iter(points))
        while True:
            self._note({"event": "step", "what": what, "label": self.lab.label(points[first])})
            want = {name: max(n, self.asked.get(self.lab.key(p), 0)) for name, p in points.items()}
            self._ensure([(p, want[name]) for name, p in points.items()])
            got = {name: self.lab.samples(p, want[name]) for name, p in points.items()}
            if got[first].values is None:
                key = self.lab.key(points[first])
                if key not in self.skip_known:
                    self.skip_known[key] = str(got[first].failure)
                    self.skipped.append(
                        {"point": self.lab.label(points[first]), "reason": str(got[first].failure)}
                    )
                self._decide(what, C.SKIP, None, points)
                return C.SKIP, None
            if any(s.values is None for s in got.values()):
                self._decide(what, C.INCONCLUSIVE, None, points)
                return C.INCONCLUSIVE, None
            est = theta(lane_free(got))
            verdict = decide(est, n >= self.o.max_launches)
            if verdict != C.MORE:
                self._decide(what, verdict, est, points)
                return verdict, est
            n = self._fill(n + 1)

    def classify_point(self, x: Point, lo: Point, hi: Point, what: str) -> tuple[str, C.Theta | None]:
        keys = {n: self.lab.key(p) for n, p in (("x", x), ("lo", lo), ("hi", hi))}
        return self._classify(
            what,
            {"x": x, "lo": lo, "hi": hi},
            lambda s: C.theta_point((keys["x"], s["x"]), (keys["lo"], s["lo"]), (keys["hi"], s["hi"])),
        )

    def effect_present(self, x_hi: Point, x_lo: Point, ref_hi: Point, ref_lo: Point, what: str) -> str:
        return self._effect_est(x_hi, x_lo, ref_hi, ref_lo, what)[0]

    def _effect_est(
        self, x_hi: Point, x_lo: Point, ref_hi: Point, ref_lo: Point, what: str, alone: bool = False
    ) -> tuple[str, C.Theta | None]:
        """Does x_lo -> x_hi do what ref_lo -> ref_hi did (BAD), not (GOOD), in part (PARTIAL)?"""
        names = {"x_hi": x_hi, "x_lo": x_lo, "ref_hi": ref_hi, "ref_lo": ref_lo}
        keys = {n: self.lab.key(p) for n, p in names.items()}
        # One environment may play two roles (x_lo is ref_lo when a factor is tried alone): measure it once.
        points: dict[str, Point] = {}
        for n, p in names.items():
            if p not in points.values():
                points[n] = p
        role = {n: next(m for m, q in points.items() if q == p) for n, p in names.items()}
        return self._classify(
            what,
            points,
            lambda s: C.theta_effect(
                *[(keys[n], s[role[n]]) for n in ("x_hi", "x_lo", "ref_hi", "ref_lo")]  # type: ignore[arg-type]
            ),
            C.classify_alone if alone else C.classify,
        )

    # -- the ordered search ----------------------------------------------------------------------

    def ordered(
        self, points: Sequence[Point], lo: int, hi: int, scale: float, what: str
    ) -> list[Step | Unresolved]:
        """Find the changes between points[lo] (good) and points[hi] (bad), which differ.

        `scale` is this bracket's share of the whole regression: residuals below `min_share` of the
        whole are not searched.
        """
        if hi - lo <= 1:
            return [Step(lo, hi)]
        verdict, est, at = C.SKIP, None, -1
        for i in order_from_middle(lo, hi):
            if self.lab.key(points[i]) in self.skip_known:
                continue
            verdict, est = self.classify_point(
                points[i], points[lo], points[hi], f"{what} [{lo}..{hi}] at {i}"
            )
            if verdict != C.SKIP:
                at = i
                break
        if at < 0:  # every point in between is SKIP: the change is somewhere in (lo, hi]
            return [Step(lo, hi, [(i, self.skip_known[self.lab.key(points[i])]) for i in range(lo + 1, hi)])]
        assert est is not None
        th = min(max(est.theta, 0.0), 1.0)
        used = min(est.launches.values())
        if verdict == C.BAD:
            out = self.ordered(points, lo, at, scale * th, what)
            if (
                est.hi < 1.0
                and (1.0 - th) * scale >= self.o.min_share
                and self._residual(points, at, hi, used, what)
            ):
                out += self.ordered(points, at, hi, scale * (1.0 - th), what)
            return out
        if verdict == C.GOOD:
            out = self.ordered(points, at, hi, scale * (1.0 - th), what)
            if est.lo > 0.0 and th * scale >= self.o.min_share and self._residual(points, lo, at, used, what):
                out = self.ordered(points, lo, at, scale * th, what) + out
            return out
        if verdict == C.PARTIAL:
            return self.ordered(points, lo, at, scale * th, what) + self.ordered(
                points, at, hi, scale * (1.0 - th), what
            )
        why = f"point {at} stayed inconclusive (theta {est.theta:.2f}, CI {est.lo:.2f}..{est.hi:.2f})"
        return [Unresolved(lo, hi, why)]

    def _residual(self, points: Sequence[Point], lo: int, hi: int, n: int, what: str) -> bool:
        """Is the rest of a bracket a regression of its own? Its two ends must differ as the endpoints
        had to (regdiag.stats' verdict, on the launches already measured): theta's CI alone, from a
        handful of launches of a noisy probe, would send the search after noise."""
        a, b = self.lab.samples(points[lo], n), self.lab.samples(points[hi], n)
        if a.values is None or b.values is None:
            return False
        vals = lane_free({"lo": a, "hi": b})
        r = C.regression(vals["lo"], vals["hi"], self.o.margin, final=True, better=self.lab.better())
        self._decide(f"{what} residual [{lo}..{hi}]", r.verdict, r, {"good": points[lo], "bad": points[hi]})
        return r.verdict == C.REPRODUCED

    def confirm(self, c: Culprit) -> str | None:
        """Re-measure a culprit's step before it is named: None when confirmed, else why not.

        The search measures a new point's launches back to back, after its bracket's were measured:
        on a shared machine whose load changes from one minute to the next, a point can look slower
        only because it ran later (seen on the loaded 2-core machine: a harmless NCCL variable's step
        classified by a residual test on launches taken minutes apart). The confirmation takes fresh
        launches of the step's two points, taking turns (lo hi lo hi ...), so both sides see the same
        moments, and asks the endpoints' own question of those launches only: is hi slower than lo
        beyond the margin (regdiag.stats' verdict, `launches` more at a time up to `max_launches`)?
        """
        lab = self.lab
        what = f"confirm {' + '.join(f.name for f in c.factors)}"
        start = (self.asked.get(lab.key(c.lo), 0), self.asked.get(lab.key(c.hi), 0))
        try:
            r = self.differs(c.lo, c.hi, what, start)
        except SideFailed as e:
            return f"not confirmed: a launch of its re-measurement failed ({e.cause})"
        if r.verdict == C.REPRODUCED:
            return None
        return (
            f"not confirmed: re-measured with both sides taking turns, {lab.label(c.hi)} / "
            f"{lab.label(c.lo)} = {r.ratio:.3f} (95 % CI {r.lo:.3f}..{r.hi:.3f}, {r.verdict}, "
            f"{r.launches[0]} launches each); not named as a culprit"
        )

    # -- the whole search ------------------------------------------------------------------------

    def run(self) -> Outcome:
        t0 = time.monotonic()
        lab = self.lab
        good, bad = lab.good(), lab.bad()
        if not self.factors:
            raise BadInput("the two sides do not differ in any factor this bisect can change")
        ends = self._endpoints(good, bad)
        self.cleared = self.clear()
        gone = {f.key for f, _ in self.cleared}
        self.factors = [f for f in lab.factors if f.key not in gone]
        cleared = [{"factor": f.to_dict(), "why": why} for f, why in self.cleared]
        if ends.verdict != C.REPRODUCED:
            return Outcome(
                ends.verdict,
                ends,
                statement=self._not_reproduced(ends),
                wall_s=time.monotonic() - t0,
                cleared=cleared,
            )
        # The chain flips the factors left one by one; the cleared ones stay good until the bad endpoint.
        chain = [
            lab.with_values(good, {f.key: f.bad for f in self.factors[:i]}) for i in range(len(self.factors))
        ] + [bad]
        culprits, unresolved = self._search(chain)
        culprits = self._confirmed(culprits)
        unresolved += self.unresolved
        verdict = "CULPRIT" if culprits else C.INCONCLUSIVE
        statement = ""  # the report says it (and, on a busy machine, why)
        return Outcome(
            verdict, ends, culprits, unresolved, self.skipped, statement, time.monotonic() - t0, cleared
        )

    def _endpoints(self, good: Point, bad: Point) -> C.Regression:
        """Do the endpoints differ? A side that cannot be measured is the user's input or the probe's."""
        try:
            return self.differs(good, bad, "endpoints")
        except C.NoDirection as e:
            raise BadInput(f"--metric {self.lab.metric}: {e}") from None
        except SideFailed as e:
            if isinstance(e.cause, MetricMissing):
                raise BadInput(f"--metric: {e.cause}") from None
            if isinstance(e.cause, ProbeUsage):
                raise BadInput(str(e.cause).removeprefix(USAGE)) from None
            raise ProbeError(f"the {e.side} endpoint cannot be measured: {e.cause}") from None

    def _not_reproduced(self, ends: C.Regression) -> str:
        why = (
            f"the regression does not reproduce: all-bad / all-good = {ends.ratio:.3f} "
            f"(95 % CI {ends.lo:.3f}..{ends.hi:.3f}, margin {self.o.margin:.0%})"
        )
        if ends.verdict == C.NOT_REPRODUCED:
            return why + "; these differences do not cause it here (a phantom, or a cause outside them)"
        return why + f"; still unclear after {self.o.max_launches} launches per side"

    def _search(self, chain: list[Point]) -> tuple[list[Culprit], list[dict[str, Any]]]:
        """The steps of the chain that carry the regression, as culprits, and the brackets left unresolved."""
        lab = self.lab
        culprits: list[Culprit] = []
        unresolved: list[dict[str, Any]] = []
        for st in self.ordered(chain, 0, len(chain) - 1, 1.0, "factors"):
            if isinstance(st, Unresolved):
                unresolved.append(
                    {
                        "between": [lab.label(chain[st.lo]), lab.label(chain[st.hi])],
                        "factors": [f.label() for f in self.factors[st.lo : st.hi]],
                        "why": st.why,
                    }
                )
            elif st.hi - st.lo > 1:
                skipped = [{"point": lab.label(chain[i]), "reason": r} for i, r in st.skipped]
                culprits.append(
                    Culprit(list(self.factors[st.lo : st.hi]), chain[st.lo], chain[st.hi], skipped=skipped)
                )
            else:
                culprits += self._explain_step(chain, st.hi)
        return culprits, unresolved

    def _confirmed(self, culprits: list[Culprit]) -> list[Culprit]:
        """The culprits whose step reproduces on fresh launches; the others go to the unresolved."""
        confirmed: list[Culprit] = []
        for c in culprits:
            doubt = self.confirm(c)
            if doubt is None:
                confirmed.append(c)
                self.unresolved += [d for d in c.doubts if d not in self.unresolved]
            else:
                self.unresolved.append(
                    {
                        "between": [self.lab.label(c.lo), self.lab.label(c.hi)],
                        "factors": [f.label() for f in c.factors],
                        "why": doubt,
                    }
                )
        return confirmed

    def _range(self, m: Factor, chain: list[Point], i: int, parent: Culprit) -> list[Culprit]:
        lab = self.lab
        values = self.values_between(m)
        if len(values) <= 2:
            return []
        points = [lab.with_values(chain[i], {m.key: v}) for v in values]
        if points[0] != chain[i - 1]:
            try:
                ends = self.differs(points[0], points[-1], f"{m.name} range endpoints")
            except StepFailed:
                return []
            if ends.verdict != C.REPRODUCED:
                return []
        out: list[Culprit] = []
        for st in self.ordered(points, 0, len(points) - 1, 1.0, f"{m.name} range"):
            if isinstance(st, Unresolved):
                continue
            narrowed = Factor(m.kind, m.name, values[st.lo], values[st.hi])
            others = [g for g in parent.factors if g.key != m.key]
            out.append(
                Culprit(
                    [*others, narrowed],
                    points[st.lo],
                    points[st.hi],
                    interaction=parent.interaction,
                    alone=parent.alone,
                    unconfirmed=parent.unconfirmed,
                    within=m,
                    doubts=parent.doubts,
                    skipped=[{"point": m.show(values[j]), "reason": r} for j, r in st.skipped],
                )
            )
        return out


def _after(s: Sample, start: int) -> Sample:
    """The sample's launches after the first `start` (a confirmation's fresh ones)."""
    lanes = s.lanes[start:] if s.lanes is not None else None
    return Sample(s.key, (s.values or [])[start:], s.failure, lanes)


def _r(x: float) -> float | None:
    if x != x or x in (float("inf"), float("-inf")):
        return None
    return round(x, 4)
