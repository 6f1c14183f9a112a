"""The host interface every command that runs something goes through.

A Host runs an argv (a list of tokens, never a shell string), streams stdout and stderr line by
line to callbacks while draining both together (no deadlock on large output), enforces a timeout
that kills the whole process tree, and offers a private temporary directory.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LineCallback = Callable[[str], None]


@dataclass
class CommandResult:
    argv: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes
    duration_s: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def stderr_tail(self, n: int = 1) -> str:
        lines = [ln for ln in self.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
        return " | ".join(lines[-n:])


class Host(ABC):
    """A machine that runs commands. `name` is what records and reports show."""

    name: str
    python: str
    via: str

    @abstractmethod
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
        """Run argv; `env` adds to (or overrides) the host's environment for this process only.

        On timeout the process and its children are killed and `timed_out` is set.
        On KeyboardInterrupt the process tree is killed and the interrupt re-raised.
        """

    @abstractmethod
    def make_tempdir(self) -> str:
        """A new private (0700) directory on the host."""

    @abstractmethod
    def remove_tree(self, path: str) -> None: ...

    @abstractmethod
    def put_file(self, local: Path, remote: str) -> None:
        """Copy a local file to the host (mode 0600)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        pass

    @contextlib.contextmanager
    def tempdir(self) -> Iterator[str]:
        """A private directory on the host for the block, removed after it (probe engine's hook files)."""
        path = self.make_tempdir()
        try:
            yield path
        finally:
            self.remove_tree(path)

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "python": self.python, "via": self.via}

    # -- what a host kind says about itself, so that no caller asks which kind it holds ----------------

    # Environments (venvs, worktrees) for this host are built on this machine (True: this machine, or
    # nodes that share its filesystem) or on the host itself, through regdiag.bisect.remote_envs.
    builds_here: bool = False
    # One warm interpreter can serve this host's launches (measure/warm.py): False where every launch is
    # a job step of its own (a Slurm node), which a long-lived process there would block.
    keeps_warm: bool = True
    # A --command (an argv of this machine's paths) runs there as it would here: this machine, or nodes
    # that share its files (Slurm).
    shares_files: bool = False
    # Why every environment is built on each of this host's nodes (bisect/node_envs.py): nodes that keep
    # regdiag's cache on disks of their own (a Slurm allocation on node-local storage, several SSH
    # hosts), or None where one build serves them all.
    builds_per_node: str | None = None
    # One host of several (hosts/group.py sets it): a node of the run, named in each launch record.
    in_group: bool = False
    # The end of the host under the run, once a failed launch found it (a Slurm allocation cancelled or
    # out of time: hosts/slurm_state.py), or None: what was measured before it is the result.
    ended: Exception | None = None

    def reopen(self) -> dict[str, Any]:
        """How to open this host again (a bisect's journal keeps it, so `--resume` reaches the same
        place): the options of the command line that chose it, {"host": NAME} for an SSH host."""
        return {"host": self.name}

    @abstractmethod
    def regdiag_argv(self, entry: Sequence[str], python: str | None = None) -> list[str]:
        """The argv that runs regdiag's own code on this host: `entry` is a bundle command
        (`probe SCRIPT ARGS...`, `snapshot ARGS...`; hosts/bundle_main.py), `python` the interpreter
        (default: the host's). A host that shares no filesystem with this machine runs the bundle,
        uploaded once per connection (hosts/bundle.py: BundleHost)."""

    @abstractmethod
    def check_regdiag(self, res: CommandResult) -> None:
        """Raise HostError when `res` says regdiag's own code could not start here (no interpreter)."""

    def nodes(self) -> list[Host]:
        """The machines a design lays its launches on, each one a Host (a Slurm allocation: its nodes)."""
        return [self]

    def for_launch(self, index: int) -> Host:
        """The machine launch `index` of a series runs on: launch i of every point on one node."""
        nodes = self.nodes()
        return nodes[index % len(nodes)]

    def unavailable(self) -> str | None:
        """Why this machine should take no more launches now (a drained node), or None."""
        return None

    def cache_dir(self) -> str | None:
        """regdiag's cache directory there when the host chooses it (Slurm's --env-dir), raising
        HostError when it knows the default one will not do; None: the host's shell finds it."""
        return None

    def placement(self) -> dict[str, Any]:
        """What a launch record says about where it ran, beyond the run's host (Slurm: node, allocation;
        one of several --host: that host, as the node)."""
        return {"node": self.name} if self.in_group else {}
