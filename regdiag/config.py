"""Defaults that a user would otherwise retype: $REGDIAG_HOME/config.toml and the REGDIAG_* variables.

    # $REGDIAG_HOME/config.toml (default ~/.regdiag/config.toml)
    [defaults]
    host = "gpu-box"                      # --host, when neither --host nor REGDIAG_HOST is given
    python = "/root/ml-env/bin/python3"   # --python, when neither --python nor REGDIAG_PYTHON is given
    shared_home = true                    # a team REGDIAG_HOME writable by its group (--shared-home)

    [hosts.gpu-box]                       # for one host (its --host spec or SSH alias, as written)
    python = "/root/ml-env/bin/python3"

What wins, first to last: the option on the command line; the variable (REGDIAG_HOST,
REGDIAG_PYTHON); for --python, the section of the host the command runs on; the [defaults] table;
regdiag's own default. An unreadable file or an unknown key is refused in one line (exit 2), never
ignored: a default that silently does not apply sends a measurement to the wrong machine. The file is
read like snapshot.key: a regular file (a FIFO or a link to /dev/zero is refused, never waited on or
read without end) of at most 64 KiB.

A config.toml that another user may have written (owned by another user than this one or root, or
writable by its group or by anyone: a team home of mode 2770) chooses no code for the user running
regdiag: its `python` (of [defaults] and of every host) and `shared_home` are ignored, said in one
warning line naming the file and why (load_checked). Its `host` still applies: where to run, not what.

Only the standard library: tomllib where Python has it (3.11+), else a reader of the small part of
TOML this file needs (tables, `key = "string"`), tested against tomllib."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from regdiag.errors import BadInput
from regdiag.files import not_own_file, regdiag_home

ENV = {"host": "REGDIAG_HOST", "python": "REGDIAG_PYTHON"}
DEFAULT_KEYS = ("host", "python")
BOOL_KEYS = ("shared_home",)
MAX_BYTES = 64 * 1024
HOST_KEYS = ("python",)


def config_path() -> Path:
    return regdiag_home() / "config.toml"


def parse_toml(text: str) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        return parse_small_toml(text)
    return tomllib.loads(text)


_TABLE = re.compile(r'^\[\s*([A-Za-z0-9_-]+|"[^"]*")(?:\s*\.\s*([A-Za-z0-9_.-]+|"[^"]*"))?\s*\]$')
_PAIR = re.compile(r'^([A-Za-z0-9_-]+)\s*=\s*("(?:[^"\\]|\\.)*"|\'[^\']*\'|true|false)$')


def parse_small_toml(text: str) -> dict[str, Any]:
    """`[table]`, `[table.name]` / `[table."name"]` and `key = "string"` lines, comments and blank
    lines: what config.toml uses. Anything else is a ValueError naming the line."""
    out: dict[str, Any] = {}
    current = out
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("#") or not line:
            continue
        if (" #" in line or "\t#" in line) and not line.startswith("["):
            line = re.sub(r'\s+#[^"\']*$', "", line)
        m = _TABLE.match(line)
        if m:
            current = out.setdefault(m.group(1).strip('"'), {})
            if m.group(2):
                current = current.setdefault(m.group(2).strip('"'), {})
            continue
        m = _PAIR.match(line)
        if not m:
            raise ValueError(f'line {n}: expected [table] or key = "value"')
        if m.group(2) in ("true", "false"):
            current[m.group(1)] = m.group(2) == "true"
            continue
        value = m.group(2)[1:-1]
        if m.group(2).startswith('"'):
            value = value.encode("utf-8").decode("unicode_escape") if "\\" in value else value
        current[m.group(1)] = value
    return out


def load(path: Path | None = None) -> dict[str, Any]:
    """The config file, checked, without what it may not choose (load_checked); {} when there is none."""
    return load_checked(path)[0]


def load_checked(path: Path | None = None) -> tuple[dict[str, Any], str | None]:
    """The config file, checked ({} when there is none), and the warning line when it is one another
    user may have written: its keys that choose code or accept the home (CODE_KEYS) are then left out."""
    p = path or config_path()
    try:
        raw, st = read_small(p, MAX_BYTES)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{p}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    try:
        data = parse_toml(text)
    except ValueError as e:  # tomllib.TOMLDecodeError is a ValueError
        raise BadInput(f"{p}: not valid TOML: {e}") from None
    _check(data, p)
    why = not_own_file(st)
    return (data, None) if why is None else _without_code(data, p, why)


# What a config.toml another user may write cannot set for this user: the interpreter regdiag runs
# (--python's default, of [defaults] and of each host) and the acceptance of a group-writable home.
CODE_KEYS = ("python", "shared_home")


def _without_code(data: dict[str, Any], p: Path, why: str) -> tuple[dict[str, Any], str | None]:
    left = []
    out: dict[str, Any] = {}
    for top, table in data.items():
        sections = {"": table} if top == "defaults" else table
        kept: dict[str, Any] = {}
        for name, section in sections.items():
            left += [f"[{top}{'.' + name if name else ''}] {k}" for k in section if k in CODE_KEYS]
            kept[name] = {k: v for k, v in section.items() if k not in CODE_KEYS}
        out[top] = kept[""] if top == "defaults" else kept
    if not left:
        return out, None
    return out, (
        f"regdiag: warning: {p}: {why}; its {', '.join(left)} ignored: a file another user may write "
        "chooses no code for this user and does not make REGDIAG_HOME acceptable"
    )


def read_small(p: Path, cap: int) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most `cap` bytes, and its stat; BadInput in one line for a FIFO, a
    device, a directory or a longer file (opened O_NONBLOCK: a FIFO is refused, never waited on)."""
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{p}: not a regular file (a FIFO, a device or a directory); remove it")
        chunks, n = [], 0
        while n <= cap:
            chunk = os.read(fd, cap + 1 - n)
            if not chunk:
                break
            chunks.append(chunk)
            n += len(chunk)
        if n > cap:
            raise BadInput(f"{p}: larger than {cap // 1024} KiB; a config file is a few lines")
        return b"".join(chunks), st
    finally:
        os.close(fd)


