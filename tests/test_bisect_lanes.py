"""Lanes of a bisect (regdiag/bisect/lanes.py, rounds.py, lab.py): the rounds run at once over the lanes,
each lane a block of the statistics, a lane's faults run again elsewhere; the GPUs of one box as lanes.

The fleet here is in-process (FakeFleet: 4 lanes whose `run` prints the probe protocol with values
that the point's variables and the lane's own speed make, after a short sleep), so the search, the
rounds and the statistics run for real without processes. The GPU lanes are simulated on this CPU
machine with REGDIAG_TEST_GPUS (the GPU count; nothing runs on a GPU here).
"""

from __future__ import annotations

import json
import math
import random
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from regdiag.bisect.lanes import blocked, slow_lane
from regdiag.bisect.rounds import Round, run_round
from regdiag.bisect.run import Request, run_bisect
from regdiag.errors import BadInput, HostError
from regdiag.hosts.base import CommandResult, Host
from regdiag.hosts.gpu_lanes import gpu_lanes
from regdiag.hosts.slurm_state import SlurmFault, step_fault


class FakeLane(Host):
    via = "fake"
    builds_here = True
    keeps_warm = False
    shares_files = True

    def __init__(self, fleet: FakeFleet, name: str, speed: float) -> None:
        self.fleet, self.name, self.python, self.speed = fleet, name, "python3", speed

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, **kw) -> CommandResult:  # type: ignore[override]
        env = dict(env or {})
        fleet = self.fleet
        with fleet.lock:
            fleet.running += 1
            fleet.most = max(fleet.most, fleet.running)
            fleet.calls.append(self.name)
            fault = fleet.faults.pop(self.name, None) if fleet.faults.get(self.name) else None
        try:
            time.sleep(0.02)
            if fault is not None:
                raise SlurmFault(f"{self.name} went DOWN", "regdiag-test-down")
            seed = f"{env.get('REGDIAG_BISECT_POINT')}-{env.get('REGDIAG_LAUNCH_INDEX')}"
            rng = random.Random(seed)
            verify = (
                10.0 * (1.5 if env.get("SLOW") == "1" else 1.0) * self.speed * math.exp(rng.gauss(0, 0.01))
            )
            out = kw.get("on_stdout_line")
            header = {"type": "header", "protocol": 1, "probe": "fake", "version": "1", "primary": "verify"}
            assert out is not None
            out(json.dumps({**header, "phases": ["verify"], "units": {"verify": "ms", "cycle": "ms"}}))
            for i in range(4):
                out(json.dumps({"type": "cycle", "i": i, "t": {"cycle": verify, "verify": verify}}))
            out(json.dumps({"type": "footer", "cycles": 4, "warmup_dropped": 0}))
            return CommandResult(list(argv), 0, b"", b"", 0.02)
        finally:
            with fleet.lock:
                fleet.running -= 1

    def make_tempdir(self) -> str:
        raise NotImplementedError

    def remove_tree(self, path: str) -> None:
        raise NotImplementedError

    def put_file(self, local: Path, remote: str) -> None:
        raise NotImplementedError

    def regdiag_argv(self, entry: Sequence[str], python: str | None = None) -> list[str]:
        return ["python3", *entry]

    def check_regdiag(self, res: CommandResult) -> None:
        pass

    def placement(self) -> dict:
        return {"node": self.name}


class FakeFleet(FakeLane):
    """Four lanes n1..n4; `slow` lanes run at that speed factor; `faults`: lane -> launches that fault."""

    def __init__(
        self, slow: Mapping[str, float] | None = None, faults: Mapping[str, int] | None = None
    ) -> None:
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.calls: list[str] = []
        self.faults = dict(faults or {})
        self.name, self.python, self.fleet, self.speed = "fleet", "python3", self, 1.0
        self.ended = None
        self.lanes = [FakeLane(self, f"n{i + 1}", (slow or {}).get(f"n{i + 1}", 1.0)) for i in range(4)]

    def nodes(self) -> list[Host]:
        return list(self.lanes)


