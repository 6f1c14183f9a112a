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

    def describe(self) -> dict[str, str]:
        return {"name": self.name, "python": self.python, "via": self.via}
