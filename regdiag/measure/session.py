"""A measuring session's snapshots: one of the host before the launches and one after them, also when
they fail, with one failure policy. A snapshot that cannot be taken never costs the measurement: the
record gets `snapshot_before`/`snapshot_after` None and a warning that says why ("snapshot before:
...").

    with Session(host, [writer], enabled=True, emit=emit):
        ...launches...

`probe`, `ab`, `probe server` and `probe engine` take their snapshots here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from regdiag.hosts.base import Host
from regdiag.runs import RunWriter

SnapshotFn = Callable[[Host], dict[str, Any]]


def take_snapshot(host: Host) -> tuple[dict[str, Any] | None, str | None]:
    """A snapshot of `host`, or None and why."""
    try:
        from regdiag.hosts.remote import collect_snapshot

        return collect_snapshot(host), None
    except ImportError as e:
        return None, f"snapshot unavailable: {e}"
    except Exception as e:  # recorded, not raised: the measurement is what the user asked for
        return None, f"snapshot failed: {' '.join(str(e).split())[:200]}"


def warn(writer: RunWriter, message: str) -> None:
    """Add a warning to a record once, in the order they came."""
    writer.run["warnings"] = list(dict.fromkeys([*writer.run.get("warnings", []), message]))


class Session:
    """Snapshots of `host` around a block, into every record of `writers` (an A/B run has two)."""

    def __init__(
        self,
        host: Host | None,
        writers: Sequence[RunWriter],
        enabled: bool = True,
        emit: Callable[[str], None] | None = None,
    ) -> None:
        from regdiag.hosts.local import LocalHost

        self.host = host if host is not None else LocalHost()
        self.writers = list(writers)
        self.enabled = enabled
        self.emit = emit or (lambda when: None)

    def snapshot(self, when: str) -> None:
        self.emit(when)
        snap, why = take_snapshot(self.host)
        for w in self.writers:
            w.run[f"snapshot_{when}"] = snap
            if why:
                warn(w, f"snapshot {when}: {why}")
            w.flush()

    def __enter__(self) -> Session:
        if self.enabled:
            self.snapshot("before")
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        # After the launches, also after a failed one; not after an interruption (the user wants out)
        # nor after a refusal that leaves no record.
        from regdiag.measure.launch import BusyAbort, UsageAbort

        if self.enabled and not isinstance(exc, (KeyboardInterrupt, UsageAbort, BusyAbort)):
            self.snapshot("after")
