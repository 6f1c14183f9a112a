"""A probe's options, declared once: in the probe's own argparse parser (`build_parser` in probes/NAME.py).

    @probe_options("spec-decode")
    def spec_decode(..., probe_args: list[str]) -> None: ...

The decorator turns each option of that parser into a typer option of the command (its flags, type,
choices, metavar and help), so `--help`, docs/cli.md and shell completion show the probe's declaration,
and hands the command `probe_args`: the options given, as the probe's argv, checked by the probe's own
parser and `validate` before anything runs (measure.probes.check_probe_args). An option added to the
probe's parser is an option of `regdiag probe NAME`, with nothing else to edit.

regdiag's own options of a probe run (--launches, --host, -o, ...) stay typer options of the command;
a probe option that takes one of their flags is refused when the command is built.
"""

from __future__ import annotations

import argparse
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Literal

import typer

# The probe options regdiag sets itself (measure.probe: the launch's index, where a profile's trace goes).
SET_BY_REGDIAG = frozenset({"launch_index", "profile_trace"})
# A command's `probe_args: list[str] = PROBE_ARGS` parameter: @probe_options fills it with the probe's
# options as given.
PROBE_ARGS: list[str] = []
# Prefix of the parameters the decorator adds: a probe option never shadows a parameter of the command.
_PREFIX = "probe__"


def probe_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options of a probe's parser that a user gives: not --help, not the internal ones (help
    suppressed), not those regdiag sets itself."""
    return [
        a
        for a in parser._actions
        if a.option_strings
        and a.help != argparse.SUPPRESS
        and not isinstance(a, argparse._HelpAction)
        and a.dest not in SET_BY_REGDIAG
    ]


def _is_flag(a: argparse.Action) -> bool:
    """An option that takes no value (store_true, store_const, ...): given or not."""
    return a.nargs == 0


def _annotation(a: argparse.Action) -> Any:
    if _is_flag(a):
        return bool
    if a.choices is not None:
        return Literal[tuple(a.choices)] | None  # type: ignore[misc]
    if isinstance(a, argparse._AppendAction):
        return list[str] | None
    return (a.type if a.type in (int, float) else str) | None


def _help(a: argparse.Action) -> str:
    """argparse's help text (its %(default)s expanded) as a sentence of the CLI's help, which says the
    probe's default."""
    text = str(a.help or "")
    if "%" in text:
        text = text % {**vars(a), "default": a.default}
    first = text.split(" ", 1)[0].rstrip(":,")
    if first.replace("-", "").isalpha() and first.islower() and first not in (a.choices or ()):
        text = text[:1].upper() + text[1:]  # not a value (`eagle3 (...) or mtp`)
    text = text if not text or text.endswith(".") else text + "."
    if a.default is not None and a.default is not False and "default" not in text:
        text += f" Default: {a.default}."
    return text


def _option(a: argparse.Action) -> Any:
    flags = sorted(a.option_strings, key=lambda o: not o.startswith("--"))  # the long flag first
    if _is_flag(a):
        return typer.Option(False, *flags, help=_help(a), show_default=False)
    return typer.Option(None, *flags, help=_help(a), show_default=False, metavar=a.metavar)


def probe_argv(actions: Sequence[argparse.Action], values: Sequence[Any]) -> list[str]:
    """The options given (None and False are not given; `values` in the order of `actions`) as the
    probe's argv, in the parser's order: True a bare flag, a list the flag repeated."""
    out: list[str] = []
    for a, val in zip(actions, values, strict=True):
        if val is None or val is False:
            continue
        flag = next(o for o in a.option_strings if o.startswith("--"))
        if val is True:
            out.append(flag)
        elif isinstance(val, (list, tuple)):
            for v in val:
                out += [flag, str(v)]
        else:
            out += [flag, str(val)]
    return out


def _own_flags(params: Sequence[inspect.Parameter]) -> set[str]:
    return {d for p in params for d in (getattr(p.default, "param_decls", None) or ())}


def probe_options(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the options of probe `name`'s parser, and it `probe_args` (their argv) in their
    place, checked by the probe before the command runs."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        from regdiag.measure.probes import check_probe_args, probe_parser

        sig = inspect.signature(fn)
        if "probe_args" not in sig.parameters:
            raise TypeError(f"{fn.__name__} takes no `probe_args` parameter")
        params = [p for p in sig.parameters.values() if p.name != "probe_args"]
        actions = probe_actions(probe_parser(name))
        clash = _own_flags(params) & {o for a in actions for o in a.option_strings}
        if clash:
            raise TypeError(f"probe {name} declares regdiag's own option(s) {', '.join(sorted(clash))}")
        kw = inspect.Parameter.POSITIONAL_OR_KEYWORD  # before the command's own, which typer reads next
        # one parameter per option (several options may share a dest: --three-cycles sets cycles)
        names = [f"{_PREFIX}{i}_{a.dest}" for i, a in enumerate(actions)]
        extra = [
            inspect.Parameter(n, kw, default=_option(a), annotation=_annotation(a))
            for n, a in zip(names, actions, strict=True)
        ]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            argv = probe_argv(actions, [kwargs.pop(name, None) for name in names])
            check_probe_args(name, argv)
            return fn(*args, probe_args=argv, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=extra + params)  # type: ignore[attr-defined]
        return wrapper

    return decorate