def _bisect(tmp_path: Path, fleet: FakeFleet, lanes: str = "auto") -> dict:
    req = Request(
        good="A=0 B=0 C=0 SLOW=0", bad="A=1 B=1 C=1 SLOW=1", command="fake-probe", metric="verify",
        launches=2, max_launches=8, margin=0.1, journal=str(tmp_path / "j.jsonl"), lanes=lanes,
    )  # fmt: skip
    return run_bisect(req, host=fleet)


def _journal(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "j.jsonl").read_text().splitlines()]


def test_rounds_fill_the_lanes_at_once_and_a_slow_lane_is_named_not_blamed(tmp_path):
    fleet = FakeFleet(slow={"n3": 1.6})  # n3 is 60 % slower at every point
    report = _bisect(tmp_path, fleet)
    assert report["verdict"] == "CULPRIT", report["statement"]
    assert [f["name"] for c in report["culprits"] for f in c["factors"]] == ["SLOW"]
    assert fleet.most == 4  # a round's launches ran on the four lanes at once
    lanes = report["lanes"]
    assert lanes["count"] == 4 and lanes["parallel"] and lanes["slow_lane"]["lane"] == "n3"
    assert any(re.match(r"lane n3 ran 1\.[5-7]\dx slower", n) for n in report["notes"]), report["notes"]
    launches = [e for e in _journal(tmp_path) if e["type"] == "launch"]
    assert all(e["lane"] == f"n{e['index'] % 4 + 1}" for e in launches)  # launch i on lane i mod 4
    per_point: dict[str, int] = {}
    for e in launches:
        per_point[e["point"]] = per_point.get(e["point"], 0) + 1
    assert all(n % 4 == 0 for n in per_point.values())  # each round fills the lanes


def test_serial_lanes_run_one_launch_at_a_time_with_the_same_plan(tmp_path):
    fleet = FakeFleet()
    report = _bisect(tmp_path, fleet, lanes="serial")
    assert report["verdict"] == "CULPRIT" and fleet.most == 1
    assert report["lanes"]["parallel"] is False


def test_a_lane_that_faults_is_named_its_launches_run_elsewhere_and_it_is_dropped(tmp_path):
    fleet = FakeFleet(faults={"n3": 1})  # n3 goes DOWN at its first launch
    report = _bisect(tmp_path, fleet)
    assert report["verdict"] == "CULPRIT", report["statement"]
    faults = report["lanes"]["faults"]
    assert faults and faults[0]["lane"] == "n3" and faults[0]["again_on"] == "n4"
    assert "n3" in report["lanes"]["dropped"]
    line = next(n for n in report["notes"] if n.startswith("n3 went DOWN at launch"))
    assert re.fullmatch(
        r"n3 went DOWN at launch \d+ \(regdiag-test-down\); its \d+ launch(es)? were run again on n\d.*", line
    ), line
    journal = _journal(tmp_path)
    assert [e["lane"] for e in journal if e["type"] == "fault"] == ["n3"]
    lost = next(e for e in journal if e["type"] == "fault")
    again = [
        e
        for e in journal
        if e["type"] == "launch" and e["point"] == lost["point"] and e["index"] == lost["index"]
    ]
    assert len(again) == 1 and again[0]["lane"] != "n3" and again[0]["status"] == "ok"
    # Nothing ran on n3 after it went DOWN.
    assert fleet.calls.count("n3") == 1
    # The journal alone resumes: every launch is there, none is run again.
    req = Request(
        good="A=0 B=0 C=0 SLOW=0", bad="A=1 B=1 C=1 SLOW=1", command="fake-probe", metric="verify",
        launches=2, max_launches=8, margin=0.1, journal=str(tmp_path / "j.jsonl"), resume=True,
    )  # fmt: skip
    again_report = run_bisect(req, host=FakeFleet())
    assert again_report["cost"]["launches_run"] == 0 and again_report["verdict"] == "CULPRIT"


