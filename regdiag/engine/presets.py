"""Phase targets per engine, as data: `module:Qualified.name`. Sources in docs/engine.md."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from regdiag.errors import BadInput

TARGET_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclass
class Targets:
    """What the hook wraps. A phase (or the cycle) may name several targets, one per model runner or
    worker of the engine: whichever the engine imports at run time is patched, the others are never
    imported. `accept` and `graph` say where the engine reports the accept length and whether a phase
    ran as a CUDA graph (probes/_engine_hook/regdiag_phase_readers.py has their forms)."""

    phases: list[tuple[str, str]]
    cycle: str | list[str] | None = None
    sync: str | None = None
    accept: list[dict[str, Any]] = field(default_factory=list)
    graph: list[dict[str, Any]] = field(default_factory=list)
    tokens: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    only: list[dict[str, Any]] = field(default_factory=list)

    @property
    def phase_names(self) -> list[str]:
        return list(dict.fromkeys(p for p, _ in self.phases))

    def config(self) -> dict[str, Any]:
        return {
            "phases": [list(p) for p in self.phases],
            "cycle": self.cycle,
            "sync": self.sync,
            "accept": [dict(a) for a in self.accept],
            "graph": [dict(g) for g in self.graph],
            "tokens": [dict(t) for t in self.tokens],
            "only": [dict(o) for o in self.only],
        }

    def readers(self) -> list[tuple[str, dict[str, Any]]]:
        """What each reader takes from a target's source, for the source check: the field a return
        carries (accept length, graph flag), the argument a batch size is read from."""
        out: list[tuple[str, dict[str, Any]]] = []
        for a in self.accept:
            if a.get("ret"):
                out.append(("accept", {"target": a["target"], "ret": a["ret"]}))
            if a.get("arg"):
                out.append(("accept", {"target": a["target"], "arg": a["arg"]}))
            if (a.get("per") or {}).get("arg"):
                out.append(("accept", {"target": a["target"], "arg": a["per"]["arg"]}))
        for g in self.graph:
            if g.get("ret") and not str(g["ret"]).isdigit():
                for t in [g["target"]] if g.get("target") else g.get("of") or []:
                    out.append(("graph", {"target": t, "ret": g["ret"]}))
        return out

    def cycle_definition(self) -> dict[str, str]:
        """What one cycle is, as the hook times it: the engines define it differently (SGLang: one
        forward_batch_generation call; vLLM: verify start to the next verify start, the engine's time
        between steps included), so two runs' cycles compare only when their `kind`s agree."""
        cycles = [self.cycle] if isinstance(self.cycle, str) else list(self.cycle or [])
        if cycles:
            names = " or ".join(t.split(":", 1)[1] for t in cycles)
            return {"kind": "one-call", "text": f"one call of {names}"}
        first = self.phase_names[0] if self.phases else "the first phase"
        if self.sync:
            sync = self.sync.split(":", 1)[1]
            return {"kind": "to-sync", "text": f"from {first}'s start to the return of {sync}"}
        return {"kind": "start-to-start", "text": f"from one start of {first} to the next ({first} included)"}

    def all(self) -> list[tuple[str, str]]:
        out = list(self.phases)
        cycles = [self.cycle] if isinstance(self.cycle, str) else list(self.cycle or [])
        out += [("cycle", t) for t in cycles] + ([("sync", self.sync)] if self.sync else [])
        out += [("accept", a["target"]) for a in self.accept]
        out += [
            ("graph", g.get("within") or g["target"])
            for g in self.graph
            if g.get("within") or g.get("target")
        ]
        return list(dict.fromkeys(out))


