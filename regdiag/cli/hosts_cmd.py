"""`regdiag trust` and `regdiag check-host`: parse, call regdiag.hosts, render."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from regdiag.cli.common import JsonOpt, PythonOpt, SshConfigOpt, err_console, format_opt, pick_format, show
from regdiag.errors import BadInput, HostError, error_line

# Help paragraphs are single lines (the terminal wraps them); "\\[" keeps rich from taking
# "[user@]" for markup.
TRUST_HELP = (
    "Add a host's SSH key to known_hosts, after showing its fingerprint.\n\n"
    "regdiag connects only to hosts whose key is already in known_hosts (UserKnownHostsFile from the SSH "
    "config, default ~/.ssh/known_hosts) and never adds a key on its own. This command fetches the key the "
    "host offers (through its ProxyJump hosts, which must be trusted already), prints its type and SHA256 "
    "fingerprint, and asks before appending it: as \\[host]:port when the port is not 22, hashed when the "
    "config says HashKnownHosts yes. Compare the fingerprint with `ssh-keygen -lf "
    "/etc/ssh/ssh_host_ed25519_key.pub` run on the host itself.\n\n"
    "A key that differs from the one already recorded is refused and never replaced. Exit 0 when the key "
    "was added or was already trusted, 4 when it was not (changed, not confirmed, host unreachable), "
    "2 for bad input."
)

CHECK_HELP = (
    "Check that regdiag can run on each HOST: connect, upload its bundle, run it with --python.\n\n"
    "Prints the host, the address connected to, the interpreter and its version, and the round trip. "
    "Exit 0 when every host answered, 4 with one line naming each failure otherwise (unknown or changed "
    "host key, authentication, connection refused or timed out, python missing or older than 3.9)."
)

HOST_ARG_HELP = "\\[user@]host\\[:port] or a Host alias from the SSH config."


def _trust(name: str, ssh_config: Path | None, yes: bool) -> dict[str, Any]:
    from regdiag.hosts.knownhosts import (
        append_known_host,
        fingerprint,
        known_hosts_line,
        known_keys_for,
        load_known_hosts,
    )
    from regdiag.hosts.sshconfig import SSHConfigFile
    from regdiag.hosts.sshconnect import fetch_host_key

    target = SSHConfigFile(ssh_config).target(name)
    if not target.known_hosts_files:
        raise BadInput(f"{name}: UserKnownHostsFile is 'none' in the SSH config; nowhere to add the key")
    known_name = target.known_hosts_name
    known = known_keys_for(
        load_known_hosts((*target.known_hosts_files, *target.global_known_hosts_files)), known_name
    )
    key = fetch_host_key(target, known=list(known))
    ktype, fp = key.get_name(), fingerprint(key)
    result = {"host": name, "known_hosts_name": known_name, "key_type": ktype, "fingerprint": fp}
    if ktype in known and known[ktype] == key:
        return {**result, "status": "already-trusted", "file": None}
    if known:
        old = ", ".join(f"{t} {fingerprint(k)}" for t, k in known.items())
        raise HostError(
            f"{name}: HOST KEY CHANGED for {known_name}: known_hosts has {old}, the server now offers {ktype} "
            f"{fp}; not replacing it (someone may be intercepting). If the host was reinstalled, remove the "
            f"old key with `ssh-keygen -R '{known_name}'` and run this again"
        )
    path = target.known_hosts_files[0]
    if not yes:
        err = sys.stderr  # plain text: "[y/N]" is not markup
        err.write(f"Host key of {known_name} ({name}):\n  {ktype} {fp}\n")
        err.write("Compare it with `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` run on the host.\n")
        err.write(f"Add it to {path}? [y/N] ")
        err.flush()
        answer = sys.stdin.readline().strip().lower()
        if not sys.stdin.isatty():
            err.write("\n")  # no terminal echoed the answer and its newline
        if answer not in ("y", "yes"):
            raise HostError(f"{name}: host key not added (not confirmed)")
    append_known_host(path, known_hosts_line(known_name, key, hashed=target.hash_known_hosts))
    return {**result, "status": "added", "file": path}


def register(app: typer.Typer) -> None:
    @app.command("trust", help=TRUST_HELP)
    def trust(
        name: str = typer.Argument(..., help=HOST_ARG_HELP),
        ssh_config: Optional[Path] = SshConfigOpt,  # noqa: UP045 - typer needs Optional on Python 3.10
        yes: bool = typer.Option(
            False, "--yes", "-y", help="Add the key without asking (default: ask on the terminal)."
        ),
        json_out: bool = JsonOpt,
        fmt: Optional[str] = format_opt("trust"),  # noqa: UP045
    ) -> None:
        out_fmt = pick_format("trust", fmt, json_out)
        show("trust", out_fmt, _trust(name, ssh_config, yes))

    @app.command("check-host", help=CHECK_HELP)
    def check_host(
        hosts: list[str] = typer.Argument(..., help=HOST_ARG_HELP + " Several are checked at once."),
        python: Optional[str] = PythonOpt,  # noqa: UP045
        ssh_config: Optional[Path] = SshConfigOpt,  # noqa: UP045
        json_out: bool = JsonOpt,
        fmt: Optional[str] = format_opt("host-check"),  # noqa: UP045
    ) -> None:
        from regdiag.hosts import remote

        out_fmt = pick_format("host-check", fmt, json_out)
        # Each host connected in its own worker: one that cannot be reached is its own entry (and error
        # line), and the others are still checked and shown.
        with err_console.status(f"connecting to {', '.join(hosts)}", spinner="dots"):
            outcomes = remote.for_each_target(hosts, python, ssh_config, remote.check_host)
        show(
            "host-check",
            out_fmt,
            [
                o.value if o.ok and o.value is not None else {"name": o.spec, "error": str(o.error)}
                for o in outcomes
            ],
        )
        failed = [o.error for o in outcomes if o.error is not None]
        for e in failed:
            err_console.print(error_line(str(e)).rstrip("\n"), highlight=False, soft_wrap=True, markup=False)
        if failed:
            raise typer.Exit(max(e.exit_code for e in failed))
