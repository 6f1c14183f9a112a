"""Phase targets per engine, as data: `module:Qualified.name`. Sources in docs/engine.md."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from regdiag.errors import BadInput

TARGET_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclass
class Targets:
    phases: list[tuple[str, str]]
    cycle: str | None = None
    sync: str | None = None
    accept: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def config(self) -> dict[str, Any]:
        return {
            "phases": [list(p) for p in self.phases],
            "cycle": self.cycle,
            "sync": self.sync,
            "accept": self.accept,
        }

    def all(self) -> list[tuple[str, str]]:
        out = list(self.phases)
        out += [(role, t) for role, t in (("cycle", self.cycle), ("sync", self.sync)) if t]
        if self.accept:
            out.append(("accept", self.accept["target"]))
        return out


_HF_CG = "transformers.generation.candidate_generator:AssistedCandidateGenerator"
_SGL1 = "sglang.srt.speculative.eagle_worker:EAGLEWorker"
_SGL2 = "sglang.srt.speculative.eagle_worker_v2"

# Each preset names the functions of one released version, read from its wheel (docs/engine.md has
# the files and the call order; tests/test_engine_presets.py checks them against those wheels).
VERSIONS = {
    "transformers": ("transformers", "5.24.0"),
    "sglang-eagle": ("sglang", "0.5.23"),
    "sglang-eagle-v1": ("sglang", "0.5.3"),
    "vllm-eagle": ("vllm", "0.33.0"),
}

PRESETS: dict[str, Targets] = {
    # generation/utils.py GenerationMixin._assisted_decoding: candidate_generator.get_candidates(), the
    # target model's call, then the host reads n_matches and calls update_candidate_strategy().
    "transformers": Targets(
        phases=[
            ("draft", f"{_HF_CG}.get_candidates"),
            ("verify", "transformers.modeling_utils:PreTrainedModel.__call__"),
        ],
        sync=f"{_HF_CG}.update_candidate_strategy",
        accept={"target": f"{_HF_CG}.update_candidate_strategy", "arg": "num_matches", "pos": 3, "plus": 1},
    ),
    # speculative/eagle_worker_v2.py EAGLEWorkerV2.forward_batch_generation (decode): draft_worker.draft(),
    # self.verify(), draft_worker._draft_extend_for_decode(); overlapped, so events are read deferred.
    "sglang-eagle": Targets(
        phases=[
            ("draft", f"{_SGL2}:EagleDraftWorker.draft"),
            ("verify", f"{_SGL2}:EAGLEWorkerV2.verify"),
            ("extend", f"{_SGL2}:EagleDraftWorker._draft_extend_for_decode"),
        ],
        cycle=f"{_SGL2}:EAGLEWorkerV2.forward_batch_generation",
    ),
    # speculative/eagle_worker.py EAGLEWorker.forward_batch_generation (decode): draft(), verify(),
    # forward_draft_extend_after_decode().
    "sglang-eagle-v1": Targets(
        phases=[
            ("draft", f"{_SGL1}.draft"),
            ("verify", f"{_SGL1}.verify"),
            ("extend", f"{_SGL1}.forward_draft_extend_after_decode"),
        ],
        cycle=f"{_SGL1}.forward_batch_generation",
    ),
    # v1/worker/gpu_model_runner.py GPUModelRunner: execute_model() runs _model_forward() over the
    # scheduled tokens (the verify), sample_tokens() the rejection sampler, then propose_draft_token_ids()
    # calls the drafter's propose() (EagleProposer inherits it from SpecDecodeBaseProposer).
    "vllm-eagle": Targets(
        phases=[
            ("verify", "vllm.v1.worker.gpu_model_runner:GPUModelRunner._model_forward"),
            ("reject", "vllm.v1.sample.rejection_sampler:RejectionSampler.forward"),
            ("draft", "vllm.v1.spec_decode.llm_base_proposer:SpecDecodeBaseProposer.propose"),
        ],
    ),
}


def check_target(text: str, what: str) -> str:
    if not TARGET_RE.match(text):
        raise BadInput(f"{what}: {text!r} is not module:Qualified.name")
    return text


def resolve(
    preset: str | None,
    phases: list[str],
    sync: str | None = None,
    cycle: str | None = None,
    accept: str | None = None,
) -> Targets:
    """The targets of a preset, with --phase NAME=module:qual replacing or adding phases."""
    if preset is not None and preset not in PRESETS:
        raise BadInput(f"unknown --preset {preset!r}; choose from {', '.join(PRESETS)}")
    base = PRESETS[preset] if preset else Targets(phases=[])
    t = Targets(list(base.phases), base.cycle, base.sync, dict(base.accept) if base.accept else None)
    for item in phases:
        name, sep, target = item.partition("=")
        if not sep or not name.isidentifier():
            raise BadInput(f"--phase {item!r}: expected NAME=module:Qualified.name")
        check_target(target, f"--phase {name}")
        t.phases = [(n, tg) for n, tg in t.phases if n != name] + [(name, target)]
    if not t.phases:
        raise BadInput("no phases: give --preset or at least one --phase NAME=module:Qualified.name")
    if sync is not None:
        t.sync = check_target(sync, "--sync") if sync else None
    if cycle is not None:
        t.cycle = check_target(cycle, "--cycle") if cycle else None
    if accept is not None:
        target, sep, arg = accept.partition("=")
        if not sep or not arg.isidentifier():
            raise BadInput(f"--accept {accept!r}: expected module:Qualified.name=ARGUMENT")
        t.accept = {"target": check_target(target, "--accept"), "arg": arg, "pos": None, "plus": 1}
    return t