_HF_CG = "transformers.generation.candidate_generator:AssistedCandidateGenerator"
_SGL1 = "sglang.srt.speculative.eagle_worker:EAGLEWorker"
_SGL2 = "sglang.srt.speculative.eagle_worker_v2"
_V1 = "vllm.v1.worker"
_V2 = "vllm.v1.worker.gpu"
_V2_CG = f"{_V2}.cudagraph_utils"
# Whether verify (V1: the forward context's cudagraph_runtime_mode, NONE / PIECEWISE / FULL) or any
# phase (V2: a graph replay inside it) ran as a CUDA graph.
_V1_VERIFY = f"{_V1}.gpu_model_runner:GPUModelRunner._model_forward"
_V2_VERIFY = f"{_V2}.model_runner:GPUModelRunner.execute_model"
_V2_DRAFT = f"{_V2}.spec_decode.target_dependent_ar.speculator:TargetDependentARSpeculator.propose"
_V2_NGRAM = f"{_V2}.spec_decode.ngram.speculator:NgramGPUSpeculator.propose"
_V2_PHASES = [_V2_VERIFY, _V2_DRAFT, _V2_NGRAM]
_VLLM_GRAPH: list[dict[str, Any]] = [
    {
        "phase": "verify",
        "context": "vllm.forward_context:get_forward_context",
        "attr": "cudagraph_runtime_mode",
        "of": [_V1_VERIFY],
    },
    *(
        {"phase": "*", "within": f"{_V2_CG}:{fn}", "of": _V2_PHASES}
        for fn in (
            "ModelCudaGraphManager.run_fullgraph",
            "CudaGraphManager.run_fullgraph",
            "CudaGraphManager.run_pw_graph",
        )
    ),
]

# SGLang's readers, per worker. The v1 EAGLEWorker (0.5.3) returns num_accepted_tokens, the batch's
# accepted draft tokens without the bonus (sum of accept_length_per_req_cpu): / len(batch.reqs) + 1.
# The spec-v2 EAGLEWorkerV2 (0.5.23) returns accept_lens, accepted + 1 per request. Both say whether
# the target's verify ran as a graph (can_run_cuda_graph); the draft's and draft-extend's graphs are
# their graph runners' replays inside the phase (0.5.3: EAGLEDraft[Extend]CudaGraphRunner.replay;
# 0.5.23: .execute), eager when the runner exists and was not called.
_SGL_DRAFT_CG = "sglang.srt.speculative.eagle_draft_cuda_graph_runner:EAGLEDraftCudaGraphRunner"
_SGL_EXTEND_CG = "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner:EAGLEDraftExtendCudaGraphRunner"
_SGL1_FBG = f"{_SGL1}.forward_batch_generation"
_SGL2_FBG = f"{_SGL2}:EAGLEWorkerV2.forward_batch_generation"
_SGL1_ACCEPT = {
    "target": _SGL1_FBG,
    "ret": "num_accepted_tokens",
    "per": {"arg": "batch", "attr": "reqs"},
    "plus": 1,
}
_SGL2_ACCEPT = {"target": _SGL2_FBG, "ret": "accept_lens", "reduce": "mean"}