def test_blocked_values_take_each_lanes_level_out():
    lanes = ["n1", "n2", "n3", "n4"] * 2
    good = [10.0, 10.1, 16.0, 9.9, 10.05, 9.95, 16.1, 10.0]  # n3 60 % slower
    bad = [v * 1.2 for v in good]
    out = blocked({"g": (good, lanes), "b": (bad, lanes)})
    assert max(out["g"]) / min(out["g"]) < 1.05 and max(out["b"]) / min(out["b"]) < 1.05
    rows = [("g", ln, v) for ln, v in zip(lanes, good, strict=True)] + [
        ("b", ln, v) for ln, v in zip(lanes, bad, strict=True)
    ]
    assert slow_lane(rows)["lane"] == "n3"
    # One lane: nothing to take out.
    assert blocked({"g": ([1.0, 2.0], [None, None])}) == {"g": [1.0, 2.0]}


def test_a_round_moves_a_faulted_launch_and_a_dropped_lanes_queue():
    rnd: Round[int] = Round(["a", "b"], [("a", 1), ("a", 2), ("b", 3)])
    done: list[tuple[str, int]] = []

    def work(lane: str, job: int) -> None:
        if lane == "a" and job == 1:
            rnd.drop("a", lambda i: "b")
            rnd.move(job, "b")
            return
        done.append((lane, job))

    run_round(rnd, work, parallel=True, stop=lambda: None)
    assert sorted(done) == [("b", 1), ("b", 2), ("b", 3)]
    failing: Round[int] = Round(["a", "b"], [("a", 1), ("b", 2)])

    def boom(lane: str, job: int) -> None:
        raise HostError("the allocation was cancelled (scancel)")

    with pytest.raises(HostError):
        run_round(failing, boom, parallel=True, stop=lambda: None)


def test_gpu_lanes_are_groups_of_the_probes_tp_each_pinned(monkeypatch):
    monkeypatch.setenv("REGDIAG_TEST_GPUS", "4")
    assert [la.name for la in gpu_lanes(1)] == ["gpu0", "gpu1", "gpu2", "gpu3"]
    pair = gpu_lanes(2)
    assert [la.name for la in pair] == ["gpu0-1", "gpu2-3"]
    res = pair[1].run(["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"])
    assert res.stdout.decode().strip() == "2,3" and pair[1].placement() == {"lane": "gpu2-3", "gpus": "2,3"}
    monkeypatch.setenv("REGDIAG_TEST_GPUS", "1")
    assert [la.name for la in gpu_lanes(1)] == ["gpu0"]
    with pytest.raises(BadInput, match="a launch needs 2 GPUs"):
        gpu_lanes(2)
    monkeypatch.setenv("REGDIAG_TEST_GPUS", "0")
    with pytest.raises(BadInput, match="no GPU here"):
        gpu_lanes(1)


@pytest.mark.cli
def test_lanes_gpu_without_a_gpu_is_one_line_exit_2(cli, tmp_path):
    env = {"REGDIAG_TEST_GPUS": "0", "REGDIAG_HOME": str(tmp_path)}
    r = cli("bisect", "--lanes", "gpu", "--good", "X=1", "--bad", "X=2", "--command", "true", env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("regdiag: error: --lanes gpu: no GPU here")
    assert not (tmp_path / "bisect").exists()  # no journal left behind


def test_a_step_cancelled_from_outside_is_the_lanes_fault():
    said = ["slurmstepd: error: *** STEP 7.3 ON n2 CANCELLED AT 2026-12-03T15:00:00 ***"]
    fault = step_fault("n2", said)
    assert fault is not None and str(fault) == "the step on n2 was cancelled (scancel of the step)"
    assert fault.at("at launch 5") == "the step on n2 was cancelled at launch 5 (scancel of the step)"
    assert step_fault("n2", ["srun: error: n2: task 0: Exited with exit code 1"]) is None
