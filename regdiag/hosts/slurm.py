"""A Slurm allocation as a host: one allocation held for the whole run, each launch a job step pinned to
a node that regdiag chooses (docs/fleet.md).

    with open_slurm("2", python=None, options={"slurm_args": "--partition=gpu"}) as fleet:
        fleet.nodes()            -> [SlurmNode(n1), SlurmNode(n2)], each a Host
        fleet.for_launch(3)      -> the node launch 3 of every point runs on (3 mod 2: n2)

`salloc --no-shell -N N --job-name regdiag-<host>-<pid> --time T --no-kill` takes the nodes; a step is
`srun --jobid J -w NODE -N1 -n1 --immediate ... -- ARGV` (no wait on a drained node), run through this
machine's LocalHost so that a timeout or Ctrl-C kills the srun client, which ends the step's tasks.
srun exits 0 when the node dies under it: a launch is judged by its own footer, never by srun's status.

The allocation outlives a dead client, so it is ended three ways: `close()` (exit, Ctrl-C, SIGTERM,
SIGHUP all reach it through the commands' `finally`), a watchdog process in its own session that
scancels the job once regdiag's pid is gone (kill -9), and at the next start the stale regdiag jobs of
this machine whose pid is gone are cancelled. The `--time` bound ends it should all of those fail.

The nodes are assumed to share this machine's filesystem (home and the checkout), as cluster nodes
do: regdiag's probes and bundle run from where they are here, environments are built by the same
builder an SSH host uses (bisect/remote_envs.py, through a step on the first node) in the shared
cache directory, or in --env-dir. A start check (hosts/slurm_check.py, one step per node) holds that
much, and that a probe that wants GPUs sees them; salloc is asked for the probe's GPUs. A step that
fails is asked about (hosts/slurm_state.py): the allocation's end or a node gone DOWN is the host's
failure, named, not the launch's.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from regdiag.errors import BadInput, HostError
from regdiag.hosts.base import CommandResult, Host, LineCallback
from regdiag.hosts.bundle import BundleHost, local_bundle_path
from regdiag.hosts.local import LocalHost, local_regdiag_argv
from regdiag.hosts.slurm_check import per_node, salloc_gpus, start_check, step_gpus
from regdiag.hosts.slurm_state import SLURM_LINE, SlurmFault, job_fault

JOB_PREFIX = "regdiag-"
DEFAULT_TIME = "240"  # minutes: the allocation's bound when --slurm-args gives no --time
GRANT_TIMEOUT_S = 3600.0  # how long salloc may wait in the queue
NO_CONFIG = "Could not establish a configuration source"

# The watchdog: polls regdiag's pid; once it is gone, cancels the job by name. Its own session, so a
# signal to regdiag's process group does not reach it; it ends when the job is gone.
WATCHDOG = """
import os, subprocess, sys, time
pid, name = int(sys.argv[1]), sys.argv[2]
while True:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        subprocess.run(["scancel", "--name", name], capture_output=True)
        break
    time.sleep(0.2)
"""
# A step is pinned to its node: one task, no wait for a node that cannot take it now, ended with its task.
STEP_OPTIONS = ("-N1", "-n1", "--immediate=10", "--kill-on-bad-exit=1", "--quiet")


def _start_watchdog(job_name: str) -> subprocess.Popen[bytes]:
    """The WATCHDOG of this process's allocation `job_name`, in a session of its own."""
    argv = [sys.executable, "-c", WATCHDOG, str(os.getpid()), job_name]
    null = subprocess.DEVNULL
    return subprocess.Popen(argv, stdin=null, stdout=null, stderr=null, start_new_session=True)


def _slurm_error(tool: str, res: CommandResult) -> str:
    """One line for a Slurm client that failed."""
    err = res.stderr.decode("utf-8", "replace")
    if NO_CONFIG in err:
        return "Slurm has no configuration here: set SLURM_CONF to the cluster's slurm.conf"
    if res.returncode == 127:
        return f"{tool} not found: install the Slurm client tools (slurm-client) or put them on PATH"
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    return f"{tool} failed: {lines[-1] if lines else f'exit status {res.returncode}'}"


def _run(argv: Sequence[str], timeout: float = 60.0) -> CommandResult:
    res = LocalHost().run(list(argv), timeout=timeout)
    if not res.ok:
        raise HostError(_slurm_error(argv[0], res))
    return res


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_jobs(jobs: Sequence[Mapping[str, Any]], hostname: str) -> list[str]:
    """Ids of regdiag jobs started from this machine whose regdiag process is gone."""
    out = []
    for j in jobs:
        m = re.fullmatch(rf"{JOB_PREFIX}(.+)-(\d+)", str(j.get("name", "")))
        if m and m.group(1) == hostname and not _pid_alive(int(m.group(2))):
            out.append(str(j.get("job_id")))
    return out


def clean_stale() -> list[str]:
    """Cancel the stale regdiag jobs of this machine (a kill -9 the watchdog did not outlive)."""
    res = _run(["squeue", "--me", "--json"])
    jobs = json.loads(res.stdout.decode("utf-8", "replace") or "{}").get("jobs", [])
    stale = stale_jobs(jobs, socket.gethostname().split(".")[0])
    if stale:
        _run(["scancel", *stale])
    return stale


