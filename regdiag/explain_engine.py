"""What explain reads of the engine a run used: which engine (its phases are priced as that engine
runs them) and what the engine did rather than what it was asked (each launch's engine_config)."""

from __future__ import annotations

from typing import Any

VLLM_DRAFT_NOTE = (
    "vLLM's draft phase includes its extend pass: priced as one draft forward over the verified tokens "
    "(with the fc over the target's hidden states) and num_steps - 1 forwards of one token, its "
    "collectives likewise"
)


def run_engine(config: dict[str, Any], launches: list[dict[str, Any]]) -> str:
    """Which engine ran: an engine record's preset, else its launches' engine_config, else SGLang."""
    preset = str(config.get("engine_preset") or "")
    if preset.startswith(("vllm", "sglang")):
        return "vllm" if preset.startswith("vllm") else "sglang"
    said = {la["engine_config"].get("engine") for la in launches if isinstance(la.get("engine_config"), dict)}
    return "vllm" if said == {"vllm"} else "sglang"


def engine_said(launches: list[dict[str, Any]]) -> list[str]:
    """What the engine did, not what it was asked (each launch's engine_config): the graphs at run
    time, an all-reduce it refused, a variable one NCCL worker lacked; once each."""
    out: list[str] = []
    for la in launches:
        cfg = la.get("engine_config") if isinstance(la.get("engine_config"), dict) else {}
        said = [x for x in cfg.get("graphs_at_run_time") or [] if isinstance(x, str)]
        if cfg.get("all_reduce_refused"):
            said.append(
                f"all-reduce: {cfg.get('all_reduce_asked')} asked, {cfg.get('all_reduce')} ran "
                f"(the engine: {cfg['all_reduce_refused']})"
            )
        missing = (cfg.get("nccl") or {}).get("missing_on_ranks") or {}
        said += [f"NCCL: {k} not in the environment of {', '.join(v)}" for k, v in missing.items()]
        out += [f"the engine: {x}" for x in said if f"the engine: {x}" not in out]
    return out


def all_reduce_path(launches: list[dict[str, Any]]) -> str | None:
    """The all-reduce the engine ran, where every launch's engine_config says the same."""
    cfgs = [la["engine_config"] for la in launches if isinstance(la.get("engine_config"), dict)]
    paths = {c.get("all_reduce") for c in cfgs}
    return paths.pop() if len(paths) == 1 and None not in paths else None
