"""The SGLang presets' readers on a real call, through the real hook: SGLang needs a GPU, so a package
laid out at SGLang's module paths stands in for it, its classes shaped as the 0.5.3 wheel defines them
(EAGLEWorker.forward_batch_generation(batch) returning num_accepted_tokens and can_run_cuda_graph; the
draft's graph runner replayed inside draft(); the draft-extend runner present; TpModelWorker serving
prefill and decode). The presets' configurations are used as they are (regdiag.engine.presets); the
names and return fields themselves are checked against the wheels in tests/test_engine_presets.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from regdiag.engine.presets import PRESETS

ROOT = Path(__file__).resolve().parent.parent

FILES = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/managers/__init__.py": "",
    "sglang/srt/speculative/__init__.py": "",
    "sglang/srt/speculative/eagle_draft_cuda_graph_runner.py": """
class EAGLEDraftCudaGraphRunner:
    def replay(self, forward_batch):
        return [1, 2]
""",
    "sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py": """
class EAGLEDraftExtendCudaGraphRunner:
    def replay(self, forward_batch):
        return 3
""",
    "sglang/srt/speculative/eagle_worker.py": """
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner


class ForwardBatchOutput:
    def __init__(self, num_accepted_tokens=None, can_run_cuda_graph=False):
        self.num_accepted_tokens = num_accepted_tokens
        self.can_run_cuda_graph = can_run_cuda_graph


class EAGLEWorker:
    def __init__(self):
        self.cuda_graph_runner = EAGLEDraftCudaGraphRunner()
        self.cuda_graph_runner_for_draft_extend = EAGLEDraftExtendCudaGraphRunner()

    def draft(self, batch):
        return self.cuda_graph_runner.replay(batch)

    def verify(self, batch, spec_info):
        return None, batch.accepted, None, True

    def forward_draft_extend_after_decode(self, batch):
        return None  # eager: the extend runner exists and is not replayed

    def forward_batch_generation(self, batch):
        if batch.forward_mode.is_extend():
            return ForwardBatchOutput(num_accepted_tokens=0, can_run_cuda_graph=False)
        spec_info = self.draft(batch)
        _, per_req, _, graphed = self.verify(batch, spec_info)
        self.forward_draft_extend_after_decode(batch)
        return ForwardBatchOutput(num_accepted_tokens=sum(per_req), can_run_cuda_graph=graphed)
""",
    "sglang/srt/managers/tp_worker.py": """
class ForwardBatchOutput:
    def __init__(self, can_run_cuda_graph):
        self.can_run_cuda_graph = can_run_cuda_graph


class TpModelWorker:
    def forward_batch_generation(self, model_worker_batch, launch_done=None, is_verify=False):
        return ForwardBatchOutput(can_run_cuda_graph=model_worker_batch.forward_mode.is_decode())
""",
}

DRIVE = r"""
import json, os, sys
cfg = json.loads(sys.argv[3])
cfg.update(out_dir=sys.argv[1], warmup=0, block=0)
path = os.path.join(sys.argv[1], "cfg.json")
json.dump(cfg, open(path, "w"))
sys.path.insert(0, sys.argv[2])
import regdiag_phase_timer as t
t.install(path)

class Mode:
    def __init__(self, m):
        self.m = m
    def is_extend(self):
        return self.m == "extend"
    def is_decode(self):
        return self.m == "decode"

class Batch:
    def __init__(self, mode, accepted=()):
        self.forward_mode, self.accepted = Mode(mode), list(accepted)
        self.reqs = list(accepted) or [0]
        self.input_ids = [7] * len(self.reqs)

if sys.argv[4] == "spec":
    from sglang.srt.speculative.eagle_worker import EAGLEWorker
    w = EAGLEWorker()
    w.forward_batch_generation(Batch("extend"))             # a prefill: no draft, not a cycle
    w.forward_batch_generation(Batch("decode", [2, 0]))     # 2 + 0 drafts of 2 requests: 2/2 + 1 = 2
    w.forward_batch_generation(Batch("decode", [3, 3, 0]))  # 6/3 + 1 = 3
else:
    from sglang.srt.managers.tp_worker import TpModelWorker
    w = TpModelWorker()
    for mode in ("extend", "decode", "decode", "extend", "decode"):
        w.forward_batch_generation(Batch(mode, [1, 1] if mode == "decode" else [1] * 5))
t._timer.finish()
"""


def _run(tmp_path: Path, preset: str, what: str) -> list[dict]:
    pkg = tmp_path / "site"
    for name, text in FILES.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    out = tmp_path / f"out-{preset}"
    out.mkdir()
    cfg = json.dumps(PRESETS[preset].config())
    env = {"PYTHONPATH": str(pkg), "PATH": "/usr/bin:/bin"}
    subprocess.run(
        [sys.executable, "-c", DRIVE, str(out), str(ROOT / "probes/_engine_hook"), cfg, what],
        check=True,
        env=env,
        cwd=tmp_path,
    )
    return [json.loads(x) for f in out.glob("hook-*.jsonl") for x in f.read_text().splitlines()]


def test_sglang_v1_accept_length_and_draft_extend_graph_flags(tmp_path):
    lines = _run(tmp_path, "sglang", "spec")
    assert not [x for x in lines if x["type"] == "error"], lines
    cycles = [x for x in lines if x["type"] == "cycle"]
    # num_accepted_tokens / len(batch.reqs) + 1; the prefill call is no cycle (no draft ran)
    assert [c["values"]["accept_len"] for c in cycles] == [2.0, 3.0]
    # verify: the batch result's can_run_cuda_graph; draft: its runner replayed inside draft();
    # extend: its runner exists (patched) and was not replayed: eager
    assert [c["graph"] for c in cycles] == [{"verify": True, "draft": True, "extend": False}] * 2
    footer = next(x for x in lines if x["type"] == "footer")
    # The 0.5.23 runners' execute() is not in this (0.5.3-shaped) engine: no flag from it, no error.
    assert sorted(footer["absent"]) == [
        "sglang.srt.speculative.eagle_draft_cuda_graph_runner:EAGLEDraftCudaGraphRunner.execute",
        "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner:EAGLEDraftExtendCudaGraphRunner.execute",
    ]
    assert any(t.endswith("EAGLEWorkerV2.forward_batch_generation") for t in footer["never_imported"])


def test_sglang_decode_times_the_decode_steps_only(tmp_path):
    lines = _run(tmp_path, "sglang-decode", "decode")
    cycles = [x for x in lines if x["type"] == "cycle"]
    # five calls of TpModelWorker.forward_batch_generation, three of them decode steps
    assert len(cycles) == 3 and all(c["calls"] == {"decode": 1} for c in cycles)
    assert all(c["graph"] == {"decode": True} and c["values"]["decode_tokens"] == 2 for c in cycles)