class SlurmNode(BundleHost):
    """One node of the allocation: every command is a step pinned to it."""

    via = "slurm"
    builds_here = False
    keeps_warm = False  # each launch is a job step; a warm parent would hold the node
    shares_files = True  # the nodes see this machine's files: a --command runs there as it would here

    def __init__(self, alloc: SlurmAllocation, node: str) -> None:
        self.alloc = alloc
        self.name = node
        self.python = alloc.python

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        on_stdout_line: LineCallback | None = None,
        on_stderr_line: LineCallback | None = None,
        keep_output: bool = True,
    ) -> CommandResult:
        if self.alloc.ended:
            raise self.alloc.ended  # no step can start on an allocation that is gone
        step = ["srun", "--jobid", self.alloc.job_id, "-w", self.name, *self.alloc.step_options]
        if cwd:
            step.append(f"--chdir={cwd}")
        said: list[str] = []  # srun's and slurmstepd's own error lines about the step

        def on_err(line: str) -> None:
            if SLURM_LINE.match(line):
                said.append(line)
            if on_stderr_line is not None:
                on_stderr_line(line)

        res = self.alloc.local.run(
            [*step, "--", *argv],
            stdin=stdin,
            env=env,
            timeout=timeout,
            on_stdout_line=on_stdout_line,
            on_stderr_line=on_err,
            keep_output=keep_output,
        )
        if said or res.returncode >= 128:  # srun said something, or the step died of a signal
            fault = self.alloc.fault(self.name, said)
            if fault is not None:
                raise fault
        return res

    def regdiag_argv(self, entry: Sequence[str], python: str | None = None) -> list[str]:
        return local_regdiag_argv(entry, python or self.python)  # the shared filesystem's copy

    def upload_once(self, sha256: str, data: Any, name: str) -> str:
        return str(local_bundle_path())  # the nodes share this filesystem

    def make_tempdir(self) -> str:
        return self.alloc.local.make_tempdir()

    def remove_tree(self, path: str) -> None:
        self.alloc.local.remove_tree(path)

    def put_file(self, local: Path, remote: str) -> None:
        self.alloc.local.put_file(local, remote)

    def placement(self) -> dict[str, Any]:
        return {"node": self.name, "allocation": self.alloc.job_id}

    def cache_dir(self) -> str | None:
        return self.alloc.cache_dir()

    def unavailable(self) -> str | None:
        """Drained, draining, down or failed (its steps would still run inside the allocation)."""
        res = self.alloc.local.run(["sinfo", "-h", "-N", "-n", self.name, "-o", "%T|%E"], timeout=30)
        state, _, reason = res.stdout.decode("utf-8", "replace").strip().partition("|")
        if res.ok and state.rstrip("*~#!%$@^-").startswith(("drain", "down", "fail")):
            return f"{state} ({reason.strip() or 'no reason given'})"
        return None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), **self.placement()}


