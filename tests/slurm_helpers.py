"""A real Slurm cluster on this machine for the tests: munged, slurmctld and N slurmd ("fake nodes", one
slurmd each: Debian's build has MULTIPLE_SLURMD), everything under a temp dir, no systemd, no cgroups.

    with slurm_cluster(tmp, nodes=4) as c:
        c.env          -> {"SLURM_CONF": ...}: what a client needs
        c.drain("n2"); c.resume("n2")
        c.node_env("n3", {"REGDIAG_PROBE_SLOW": "verify:40"})   # set only in tasks on n3 (TaskProlog)
        c.jobs()       -> the jobs squeue lists

Needs the packages slurmd, slurmctld, slurm-client and munge (.ci/run installs them); `available()`
says whether they are here, so the tests are skipped only where they are not. Run as root (the
daemons and SlurmUser are root here, as in CI).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = (
    "munged",
    "mungekey",
    "slurmctld",
    "slurmd",
    "salloc",
    "srun",
    "squeue",
    "scontrol",
    "scancel",
    "sinfo",
    "sdiag",
)

ENDED = (
    "CANCELLED",
    "COMPLETED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
)

GPUS = 2  # fake GPUs per node (_fake_gpus)

# The task prolog runs what node_env()/node_script() wrote for the node the task runs on, with the
# task's environment: each `export NAME=VALUE` line it prints is set in the task.
TASK_PROLOG = """#!/bin/sh
f="{dir}/node-env/$SLURMD_NODENAME"
[ -f "$f" ] && . "$f"
exit 0
"""


def available() -> bool:
    return os.geteuid() == 0 and all(shutil.which(t) for t in TOOLS)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    dir: Path
    nodes: list[str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.dir / "etc" / "slurm.conf")}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=60,
            check=check,
        )

    def jobs(self) -> list[dict]:
        return json.loads(self.run("squeue", "--json").stdout)["jobs"]

    def regdiag_jobs(self, wait: float = 0.0) -> list[dict]:
        """regdiag's jobs that still hold nodes (ended ones stay listed for MinJobAge); waits up to `wait` s
        for them to end."""
        deadline = time.monotonic() + wait
        while True:
            held = [
                j for j in self.jobs()
                if str(j.get("name", "")).startswith("regdiag-") and j.get("job_state") not in ENDED
            ]  # fmt: skip
            if not held or time.monotonic() >= deadline:
                return held
            time.sleep(0.2)

    def drain(self, node: str) -> None:
        self.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=regdiag-test")

    def down(self, node: str) -> None:
        """The node set DOWN, as an administrator or a health check does: its steps are killed."""
        self.run("scontrol", "update", f"nodename={node}", "state=down", "reason=regdiag-test-down")

    def submitted(self) -> int:
        """How many jobs slurmctld has been asked for since it started (sdiag)."""
        out = self.run("sdiag").stdout
        return int(next(ln for ln in out.splitlines() if "Jobs submitted" in ln).split(":")[1])

    def resume(self, node: str) -> None:
        self.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)

    def node_env(self, node: str, variables: dict[str, str]) -> None:
        """Variables every task on `node` gets (and only there), as a site's TaskProlog would set them."""
        self.node_script(node, "".join(f"echo 'export {k}={v}'\n" for k, v in variables.items()))

    def node_script(self, node: str, script: str) -> None:
        """Shell lines the TaskProlog runs for every task on `node` (what they print as `export N=V`
        is set in the task), e.g. a variable for one side of an A/B run only ("" removes them)."""
        path = self.dir / "node-env" / node
        if script:
            path.write_text(script)
        else:
            path.unlink(missing_ok=True)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Every node idle again (jobs ended, none drained)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = self.run("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.split()
            if states and all(s == "idle" for s in states) and not self.jobs():
                return True
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        for p in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _config(d: Path, nodes: list[str], ctld_port: int, ports: list[int], cpus: int) -> str:
    host = socket.gethostname().split(".")[0]
    lines = [
        "ClusterName=regdiag-test", f"SlurmctldHost={host}(127.0.0.1)", f"SlurmctldPort={ctld_port}",
        "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={d}/munge/run/munge.socket", f"StateSaveLocation={d}/state",
        f"SlurmdSpoolDir={d}/spool/%n", f"SlurmctldPidFile={d}/run/slurmctld.pid",
        f"SlurmdPidFile={d}/run/slurmd-%n.pid", f"SlurmctldLogFile={d}/log/slurmctld.log",
        f"SlurmdLogFile={d}/log/slurmd-%n.log", "SlurmdParameters=config_overrides",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none", "MpiDefault=none",
        "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "ReturnToService=2", "KillWait=2", "MinJobAge=2", "InactiveLimit=0", f"TaskProlog={d}/task_prolog.sh",
        "GresTypes=gpu",
    ]  # fmt: skip
    for n, p in zip(nodes, ports, strict=True):
        lines.append(
            f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} CPUs={cpus} RealMemory=4000 "
            f"Gres=gpu:{GPUS} State=UNKNOWN"
        )
    lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def _fake_gpus(d: Path, nodes: list[str]) -> None:
    """GPUS GPUs per node as Slurm's GRES, each a character device like /dev/null (Slurm wants a
    device): Slurm hands them out and sets CUDA_VISIBLE_DEVICES in a step that asks for them, but
    nothing behind them is a GPU (NVML finds none), as on a node whose driver is missing."""
    (d / "dev").mkdir(exist_ok=True)
    for i in range(GPUS):
        os.mknod(d / "dev" / f"gpu{i}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    files = f"{d}/dev/gpu[0-{GPUS - 1}]" if GPUS > 1 else f"{d}/dev/gpu0"
    (d / "etc" / "gres.conf").write_text(
        "AutoDetect=off\n" + "".join(f"NodeName={n} Name=gpu File={files}\n" for n in nodes)
    )


def _daemon(c: Cluster, argv: list[str], log: str) -> None:
    out = open(c.dir / "log" / log, "wb")  # noqa: SIM115 - handed to the daemon
    c.procs.append(
        subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, env={**os.environ, **c.env})
    )
    out.close()


