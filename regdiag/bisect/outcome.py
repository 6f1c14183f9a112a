"""What a bisect search works with and hands back: its options, the steps and culprits it finds, the
outcome the report is made from (plain data; regdiag.bisect.search makes them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from regdiag.bisect import classify as C
from regdiag.bisect.factors import Factor
from regdiag.bisect.lab import Point


@dataclass
class Options:
    launches: int = 3  # per point before the first look; then one more at a time (sequential)
    max_launches: int = 9  # per point: the cap after which a step is PARTIAL or INCONCLUSIVE
    margin: float = 0.02  # the endpoints must differ by more than this (ratio - 1)
    min_share: float = 0.1  # a residual smaller than this share of the regression is not searched


@dataclass
class Step:
    """A change between two adjacent tested points of an ordered list (points in between: SKIP)."""

    lo: int
    hi: int
    skipped: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Unresolved:
    lo: int
    hi: int
    why: str


@dataclass
class Culprit:
    factors: list[Factor]  # with the exact good/bad values of the change (a commit pair, a version pair)
    lo: Point
    hi: Point
    interaction: bool = False
    alone: str | None = None  # the verdict of the factor tried alone
    unconfirmed: list[Factor] = field(
        default_factory=list
    )  # partners ddmin kept but could not show necessary
    within: Factor | None = None  # the factor this refines, when found by a range search
    skipped: list[dict[str, str]] = field(default_factory=list)
    # An interaction: each member tried alone (all good but that member) and the group together (all
    # good but the group): the report gives each its ms and share of the regression.
    members: list[tuple[Factor, Point]] = field(default_factory=list)
    together: Point | None = None
    # What was left open about it (its partners): reported unresolved only when it is named (confirmed).
    doubts: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Outcome:
    verdict: str  # CULPRIT, NOT-REPRODUCED, INCONCLUSIVE
    endpoints: C.Regression | None
    culprits: list[Culprit] = field(default_factory=list)
    unresolved: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    statement: str = ""
    wall_s: float = 0.0
    cleared: list[dict[str, Any]] = field(default_factory=list)  # factors no measured process loads
