"""Every probe option is declared in the probe's own parser (the source: the probe runs without regdiag)
and once more as a typer option of `regdiag probe NAME`; this test keeps the two the same — flags,
defaults and choices — so neither can drift."""

from __future__ import annotations

import argparse
import enum
import importlib.util
import sys

import pytest
import typer

from regdiag.cli import app
from regdiag.measure.probes import presets, probe_script, probe_table

PRESETS, PROBES = presets(), probe_table()

# regdiag's own options of a probe run, not the probe's.
RUNNER_ONLY = {
    "--launches",
    "--cold",
    "--format",
    "--timeout",
    "--no-snapshot",
    "--output",
    "--json",
    "--host",
    "--python",
    "--ssh-config",
    "--slurm",
    "--slurm-args",
}
# The probe's options regdiag sets itself.
PROBE_ONLY = {"--launch-index", "--profile-trace"}


def _probe_parser(name: str) -> argparse.ArgumentParser:
    path = probe_script(name)
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"_probe_{name.replace('-', '_')}", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
        spec.loader.exec_module(mod)
        return mod.build_parser()
    finally:
        sys.path.remove(str(path.parent))


def _cli_command(name: str) -> typer.core.TyperCommand:  # click may be typer's vendored copy
    group = typer.main.get_command(app)
    probe = group.commands["probe"]  # type: ignore[attr-defined]
    return probe.commands[name]


@pytest.mark.parametrize("name", sorted(PROBES))
def test_cli_and_probe_declare_the_same_options(name: str) -> None:
    parser = _probe_parser(name)
    probe_opts = {}
    for a in parser._actions:
        if a.help == argparse.SUPPRESS or not a.option_strings or a.option_strings[0] in ("-h", "--help"):
            continue
        flag = next(o for o in a.option_strings if o.startswith("--"))
        if flag not in PROBE_ONLY:
            probe_opts[flag] = a
    cli_opts = {}
    for p in _cli_command(name).params:
        flag = next((o for o in p.opts if o.startswith("--")), None)
        if flag and flag not in RUNNER_ONLY:
            cli_opts[flag] = p
    assert set(cli_opts) == set(probe_opts), set(cli_opts) ^ set(probe_opts)
    for flag, a in probe_opts.items():
        p = cli_opts[flag]
        if a.choices is not None:
            kind = p.type_descriptor.annotation  # type: ignore[attr-defined]
            if flag == "--preset":  # free text in regdiag, checked against this table for a one-line error
                assert list(PRESETS) == list(a.choices)
                continue
            assert isinstance(kind, type) and issubclass(kind, enum.Enum), f"{flag}: free text in regdiag"
            assert [e.value for e in kind] == list(a.choices), flag
        cli_default = p.default.value if hasattr(p.default, "value") else p.default
        if isinstance(a, argparse._StoreTrueAction):
            assert cli_default is False, flag
        elif a.default is not None and cli_default is not None:
            assert cli_default == a.default, f"{flag}: regdiag says {cli_default!r}, the probe {a.default!r}"