def _sgl_graphs(v1: bool, v2: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if v2:
        out += [
            {"phase": "verify", "target": _SGL2_FBG, "ret": "can_run_cuda_graph"},
            {
                "phase": "draft",
                "within": f"{_SGL_DRAFT_CG}.execute",
                "of": [f"{_SGL2}:EagleDraftWorker.draft"],
            },
            {
                "phase": "extend",
                "within": f"{_SGL_EXTEND_CG}.execute",
                "of": [f"{_SGL2}:EagleDraftWorker._draft_extend_for_decode"],
            },
        ]
    if v1:
        out += [
            {"phase": "verify", "target": _SGL1_FBG, "ret": "can_run_cuda_graph"},
            {"phase": "draft", "within": f"{_SGL_DRAFT_CG}.replay", "of": [f"{_SGL1}.draft"]},
            {
                "phase": "extend",
                "within": f"{_SGL_EXTEND_CG}.replay",
                "of": [f"{_SGL1}.forward_draft_extend_after_decode"],
            },
        ]
    return out


# SGLang's plain decode, the same instrument as its speculative presets (and as vllm-decode): the
# target's TpModelWorker.forward_batch_generation, its prefill calls left out by forward mode.
_SGL_TP = "sglang.srt.managers.tp_worker:TpModelWorker.forward_batch_generation"
_SGL_DECODE_ONLY = {
    "phase": "decode",
    "pos": 1,
    "kw": ["batch", "model_worker_batch", "forward_batch"],
    "attr": "forward_mode",
    "method": "is_decode",
}

# Each preset names the functions of one released version, read from its wheel (docs/engine.md has
# the files and the call order; tests/test_engine_presets.py checks them against those wheels).
VERSIONS = {
    "transformers": ("transformers", "5.24.0"),
    "sglang-eagle": ("sglang", "0.5.23"),
    "sglang-eagle-v1": ("sglang", "0.5.3"),
    "vllm-eagle": ("vllm", "0.33.0"),
    "vllm": ("vllm", "0.33.0"),
    "vllm-decode": ("vllm", "0.33.0"),
    "sglang": ("sglang", "0.5.23"),
    "sglang-decode": ("sglang", "0.5.23"),
}
# Presets that name more than one release's functions: each of these is checked too
# (tests/test_engine_presets.py), every target in at least one of them.
ALSO = {"sglang": [("sglang", "0.5.3")], "sglang-decode": [("sglang", "0.5.3")]}


def _vllm_tokens(phase: str) -> list[dict[str, Any]]:
    """The tokens of the target's forward: V1 `_model_forward(input_ids=...)`, V2
    `execute_model(scheduler_output)`'s total_num_scheduled_tokens."""
    return [
        {"phase": phase, "arg": "input_ids", "of": [_V1_VERIFY]},
        {
            "phase": phase,
            "arg": "scheduler_output",
            "pos": 1,
            "attr": "total_num_scheduled_tokens",
            "of": [_V2_VERIFY],
        },
    ]


PRESETS: dict[str, Targets] = {
    # generation/utils.py GenerationMixin._assisted_decoding: candidate_generator.get_candidates(), the
    # target model's call, then the host reads n_matches and calls update_candidate_strategy().
    "transformers": Targets(
        phases=[
            ("draft", f"{_HF_CG}.get_candidates"),
            ("verify", "transformers.modeling_utils:PreTrainedModel.__call__"),
        ],
        sync=f"{_HF_CG}.update_candidate_strategy",
        accept=[{"target": f"{_HF_CG}.update_candidate_strategy", "arg": "num_matches", "pos": 3, "plus": 1}],
    ),
    # speculative/eagle_worker_v2.py EAGLEWorkerV2.forward_batch_generation (decode): draft_worker.draft(),
    # self.verify(), draft_worker._draft_extend_for_decode(); overlapped, so events are read deferred.
    "sglang-eagle": Targets(
        phases=[
            ("draft", f"{_SGL2}:EagleDraftWorker.draft"),
            ("verify", f"{_SGL2}:EAGLEWorkerV2.verify"),
            ("extend", f"{_SGL2}:EagleDraftWorker._draft_extend_for_decode"),
        ],
        cycle=_SGL2_FBG,
        accept=[dict(_SGL2_ACCEPT)],
        graph=_sgl_graphs(v1=False, v2=True),
    ),
    # speculative/eagle_worker.py EAGLEWorker.forward_batch_generation (decode): draft(), verify(),
    # forward_draft_extend_after_decode().
    "sglang-eagle-v1": Targets(
        phases=[
            ("draft", f"{_SGL1}.draft"),
            ("verify", f"{_SGL1}.verify"),
            ("extend", f"{_SGL1}.forward_draft_extend_after_decode"),
        ],
        cycle=_SGL1_FBG,
        accept=[dict(_SGL1_ACCEPT)],
        graph=_sgl_graphs(v1=True, v2=False),
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
    # Both model runners of one vLLM, and each drafter, whichever the engine imports at run time.
    # V1 (v1/worker/gpu_model_runner.py; CPUModelRunner subclasses it, and CPU builds fall back to it:
    # "Model Runner V2 requires Triton"): execute_model() calls _model_forward() inside
    # set_forward_context(cudagraph_runtime_mode=...), sample_tokens() the RejectionSampler (its
    # SamplerOutput.sampled_token_ids holds the accepted tokens plus the bonus, -1 for rejected
    # places), propose_draft_token_ids() the drafter: NgramProposer.propose for "ngram", the
    # SpecDecodeBaseProposer.propose that EagleProposer (EAGLE, EAGLE-3, MTP) and DraftModelProposer
    # inherit. V2 (v1/worker/gpu/model_runner.py, the GPU default): execute_model() runs the model,
    # replaying its graph through ModelCudaGraphManager.run_fullgraph (FULL) or
    # CudaGraphManager.run_pw_graph (PIECEWISE), eager otherwise; sample() calls
    # RejectionSampler.__call__ (SamplerOutput.num_sampled: accepted + 1 per request); the
    # speculator's propose() (EagleSpeculator and MTPSpeculator inherit TargetDependentARSpeculator's;
    # the n-gram one is NgramGPUSpeculator) replays through CudaGraphManager.run_fullgraph.
    "vllm": Targets(
        phases=[
            ("verify", _V1_VERIFY),
            ("verify", _V2_VERIFY),
            ("reject", "vllm.v1.sample.rejection_sampler:RejectionSampler.forward"),
            ("reject", f"{_V2}.spec_decode.rejection_sampler:RejectionSampler.__call__"),
            ("draft", "vllm.v1.spec_decode.llm_base_proposer:SpecDecodeBaseProposer.propose"),
            ("draft", "vllm.v1.spec_decode.ngram_proposer:NgramProposer.propose"),
            (
                "draft",
                f"{_V2}.spec_decode.target_dependent_ar.speculator:TargetDependentARSpeculator.propose",
            ),
            ("draft", f"{_V2}.spec_decode.ngram.speculator:NgramGPUSpeculator.propose"),
        ],
        accept=[
            {
                "target": "vllm.v1.sample.rejection_sampler:RejectionSampler.forward",
                "ret": "sampled_token_ids",
                "reduce": "count_ne",
                "value": -1,
                "positions": True,
            },
            {
                "target": f"{_V2}.spec_decode.rejection_sampler:RejectionSampler.__call__",
                "ret": "num_sampled",
                "reduce": "mean",
            },
        ],
        graph=_VLLM_GRAPH,
        tokens=_vllm_tokens("verify"),
    ),
    # The same engine without speculation: one decode step per cycle, the same instrument, for
    # `explain RUN --baseline DECODE_RUN` (start it without --speculative-config).
    "vllm-decode": Targets(
        phases=[
            ("decode", _V1_VERIFY),
            ("decode", _V2_VERIFY),
        ],
        graph=[{**g, "phase": "decode" if g["phase"] == "verify" else g["phase"]} for g in _VLLM_GRAPH],
        tokens=_vllm_tokens("decode"),
    ),
    # Both EAGLE workers of SGLang (the spec-v2 one of 0.5.x's overlap scheduler, the v1 one before),
    # whichever the server imports; the batch result carries accept_lens (accepted + 1 per request)
    # and can_run_cuda_graph (whether the target's verify forward ran as a graph).
    "sglang": Targets(
        phases=[
            ("draft", f"{_SGL2}:EagleDraftWorker.draft"),
            ("draft", f"{_SGL1}.draft"),
            ("verify", f"{_SGL2}:EAGLEWorkerV2.verify"),
            ("verify", f"{_SGL1}.verify"),
            ("extend", f"{_SGL2}:EagleDraftWorker._draft_extend_for_decode"),
            ("extend", f"{_SGL1}.forward_draft_extend_after_decode"),
        ],
        cycle=[_SGL2_FBG, _SGL1_FBG],
        accept=[dict(_SGL2_ACCEPT), dict(_SGL1_ACCEPT)],
        graph=_sgl_graphs(v1=True, v2=True),
    ),
    # SGLang without speculation: one decode step per cycle (start it without --speculative-algorithm),
    # for `explain RUN --baseline DECODE_RUN` with one instrument inside SGLang.
    "sglang-decode": Targets(
        phases=[("decode", _SGL_TP)],
        graph=[{"phase": "decode", "ret": "can_run_cuda_graph", "of": [_SGL_TP]}],
        tokens=[{"phase": "decode", "arg": "batch", "pos": 1, "attr": "input_ids"}],
        only=[dict(_SGL_DECODE_ONLY)],
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
    t = Targets(
        list(base.phases),
        base.cycle,
        base.sync,
        [dict(a) for a in base.accept],
        [dict(g) for g in base.graph],
        [dict(x) for x in base.tokens],
        list(base.notes),
        [dict(o) for o in base.only],
    )
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
        t.accept = [{"target": check_target(target, "--accept"), "arg": arg, "pos": None, "plus": 1}]
    return t
