"""Per-cycle facts of `probe engine` beyond the phase times, in real processes (the fake engine of
tests/engine_fake): a phase never called is absent, never a column of zeros; each cycle has its
start-to-start period beside the cycle; readers of return values and graph flags (the forms the vLLM
and SGLang presets use) work on a real call."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from server_helpers import free_port
from test_engine_probe import FAKE_PHASES, _fake_server

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.launch
@pytest.mark.engine
def test_a_phase_never_called_is_absent_and_each_cycle_has_its_period(cli, tmp_path):
    port = free_port()
    out = tmp_path / "run.json"
    r = cli("probe", "engine", *_fake_server(port, workers=1), *FAKE_PHASES,
            "--phase", "rollback=fake_spec:SpecWorker.rollback",
            "-L", "1", "-R", "2", "--max-tokens", "60", "-o", str(out), "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = json.loads(out.read_text())
    la = run["launches"][0]
    assert run["phases"] == ["draft", "verify", "extend", "rollback"]
    assert la["phases_absent"] == ["rollback"] and "rollback" not in la["samples"]
    n = len(la["samples"]["cycle"])
    assert la["phase_cycles"] == {"draft": n, "verify": n, "extend": n, "rollback": 0}
    summary = json.loads(r.stdout)
    assert summary["rollback_ms_median"] is None and summary["phases_absent"] == ["rollback"]
    # Start to start contains the cycle (its end comes before the next start) and is never shorter.
    periods = la["samples"]["period"]
    assert len(periods) >= n - 1
    assert all(p >= c for c, p in zip(la["samples"]["cycle"], periods, strict=False))
    assert la["scalars"]["between_cycles_ms"] >= 0
    assert run["units"]["period"] == "ms" and run["better"]["accept_len"] == "higher"


HOOK_CHECK = r"""
import json, os, sys
cfg = {
    "phases": [["verify", "fake_batch:Runner.verify"], ["verify", "fake_batch:OtherRunner.verify"],
               ["reject", "fake_batch:Runner.reject"]],
    "cycle": None, "sync": None,
    "accept": [{"target": "fake_batch:Runner.reject", "ret": "tokens", "reduce": "count_ne", "value": -1}],
    "graph": [{"phase": "verify", "context": "fake_batch:context", "attr": "mode",
               "of": ["fake_batch:Runner.verify"]},
              {"phase": "*", "within": "fake_batch:Runner.replay", "of": ["fake_batch:OtherRunner.verify"]}],
    "out_dir": sys.argv[1], "warmup": 0, "block": 0,
}
path = os.path.join(sys.argv[1], "cfg.json")
json.dump(cfg, open(path, "w"))
sys.path.insert(0, sys.argv[2])
import regdiag_phase_timer as t
t.install(path)
import fake_batch
r = fake_batch.Runner()
for graphed in (False, True, True):
    r.step(graphed)
o = fake_batch.OtherRunner()
o.step(True)
o.step(False)
t._timer.finish()
"""

FAKE_BATCH = """
import enum
class Mode(enum.Enum):
    NONE = 0
    FULL = 2
class _Ctx:
    mode = Mode.NONE
_ctx = _Ctx()
def context():
    return _ctx
class Out:
    def __init__(self, tokens):
        self.tokens = tokens
class Runner:
    def verify(self):
        return 1
    def replay(self):
        return 2
    def reject(self):
        # two requests: 2 of 3 drafts + bonus, and none + bonus; -1 marks rejected places
        return Out([[5, 6, 7, -1], [9, -1, -1, -1]])
    def step(self, graphed):
        _ctx.mode = Mode.FULL if graphed else Mode.NONE
        self.verify()
        _ctx.mode = Mode.NONE
        self.reject()
class OtherRunner(Runner):
    def verify(self):
        return self.replay() if self.graphed else 0
    def step(self, graphed):
        self.graphed = graphed
        self.verify()
        self.reject()
"""


def test_readers_of_return_values_and_graph_flags(tmp_path):
    (tmp_path / "fake_batch.py").write_text(FAKE_BATCH)
    out = tmp_path / "out"
    out.mkdir()
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", HOOK_CHECK, str(out), str(ROOT / "probes/_engine_hook")],
                   check=True, env=env, cwd=tmp_path)  # fmt: skip
    lines = [json.loads(x) for f in out.glob("hook-*.jsonl") for x in f.read_text().splitlines()]
    cycles = [x for x in lines if x["type"] == "cycle"]
    assert len(cycles) == 5
    # accept length per cycle: mean over the batch's rows of the places that are not -1: (3 + 1) / 2.
    assert [c["values"]["accept_len"] for c in cycles] == [2.0] * 5
    # V1-like: the forward context says NONE / FULL; V2-like: a replay inside the phase, or none.
    assert [c["graph"]["verify"] for c in cycles] == [False, True, True, True, False]
    assert [c.get("graph_mode", {}).get("verify") for c in cycles[:3]] == ["NONE", "FULL", "FULL"]
    # The reject phase is not one the readers speak for: no flag rather than a guessed one.
    assert all("reject" not in c["graph"] for c in cycles)
    header = next(x for x in lines if x["type"] == "header")
    assert header["targets"]["verify"] == ["fake_batch:Runner.verify", "fake_batch:OtherRunner.verify"]
