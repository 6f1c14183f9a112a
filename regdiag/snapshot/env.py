"""Every environment variable, safely: values in clear unless sensitive, else a keyed hash.

An allowlist missed variables that change speed (PYTHONMALLOC, ATEN_CPU_CAPABILITY, MALLOC_ARENA_MAX
set in a shell never reached a record), so every variable is recorded. What keeps secrets out is
the value, not the name list: a variable the redaction rules (regdiag.snapshot.redact) would touch
is stored as an HMAC under a key kept in $REGDIAG_HOME (regdiag.snapshot.keyedhash), so `diff` and
`bisect` still see that it changed. Default-deny: only a value shown harmless by its shape is kept
in clear; nothing of a hidden value stays readable.

Families decide the order in `diff`: NCCL first, then the variables known to change how kernels,
allocators, threads, the loader or the engines behave (the ranked families of
regdiag.snapshot.families), then the rest. Variables that only describe the login session (`_`, SHLVL,
SSH_CLIENT, ...) are recorded too but listed in `session`: they differ between any two shells, so
`diff` treats them as momentary. `not_bisected` lists those and the variables a bisect sets itself
(PATH, HOME, VIRTUAL_ENV, ...): `bisect` neither varies nor fixes them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from regdiag.snapshot import fields as F
from regdiag.snapshot import keyedhash
from regdiag.snapshot.families import RANKED_PREFIXES
from regdiag.snapshot.redact import redact_value

SESSION = frozenset(
    {
        "_",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "SSH_CLIENT",
        "SSH_CONNECTION",
        "SSH_TTY",
        "SSH_AUTH_SOCK",
        "SSH_AGENT_PID",
        "TERM_SESSION_ID",
        "WINDOWID",
        "XDG_SESSION_ID",
        "XDG_RUNTIME_DIR",
        "TMUX",
        "TMUX_PANE",
        "STY",
        "GPG_TTY",
        "INVOCATION_ID",
        "JOURNAL_STREAM",
        "LS_COLORS",
        "COLUMNS",
        "LINES",
        "DBUS_SESSION_BUS_ADDRESS",
        "MAIL",
        "PS1",
        "PROMPT_COMMAND",
        "HISTFILE",
    }
)
# Shown by `diff` like any other variable, but a bisect must own them: it puts the environment's
# interpreter first on PATH, and a launch run with another machine's HOME or VIRTUAL_ENV would not
# be the point being measured. Neither varied nor fixed by `bisect` (listed in `not_bisected`).
OWNED_BY_BISECT = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "HOSTNAME",
        "TERM",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",
        "CONDA_SHLVL",
        "PYTHONHOME",
        "PYENV_VERSION",
    }
)
SESSION_PREFIXES = ("VSCODE_", "TERM_PROGRAM", "ITERM_", "KITTY_", "WEZTERM_", "KONSOLE_", "VTE_")


def family(name: str) -> str:
    """'nccl', 'perf', 'session' or 'other': the order of variables in `diff`."""
    if name.startswith("NCCL_"):
        return "nccl"
    if name.startswith(RANKED_PREFIXES):
        return "perf"
    if name in SESSION or name.startswith(SESSION_PREFIXES):
        return "session"
    return "other"


class Hasher:
    """Redacts one value at a time; sensitive values become keyed hashes when the key is usable."""

    def __init__(self) -> None:
        self.note: str | None = None
        # A key that can be neither read nor made stops the snapshot (keyedhash.KeyFileError, exit 2):
        # values recorded without a key could not be told apart, so hashing never silently turns off.
        self.key: bytes | None = keyedhash.load_key()

    @property
    def key_id(self) -> str | None:
        return keyedhash.key_id(self.key) if self.key else None

    def value(self, name: str, value: str) -> tuple[str, bool, bool]:
        """(what to record, not the value in clear?, a keyed hash?)."""
        kept, changed = redact_value(name, value, self.key or b"")
        return kept, changed, changed and bool(self.key)


def collect(
    environ: Mapping[str, str] | None = None,
    sources: Mapping[str, str] | None = None,
    hasher: Hasher | None = None,
) -> dict[str, Any]:
    """The env group: one field per variable of `environ` (default os.environ).

    `sources` names, for variables that did not come from the process's initial environment, the
    file that set them (a sitecustomize.py, a .pth, an nccl.conf).
    """
    src = os.environ if environ is None else environ
    hasher = hasher or Hasher()
    fields: dict[str, F.Field] = {}
    redacted: list[str] = []
    hashed: list[str] = []
    for name in sorted(src):
        value, hidden, is_hash = hasher.value(name, src[name])
        fields[name] = F.ok(value)
        if hidden:
            redacted.append(name)
        if is_hash:
            hashed.append(name)
    group = F.group(fields, status=F.OK)
    group["redacted"] = redacted
    group["hashed"] = hashed
    group["hash_key_id"] = hasher.key_id
    group["session"] = [n for n in sorted(src) if family(n) == "session"]
    group["not_bisected"] = [n for n in sorted(src) if family(n) == "session" or n in OWNED_BY_BISECT]
    group["sources"] = {k: v for k, v in sorted((sources or {}).items()) if k in src}
    if hasher.note:
        group["note"] = hasher.note
    return group
