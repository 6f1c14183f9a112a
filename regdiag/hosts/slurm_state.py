"""What Slurm says when a step failed: the allocation ended (scancel, TIMEOUT, ...) or the step's node
went DOWN, each named in one line, so that a fault of the cluster is never read as the launch's own
failure (docs/fleet.md, "Faults").

    fault = job_fault(job_id, "n3", ["srun: error: Node failure on n3"])
    -> "n3 went DOWN (node failure: it left the allocation)"  or
       "the allocation was cancelled (scancel)"  or  None (the launch failed on its own)

Slurm is asked first (`squeue --json --jobs J`: the job's state, reason and nodes; `sacct` where
accounting keeps a job squeue no longer lists); srun's and slurmstepd's own lines are the last word
(`*** STEP 7.3 ON n1 CANCELLED AT ... DUE TO TIME LIMIT ***`), for a job Slurm has already forgotten.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any

from regdiag.errors import HostError
from regdiag.hosts.local import LocalHost

# A line srun or slurmstepd prints about the step itself (not the task's own output).
SLURM_LINE = re.compile(r"^(srun|slurmstepd(-\S+)?): error: ")
# The job states a running allocation can be in; any other means it ended. COMPLETING (its steps being
# ended) hides how it ended: Slurm is asked again until the job's own end shows, for up to SETTLE_S.
ALIVE = ("RUNNING", "CONFIGURING", "PENDING", "SUSPENDED", "REQUEUED", "RESIZING")
SETTLE_S = 15.0
ENDED = {
    "CANCELLED": ("the allocation was cancelled", "scancel"),
    "TIMEOUT": ("the allocation reached its time limit", "TIMEOUT"),
    "NODE_FAIL": ("the allocation ended: one of its nodes failed", "NODE_FAIL"),
    "PREEMPTED": ("the allocation was preempted", "PREEMPTED"),
    "DEADLINE": ("the allocation reached its deadline", "DEADLINE"),
    "BOOT_FAIL": ("the allocation ended: a node failed to boot", "BOOT_FAIL"),
    "OUT_OF_MEMORY": ("the allocation ran out of memory", "OUT_OF_MEMORY"),
}


class SlurmFault(HostError):
    """A step failed because of the cluster, not the launch: `what` happened ("n3 went DOWN", "the
    allocation was cancelled"), `why` Slurm gives ("scancel", the node's reason)."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what} ({why})")
        self.what, self.why = what, why

    def at(self, where: str) -> str:
        """The line with where in the run it happened: "n3 went DOWN at launch 14 (reason)"."""
        return f"{self.what} {where} ({self.why})"


def _local(argv: Sequence[str], timeout: float = 30.0) -> tuple[bool, str]:
    res = LocalHost().run(list(argv), timeout=timeout)
    return res.ok, res.stdout.decode("utf-8", "replace")


def ended(state: str) -> SlurmFault:
    """A job state that is not alive, named (CANCELLED: "the allocation was cancelled (scancel)")."""
    return SlurmFault(*ENDED.get(state, ("the allocation ended", state)))


def job_state(job_id: str) -> dict[str, Any] | None:
    """{"state", "reason", "nodes"} of the job as squeue (then sacct) has it; None: Slurm forgot it."""
    ok, out = _local(["squeue", "--json", "--jobs", job_id])
    if ok:
        jobs = json.loads(out or "{}").get("jobs", [])
        for j in jobs:
            if str(j.get("job_id")) == job_id:
                state = j.get("job_state")
                state = state[0] if isinstance(state, list) and state else state  # newer Slurm: a list
                reason, end = str(j.get("state_reason") or ""), j.get("end_time")
                if state == "RUNNING" and isinstance(end, int) and 0 < end <= time.time():
                    # Past its time limit, before slurmctld's periodic check ends it (up to a minute):
                    # no step can start ("Job/step already completing or completed").
                    state, reason = "TIMEOUT", "TimeLimit"
                return {"state": str(state), "reason": reason, "nodes": j.get("nodes")}
    ok, out = _local(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,Reason"])
    first = out.strip().splitlines()[0] if ok and out.strip() else ""
    if first:
        state, _, reason = first.partition("|")
        return {"state": state.split()[0], "reason": reason, "nodes": None}  # "CANCELLED by 0"
    return None


def _from_lines(lines: Sequence[str]) -> str | None:
    """The job's end as srun's and slurmstepd's lines tell it (for a job Slurm no longer lists)."""
    text = "\n".join(lines)
    if "DUE TO TIME LIMIT" in text:
        return "TIMEOUT"
    if "DUE TO PREEMPTION" in text:
        return "PREEMPTED"
    if re.search(r"\*\*\* (STEP|JOB) \S+ ON \S+ CANCELLED AT", text) or "Invalid job id" in text:
        return "CANCELLED"
    return None


def _node_down(node: str, lines: Sequence[str], nodes: list[str] | None) -> SlurmFault | None:
    """Why `node` is down, drained out or gone from the allocation; None: it is there and up."""
    ok, out = _local(["sinfo", "-h", "-N", "-n", node, "-o", "%T|%E"])
    state, _, reason = out.strip().partition("|")
    state = state.rstrip("*~#!%$@^-")
    if ok and state.startswith(("down", "fail")):
        return SlurmFault(f"{node} went DOWN", reason.strip() or state)
    if any(f"Node failure on {node}" in ln for ln in lines) or (nodes is not None and node not in nodes):
        return SlurmFault(f"{node} went DOWN", "node failure: it left the allocation")
    return None


def step_fault(node: str, lines: Sequence[str]) -> SlurmFault | None:
    """The step on `node` was cancelled from outside (`scancel J.S`, an operator's signal) while its
    job and node are fine, as slurmstepd says it ("*** STEP J.S ON n1 CANCELLED AT ..."): the lane's
    fault, not the launch's; None when it does not say so."""
    if _from_lines(lines) == "CANCELLED":
        return SlurmFault(f"the step on {node} was cancelled", "scancel of the step")
    return None


def job_fault(
    job_id: str, node: str | None, lines: Sequence[str], hostnames: Any = None
) -> tuple[str, SlurmFault] | None:
    """What Slurm says went wrong under a step on `node` of job `job_id`: ("job", fault) when the
    allocation ended, ("node", fault) when the node went DOWN, None when nothing did (the launch's own
    failure). `hostnames(nodelist)` expands a node list (scontrol show hostnames)."""
    info = job_state(job_id)
    deadline = time.monotonic() + SETTLE_S
    while info is not None and info["state"] == "COMPLETING":
        told = "TIMEOUT" if info["reason"] == "TimeLimit" else _from_lines(lines)
        if told is not None:
            return "job", ended(told)
        if time.monotonic() > deadline:
            return "job", SlurmFault(
                "the allocation is ending", f"COMPLETING, reason {info['reason'] or 'none'}"
            )
        time.sleep(0.2)
        info = job_state(job_id)
    state = info["state"] if info else _from_lines(lines)
    if state is None:
        return "job", SlurmFault("the allocation ended", f"job {job_id}: Slurm no longer lists it")
    if state not in ALIVE:
        return "job", ended(state)
    if node is None:
        return None
    nodes = hostnames(info["nodes"]) if info and info.get("nodes") and hostnames else None
    down = _node_down(node, lines, nodes) or step_fault(node, lines)
    return ("node", down) if down else None
