"""Why a point of a bisect cannot be measured, as exceptions (not strings parsed back).

Each class has a `kind` the journal stores next to the launch's one-line reason, so a resumed
bisect knows the class of an old failure without reading its text.

    StepFailed        a point cannot be measured: SKIP, git bisect's 125 (the base class)
      BuildFailed     its environment cannot be made (regdiag.bisect.envs)
      CannotTest      the launch exited 125 (the user's "this point cannot be tested")
      LaunchFailed    the launch crashed, timed out or printed a probe error
      ProbeUsage      the probe refused its arguments: a usage error, the same at every point
      MetricMissing   the probe ran but reports no such --metric: a usage error too

`SideFailed` wraps one of them when an endpoint of a bracket cannot be measured. Refusals that no
other point can avoid (a factor that cannot be applied on this machine at all, such as a GPU clock
without a GPU or without permission) are `regdiag.errors.BadInput`, raised where they are found.
"""

from __future__ import annotations


class StepFailed(Exception):
    kind = "failed"


class BuildFailed(StepFailed):
    """An environment that cannot be made; the message is one line (the reason for SKIP), secrets out."""

    kind = "build"

    def __init__(self, message: str) -> None:
        from regdiag.snapshot.redact import scrub_text

        super().__init__(scrub_text(message))


class CannotTest(StepFailed):
    kind = "skip"


class LaunchFailed(StepFailed):
    kind = "error"


class ProbeUsage(StepFailed):
    kind = "usage"


class MetricMissing(StepFailed):
    kind = "metric"


FAILURES: dict[str, type[StepFailed]] = {
    c.kind: c for c in (StepFailed, BuildFailed, CannotTest, LaunchFailed, ProbeUsage, MetricMissing)
}


def failure(kind: str | None, reason: str) -> StepFailed:
    """The exception for a journalled failure; journals written before kinds were kept give a
    LaunchFailed (or CannotTest for git's 125)."""
    return FAILURES.get(kind or "", LaunchFailed)(reason)


class SideFailed(StepFailed):
    """One side of a bracket (its good or bad point) cannot be measured."""

    def __init__(self, side: str, cause: StepFailed) -> None:
        super().__init__(f"the {side} side cannot be measured: {cause}")
        self.side = side
        self.cause = cause
