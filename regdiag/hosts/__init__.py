"""Where commands run: this machine, or a remote one over SSH, behind one interface."""

from regdiag.hosts.base import CommandResult, Host
from regdiag.hosts.local import LocalHost

__all__ = ["CommandResult", "Host", "LocalHost"]
