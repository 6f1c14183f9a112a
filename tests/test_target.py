"""One Target per command (regdiag/cli/target.py): host options declared once, config defaults applied
once, a default host yielding to --slurm, and a new host kind being one file plus one registry line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from regdiag.cli.target import Target, target_from_options
from regdiag.errors import BadInput
from regdiag.hosts import resolve
from regdiag.hosts.local import LocalHost

KIND_FILE = '''
from regdiag.hosts.local import LocalHost


class LoopHost(LocalHost):
    """This machine under another name: a host kind of the test suite's own."""

    def __init__(self, label, python):
        super().__init__(python)
        self.name = "loop-" + label
        self.via = "loop"

    def reopen(self):
        return {"loop": self.name[len("loop-"):]}


def open_loop(value, python, options):
    return LoopHost(value, python)
'''


@pytest.fixture
def loop_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "loop_kind.py").write_text(KIND_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(resolve.HOST_KINDS, "loop", "loop_kind:open_loop")  # the one registry line
    yield
    sys.modules.pop("loop_kind", None)


def test_a_new_host_kind_is_a_file_and_a_registry_line(loop_kind: None) -> None:
    target = Target(options={"loop": "a"})
    assert target.kind == "loop" and target.remote
    with target.open() as host:
        assert host.name == "loop-a" and host.run(["true"]).ok
        record = host.reopen()
    # what a journal keeps opens the same place again
    with Target.from_record(record).open() as again:
        assert again.name == "loop-a"
    with pytest.raises(BadInput, match="--loop and --host: give one of them"):
        Target(hosts=("gpu-1",), options={"loop": "a"}).open()


def test_a_default_host_yields_to_another_kind_and_a_given_one_does_not() -> None:
    both = {"slurm": "2"}
    assert Target(hosts=("gpu-1",), options=both, host_defaulted=True).checked().hosts == ()
    with pytest.raises(BadInput, match="--slurm and --host"):
        Target(hosts=("gpu-1",), options=both).checked()
    with pytest.raises(BadInput, match="--slurm-args needs --slurm N"):
        Target(options={"slurm_args": "--partition=x"}).checked()


def test_config_defaults_fill_host_and_python_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = Path(str(tmp_path))
    monkeypatch.setenv("REGDIAG_HOME", str(home))
    monkeypatch.delenv("REGDIAG_HOST", raising=False)
    monkeypatch.delenv("REGDIAG_PYTHON", raising=False)
    (home / "config.toml").write_text(
        '[defaults]\nhost = "gpu-7"\n[hosts.gpu-7]\npython = "/opt/ml/bin/python3"\n'
    )
    t = target_from_options({"host": None, "python": None, "ssh_config": None, "slurm": "2"})
    assert t.hosts == ("gpu-7",) and t.python == "/opt/ml/bin/python3" and t.host_defaulted
    assert t.checked().kind == "slurm" and t.checked().hosts == ()
    given = target_from_options({"host": ["gpu-9"], "python": "/usr/bin/python3"})
    assert given.hosts == ("gpu-9",) and given.python == "/usr/bin/python3"


def test_a_journal_target_holds_unless_the_command_line_chooses_again() -> None:
    journal = Target.from_record({"slurm": 2, "slurm_args": "--partition=debug"})
    assert journal.options == {"slurm": "2", "slurm_args": "--partition=debug"}
    given = Target(hosts=("gpu-7",), python="/p", host_defaulted=True)
    kept = journal.overridden_by(given, set())
    assert kept.kind == "slurm" and kept.python == "/p" and not kept.hosts
    assert journal.overridden_by(given, {"host"}) is given
    assert Target.from_record({}).open().__class__ is LocalHost


@pytest.mark.cli
def test_every_command_that_runs_somewhere_takes_the_same_host_options(cli: Any) -> None:
    for argv in (
        ("probe", "spec-decode"),
        ("probe", "collectives"),
        ("probe", "server"),
        ("probe", "engine"),
        ("bisect",),
        ("ab",),
        ("snapshot",),
        ("clean",),
    ):
        out = cli(*argv, "--help", env={"COLUMNS": "200"}).stdout
        assert "--host" in out and "--python" in out and "--ssh-config" in out, argv
        assert ("--slurm" in out) == (
            argv[0] in ("bisect", "ab") or argv[1:] in (("spec-decode",), ("collectives",))
        ), argv
