"""Where a command runs, declared once: the `Target` and the `@target_options` decorator that fills it.

    @target_options(kinds=("slurm",))
    def probe_cmd(..., target: Target) -> None:
        with target.open() as host: ...

The decorator adds --host, --python, --ssh-config (and --slurm, --slurm-args where the command can use an
allocation) to the command's signature, so typer shows them in --help and docs/cli.md, and hands the
command one `Target` in their place. config.toml's defaults ([defaults] host, [hosts.NAME] python) are
applied here, once; where the host came from (the command line, $REGDIAG_HOST, config.toml) is kept, so
that --slurm on the command line wins over a default host and a journal can say where a bisect ran.

A new host kind touches hosts/<kind>.py, HOST_KINDS, and at most `_kind_parameters` below.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import typer

from regdiag.errors import BadInput

_SOURCE_DEFAULTED = ("ENVIRONMENT", "DEFAULT", "DEFAULT_MAP")


@dataclass(frozen=True)
class Target:
    """The machine or machines a command runs on, as the command line (and its defaults) chose them.

    `options` holds the options of the host kinds beyond SSH (hosts.resolve.HOST_KINDS): the kind's own
    option (`slurm`: N) and those named after it (`slurm_args`)."""

    hosts: tuple[str, ...] = ()
    python: str | None = None
    ssh_config: Path | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    host_defaulted: bool = False  # hosts came from $REGDIAG_HOST or config.toml, not --host

    @property
    def host(self) -> str | None:
        """The one host (the first of several); None: this machine, or a host of another kind."""
        return self.hosts[0] if self.hosts else None

    @property
    def kind(self) -> str | None:
        """The host kind beyond SSH that the options ask for (`slurm`), or None."""
        from regdiag.hosts.resolve import HOST_KINDS

        return next((k for k in HOST_KINDS if k != "host" and self.options.get(k)), None)

    @property
    def slurm(self) -> str | None:
        return self.options.get("slurm") or None

    @property
    def remote(self) -> bool:
        """Whether the command runs anywhere but this machine."""
        return bool(self.hosts or self.kind)

    def one(self, what: str) -> Target:
        """This target, refused in one line when it names several hosts (`what` runs on one)."""
        unique = tuple(dict.fromkeys(self.hosts))
        if len(unique) > 1:
            raise BadInput(f"{what} runs on one host: give one --host (got {', '.join(unique)})")
        return replace(self, hosts=unique)

    def checked(self) -> Target:
        """The target with its contradictions refused, and a default host yielding to another kind."""
        from regdiag.hosts.resolve import HOST_KINDS

        for name, value in self.options.items():
            base = name.split("_")[0]
            if value and base != name and base in HOST_KINDS and not self.options.get(base):
                raise BadInput(f"--{name.replace('_', '-')} needs --{base} N")
        kind = self.kind
        if self.options.get("env_dir") and kind != "slurm":
            raise BadInput(
                "--env-dir needs --slurm N (elsewhere environments are built in regdiag's own cache)"
            )
        if kind and self.hosts:
            if not self.host_defaulted:
                raise BadInput(f"--{kind} and --host: give one of them")
            return replace(self, hosts=(), host_defaulted=False)  # --slurm on the command line wins
        return self

    def open(self, **needs: Any) -> Any:
        """The one host the command runs on (the caller closes it): this machine, an SSH host or a host
        of another kind (a Slurm allocation); the kind is chosen here and nowhere else. `needs`: what
        one launch needs (gpus=measure.needs.GpuNeed), for a kind that asks for resources."""
        from regdiag.hosts.resolve import open_host, open_kind

        t = self.checked()
        kind = t.kind
        if kind:
            return open_kind(kind, t.options[kind], t.python, {**t.options, **needs})
        if len(set(t.hosts)) > 1:  # a command that takes several (bisect): each host a lane
            from regdiag.hosts.group import HostGroup
            from regdiag.hosts.resolve import open_hosts

            return HostGroup(open_hosts(t.hosts, t.python, t.ssh_config))
        return open_host(t.host, t.python, t.ssh_config)

    def for_each(self, fn: Callable[[Any], Any]) -> list[Any]:
        """fn(host) on every host at once, one thread each (hosts.remote.for_each_target)."""
        from regdiag.hosts.remote import for_each_target

        return for_each_target(list(self.hosts), self.python, self.ssh_config, fn)

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> Target:
        """The target a journal kept (Host.reopen(): {} this machine, {"host": NAME}, {"hosts": [NAME,
        ...]}, {"slurm": N, ...})."""
        hosts = [d["host"]] if isinstance(d.get("host"), str) else []
        if isinstance(d.get("hosts"), list):
            hosts = [str(h) for h in d["hosts"]]
        options = {str(k): str(v) for k, v in d.items() if k != "host" and isinstance(v, (str, int))}
        return cls(hosts=tuple(hosts), options=options)

    def overridden_by(self, given: Target, on_line: set[str]) -> Target:
        """This (a journal's) target unless the command line chose a place again (`on_line`: the option
        names given there): --host or a kind's option replaces the place as a whole."""
        if on_line:
            return given
        return replace(self, python=given.python, ssh_config=given.ssh_config)


