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
        return {"phases": [list(p) for p in self.phases], "cycle": self.cycle, "sync": self.sync,
                "accept": self.accept}

    def all(self) -> list[tuple[str, str]]:
        out = list(self.phases)
        out += [(role, t) for role, t in (("cycle", self.cycle), ("sync", self.sync)) if t]
        if self.accept:
            out.append(("accept", self.accept["target"]))
        return out


_HF_CG = "transformers.generation.candidate_generator:AssistedCandidateGenerator"
_SGL = "sglang.srt.speculative.eagle_worker:EAGLEWorker"

PRESETS: dict[str, Targets] = {
    # transformers 5.24.0, generation/utils.py GenerationMixin._assisted_decoding: get_candidates, then
    # the target model's call, then the host reads n_matches and calls update_candidate_strategy.
    "transformers": Targets(
        phases=[("draft", f"{_HF_CG}.get_candidates"), ("verify", "transformers.modeling_utils:PreTrainedModel.__call__")],
        sync=f"{_HF_CG}.update_candidate_strategy",
        accept={"target": f"{_HF_CG}.update_candidate_strategy", "arg": "num_matches", "pos": 3, "plus": 1},
    ),
    # SGLang python/sglang/srt/speculative/eagle_worker.py (commit 00559ea): forward_batch_generation is
    # one cycle: draft(), verify(), forward_draft_extend_after_decode().
    "sglang-eagle": Targets(
        phases=[("draft", f"{_SGL}.draft"), ("verify", f"{_SGL}.verify"),
                ("extend", f"{_SGL}.forward_draft_extend_after_decode")],
        cycle=f"{_SGL}.forward_batch_generation",
    ),
    # vLLM V1 (commit 008603a): the target forward of the scheduled (verify) tokens, then the EAGLE
    # proposer drafts the next tokens; a cycle runs from one verify to the next.
    "vllm-eagle": Targets(
        phases=[("verify", "vllm.v1.worker.gpu_model_runner:GPUModelRunner._model_forward"),
                ("draft", "vllm.v1.spec_decode.eagle:EagleProposer.propose")],
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
