"""A probe's options are declared once, in the probe's own argparse parser: `regdiag probe NAME` takes its
options from there (cli/probe_options.py), with their flags, choices and help, and hands them to the
probe as given; regdiag's own options of a probe run stay its own. A bad probe option is refused by
the probe's parser and checks before anything runs: one line, exit 2."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from regdiag.cli import app
from regdiag.cli.probe_options import probe_actions
from regdiag.errors import BadInput
from regdiag.measure.probes import check_probe_args, probe_parser, probe_table

ROOT = Path(__file__).resolve().parent.parent
PROBES = probe_table()

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
    "--env-dir",
    "--help",
}


def _cli_command(name: str):  # type: ignore[no-untyped-def]  # typer's own (vendored) click command
    group = typer.main.get_command(app)
    return group.commands["probe"].commands[name]  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(PROBES))
def test_the_cli_options_of_a_probe_are_its_parser_s(name: str) -> None:
    actions = {
        next(o for o in a.option_strings if o.startswith("--")): a for a in probe_actions(probe_parser(name))
    }
    cli = {}
    for p in _cli_command(name).params:
        flag = next(o for o in p.opts if o.startswith("--"))
        if flag not in RUNNER_ONLY:
            cli[flag] = p
    assert list(cli) == list(actions)  # the same options, in the parser's order
    for flag, a in actions.items():
        p = cli[flag]
        assert set(p.opts) == set(a.option_strings), flag
        assert " ".join(str(a.help).split()).lower().rstrip(".") in " ".join(p.help.split()).lower(), flag
        if a.choices is not None:
            assert [getattr(c, "value", c) for c in p.type_descriptor.choices] == list(a.choices), flag


def _parsed_argv(monkeypatch: pytest.MonkeyPatch, name: str, args: list[str]) -> list[str]:
    """What `regdiag probe NAME ARGS` hands its launches as the probe's argv (the run itself stubbed)."""
    from regdiag.cli import probe_cmd

    seen: list[list[str]] = []
    monkeypatch.setattr(probe_cmd, "_run", lambda asked, target: seen.append(asked.args))
    _cli_command(name).main(args=args, standalone_mode=False)
    return seen[0]


def test_the_probe_gets_the_options_as_given_and_regdiag_keeps_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = _parsed_argv(
        monkeypatch,
        "spec-decode",
        [
            "-L",
            "3",
            "--slow-phase",
            "verify:2",
            "-n",
            "7",
            "--preset",
            "tiny",
            "--no-snapshot",
            "--slow-phase",
            "draft:1",
            "--naive-timer",
            "--cold",
        ],
    )
    # in the parser's order, the long flags, repeats kept; nothing of -L, --no-snapshot, --cold
    assert argv == [
        "--preset",
        "tiny",
        "--cycles",
        "7",
        "--naive-timer",
        "--slow-phase",
        "verify:2",
        "--slow-phase",
        "draft:1",
    ]
    assert _parsed_argv(monkeypatch, "collectives", []) == []  # the probe's defaults stay the probe's