# A command's `target: Target = TARGET` parameter: @target_options fills it from the host options.
TARGET = Target()


def _host_option(hosts: str, help_verb: str) -> Any:
    what = "one host" if hosts == "one" else "repeat for several hosts"
    return typer.Option(
        None,
        "--host",
        envvar="REGDIAG_HOST",
        help=f"{help_verb} on this host over SSH: \\[user@]host\\[:port] or a Host alias from the SSH config; "
        f"{what}. Default: $REGDIAG_HOST, else config.toml's [defaults] host, else this machine.",
    )


def _kind_parameters(kind: str) -> list[tuple[str, Any]]:
    """The options of a host kind beyond SSH, as (parameter name, typer option); a new kind adds its own."""
    from regdiag.cli.common import EnvDirOpt, SlurmArgsOpt, SlurmOpt

    table = {"slurm": [("slurm", SlurmOpt), ("slurm_args", SlurmArgsOpt), ("env_dir", EnvDirOpt)]}
    return table[kind]


def _parameters(hosts: str, kinds: tuple[str, ...], help_verb: str) -> list[inspect.Parameter]:
    from regdiag.cli.common import PythonOpt, SshConfigOpt

    kw = inspect.Parameter.KEYWORD_ONLY
    out = [
        inspect.Parameter("host", kw, default=_host_option(hosts, help_verb), annotation=list[str] | None),
        inspect.Parameter("python", kw, default=PythonOpt, annotation=str | None),
        inspect.Parameter("ssh_config", kw, default=SshConfigOpt, annotation=Path | None),
    ]
    for kind in kinds:
        out += [inspect.Parameter(n, kw, default=o, annotation=str | None) for n, o in _kind_parameters(kind)]
    return out


def _defaulted(name: str) -> bool:
    from typer._click.globals import get_current_context  # typer's own click, as cli/helpfmt.py uses it

    ctx = get_current_context(silent=True)
    source = ctx.get_parameter_source(name) if ctx is not None else None
    return source is None or source.name in _SOURCE_DEFAULTED


def target_from_options(options: dict[str, Any]) -> Target:
    """A Target from the parsed host options, config.toml's defaults filled in where none was given."""
    from regdiag import config

    if any(not str(h).strip() for h in options.get("host") or []):  # `--host ''`: never this machine unsaid
        raise BadInput("--host '': an empty host name; leave --host out to run on this machine")
    given = config.apply(
        {"host": options.get("host") or [], "python": options.get("python")}, config.load(), True
    )
    hosts = tuple(given["host"] or ())
    return Target(
        hosts=hosts,
        python=given["python"],
        ssh_config=options.get("ssh_config"),
        options={k: str(v) for k, v in options.items() if k not in ("host", "python", "ssh_config") and v},
        host_defaulted=bool(hosts) and _defaulted("host"),
    )


def target_options(
    *, one: str | None = None, kinds: tuple[str, ...] = (), verb: str = "Run"
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the host options, and it a `target: Target` in their place. `one`: the command
    runs on one host (its name, for the refusal of a second --host); `kinds`: the host kinds beyond SSH
    it takes (("slurm",): --slurm N, --slurm-args)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        if "target" not in sig.parameters:
            raise TypeError(f"{fn.__name__} takes no `target` parameter")
        params = [p for p in sig.parameters.values() if p.name != "target"]
        extra = _parameters("one" if one else "many", kinds, verb)
        names = [p.name for p in extra]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            target = target_from_options({n: kwargs.pop(n, None) for n in names})
            return fn(*args, target=target.one(one) if one else target, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=params + extra)  # type: ignore[attr-defined]
        wrapper.regdiag_target = True  # type: ignore[attr-defined]  # config defaults applied: helpfmt skips it
        return wrapper

    return decorate