def _wait(pred, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


@contextlib.contextmanager
def slurm_cluster(d: Path, nodes: int = 2, cpus: int = 4) -> Iterator[Cluster]:
    """Bring a cluster up in `d` (idle within seconds), stop every daemon after the block."""
    names = [f"n{i + 1}" for i in range(nodes)]
    for sub in ("etc", "log", "state", "run", "munge/key", "munge/run", "munge/lib", "node-env"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    for n in names:
        (d / "spool" / n).mkdir(parents=True, exist_ok=True)
    for sub in ("", "munge", "munge/run"):
        os.chmod(d / sub if sub else d, 0o755)
    os.chmod(d / "munge" / "key", 0o700)
    c = Cluster(d, names)
    key = d / "munge" / "key" / "munge.key"
    subprocess.run(["mungekey", "--create", "--force", f"--keyfile={key}"], check=True, capture_output=True)
    (d / "task_prolog.sh").write_text(TASK_PROLOG.format(dir=d))
    os.chmod(d / "task_prolog.sh", 0o755)
    try:
        _daemon(c, ["munged", "-F", f"--key-file={key}", f"--socket={d}/munge/run/munge.socket",
                    f"--pid-file={d}/munge/run/munged.pid", f"--seed-file={d}/munge/lib/munged.seed",
                    f"--log-file={d}/log/munged.log"], "munged.out")  # fmt: skip
        if not _wait(lambda: (d / "munge" / "run" / "munge.socket").exists(), 10):
            raise RuntimeError("munged did not start")
        ports = [_free_port() for _ in names]
        (d / "etc" / "slurm.conf").write_text(_config(d, names, _free_port(), ports, cpus))
        _fake_gpus(d, names)
        conf = str(d / "etc" / "slurm.conf")
        _daemon(c, ["slurmctld", "-D", "-f", conf], "slurmctld.out")
        for n in names:
            _daemon(c, ["slurmd", "-D", "-N", n, "-f", conf], f"slurmd-{n}.out")
        want = f"idle {nodes}"
        if not _wait(lambda: c.run("sinfo", "-h", "-o", "%T %D", check=False).stdout.strip() == want, 60):
            raise RuntimeError(f"the cluster did not come up: {c.run('sinfo', check=False).stdout}")
        yield c
    finally:
        c.stop()
