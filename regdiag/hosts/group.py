"""Several SSH hosts as one place for a bisect (`regdiag bisect --host a --host b`): each host a lane.

A bisect's rounds run at once over the hosts (bisect/lanes.py, bisect/rounds.py), as over the nodes of
a Slurm allocation: launch i of every point on host i mod N, each comparison paired within a host, a
slow host named. The hosts share no files, so every environment is built on each of them, in its own
cache, and each launch runs in its own host's copy (bisect/node_envs.py). A host whose connection is
lost mid-run is a lane fault: its launch runs again on another host, and the host is dropped
(bisect/lab.py); the run ends only when no host is left. Anything that needs no particular host (the
builder's first questions, a snapshot) runs on the first one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from regdiag.hosts.base import CommandResult, Host


class HostGroup(Host):
    """The hosts of one bisect, in the order given; the first answers what any of them could."""

    builds_here = False
    keeps_warm = True
    shares_files = False
    # Why each host builds its own copy of every environment (bisect/node_envs.py says it once).
    builds_per_node = "SSH hosts keep their own files"

    def __init__(self, hosts: Sequence[Host]) -> None:
        if len(hosts) < 2:
            raise ValueError("a group of hosts needs two or more")
        self.hosts = list(hosts)
        for h in self.hosts:
            h.in_group = True
        self.first = self.hosts[0]
        self.name = "+".join(h.name for h in self.hosts)
        self.python = self.first.python
        self.via = self.first.via

    def run(self, argv: Sequence[str], **kw: Any) -> CommandResult:  # type: ignore[override]
        return self.first.run(argv, **kw)

    def make_tempdir(self) -> str:
        return self.first.make_tempdir()

    def remove_tree(self, path: str) -> None:
        self.first.remove_tree(path)

    def put_file(self, local: Path, remote: str) -> None:
        self.first.put_file(local, remote)

    def regdiag_argv(self, entry: Sequence[str], python: str | None = None) -> list[str]:
        return self.first.regdiag_argv(entry, python)

    def check_regdiag(self, res: CommandResult) -> None:
        self.first.check_regdiag(res)

    def nodes(self) -> list[Host]:
        return list(self.hosts)

    def reopen(self) -> dict[str, Any]:
        """Every host again, in the same order (a resumed bisect's lanes)."""
        return {"hosts": [str(h.reopen().get("host", h.name)) for h in self.hosts]}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "hosts": [h.describe() for h in self.hosts]}

    def close(self) -> None:
        for h in self.hosts:
            try:
                h.close()
            except Exception:  # noqa: BLE001 - one host's close must not leave the others open
                pass
