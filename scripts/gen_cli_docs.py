"""Generate docs/cli.md from the command tree itself, so the reference cannot drift from --help.

python scripts/gen_cli_docs.py          # rewrite docs/cli.md
python scripts/gen_cli_docs.py --check  # exit 1 if docs/cli.md is out of date (a test runs this)
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "cli.md"
# Document this tree's commands, not those of whichever regdiag is installed.
sys.path.insert(0, str(ROOT))

HEADER = """# Command reference

Generated from the commands themselves by `python scripts/gen_cli_docs.py`; a test fails when this
file and `--help` disagree. Every command also answers `-h` / `--help`.

## Exit codes

| code | meaning |
| --- | --- |
| 0 | success; `compare`: unchanged or improved; `snapshot --check`: fit for benchmarking; `bisect`: culprit found |
| 1 | `compare`: regressed; `snapshot --check`: not fit for benchmarking |
| 2 | bad input: unreadable, truncated, empty, wrong-kind or newer-version record, or one with a non-finite, zero or negative measurement; a FIFO, device or directory where a file is expected; bad option value; a file another regdiag is writing (the line names its pid); a write that does not fit (the line names the file and what was kept) |
| 3 | inconclusive (`compare`, `bisect`): more launches needed, or the regression did not reproduce |
| 4 | host error: connection, authentication, host key, remote python missing or too old, remote timeout |
| 5 | the measured program failed: a probe rank crashed or hung (named, with where it was stuck), the GPUs are held by another process (named), the server died |
| 129 | hung up (SIGHUP, e.g. the SSH session to the machine running regdiag dropped); as 130 |
| 130 | interrupted (Ctrl-C); every process regdiag started is stopped, everything measured before it is kept on disk |
| 141 | output closed: the reader of stdout went away (`regdiag compare A B \\| head -1`); regdiag stops quietly and reports no verdict |
| 143 | terminated (SIGTERM); as 130 |

Errors are one line on stderr, `regdiag: error: ...`, never a traceback; secrets are redacted from\nit like from every other output. docs/reliability.md lists what is checked and how it is tested.

Why 141 for a closed pipe: it is 128 + SIGPIPE, what the shell shows for any tool the closed pipe
stopped, and it is none of the verdict codes. Python tools (and regdiag before) exit 1 there, which a CI
gate reads as REGRESSED; exit 0 would read as "unchanged" though the verdict was never delivered. A
gate that needs the verdict should not cut the output: use `--json > file` or `${PIPESTATUS[0]}`. When
the whole output fits in the pipe before the reader exits, no write fails and the verdict code stands.

## Progress outside a terminal

On a terminal, long commands (`probe spec-decode`, `probe collectives`, `probe server`, `bisect`, `ab`,
`demo`) show a live display on stderr. When stderr is not a terminal (CI, nohup, `ssh box '...' | tee`)
they print plain lines instead, no colour codes, each `[ elapsed] command: what`: one per launch
started and ended, per server start and bisect step; counts inside a launch at most once every
`REGDIAG_PROGRESS_EVERY` seconds (default 10) since the last line. For example:

```
[    0s] probe spec-decode: launch 1/2 started
[    9s] probe spec-decode: launch 1/2: ok, primary median 19.32, run 19.32
[    9s] probe spec-decode: launch 2/2 started
[   19s] probe spec-decode: launch 2/2 teardown
[   22s] probe spec-decode: launch 2/2: ok, primary median 39.61, run 27.66
```

A finished launch says its median and the run's number so far, `run`: the geometric mean of the
launch medians, the number the summary, `baseline list` and compare show for the run
(docs/statistics.md, "One number per run"). These lines (tiny preset on a loaded 2-core VM,
`regdiag probe spec-decode --preset tiny --cycles 6 --warmup 1 --launches 2 --no-snapshot -o r.json
2>err`) go to stderr; the summary to stdout, after the last of them.

## 80, 60 and 40 columns, and other encodings

Reports are laid out for the width they are given (`COLUMNS`, else the terminal's, else 80 in a log).
Below the width a table needs with every cell whole, it becomes one block per row: the row's name
(a metric, a run id, a message size, a baseline) on its own line, then `header value` items packed
under it, each item whole. Sentences wrap between words, continued two columns further in, and a
number never leaves its unit (`9.44 ms`, `68.5 %`); a word longer than the line (a path, a hash)
stands whole past the edge instead of being cut. Nothing is elided with `…`.

On a stream that cannot write UTF-8 (`PYTHONIOENCODING=ascii`, an old `LANG=C` box) the arrows,
signs and dashes are written in ASCII (`->`, `x`, `+/-`, `|`), tables get ASCII borders, and the
exit code is the command's own (a traceback and exit 1, REGRESSED's code, before).

## One vocabulary

The options that several commands share mean one thing everywhere:

| option | meaning | commands |
| --- | --- | --- |
| `-L`, `--launches N` | fresh processes (or server starts) per run, side or point: the unit of evidence | probe spec-decode / collectives / server / engine, ab, bisect, demo |
| `-m`, `--margin X` | the smallest change that matters, as `2%` or `0.02` | compare, ab, bisect |
| `-o`, `--output FILE` | also write the record to FILE, atomically, kept as current as the stored one (an interrupted run leaves its launches in both); a run's record always goes to `$REGDIAG_HOME/runs/` too, and snapshot still prints its own. ab takes a PREFIX (`PREFIX-a.json`, `PREFIX-b.json`); export, which makes no record, writes to FILE instead of stdout. Until this release probe spec-decode / collectives and ab wrote only to FILE | probe *, snapshot, ingest-log, ab, export |
| `-R`, `--requests N` | measured requests per launch | probe server, probe engine |
| `-C` | `--concurrency`, the requests in flight (probe spec-decode's `-C` for `--cycles` still works until the next release, with a one-line note: its short option is `-n` now) | probe server |
| `-n`, `--cycles N` | measured cycles per launch | probe spec-decode |
| `--host H` | run there over SSH (`[user@]host[:port]` or an SSH config alias; default `REGDIAG_HOST`, then config.toml). Repeatable where a command runs on several hosts at once: each its own run (snapshot, probe spec-decode / collectives, clean), or one run with each host a node of its pairs or a lane of its rounds (ab, bisect; docs/fleet.md); elsewhere one host, and a second `--host` is refused in one line (probe server, probe engine) | as listed |
| `--python PATH` | the interpreter on the target host (default `REGDIAG_PYTHON`, then config.toml) | every command with `--host`, check-host |
| `--preset NAME` | a named set that regdiag ships: model shapes (probe spec-decode, and explain's roofline) or an engine's phase targets (probe engine). explain's `--model` still works until the next release, with a one-line note | probe spec-decode, explain, probe engine |
| `--model NAME` | the served model's name for the OpenAI APIs, as the engines' own benchmarks use it | probe server |
| `--timeout S` | seconds one unit of work may take: a launch (probes), the engine's start (probe engine), a slow source (snapshot); bisect and ab call it `--launch-timeout` | as listed |
| `--format F` | the output format; `--json` and `--markdown` are its short forms, and two different asks are refused | every reporting command |

## Defaults: REGDIAG_HOST, REGDIAG_PYTHON and config.toml

`--host` and `--python` need not be retyped on every command. What wins, first to last: the option on
the command line; `REGDIAG_HOST` / `REGDIAG_PYTHON` (each option's `--help` names its variable;
`REGDIAG_HOST=` empty means this machine); for `--python`, the section of the host the command runs on
in `$REGDIAG_HOME/config.toml`; that file's `[defaults]`; regdiag's own default.

```toml
# $REGDIAG_HOME/config.toml (default ~/.regdiag/config.toml)
[defaults]
host = "gpu-box"                      # every command that takes --host runs there
python = "/root/ml-env/bin/python3"

[hosts.gpu-box]                       # the --host spec or SSH alias, as written
python = "/root/ml-env/bin/python3"
```

A file that is not valid TOML, an unknown table or key is refused in one line (exit 2); commands with
neither `--host` nor `--python` never read it. regdiag/config.py has the rules.

A config.toml that another user owns, or that its group or anyone may write (a team home's, mode 2770),
chooses no code for the user running regdiag: its `python` (of `[defaults]` and of every host) and
`shared_home` are ignored, said in one line, `regdiag: warning: /team/config.toml: writable by its group
(mode 664); its [defaults] python ignored: ...`; the command goes on with its own defaults (a team home
then needs `--shared-home` or `REGDIAG_SHARED_HOME=1`, else exit 2). Its `host` still applies.

## Shell completion

`regdiag --install-completion` adds completion of commands, options and choices to the shell it runs in
(bash, zsh, fish, PowerShell); `regdiag --show-completion` prints the script instead, to install it by
hand. Both take the shell's name as an argument (`--show-completion bash`) where it cannot be detected.

## Help

`--help` is click's plain layout, wrapped at the terminal's width (80 columns in a CI log) between words:
each option with its value's type as click names it (`TEXT`, `INTEGER`, `FLOAT RANGE`, `PATH`,
`[eager|graph|both]`), flags with none, arguments by name (`OLD NEW`), and nothing cut with an ellipsis.
"""


def _param_row(p) -> str | None:
    if p.param_type_name == "argument":
        help_text = " ".join((getattr(p, "help", None) or "").split()).replace("|", "\\|")
        return f"| `{(p.name or '').upper()}` | {help_text}{' (required)' if p.required else ''} | |"
    if p.param_type_name != "option" or getattr(p, "hidden", False):
        return None
    names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
    help_text = " ".join((p.help or "").split()).replace("|", "\\|")
    default = ""
    if p.show_default is not False and p.default not in (None, False, (), []) and not callable(p.default):
        # an Enum default is shown as the value a user types (`auto`), not its Python name (`Device.auto`)
        default = f"`{getattr(p.default, 'value', p.default)}`"
    if p.multiple:
        help_text += " (repeatable)"
    return f"| {names} | {help_text} | {default} |"


def _command_section(path: list[str], cmd) -> list[str]:
    out = [f"## `{' '.join(path)}`", ""]
    text = (cmd.help or cmd.short_help or "").strip()
    if text:
        out += [text.replace("\b\n", ""), ""]
    rows = [r for r in (_param_row(p) for p in cmd.params) if r]
    if rows:
        out += ["| option | meaning | default |", "| --- | --- | --- |", *rows, ""]
    return out


def walk(group, path: list[str]) -> list:
    out: list = []
    for name in sorted(group.commands):
        cmd = group.commands[name]
        if cmd.hidden:
            continue
        if hasattr(cmd, "commands"):
            out += walk(cmd, [*path, name])
        else:
            out.append(([*path, name], cmd))
    return out


def render() -> str:
    # This checkout's commands, not those of whichever regdiag is installed (an editable install of
    # another worktree would document that one's).
    sys.path.insert(0, str(ROOT))
    from regdiag.cli import app

    root = typer.main.get_command(app)
    lines = [HEADER]
    for path, cmd in walk(root, ["regdiag"]):
        lines += _command_section(path, cmd)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print("docs/cli.md is out of date: run python scripts/gen_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
