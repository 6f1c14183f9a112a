"""One round of a bisect's launches over its lanes (bisect/lanes.py): each lane's launches in a thread of
its own, the lanes at once; or, serial, every launch in this thread in the round's order.

A launch lost to its lane (Lab decides: a node gone DOWN, a cancelled step) is moved to another lane's
queue (`move`), and a lane dropped after its faults hands its queue to the others (`drop`). Anything
else a lane raises ends the round: the other lanes take no new launch, and it is raised here once every
lane has ended. An interruption (Ctrl-C, SIGTERM, SIGHUP) reaches this thread only: `stop` ends every
lane's process (a Slurm allocation: scancel), the lanes record what arrived, and it is raised.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from regdiag.measure.nodes import join_lanes

Job = TypeVar("Job")


class Round(Generic[Job]):
    def __init__(self, lanes: Sequence[str], jobs: Sequence[tuple[str, Job]]) -> None:
        self.order = list(lanes)
        self.queues: dict[str, deque[Job]] = {lane: deque() for lane in lanes}
        for lane, job in jobs:
            self.queues[lane].append(job)
        self.serial: deque[tuple[str, Job]] = deque(jobs)
        self.open = len(jobs)
        self.live = set(lanes)
        self.fatal: list[BaseException] = []
        self.cv = threading.Condition()
        self.parallel = False  # run_round sets it: the lanes' queues are used, else the serial order

    def take(self, lane: str) -> Job | None:
        """The lane's next launch; None once the round is over for it (done, dropped or ended)."""
        with self.cv:
            while not self.fatal and lane in self.live:
                if self.queues[lane]:
                    return self.queues[lane].popleft()
                if self.open <= 0:
                    return None
                self.cv.wait()
            return None

    def done(self) -> None:
        with self.cv:
            self.open -= 1
            self.cv.notify_all()

    def move(self, job: Job, to: str) -> None:
        """Run `job` again on lane `to` (next, when serial)."""
        with self.cv:
            self.open += 1  # the lost attempt is done (its lane's thread says so), this one is not
            if self.parallel:
                self.queues[to].append(job)
            else:
                self.serial.appendleft((to, job))
            self.cv.notify_all()

    def drop(self, lane: str, to: Callable[[int], str]) -> list[str]:
        """Take `lane` out of the round; its queued launches go to `to(i)` for the i-th of them (where
        each went, in order)."""
        with self.cv:
            self.live.discard(lane)
            if self.parallel:
                moved = list(self.queues[lane])
                self.queues[lane].clear()
                where = [to(i) for i in range(len(moved))]
                for job, dest in zip(moved, where, strict=True):
                    self.queues[dest].append(job)
            else:
                moved = [j for ln, j in self.serial if ln == lane]
                where = [to(i) for i in range(len(moved))]
                again = iter(zip(where, moved, strict=True))
                self.serial = deque(next(again) if ln == lane else (ln, j) for ln, j in self.serial)
            self.cv.notify_all()
            return where

    def fail(self, e: BaseException) -> None:
        with self.cv:
            self.fatal.append(e)
            self.cv.notify_all()


def run_round(
    rnd: Round[Job],
    work: Callable[[str, Job], None],
    parallel: bool,
    stop: Callable[[], None],
) -> None:
    """Run every launch of `rnd` with `work(lane, job)` (which calls rnd.move/rnd.drop for a fault)."""
    rnd.parallel = parallel and len(rnd.order) > 1
    if not rnd.parallel:
        while rnd.serial:
            lane, job = rnd.serial.popleft()
            work(lane, job)
        return

    def lane_thread(lane: str) -> None:
        while (job := rnd.take(lane)) is not None:
            try:
                work(lane, job)
            except BaseException as e:  # noqa: BLE001 - raised in the main thread once the lanes end
                rnd.fail(e)
                return
            finally:
                rnd.done()

    threads = [threading.Thread(target=lane_thread, args=(lane,), daemon=True) for lane in rnd.order]

    def halt() -> None:
        rnd.fail(KeyboardInterrupt())  # no lane takes another launch
        stop()

    join_lanes(threads, halt)
    if rnd.fatal:
        raise rnd.fatal[0]