@pytest.mark.parametrize(
    "name, argv, needle",
    [
        ("spec-decode", ["--tp", "0"], "--tp 0"),
        ("spec-decode", ["--tp", "2", "--tp-slice", "8"], "--tp-slice"),
        ("spec-decode", ["--hang-timeout", "nan"], "--hang-timeout nan"),
        ("spec-decode", ["--slow-phase", "verify:1e9"], "slow-phase"),
        ("spec-decode", ["--preset", "gpt-5"], "invalid choice: 'gpt-5'"),
        ("spec-decode", ["--bogus"], "unrecognized arguments: --bogus"),
        ("collectives", ["--sizes", "1e400"], "at most 64G"),
        ("collectives", ["--target-ms", "nan"], "--target-ms"),
        ("collectives", ["--api", "nccl", "--device", "cpu"], "NCCL needs CUDA"),
    ],
)
def test_bad_probe_options_are_refused_by_the_probe_s_own_checks(
    name: str, argv: list[str], needle: str
) -> None:
    with pytest.raises(BadInput, match="^probe ") as e:
        check_probe_args(name, argv)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_the_parser_is_read_without_torch_and_leaves_the_process_as_it_was() -> None:
    code = (
        "import sys\n"
        "from regdiag.measure.probes import probe_parser, probe_table\n"
        "base = (list(sys.path), set(sys.modules))\n"
        "[probe_parser(n) for n in probe_table()]\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "assert sys.path == base[0], sys.path\n"
        "new = set(sys.modules) - base[1]\n"
        "import os; assert not [m for m in new if os.path.isfile(f'probes/{m}.py')], new\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr


# --- an option added to the probe's parser alone -------------------------------------------------------

ADDED = (
    '    p.add_argument("--three-cycles", dest="cycles", action="store_const", const=3, '
    'help="run three measured cycles, whatever --cycles says")\n'
)


@pytest.fixture
def tree_with_an_added_option(tmp_path: Path) -> Path:
    """A copy of the source tree whose spec-decode parser has one option more, and nothing else."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "regdiag", tmp_path / "regdiag", ignore=ignore)
    shutil.copytree(ROOT / "probes", tmp_path / "probes", ignore=ignore)
    script = tmp_path / "probes" / "spec_decode.py"
    text = script.read_text(encoding="utf-8")
    assert text.count("    add_common_args(p)\n") == 1
    script.write_text(
        text.replace("    add_common_args(p)\n", ADDED + "    add_common_args(p)\n"), encoding="utf-8"
    )
    return tmp_path


def _regdiag(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(tree), "COLUMNS": "120", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "regdiag", *args],
        capture_output=True,
        text=True,
        cwd=tree,
        env={**env, "REGDIAG_HOME": str(tree / "home")},
        timeout=300,
    )


@pytest.mark.launch
@pytest.mark.cli
def test_an_option_added_to_the_probe_s_parser_is_in_the_help_and_reaches_the_probe(
    tree_with_an_added_option,
):
    tree = tree_with_an_added_option
    help_text = " ".join(_regdiag(tree, "probe", "spec-decode", "--help").stdout.split())
    assert "--three-cycles Run three measured cycles, whatever --cycles says." in help_text
    out = tree / "run.json"
    once = "--preset tiny --context 64 --warmup 1 -L 1 --cold --no-snapshot".split()
    r = _regdiag(tree, "probe", "spec-decode", *once, "--three-cycles", "-o", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    run = json.loads(out.read_text(encoding="utf-8"))
    assert "--three-cycles" in run["probe"]["args"]
    assert len(run["launches"][0]["samples"]["cycle"]) == 3  # the probe parsed it: 3 cycles, not 50
    bad = _regdiag(tree, "probe", "spec-decode", "--three-cycles=4")
    lines = [ln for ln in bad.stderr.splitlines() if ln.strip()]
    assert bad.returncode == 2 and len(lines) == 1 and "--three-cycles" in lines[0], bad.stderr


def test_a_probe_option_that_takes_a_runner_flag_is_refused_when_the_command_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from regdiag.cli import probe_options

    parser = argparse.ArgumentParser()
    parser.add_argument("--launches", type=int)
    monkeypatch.setattr("regdiag.measure.probes.probe_parser", lambda name: parser)

    def cmd(launches: int = typer.Option(8, "--launches"), probe_args: list[str] = probe_options.PROBE_ARGS):
        pass

    with pytest.raises(TypeError, match="--launches"):
        probe_options.probe_options("x")(cmd)


@pytest.mark.parametrize("command", ["bisect", "ab"])
def test_the_probe_options_after_bisect_s_and_ab_s_double_dash_are_checked_by_the_probe(command: str) -> None:
    sides = ["--good", "X=1", "--bad", "X=2"] if command == "bisect" else ["--a", "X=1", "--b", "X=2"]
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    with pytest.raises(BadInput, match="probe spec-decode: --tp 0: must be within 1..1024"):
        cmd.main(
            args=[*sides, "--probe", "spec-decode", "--", "--preset", "tiny", "--tp", "0"],
            standalone_mode=False,
        )
