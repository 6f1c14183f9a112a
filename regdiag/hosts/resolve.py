"""From `--host` / `--python` / `--ssh-config` to connected Host objects.

    open_host(None, python, cfg)            -> LocalHost (this machine)
    open_host("gpu-3", python, cfg)         -> SSHHost: a Host alias of the SSH config, or a host name
    open_host("root@10.1.2.3:2222", ...)    -> SSHHost: [user@]host[:port] (overrides the config's values)
    open_hosts(["a", "b"], python, cfg)     -> [SSHHost(a), SSHHost(b)], connected in parallel

paramiko is imported only when an SSH host is asked for, so local commands do not pay for it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from regdiag.errors import HostError
from regdiag.hosts.base import Host
from regdiag.hosts.local import LocalHost

# Host kinds beyond this machine: the option that asks for one -> "module:function" opening it from that
# option's value, the --python given and the other options. A new kind is one file under hosts/ plus
# one line here (and its options in cli/target.py, `_kind_parameters`); docs/architecture.md works
# through Slurm; tests/test_target.py adds a kind of its own.
HOST_KINDS: dict[str, str] = {
    "host": "regdiag.hosts.ssh:open_ssh",  # --host [user@]name[:port]
    "slurm": "regdiag.hosts.slurm:open_slurm",  # --slurm N [--slurm-args '...']
}


def open_kind(kind: str, value: str, python: str | None, options: Mapping[str, Any]) -> Host:
    """A connected Host of a kind in HOST_KINDS; the caller closes it."""
    import importlib

    module, _, func = HOST_KINDS[kind].partition(":")
    opener: Callable[[str, str | None, Mapping[str, Any]], Host] = getattr(
        importlib.import_module(module), func
    )
    return opener(value, python, options)


def open_host(
    spec: str | None, python: str | None = None, ssh_config: str | os.PathLike[str] | None = None
) -> Host:
    """A connected Host. Raises BadInput for a malformed spec or config, HostError when it cannot connect.

    `python` is the interpreter on that host (default: this interpreter locally, `python3` remotely).
    `ssh_config` replaces ~/.ssh/config and /etc/ssh/ssh_config, as `ssh -F` does.
    The caller closes the host (it is a context manager).
    """
    if spec is None or spec == "":
        return LocalHost(python)
    return open_kind("host", spec, python, {"ssh_config": ssh_config})


def open_hosts(
    specs: Sequence[str] | None, python: str | None = None, ssh_config: str | os.PathLike[str] | None = None
) -> list[Host]:
    """Hosts in the order given; no spec means [this machine]. Connects to all of them at once.

    If any host cannot be reached, the others are closed and one HostError names every failure
    (`a: connection refused ...; b: host key not known ...`).
    """
    if not specs:
        return [LocalHost(python)]
    unique = list(dict.fromkeys(specs))  # `--host a --host a` is one host
    if len(unique) == 1:
        return [open_host(unique[0], python, ssh_config)]
    from regdiag.hosts.ssh import SSHHost
    from regdiag.hosts.sshconfig import SSHConfigFile

    config = SSHConfigFile(ssh_config)  # parsed once; a bad config or spec fails before any connection
    targets = [config.target(s) for s in unique]

    def connect(i: int) -> Host | BaseException:
        try:
            return SSHHost(targets[i], python)
        except Exception as e:
            return e

    with ThreadPoolExecutor(max_workers=min(16, len(unique))) as pool:
        results = list(pool.map(connect, range(len(unique))))
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        for r in results:
            if isinstance(r, Host):
                r.close()
        first = next((e for e in errors if not isinstance(e, HostError)), None)
        if first is not None:
            raise first
        raise HostError("; ".join(str(e) for e in errors))
    return [r for r in results if isinstance(r, Host)]
