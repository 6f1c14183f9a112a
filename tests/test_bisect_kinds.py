"""Factor kinds (regdiag.bisect.kinds), the GPU-clock kind above all: read from spec strings and
snapshots, refused in one line where there is no GPU (for real, on this machine), and applied before
and undone after each launch. No GPU here: the clocks are driven through `StandInClocks`, a stand-in
for NVML that logs each call and models the GPU's speed by the work file the test probe reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bisect_helpers import write_probe

from regdiag.bisect import Request, run_bisect
from regdiag.bisect.factors import diff, parse_spec, spec_from_snapshot
from regdiag.bisect.kinds import KINDS, LaunchSetup, gpu_clock
from regdiag.errors import BadInput


def test_every_kind_is_registered_once_in_the_order_factors_are_tried():
    assert list(KINDS) == ["commit", "package", "env", "gpu-clock"]
    assert [k.ordered for k in KINDS.values()] == [True, True, False, False]


def test_gpu_clock_tokens_parse_and_diff():
    good = parse_spec("gpu0.sm_lock=1980 gpu1.app_clocks=2619,1980 A=1")
    bad = parse_spec("gpu0.sm_lock=1410-1500 -gpu1.app_clocks A=1")
    fs = diff(good, bad).factors
    assert [f.label() for f in fs] == [
        "gpu0.sm_lock 1980-1980 -> 1410-1500",
        "gpu1.app_clocks 2619,1980 -> default",
    ]
    assert (
        fs[0].show("1410-1500") == "gpu0.sm_lock=1410-1500" and fs[1].show(None) == "gpu1.app_clocks default"
    )


@pytest.mark.parametrize(
    "token, message",
    [
        ("gpu0.sm_lock=fast", "a locked SM clock is MHZ or MIN-MAX"),
        ("gpu0.sm_lock=1980-1410", "MIN is above MAX"),
        ("gpu0.app_clocks=1980", "application clocks are MEM,SM"),
        ("-gpu0.sm_lock=1", "write gpu0.sm_lock=VALUE, or -gpu0.sm_lock for the default"),
        ("gpu0.sm_lock=1 gpu0.sm_lock=2", "gpu0.sm_lock is given twice"),
    ],
)
def test_bad_gpu_clock_tokens_are_one_line(token, message):
    with pytest.raises(BadInput, match=message):
        parse_spec(token)


def _snap(app: tuple[int, int]) -> dict:
    ok = {"status": "ok"}
    fields = {
        "gpu0.clock_mem_app_mhz": {**ok, "value": app[0]},
        "gpu0.clock_sm_app_mhz": {**ok, "value": app[1]},
    }
    return {"schema": "regdiag.snapshot/1", "groups": {"gpu": {"status": "ok", "fields": fields}}}


def test_application_clocks_that_differ_between_snapshots_are_a_factor():
    d = diff(spec_from_snapshot(_snap((2619, 1980)), "a"), spec_from_snapshot(_snap((2619, 1410)), "b"))
    assert [f.label() for f in d.factors] == ["gpu0.app_clocks 2619,1980 -> 2619,1410"]
    assert (
        diff(
            spec_from_snapshot(_snap((2619, 1980)), "a"), spec_from_snapshot(_snap((2619, 1980)), "b")
        ).factors
        == []
    )


def test_clocks_seen_on_one_side_only_are_a_note_not_a_factor():
    no_gpu = {"schema": "regdiag.snapshot/1", "groups": {}}
    d = diff(spec_from_snapshot(no_gpu, "a"), spec_from_snapshot(_snap((2619, 1410)), "b"))
    assert d.factors == [] and d.notes == ["gpu0.app_clocks is known on one side only; not bisected"]


def test_without_a_gpu_the_bisect_is_refused_in_one_line_before_any_launch(cli, tmp_path):
    """The real NVML path: this machine has no GPU driver."""
    journal = tmp_path / "j.jsonl"
    res = cli("bisect", "--good", "gpu0.sm_lock=1980", "--bad", "gpu0.sm_lock=1410",
              "--command", "python -c 'print(1)'", "--journal", str(journal))  # fmt: skip
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1
    assert res.stderr.startswith(
        "regdiag: error: GPU clock factors need a GPU and its driver here: NVML says "
    )
    assert not journal.exists()


class StandInClocks:
    """A stand-in for NVML (regdiag.bisect.kinds.gpu_clock.ClockControl): logs each call, and models the
    GPU as the probe sees it: locked below 1500 MHz, verify takes 4 ms more (tests/bisect_helpers'
    probe reads work.json)."""

    def __init__(self, workdir: Path) -> None:
        self.log = workdir / "calls.log"
        self.work = workdir / "work.json"
        self.app = (2619, 1980)

    def _note(self, line: str) -> None:
        with self.log.open("a") as f:
            f.write(line + "\n")

    def lock_sm(self, gpu: int, lo: int, hi: int) -> None:
        self._note(f"lock gpu{gpu} {lo}-{hi}")
        self.work.write_text(json.dumps({"verify": 6.0} if hi < 1500 else {}))

    def unlock_sm(self, gpu: int) -> None:
        self._note(f"unlock gpu{gpu}")
        self.work.unlink(missing_ok=True)

    def app_clocks(self, gpu: int) -> tuple[int, int]:
        return self.app

    def set_app_clocks(self, gpu: int, mem: int, sm: int) -> None:
        self._note(f"app gpu{gpu} {mem},{sm}")
        self.app = (mem, sm)

    def reset_app_clocks(self, gpu: int) -> None:
        self._note(f"app-reset gpu{gpu}")
        self.app = (2619, 1980)


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    clocks = StandInClocks(tmp_path)
    monkeypatch.chdir(tmp_path)  # launches run here: the probe reads ./work.json
    monkeypatch.setattr(gpu_clock, "open_control", lambda: clocks)
    monkeypatch.setattr(KINDS["gpu-clock"], "_control", None)
    return clocks


@pytest.mark.slow
def test_clock_is_set_before_and_undone_after_every_launch_and_found_as_the_culprit(tmp_path, stand_in):
    probe = write_probe(tmp_path)
    wrapper = tmp_path / "wrapper.py"
    # Each launch notes what it saw in the call log, then runs the probe.
    wrapper.write_text(
        "import pathlib, runpy, sys\n"
        "w = pathlib.Path('work.json')\n"
        "with open('calls.log', 'a') as f:\n"
        "    f.write('launch ' + (w.read_text() if w.exists() else 'unlocked') + '\\n')\n"
        f"runpy.run_path({str(probe)!r}, run_name='__main__')\n"
    )
    req = Request(
        good="gpu0.sm_lock=1980 NCCL_PROTO=LL",
        bad="gpu0.sm_lock=1410 NCCL_PROTO=Simple",
        command=f"{{python}} {wrapper}",
        journal=str(tmp_path / "j.jsonl"),
        launches=2,
        max_launches=6,
    )
    r = run_bisect(req)
    assert r["verdict"] == "CULPRIT"
    [c] = r["culprits"]
    assert c["change"] == "gpu0.sm_lock 1980-1980 -> 1410-1410"
    assert c["ms"]["verify"] == pytest.approx(4.0, abs=0.6)
    lines = stand_in.log.read_text().splitlines()
    launches = [i for i, x in enumerate(lines) if x.startswith("launch")]
    assert len(launches) == r["cost"]["launches_run"] > 0
    for i in launches:  # lock, launch, unlock: never a launch at an unknown clock, never a clock left set
        assert lines[i - 1].startswith("lock gpu0 ") and lines[i + 1] == "unlock gpu0"
        assert lines[i] == (
            'launch {"verify": 6.0}' if lines[i - 1] == "lock gpu0 1410-1410" else "launch {}"
        )
    assert len(lines) == 3 * len(launches) and not stand_in.work.exists()


def test_undo_runs_when_the_launch_fails(stand_in):
    kind = KINDS["gpu-clock"]
    [app, lock] = diff(
        parse_spec("gpu0.sm_lock=1980 gpu0.app_clocks=2619,1980"),
        parse_spec("gpu0.sm_lock=1410 gpu0.app_clocks=1593,1410"),
    ).factors
    with pytest.raises(RuntimeError), LaunchSetup() as setup:
        kind.apply(app, app.bad, setup)
        kind.apply(lock, lock.bad, setup)
        raise RuntimeError("the launch died")
    assert stand_in.log.read_text().splitlines() == [
        "app gpu0 1593,1410",
        "lock gpu0 1410-1410",
        "unlock gpu0",
        "app gpu0 2619,1980",  # back to what it was before, not to the GPU's defaults
    ]