class SlurmAllocation(SlurmNode):
    """The allocation: its nodes, and commands that need no particular node run on the first one."""

    def __init__(
        self,
        count: int,
        python: str | None = None,
        salloc_args: Sequence[str] = (),
        need: Any = None,
        env_dir: str | None = None,
    ) -> None:
        self.local = LocalHost(python)
        self.python = self.local.python
        self.alloc = self
        self.job_name = f"{JOB_PREFIX}{socket.gethostname().split('.')[0]}-{os.getpid()}"
        self.job_id = ""
        self.ended = None  # the allocation's end, once fault() found it (a SlurmFault)
        self.step_options: tuple[str, ...] = STEP_OPTIONS
        self._closed = False
        self._lock = threading.Lock()
        self.stale = clean_stale()
        self._watchdog = _start_watchdog(self.job_name)
        self.need = need  # the GPUs one launch uses (measure/needs.py), or None
        self.env_dir = env_dir  # --env-dir: where environments are built (every node must see it)
        self.unshared: str | None = None  # why the default cache is not shared (each node builds then)
        self.per_node = (1, 0)  # the CPUs and GPUs the allocation holds on each node
        try:
            self.job_id = self._allocate(count, list(salloc_args))
            self.node_names = self._node_names()
            self.step_options = (*STEP_OPTIONS, *step_gpus(need, *self.per_node))
            self._nodes = [SlurmNode(self, n) for n in self.node_names]
            problems, unshared = start_check(self._nodes, self.python, need, env_dir)
            if env_dir and unshared:
                problems += [
                    f"--env-dir {env_dir}: {unshared[0]}: give --env-dir a directory every node shares"
                ]
            if problems:
                more = f" (and {len(problems) - 1} more alike)" if len(problems) > 1 else ""
                raise HostError(problems[0] + more)
            self.unshared = unshared[0] if unshared else None
        except BaseException:
            self.close()
            raise
        self.name = "slurm"
        self._reopen = {"slurm": str(count), "slurm_args": shlex.join(salloc_args) or None}
        if env_dir:
            self._reopen["env_dir"] = env_dir

    def _allocate(self, count: int, extra: list[str]) -> str:
        argv = ["salloc", "--no-shell", "-N", str(count), "--job-name", self.job_name, "--no-kill"]
        if not any(a == "-t" or a.startswith(("--time", "-t")) for a in extra):
            argv += ["--time", DEFAULT_TIME]
        gpus = salloc_gpus(extra, self.need)
        res = self.local.run([*argv, *gpus, *extra], timeout=GRANT_TIMEOUT_S)
        err = res.stderr.decode("utf-8", "replace")
        m = re.search(r"Granted job allocation (\d+)", err)
        if m is None or not res.ok:
            asked = (
                f" (regdiag asked for {gpus[0]} for the probe's {self.need.why}: give the probe --device cpu, "
                "or ask for GPUs in --slurm-args)"
                if gpus
                else ""
            )
            raise HostError(_slurm_error("salloc", res) + asked)
        return m.group(1)

    def _node_names(self) -> list[str]:
        res = _run(["squeue", "--json", "--jobs", self.job_id])
        jobs = json.loads(res.stdout.decode("utf-8", "replace") or "{}").get("jobs", [])
        job = next((j for j in jobs if str(j.get("job_id")) == self.job_id), {})
        nodelist, self.per_node = str(job.get("nodes") or ""), per_node(job)
        if not nodelist:
            raise HostError(f"Slurm job {self.job_id} has no nodes (squeue --json)")
        return self._hostnames(nodelist)

    def fault(self, node: str | None = None, said: Sequence[str] = ()) -> SlurmFault | None:
        """What Slurm says went wrong under a failed step on `node` (`said`: srun's error lines): the
        allocation's end ("the allocation was cancelled (scancel)", kept: every later step fails with
        it at once), the node gone DOWN, or None (the launch failed on its own)."""
        if self.ended or self._closed:
            return self.ended
        found = job_fault(self.job_id, node, said, self._hostnames)
        if found is None:
            return None
        kind, fault = found
        if kind == "job":
            self.ended = fault
        return fault

    def _hostnames(self, nodelist: str) -> list[str]:
        return _run(["scontrol", "show", "hostnames", nodelist]).stdout.decode().split()

    def run(self, argv: Sequence[str], **kw: Any) -> CommandResult:  # type: ignore[override]
        return self._nodes[0].run(argv, **kw)

    def nodes(self) -> list[Host]:
        return list(self._nodes)

    def placement(self) -> dict[str, Any]:
        return {"allocation": self.job_id}

    def cache_dir(self) -> str | None:
        """Where environments are built: --env-dir, else each node's own ~/.cache/regdiag (shared by
        the nodes, as the start check found, or each node's own: `builds_per_node`)."""
        return self.env_dir

    @property
    def builds_per_node(self) -> str | None:
        """Why each node builds its own copy of every environment (its cache is its own, and no --env-dir
        was given: bisect/node_envs.py), or None where one build serves every node."""
        if self.env_dir is not None or self.unshared is None:
            return None
        return f"{self.unshared}; --env-dir DIR builds them once there"

    def reopen(self) -> dict[str, Any]:
        """--slurm N and its --slurm-args: a resumed bisect asks Slurm for a new allocation alike."""
        return dict(self._reopen)

    def describe(self) -> dict[str, Any]:
        gpus = {"per_launch": getattr(self.need, "count", 0), "per_node": self.per_node[1]}
        return {
            **super().describe(),
            "nodes": list(self.node_names),
            "gpus": gpus,
            "env_dir": self.env_dir,
            "builds": "on each node" if self.builds_per_node else "once, shared",
        }  # name, python, via, ...

    def close(self) -> None:
        """Cancel the allocation (every step on it ends) and stop the watchdog; safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.job_id:
            subprocess.run(["scancel", self.job_id], capture_output=True, timeout=60)
        else:
            subprocess.run(["scancel", "--name", self.job_name], capture_output=True, timeout=60)
        self._watchdog.kill()
        self._watchdog.wait()


def parse_count(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise BadInput(f"--slurm {value!r}: give the number of nodes, e.g. --slurm 4")
    return n


def open_slurm(value: str, python: str | None, options: Mapping[str, Any]) -> Host:
    """`--slurm N` (N nodes) with `--slurm-args '...'` passed to salloc (SLURM_*/SALLOC_* defaults hold)."""
    count = parse_count(value)
    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):
        raise BadInput(f"SLURM_CONF={conf}: no such file (the Slurm clients would retry it for a minute)")
    try:
        extra = shlex.split(str(options.get("slurm_args") or ""))
    except ValueError as e:
        raise BadInput(f"--slurm-args: cannot split it: {e}") from None
    env_dir = str(options.get("env_dir") or "") or None
    if env_dir is not None:
        env_dir = os.path.abspath(os.path.expanduser(env_dir))
        if not os.path.isdir(env_dir):
            raise BadInput(
                f"--env-dir {env_dir}: no such directory here (give a directory every node shares)"
            )
    return SlurmAllocation(count, python, extra, options.get("gpus"), env_dir)
