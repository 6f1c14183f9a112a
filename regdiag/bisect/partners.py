"""Partners of a culprit: a factor found at a step of the chain that does not do its whole effect alone.

A factor f found at step c(i-1) -> c(i) is tried alone (all good but f). When it is shown not to do
its effect alone (GOOD), or does only a part of it (PARTIAL), the factors before it in the chain
(its context) hold a partner or several: delta debugging (Zeller's ddmin) over the context finds the
smallest set T with which f does what it did in context. Each test asks "does f, added to this
subset, do its effect?" (the effect's CI above one half: BAD). ddmin counts an INCONCLUSIVE test as
"does not", so under noise it keeps factors it cannot drop; every partner it returns is therefore
confirmed on fresh launches of the four points involved, taken in turns: without the partner the
effect must be shown smaller, by more than min_share of the whole. A partner not confirmed is not
named; it is reported unresolved.

The group is reported as one culprit: "interaction: A with B", with each member's effect tried
alone and the group's together (ms, 95 % CI, share of the regression). A question that stays open at
--max-launches is said so, with about how many launches each point would need to decide it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from regdiag.bisect import classify as C
from regdiag.bisect.factors import Factor
from regdiag.bisect.kinds import kind_of
from regdiag.bisect.lab import Lab, Point
from regdiag.bisect.outcome import Culprit, Options

# The verdict of a partner test that showed the effect smaller without it (a partner in part).
SMALLER = "SMALLER"


def launches_needed(est: C.Theta | None, n: int) -> int | None:
    """About how many launches per point would have put theta's CI clear of one half (the CI shrinks
    as 1/sqrt(n)): None when theta sits on one half or its CI is unbounded."""
    if est is None or est.hi == float("inf") or est.lo == float("-inf"):
        return None
    half, dist = (est.hi - est.lo) / 2.0, abs(est.theta - 0.5)
    if dist <= 0.0 or half <= 0.0:
        return None
    return max(n + 1, int(-(-n * (half / dist) ** 2 // 1)))


class Interactions:
    """What the search (regdiag.bisect.search.Search) does once a step of the chain is found."""

    lab: Lab
    o: Options
    factors: list[Factor]
    unresolved: list[dict[str, Any]]
    asked: dict[str, int]

    # -- provided by Search ----------------------------------------------------------------------

    def effect_present(self, x_hi: Point, x_lo: Point, ref_hi: Point, ref_lo: Point, what: str) -> str:
        raise NotImplementedError

    def _effect_est(
        self, x_hi: Point, x_lo: Point, ref_hi: Point, ref_lo: Point, what: str, alone: bool = False
    ) -> Any:
        raise NotImplementedError

    def _ensure(self, targets: Any) -> None:
        raise NotImplementedError

    def _note(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def _decide(self, what: str, verdict: str, est: Any, points: dict[str, Point]) -> None:
        raise NotImplementedError

    def _range(self, m: Factor, chain: list[Point], i: int, parent: Culprit) -> list[Culprit]:
        raise NotImplementedError

    # -- a step explained ------------------------------------------------------------------------

    def _explain_step(self, chain: list[Point], i: int) -> list[Culprit]:
        lab = self.lab
        f = self.factors[i - 1]
        prefix = list(self.factors[: i - 1])
        group = [f]
        culprit = Culprit([f], chain[i - 1], chain[i])
        between = [lab.label(chain[i - 1]), lab.label(chain[i])]
        if prefix:
            alone = lab.with_values(lab.good(), {f.key: f.bad})
            culprit.alone, est = self._effect_est(
                alone, lab.good(), chain[i], chain[i - 1], f"{f.name} alone", alone=True
            )
            if culprit.alone in (C.GOOD, C.PARTIAL):
                partners, unconfirmed = self.partners(prefix, f, chain[i], chain[i - 1], culprit.alone)
                group = [*partners, f]
                culprit.factors = group
                culprit.interaction = bool(partners)
                culprit.unconfirmed = unconfirmed
                if partners:
                    self._members(culprit, group)
                if unconfirmed or not partners:
                    did = (
                        "did not reproduce its effect alone"
                        if culprit.alone == C.GOOD
                        else "did part of it alone"
                    )
                    names = ", ".join(g.name for g in unconfirmed) or "none of them"
                    culprit.doubts.append(
                        {
                            "between": between,
                            "factors": [g.label() for g in unconfirmed or prefix],
                            "why": f"{f.name} {did}; {names} could not be shown necessary to it (without "
                            "each, the effect was not shown smaller): not named as culprits",
                        }
                    )
            elif culprit.alone != C.BAD:
                used = min(est.launches.values()) if est is not None else self.o.max_launches
                need = launches_needed(est, used)
                more = f"; about {need} launches per point would decide it" if need else ""
                culprit.doubts.append(
                    {
                        "between": between,
                        "factors": [g.label() for g in prefix],
                        "why": f"{f.name} tried alone stayed {culprit.alone} after {used} launches per point "
                        f"(--max-launches {self.o.max_launches}): whether it acts alone or only with some of "
                        f"these could not be decided{more}; it is named alone",
                        "launches_needed": need,
                    }
                )
        refined: list[Culprit] = []
        for m in group:
            if not kind_of(m).ordered:
                continue
            refined += self._range(m, chain, i, culprit)
        return refined or [culprit]

    def _members(self, c: Culprit, group: list[Factor]) -> None:
        """Each member tried alone and the group together, measured (most already are: f alone by the
        alone check, the group by ddmin or the confirmation) so the report can give each its share."""
        lab = self.lab
        good = lab.good()
        c.members = [(g, lab.with_values(good, {g.key: g.bad})) for g in group]
        c.together = lab.with_values(good, {g.key: g.bad for g in group})
        self._ensure([(p, max(self.o.launches, self.asked.get(lab.key(p), 0))) for _, p in c.members])
        self._ensure([(c.together, max(self.o.launches, self.asked.get(lab.key(c.together), 0)))])

    # -- ddmin over the context ------------------------------------------------------------------

    def partners(
        self, prefix: list[Factor], f: Factor, ref_hi: Point, ref_lo: Point, alone: str
    ) -> tuple[list[Factor], list[Factor]]:
        """ddmin over `prefix`: the smallest subset T with which f does what it did in context, split
        into (confirmed, unconfirmed). ddmin takes any verdict but BAD as "f does not do it with this
        subset", an INCONCLUSIVE included, so under noise it keeps factors it merely could not drop.
        A partner p is confirmed only when f with T minus p is shown to do less (_necessary)."""
        good = self.lab.good()
        verdicts: dict[frozenset[str], str] = {frozenset(): alone}

        def effect(subset: list[Factor]) -> str:
            keys = frozenset(g.key for g in subset)
            if keys not in verdicts:
                base = self.lab.with_values(good, {g.key: g.bad for g in subset})
                with_f = self.lab.with_values(base, {f.key: f.bad})
                names = ", ".join(g.name for g in subset)
                verdicts[keys] = self.effect_present(
                    with_f, base, ref_hi, ref_lo, f"{f.name} with {{{names}}}"
                )
            return verdicts[keys]

        def test(subset: list[Factor]) -> bool:
            return effect(subset) == C.BAD

        c = list(prefix)
        n = 2
        while len(c) >= 2:
            size = len(c)
            chunks = [c[i * size // n : (i + 1) * size // n] for i in range(n)]
            chunks = [ch for ch in chunks if ch]
            hit = next((ch for ch in chunks if test(ch)), None)
            if hit is not None:
                c, n = hit, 2
                continue
            if n > 2:
                comp = next(
                    (cm for ch in chunks if (cm := [x for x in c if x not in ch]) and test(cm)),
                    None,
                )
                if comp is not None:
                    c, n = comp, max(n - 1, 2)
                    continue
            if n >= len(c):
                break
            n = min(2 * n, len(c))

        # ddmin has tested (or, for a single partner, the alone check has) every complement already:
        # one that was not BAD is measured again, fresh and taking turns with f added to T itself.
        # When f alone did nothing, the complement must have been GOOD already (a cheap first filter).
        def maybe(rest: list[Factor]) -> bool:
            return effect(rest) == C.GOOD if alone == C.GOOD else effect(rest) != C.BAD

        shown = {
            p.key
            for p in c
            if maybe(rest := [x for x in c if x.key != p.key]) and self._necessary(f, p, rest, c)
        }
        return [p for p in c if p.key in shown], [p for p in c if p.key not in shown]

    def _necessary(self, f: Factor, p: Factor, rest: list[Factor], group: list[Factor]) -> bool:
        """Is p necessary to f? f added to `rest` (the group without p) against f added to the whole
        group, four points measured afresh taking turns (the ddmin tests compared effects measured
        minutes apart, against the chain's step measured earlier still): the effect without p must be
        shown smaller than with it by more than min_share (its CI below 1 - min_share), whether f alone
        did nothing or a part (the alone check's GOOD or PARTIAL can be either, under noise); shown to
        be most of it (the CI above 1/2), p is not necessary."""
        lab = self.lab
        without = lab.with_values(lab.good(), {g.key: g.bad for g in rest})
        whole = lab.with_values(lab.good(), {g.key: g.bad for g in group})
        points = {
            "x_hi": lab.with_values(without, {f.key: f.bad}),
            "x_lo": without,
            "ref_hi": lab.with_values(whole, {f.key: f.bad}),
            "ref_lo": whole,
        }
        keys = {n: lab.key(q) for n, q in points.items()}
        top = 1.0 - self.o.min_share

        def smaller(est: C.Theta, final: bool) -> str:
            if est.hi < top:
                return SMALLER  # without p, f does less: p is necessary to (part of) its effect
            if est.lo > 0.5:
                return C.BAD  # without p, f still does most of it
            return C.INCONCLUSIVE if final else C.MORE

        verdict = self._fresh(
            f"confirm {p.name} necessary to {f.name}",
            points,
            lambda s: C.theta_effect(
                (keys["x_hi"], s["x_hi"]),
                (keys["x_lo"], s["x_lo"]),
                (keys["ref_hi"], s["ref_hi"]),
                (keys["ref_lo"], s["ref_lo"]),
            ),
            smaller,
        )
        return verdict == SMALLER

    def _fresh(
        self,
        what: str,
        points: dict[str, Point],
        theta: Callable[[dict[str, list[float]]], C.Theta],
        decide: Callable[[C.Theta, bool], str] = C.classify,
    ) -> str:
        """Classify as _classify does, on launches taken now for this question only, every point in turn."""
        lab = self.lab
        start = {name: self.asked.get(lab.key(q), 0) for name, q in points.items()}
        n = self.o.launches
        while True:
            self._note({"event": "step", "what": what, "label": lab.label(next(iter(points.values())))})
            self._ensure([(q, start[name] + n) for name, q in points.items()])
            got = {name: lab.samples(q, start[name] + n).values for name, q in points.items()}
            if any(v is None for v in got.values()):
                self._decide(what, C.INCONCLUSIVE, None, points)
                return C.INCONCLUSIVE
            est = theta({name: v[start[name] :] for name, v in got.items() if v is not None})
            verdict = decide(est, n >= self.o.max_launches)
            if verdict != C.MORE:
                self._decide(what, verdict, est, points)
                return verdict
            n = min(self.o.max_launches, n + 1)
