"""Environments built on every node of a place whose nodes keep regdiag's cache on disks of their own,
so that each launch finds its environment where it runs: a Slurm allocation on node-local storage, or
several SSH hosts as a bisect's lanes (hosts/group.py), which share no files.

The start check of an allocation (hosts/slurm_check.py) writes a marker in the cache directory as this
machine sees it and asks each node for it. Where a node does not see it and no --env-dir was given (or
for SSH hosts, always), an environment built on one node would be missing on the others: `NodeBuilder`
then builds each one on every node at once, each node in its own cache
(`${XDG_CACHE_HOME:-$HOME/.cache}/regdiag/envs/<key>`, as that node's shell finds it), and a launch runs
in its node's copy (`on`). A node whose copy is missing (it was busy or gone when the others built)
builds it when a launch first needs it there. Nodes whose cache has the same path build one after
another (the first builds, the others find it built where they share the disk), so that two never
build in one directory at once. The place says why (`builds_per_node`), and the run says it once.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from regdiag.bisect.envs import Built
from regdiag.bisect.failures import BuildFailed
from regdiag.bisect.remote_envs import RemoteBuilder
from regdiag.hosts.base import Host


class NodeBuilder:
    """RemoteBuilder's interface over the nodes of an allocation: `build` builds on each node, returns
    the first node's environment, and `on(built, node)` is that environment on `node`."""

    def __init__(self, base: RemoteBuilder, nodes: Sequence[Host], why: str) -> None:
        self.base = base  # on the allocation (its first node): identity, base_path, base_versions
        self.why = why  # the start check's line: which node does not see this machine's cache
        self.nodes = {n.name: base.on(n) for n in nodes}
        self._copies: dict[tuple[str, str], Built] = {}  # (the first node's python, node) -> its copy
        self._asked: dict[str, tuple[Mapping[str, str], str | None]] = {}  # first python -> what it is
        self._lock = threading.Lock()
        self._dirs: dict[str, threading.Lock] = {}  # a cache path -> one build at a time there

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)  # repo, setup, base_python, identity, base_path, key, ...

    def _build_on(self, name: str, packages: Mapping[str, str], commit: str | None) -> Built:
        """The environment on node `name`, built there one at a time per cache path."""
        b = self.nodes[name]
        where = b.root() if b.key(packages, commit) is not None else ""
        with self._lock:
            lock = self._dirs.setdefault(where, threading.Lock())
        with lock:
            return b.build(packages, commit)

    @property
    def built_now(self) -> int:
        """Environments built in this run, a node's copy each."""
        return sum(b.built_now for b in self.nodes.values())

    def check(self) -> None:
        for b in self.nodes.values():
            b.check()

    def build(self, packages: Mapping[str, str], commit: str | None) -> Built:
        """The environment built on every node at once (cached where a node has it); a node that
        cannot build it fails the build, named."""
        names = list(self.nodes)

        def one(name: str) -> Built:
            try:
                return self._build_on(name, packages, commit)
            except BuildFailed as e:
                raise BuildFailed(f"on {name}: {e}") from None

        with ThreadPoolExecutor(max_workers=min(16, len(names))) as pool:
            made = dict(zip(names, pool.map(one, names), strict=True))
        first = made[names[0]]
        with self._lock:
            self._asked[first.python] = (dict(packages), commit)
            for name, b in made.items():
                self._copies[(first.python, name)] = b
        slowest = max(b.build_s for b in made.values())
        cached = all(b.cached for b in made.values())
        return Built(
            first.key, first.python, first.root, first.venv, first.worktree, cached, slowest, first.notes
        )

    def on(self, built: Built, node: Host) -> Built:
        """`built` (as `build` returned it) on `node`: that node's copy, built there now if missing."""
        with self._lock:
            have = self._copies.get((built.python, node.name))
            asked = self._asked.get(built.python)
        if have is not None or asked is None or node.name not in self.nodes:
            return have or built  # the base interpreter, or not one of the allocation's nodes
        made = self._build_on(node.name, *asked)
        with self._lock:
            self._copies[(built.python, node.name)] = made
        return made

    def present(self, python: str, node: Host | None = None) -> bool:
        """The environment's interpreter is still on `node` (default: the first node holding it)."""
        with self._lock:
            where = [n for (_first, n), b in self._copies.items() if b.python == python]
        name = node.name if node is not None and node.name in self.nodes else (where[0] if where else None)
        return self.nodes[name].present(python) if name else self.base.present(python)


def per_node(builder: Any, host: Host | None) -> Any:
    """`builder` as the allocation `host` needs it: a NodeBuilder where its nodes do not share
    regdiag's cache (host.builds_per_node says why), else as it is."""
    why = host.builds_per_node if host is not None else None
    if not why or not isinstance(builder, RemoteBuilder) or host is None:
        return builder
    return NodeBuilder(builder, host.nodes(), why)


def each_node(builder: NodeBuilder) -> str:
    """What a run says of its builds: "environments are built on each of n1, n2 (n2 does not see ...)"."""
    return f"environments are built on each of {', '.join(builder.nodes)} ({builder.why})"


def on_node(builder: Any, built: Built, node: Host) -> Built:
    """The copy of `built` that a launch on `node` runs in (the same one where the cache is shared)."""
    return builder.on(built, node) if isinstance(builder, NodeBuilder) else built


def present_on(builder: Any, python: str, node: Host) -> bool:
    """The interpreter `python` is still where a launch on `node` finds it."""
    return (
        builder.present(python, node) if isinstance(builder, NodeBuilder) else bool(builder.present(python))
    )
