"""Several nodes of one host (a Slurm allocation): a health check of each before a design is laid out,
and one lane of launches per node, the lanes in parallel.

A node whose snapshot cannot be taken or that `snapshot --check` calls unfit is left out and named; a
lane that fails costs only its own node (nothing is retried on another one). An interruption (Ctrl-C,
SIGTERM, SIGHUP) reaches the main thread only: it closes the host, which ends every lane's process
(Slurm: scancel of the allocation), then waits for the lanes to record what they had.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from regdiag.hosts.base import Host
from regdiag.measure.session import take_snapshot


def health(node: Host) -> tuple[dict[str, Any] | None, str | None]:
    """A node's snapshot and why it is unfit to benchmark (None: fit)."""
    from regdiag.snapshot.check import check_snapshot, is_fit

    snap, why = take_snapshot(node)
    if snap is None:
        return None, why
    # A load above the CPUs is momentary (the last minute, other nodes' launches on a shared machine
    # included): each launch records its host and compare flags it; it does not leave a node out.
    reasons = [r for r in check_snapshot(snap) if r.get("field") != "load_avg"]
    if is_fit(reasons):
        return snap, None
    errors = [r["message"] for r in reasons if r.get("severity") == "error"]
    return snap, "unfit to benchmark: " + "; ".join(errors[:2])


def fit_nodes(
    nodes: Sequence[Host], emit: Callable[[dict[str, Any]], None]
) -> tuple[list[Host], dict[str, str], dict[str, dict[str, Any]]]:
    """The nodes fit to benchmark (checked in parallel), the unfit ones by name with why, and each
    node's snapshot by name (what a named outlier is told apart by)."""
    with ThreadPoolExecutor(max_workers=min(16, len(nodes))) as pool:
        results = list(pool.map(health, nodes))
    fit: list[Host] = []
    unfit: dict[str, str] = {}
    snaps = {node.name: snap for node, (snap, _why) in zip(nodes, results, strict=True) if snap is not None}
    for node, (_snap, why) in zip(nodes, results, strict=True):
        emit({"node": node.name, "fit": why is None, "why": why})
        if why is None:
            fit.append(node)
        else:
            unfit[node.name] = why
    if not fit:
        from regdiag.errors import ProbeError

        raise ProbeError("no node is fit to benchmark: " + "; ".join(f"{k}: {v}" for k, v in unfit.items()))
    return fit, unfit, snaps


class NodeFailed(Exception):
    """A launch on one node of several failed: that node's pairs are left out, the others go on."""


def run_lanes(
    nodes: Sequence[Host],
    lanes: Sequence[Callable[[], None]],
    stop: Callable[[], None],
    on_fail: Callable[[str, str], None] | None = None,
) -> dict[str, str]:
    """Run each node's lane in its own thread; the failed nodes by name with why (a lane's exception,
    in one line), each also told to `on_fail(name, why)` as it fails, while the others run on. A usage
    error or an interruption is raised here, after every lane has ended; `stop` ends every lane's
    process at once (the host's close)."""
    failed: dict[str, str] = {}
    fatal: list[BaseException] = []
    lock = threading.Lock()

    def one(node: Host, lane: Callable[[], None]) -> None:
        try:
            lane()
        except BaseException as e:  # noqa: BLE001 - each lane's end is recorded, then judged below
            with lock:
                failed[node.name] = " ".join(str(e).split()) or type(e).__name__
                if not _node_failure(e):
                    fatal.append(e)
                elif on_fail is not None:
                    on_fail(node.name, failed[node.name])

    threads = [
        threading.Thread(target=one, args=(n, lane), daemon=True)
        for n, lane in zip(nodes, lanes, strict=True)
    ]
    join_lanes(threads, stop)
    if fatal:
        raise fatal[0]
    return failed


def join_lanes(threads: Sequence[threading.Thread], stop: Callable[[], None]) -> None:
    """Start the lanes' threads and wait for them; an interruption (this thread only gets it) calls `stop`,
    which ends every lane's process, waits for the lanes to record what arrived, and is raised."""
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        stop()  # ends every lane's process; the lanes then record what arrived
        for t in threads:
            t.join(timeout=30)
        raise


def _node_failure(e: BaseException) -> bool:
    """A failure that belongs to one node (its launch failed, its connection dropped), not to the run."""
    from regdiag.errors import HostError

    return isinstance(e, (NodeFailed, HostError))