def shared_home_wanted(data: dict[str, Any]) -> bool:
    return data.get("defaults", {}).get("shared_home") is True


def _check(data: dict[str, Any], p: Path) -> None:
    for top, value in data.items():
        if top not in ("defaults", "hosts") or not isinstance(value, dict):
            raise BadInput(f"{p}: unknown table [{top}] (config.toml has [defaults] and [hosts.NAME])")
    for key, value in data.get("defaults", {}).items():
        if key in BOOL_KEYS and isinstance(value, bool):
            continue
        if key not in DEFAULT_KEYS or not isinstance(value, str):
            raise BadInput(f"{p}: [defaults] {key}: expected one of {', '.join(DEFAULT_KEYS)} as a string")
    for name, section in data.get("hosts", {}).items():
        if not isinstance(section, dict):
            raise BadInput(f"{p}: hosts.{name} is not a table ([hosts.{name}])")
        for key, value in section.items():
            if key not in HOST_KEYS or not isinstance(value, str):
                raise BadInput(f"{p}: [hosts.{name}] {key}: expected {', '.join(HOST_KEYS)} as a string")


def default_host(data: dict[str, Any]) -> str | None:
    """The host a command runs on when no --host was given: REGDIAG_HOST, else [defaults] host."""
    if ENV["host"] in os.environ:
        return os.environ[ENV["host"]] or None  # REGDIAG_HOST= (empty): this machine
    return data.get("defaults", {}).get("host") or None


def python_for(data: dict[str, Any], host: str | None) -> str | None:
    """--python when none was given (REGDIAG_PYTHON has been read by the option itself): the host's
    section, else [defaults] python."""
    section = data.get("hosts", {}).get(host or "", {}) if host else {}
    return section.get("python") or data.get("defaults", {}).get("python") or None


def apply(params: dict[str, Any], data: dict[str, Any], host_list: bool = False) -> dict[str, Any]:
    """A command's parsed options with the config's defaults filled in where none was given
    (`host_list`: the command's --host is repeatable)."""
    out = dict(params)
    if "host" in out and not out["host"] and ENV["host"] not in os.environ:
        host = data.get("defaults", {}).get("host")
        if host:
            out["host"] = [host] if host_list else host
    if "python" in out and out["python"] is None:
        hosts = out.get("host") or out.get("hosts")  # check-host takes its hosts as arguments
        names = [h for h in (hosts if isinstance(hosts, list) else [hosts]) if isinstance(h, str) and h]
        pythons = {python_for(data, h) for h in dict.fromkeys(names)} or {python_for(data, None)}
        if len(pythons) > 1:
            raise BadInput(
                f"{', '.join(names)}: config.toml gives these hosts different pythons; run them apart, "
                "or give --python"
            )
        out["python"] = pythons.pop()
    return out
