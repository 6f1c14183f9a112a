"""`--help` in click's plain style: `--launches INTEGER`, `OLD NEW`, flags without a type, wrapped at
the terminal's width (80 columns in a CI log) between words, never cut with an ellipsis.

typer's rich help prints Python types (`<bool>`, `<list[str]>`, `{old} {new}`) and, at 80 columns,
cuts long defaults and option names with `…`. `click_style(command)` turns the built click command
tree to click's own help: each option's metavar is its click type's (TEXT, INTEGER, FLOAT RANGE,
PATH, [a|b|c]), each argument's its upper-case name, and help text loses the rich escapes (`\\[`)."""

from __future__ import annotations

from typing import Any

_TYPE_NAMES = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "bool": "BOOLEAN", "Path": "PATH"}
_PATH_NAMES = {"file": "FILE", "dir": "DIRECTORY", "path": "PATH"}


def _name_of(annotation: Any) -> str:
    import typing

    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is list and args:
        return _name_of(args[0])  # a repeatable option: its element's type, as click shows it
    name = getattr(annotation, "__name__", str(annotation))
    return _TYPE_NAMES.get(name, name.upper())


def option_metavar(param: Any) -> str:
    """click's metavar for an option's type: TEXT, INTEGER, FLOAT RANGE, PATH, FILE, [a|b]."""
    desc = getattr(param, "type_descriptor", None)
    if desc is None:  # a typer built on click's own parameter types
        t = param.type
        choices = getattr(t, "choices", None)
        return "[" + "|".join(map(str, choices)) + "]" if choices else str(t.name).upper()
    if desc.is_choice:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in desc.choices or ()) + "]"
    if desc.is_path:
        return _PATH_NAMES.get(desc.path_type, "PATH")
    name = _name_of(desc.annotation)
    return f"{name} RANGE" if desc.is_ranged else name


def _argument(param: Any) -> None:
    name = param.metavar or str(param.name or "ARG").upper()
    param.metavar = name
    shown = name + ("..." if param.nargs != 1 else "")
    usage = shown if param.required else f"[{shown}]"
    param._usage_display_name = lambda: usage  # typer's own wraps a required one in {braces}
    param.display_type_rich = lambda ctx: None  # the name says it: no `<str>` beside it


def _unescape(text: str | None) -> str | None:
    return text.replace("\\[", "[") if text else text


def _keep_lists(text: str | None) -> str | None:
    """A paragraph of list items or indented lines is printed as written (click's \\b), not re-flowed."""
    if not text:
        return text
    paras = text.split("\n\n")
    out = []
    for p in paras:
        lines = p.splitlines()
        if len(lines) > 1 and any(ln.startswith(("- ", "* ", "  ")) for ln in lines):
            p = "\b\n" + p
        out.append(p)
    return "\n\n".join(out)


def _whole_short_help(cmd: Any) -> None:
    """A command's line in its group's list is its first sentence, whole (wrapped), not cut at 45
    characters with `...`."""
    text = cmd.short_help or (cmd.help or "").split("\n\n")[0].replace("\b\n", "")
    line = " ".join(text.split())
    cmd.get_short_help_str = lambda limit=45: line


def click_style(cmd: Any, top: bool = True) -> Any:
    """Apply click's plain help style to `cmd` and every command below it; returns `cmd`."""
    if top:  # click's help stops at 80 columns by default; the terminal's width is the limit here
        import shutil

        cmd.context_settings = {
            **cmd.context_settings,
            "max_content_width": shutil.get_terminal_size().columns,
        }
    if hasattr(cmd, "rich_markup_mode"):
        cmd.rich_markup_mode = None
    cmd.help = _keep_lists(_unescape(cmd.help))
    cmd.short_help = _unescape(cmd.short_help)
    for param in getattr(cmd, "params", []):
        if hasattr(param, "help"):
            param.help = _unescape(param.help)
        if param.param_type_name == "argument":
            _argument(param)
            continue
        if param.metavar is None and not (param.is_flag or param.count):
            param.metavar = option_metavar(param)
    for sub in (getattr(cmd, "commands", None) or {}).values():
        click_style(sub, top=False)
        _whole_short_help(sub)
    return cmd


def with_config_defaults(app: Any) -> None:
    """Every command of `app` (a typer app) that takes --host or --python gets the defaults of
    $REGDIAG_HOME/config.toml where the command line and REGDIAG_HOST / REGDIAG_PYTHON gave none
    (regdiag.config.apply)."""
    import functools
    import inspect

    for info in app.registered_commands:
        fn = info.callback
        params = inspect.signature(fn).parameters if fn is not None else {}
        if fn is None or not {"host", "python"} & set(params) or getattr(fn, "regdiag_target", False):
            continue  # no host options, or a Target's (cli/target.py applies the defaults itself)
        many = "host" in params and "list" in str(params["host"].annotation)

        def wrapped(*args: Any, _fn: Any = fn, _many: bool = many, **kwargs: Any) -> Any:
            from regdiag import config

            return _fn(*args, **config.apply(kwargs, config.load(), _many))

        info.callback = functools.wraps(fn)(wrapped)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            with_config_defaults(group.typer_instance)


# Spellings that changed, kept for one release: (command path) -> {old: new}. The old one works and a
# one-line note on stderr names the new one (docs/cli.md, "One vocabulary").
RENAMED: dict[tuple[str, ...], dict[str, tuple[str, str]]] = {
    ("probe", "spec-decode"): {"-C": ("-n", "-C is --concurrency in probe server; --cycles is -n")},
    ("explain",): {
        "--model": ("--preset", "--model is the served model's name in probe server; shapes are --preset")
    },
}


def renamed(argv: list[str]) -> list[str]:
    """argv with the old spellings of RENAMED replaced by the new ones (before any `--`), each said once."""
    import sys

    for path, names in RENAMED.items():
        if tuple(argv[: len(path)]) != path:
            continue
        out = list(argv)
        end = out.index("--") if "--" in out else len(out)
        for i in range(len(path), end):
            for old, (new, why) in names.items():
                rest = out[i][len(old) :] if out[i].startswith(old) else None
                # -C, -C5 (a short option's value attached) and --model=X name the old spelling
                if rest is not None and (
                    rest == "" or (rest.isdigit() and not old.startswith("--")) or rest[:1] == "="
                ):
                    out[i] = new + out[i][len(old) :]
                    sys.stderr.write(
                        f"regdiag: note: {' '.join(path)} {old} is deprecated ({why}); use {new}\n"
                    )
        return out
    return argv


def _no_hyphen_breaks() -> None:
    """click wraps help text with a TextWrapper that breaks `--find-links` after its hyphen and cuts
    words longer than a line: it keeps them whole here (a path or an option name is copied)."""
    try:
        from typer._click import _textwrap
    except ImportError:  # an older typer on click itself
        from click import _textwrap  # type: ignore[no-redef]

    base = _textwrap.TextWrapper
    if getattr(base, "_regdiag_whole_words", False):
        return

    class WholeWords(base):  # type: ignore[misc, valid-type]
        _regdiag_whole_words = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("break_on_hyphens", False)
            kwargs.setdefault("break_long_words", False)
            super().__init__(*args, **kwargs)

    _textwrap.TextWrapper = WholeWords  # type: ignore[misc]


_no_hyphen_breaks()
