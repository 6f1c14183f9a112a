"""The engine's configuration in effect, read from what it prints while it starts and runs: the
`engine_config` section of an engine or server launch record (docs/engine.md, "The configuration in
effect").

What is read, per engine (every other line is passed over):

vLLM (V1), the engine core's start-up line and the lines that report a choice:
  Initializing a V1 LLM engine (v0.32.0) with config: model='...', speculative_config=...,
      dtype=torch.float32, tensor_parallel_size=1, ..., enforce_eager=True, ...,
      enable_prefix_caching=True, ...                              -> version, settings.*
  Using FLASH_ATTN attention backend out of potential backends: [...] / Using Flash Attention
      backend on V1 engine. / Using CPU attention backend / Using TORCH_SDPA backend.
                                                                   -> attention_backend
  Using AttentionBackendEnum.FLASH_ATTN backend.                  -> attention_backend (0.28+)
  Using FLASHINFER_CUTLASS Fp8 MoE backend out of potential backends: [...] / Using 'MARLIN' NvFp4
      MoE backend ... / Using 'MARLIN' WNA16 MoE backend ... / Using TRITON backend for Unquantized
      MoE                                                          -> moe_backend, moe_quant
  Loading drafter model...          the backend lines after it are the draft's: attention_backend.draft,
                                    draft_moe_backend
  Custom allreduce is disabled ... / vLLM is using nccl==2.21.5 / ... SymmMem ... / flashinfer
      allreduce fusion ...                                          -> all_reduce
  Capturing CUDA graphs (mixed prefill-decode, PIECEWISE) ...      -> graphs.captured (every one)
  CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention backend
      FlashInferBackend (...); setting cudagraph_mode=PIECEWISE    -> graphs.mode (what ran),
                                                                      graphs.mode_asked, graphs.downgraded
  Engine 000: ..., Prefix cache hit rate: 45.0%                     -> prefix_cache_hit_rate (last)
SGLang:
  server_args=ServerArgs(model_path='...', attention_backend='fa3', ..., disable_cuda_graph=False,
      speculative_algorithm='EAGLE3', ..., moe_runner_backend='auto', ...)  -> settings.*, from which
      attention_backend (decode, and verify: the prefill backend unless speculative_attention_mode
      is 'decode'), moe_backend, all_reduce, graphs
  Capture cuda graph begin / Capture draft cuda graph begin / Capture draft extend cuda graph begin
                                                                   -> graphs.{decode,draft,extend}
  Prefill batch. ..., #new-token: 10, #cached-token: 30, ...       -> prefix cache hits (token share)
  Decode batch. ..., cuda graph: True, ...                          -> graphs_run.decode (the share of
                                                                      decode lines that ran a graph)
Both engines (the same custom_all_reduce.py lineage):
  Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. ...
                                  -> all_reduce is what ran (NCCL), all_reduce_asked what the settings
                                     asked, all_reduce_refused the engine's reason
NCCL (NCCL_DEBUG=INFO; regdiag adds it to a --launch-cmd unless it is set, and keeps those lines
out of what it shows):
  NCCL version 2.21.5+cuda12.4                                     -> nccl.version
  NCCL INFO NCCL_ALGO set by environment to Ring                   -> nccl.set_by_environment
  NCCL INFO AllReduce: 4096 Bytes -> Algo 1 proto 2 time 12.3      -> nccl.tuning (NCCL_DEBUG_SUBSYS=TUNING)
  NCCL INFO Channel 00/0 : 8[0] -> 15[7] via P2P/IPC/read          -> nccl.transports (P2P/IPC, SHM/direct,
                                                                      NET/Socket, NET/IB, ...)
  host:pid:tid [dev] NCCL INFO ...  the process that printed it: a variable one worker's NCCL read from
                                    its environment and another's did not is nccl.missing_on_ranks

Each rank prints its own lines; what the ranks disagree on is kept per rank under `ranks_differ`.
Standard library only.
"""

from __future__ import annotations

import re
from typing import Any

_VLLM_INIT = re.compile(r"Initializing a V\d LLM engine \(v(?P<version>[^)]+)\) with config: (?P<cfg>.*)$")
_SGL_ARGS = re.compile(r"server_args=(?:ServerArgs\((?P<cfg>.*)\)|(?P<dict>\{.*\}))\s*$")
_VLLM_ATTN = [
    re.compile(r"Using (?P<b>[A-Z0-9_]+) attention backend"),
    re.compile(r"Using (?P<b>[\w .-]+?) backend on V1 engine"),
    re.compile(r"Using (?P<b>[A-Za-z0-9_ ]+?) (?:attention )?backend\.?\s*$"),
]
_MOE = re.compile(r"Using (?P<b>[\w .-]+?) (?:MoE backend|backend for [\w ]*MoE)", re.I)
# vLLM's MoE oracles (fp8.py, NvFp4 and WNA16 alike): "Using FLASHINFER_CUTLASS Fp8 MoE backend out of
# potential backends: [...]", newer ones quote the name: "Using 'MARLIN' NvFp4 MoE backend ...".
_MOE_QUANT = re.compile(r"Using '?(?P<b>[A-Z][A-Z0-9_]*)'? (?P<q>[A-Za-z][\w]*) MoE backend")
# vLLM 0.28+ when a backend is chosen by name: "Using AttentionBackendEnum.FLASH_ATTN backend."; the
# vision encoder's ("Using backend AttentionBackendEnum.X for vit attention", "... for
# MMEncoderAttention") is not the decoder's.
_ATTN_ENUM = re.compile(r"Using (?:backend )?AttentionBackendEnum\.(?P<b>\w+)(?P<rest>.*)$")
_DRAFTER = "Loading drafter model"
_GRAPH_DOWNGRADE = re.compile(
    r"CUDAGraphMode\.(?P<asked>\w+) is not supported with (?P<why>.+?); setting cudagraph_mode=(?P<run>\w+)"
)
_AR_REFUSED = re.compile(r"Custom allreduce is disabled because (?P<why>.+?)\.(?: |$)")
_SGL_DECODE_GRAPH = re.compile(r"Decode batch.*\b(?:cuda|cpu) graph: (?P<g>True|False)")
_NCCL_WHO = re.compile(r"^\s*(?P<host>[\w.-]+):\d+:\d+ \[(?P<dev>\d+)\] NCCL")
_NCCL_TRANSPORT = re.compile(r"NCCL INFO (?:Channel|Ring) \d+(?:/\d+)? : .*? via (?P<t>[\w]+/[\w]+)")
_ALL_REDUCE = [
    (re.compile(r"Custom allreduce is disabled"), "custom all-reduce disabled"),
    (re.compile(r"symm(?:etric)?[ _-]?mem", re.I), "symm-mem"),
    (re.compile(r"flashinfer[\w ]*allreduce fusion|allreduce[\w ]*fusion", re.I), "flashinfer fusion"),
    (re.compile(r"quick[ _]?all[ _-]?reduce", re.I), "quick all-reduce"),
    (re.compile(r"vLLM is using nccl==(?P<v>[\d.]+)"), "pynccl"),
]
_GRAPH_CAPTURE = re.compile(r"Capturing CUDA graphs? \((?P<what>[^)]*)\)")
# 0.5.3: "Capture cuda graph begin" (the target's, decode and verify), "Capture draft cuda graph
# begin", "Capture draft extend cuda graph begin"; 0.5.23: "Capture target verify CUDA graph begin",
# "Capture target decode ...", "Capture target prefill ...", "Capture draft decode ...", "Capture
# draft extend ..."; "cpu graph" / "CPU graph" on CPU builds.
_SGL_CAPTURE = re.compile(
    r"Capture (?:(?P<what>(?:target|draft)(?: (?:verify|decode|prefill|extend))?) )?"
    r"(?:cuda|cpu|CUDA|CPU|NPU|XPU|MUSA) graph begin"
)
_SGL_GRAPH_PHASES = {
    None: ("decode", "verify"),
    "target": ("decode", "verify"),
    "target verify": ("decode", "verify"),  # a speculative target decodes by verifying
    "target decode": ("decode",),
    "target prefill": ("prefill",),
    "draft": ("draft",),
    "draft decode": ("draft",),
    "draft extend": ("extend",),
}
# Inside the vLLM start-up line's nested configs: the graph mode and the MoE kernel it was asked for.
_VLLM_NESTED = {
    "cudagraph_mode": re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)"),
    "compilation_mode": re.compile(r"'mode': <CompilationMode\.(\w+)"),
    "moe_backend": re.compile(r"\bmoe_backend='([^']*)'"),
}
_PREFIX_RATE = re.compile(r"Prefix cache hit rate: (?P<r>[\d.]+)%")
_SGL_PREFILL = re.compile(r"#new-token: (?P<new>\d+), #cached-token: (?P<cached>\d+)")
_NCCL_VERSION = re.compile(r"NCCL version (?P<v>[\w.+-]+)")
_NCCL_ENV = re.compile(r"NCCL INFO (?P<k>NCCL_\w+) set by environment to (?P<v>[^\s]+?)\.?\s*$")
# NCCL_DEBUG_SUBSYS=TUNING, rank 0, per collective call: "AllGather: 37756928 Bytes -> Algo 1 proto 2
# time 2860.2" (2.1x-2.2x; some print no operation) and "AllReduce:     4096 Bytes -> Algo TREE proto LL
# channel{Lo..Hi}={0..1}" (newer, names).
_NCCL_TUNING = re.compile(
    r"NCCL INFO\s+(?:(?P<op>\w+):\s+)?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
)
NCCL_ALGOS = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
NCCL_PROTOS = ("LL", "LL128", "SIMPLE")
_RANK = re.compile(r"(?:\[(?P<nccl>\d+)\] NCCL|\b(?:TP|rank=|Worker_TP)(?P<tp>\d+))")
_KV = re.compile(r"(\w+)=")

# The settings of the start-up line kept for the record (a diff names each that changed).
VLLM_KEYS = (
    "dtype",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "quantization",
    "enforce_eager",
    "kv_cache_dtype",
    "device_config",
    "enable_prefix_caching",
    "chunked_prefill_enabled",
    "enable_chunked_prefill",
    "disable_custom_all_reduce",
    "max_seq_len",
    "speculative_config",
    "async_scheduling",
)
SGLANG_KEYS = (
    "tp_size",
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "attention_backend",
    "decode_attention_backend",
    "prefill_attention_backend",
    "speculative_attention_mode",
    "sampling_backend",
    "moe_runner_backend",
    "moe_a2a_backend",
    "disable_cuda_graph",
    "cuda_graph_max_bs",
    "disable_custom_all_reduce",
    "enable_flashinfer_allreduce_fusion",
    "enable_symm_mem",
    "disable_radix_cache",
    "chunked_prefill_size",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "enable_two_batch_overlap",
    "disable_overlap_schedule",
    "torch_compile_max_bs",
    "enable_torch_compile",
)
MAX_TUNING = 64


def split_settings(text: str) -> dict[str, str]:
    """`a=1, b='x, y', c={...}` into {name: value text}: commas inside quotes or brackets do not split."""
    out: dict[str, str] = {}
    depth, quote, start, key = 0, "", 0, None
    i = 0
    while i <= len(text):
        ch = text[i] if i < len(text) else ","
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "=" and depth == 0 and key is None:
            key = text[start:i].strip()
            start = i + 1
        elif ch == "," and depth <= 0:
            if key:
                out[key] = text[start:i].strip()
            key, start, depth = None, i + 1, 0
        i += 1
    return out


def dict_settings(text: str) -> dict[str, str]:
    """SGLang 0.5.2x logs `server_args={'model_path': '...', ...}` (a dict's repr): {name: value text}."""
    return {m[1]: m[2] for m in _DICT_ITEM.finditer(text)}


_DICT_ITEM = re.compile(r"'(\w+)': ('(?:[^'\\]|\\.)*'|[^,{}\[\]]+)")


def _unquote(v: str) -> Any:
    v = v.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    if v in ("True", "False"):
        return v == "True"
    if v == "None":
        return None
    try:
        return int(v)
    except ValueError:
        return v


class EngineConfigReader:
    """Fed every line of the engine's output (`feed`); `result()` is the launch's engine_config."""

    def __init__(self) -> None:
        self.engine: str | None = None
        self.version: str | None = None
        self.settings: dict[str, Any] = {}
        self.per_rank: dict[str, dict[str, Any]] = {}
        self.attention: dict[str, str] = {}  # "target" / "draft": the lines before / after the drafter loads
        self.moe: dict[str, tuple[str, str | None]] = {}
        self.in_draft = False
        self.all_reduce: list[str] = []
        self.ar_refused: str | None = None
        self.graphs: dict[str, Any] = {}
        self.captured: list[str] = []
        self.downgrade: dict[str, str] | None = None
        self.decode_graph = [0, 0]  # SGLang decode lines that ran a graph, all decode lines
        self.prefix_rate: float | None = None
        self.prefix_tokens = [0, 0]  # SGLang prefills: cached, all
        self.nccl_version: str | None = None
        self.nccl_env: dict[str, str] = {}
        self.nccl_env_by_rank: dict[str, dict[str, str]] = {}
        self.transports: set[str] = set()
        self.tuning: dict[tuple[str, int], dict[str, Any]] = {}
        self.lines = 0

    def is_nccl(self, line: str) -> bool:
        return " NCCL INFO " in line or "NCCL version" in line

    def feed(self, line: str) -> None:
        if "NCCL" in line and self._nccl(line):
            return
        if m := _VLLM_INIT.search(line):
            self.engine, self.version = "vllm", m["version"]
            raw = split_settings(m["cfg"])
            raw.update({k: repr(x[1]) for k, rx in _VLLM_NESTED.items() if (x := rx.search(m["cfg"]))})
            self._settings(raw, (*VLLM_KEYS, *_VLLM_NESTED), line)
        elif m := _SGL_ARGS.search(line):
            self.engine = "sglang"
            self._settings(
                split_settings(m["cfg"]) if m["cfg"] else dict_settings(m["dict"]), SGLANG_KEYS, line
            )
        elif _DRAFTER in line:
            self.in_draft = True
        elif m := _GRAPH_DOWNGRADE.search(line):
            self.downgrade = {"asked": m["asked"], "run": m["run"], "why": m["why"].strip()}
        elif m := _GRAPH_CAPTURE.search(line):
            self.graphs["captured"] = m["what"]
            if m["what"] not in self.captured:
                self.captured.append(m["what"])
        elif m := _SGL_CAPTURE.search(line):
            for ph in _SGL_GRAPH_PHASES.get(m["what"], ()):
                self.graphs[ph] = True
        elif m := _PREFIX_RATE.search(line):
            self.prefix_rate = float(m["r"]) / 100
        elif m := _SGL_PREFILL.search(line):
            self.prefix_tokens[0] += int(m["cached"])
            self.prefix_tokens[1] += int(m["cached"]) + int(m["new"])
        elif m := _SGL_DECODE_GRAPH.search(line):
            self.decode_graph[0] += m["g"] == "True"
            self.decode_graph[1] += 1
        elif m := _ATTN_ENUM.search(line):
            if "vit" in m["rest"] or "Encoder" in m["rest"]:
                return
            self.attention.setdefault(self._whose(), m["b"])
        elif m := _MOE_QUANT.search(line):
            self.moe.setdefault(self._whose(), (m["b"], m["q"]))
        elif m := _MOE.search(line):
            self.moe.setdefault(self._whose(), (m["b"].strip(), None))
        elif "backend" in line and (b := _attention(line)):
            self.attention.setdefault(self._whose(), b)
        else:
            if m := _AR_REFUSED.search(line):
                self.ar_refused = self.ar_refused or m["why"].strip()
            for rx, name in _ALL_REDUCE:
                if rx.search(line) and name not in self.all_reduce:
                    self.all_reduce.append(name)
                    break
            else:
                if not self.ar_refused:
                    return
        self.lines += 1

    def _whose(self) -> str:
        return "draft" if self.in_draft else "target"

    def _settings(self, raw: dict[str, str], keys: tuple[str, ...], line: str) -> None:
        got = {k: _unquote(raw[k]) for k in keys if k in raw}
        rank = _rank(line)
        self.per_rank.setdefault(rank, {}).update(got)
        for k, v in got.items():
            self.settings.setdefault(k, v)

    def _nccl(self, line: str) -> bool:
        """An NCCL line: read, True. Another line that names NCCL (an engine's own): False."""
        who = _NCCL_WHO.search(line)
        rank = f"{who['host']} [{who['dev']}]" if who else None
        if rank is not None:
            self.nccl_env_by_rank.setdefault(rank, {})
        if m := _NCCL_ENV.search(line):
            self.nccl_env[m["k"]] = m["v"]
            if rank is not None:
                self.nccl_env_by_rank[rank][m["k"]] = m["v"]
        elif m := _NCCL_TUNING.search(line):
            key = (m["op"] or "?", int(m["bytes"]))
            if key in self.tuning or len(self.tuning) < MAX_TUNING:
                algo, proto = _named(m["algo"], NCCL_ALGOS), _named(m["proto"], NCCL_PROTOS)
                self.tuning[key] = {"op": key[0], "bytes": key[1], "algo": algo, "proto": proto}
        elif m := _NCCL_TRANSPORT.search(line):
            self.transports.add(m["t"])
        elif m := _NCCL_VERSION.search(line):
            self.nccl_version = self.nccl_version or m["v"]
        else:
            return self.is_nccl(line)
        self.lines += 1
        return True

    def result(self) -> dict[str, Any] | None:
        """The section, or None when the engine printed nothing this reader knows."""
        if not self.lines:
            return None
        s = self.settings
        out: dict[str, Any] = {"engine": self.engine, "version": self.version}
        if self.engine == "sglang":
            decode = s.get("decode_attention_backend") or s.get("attention_backend")
            prefill = s.get("prefill_attention_backend") or s.get("attention_backend")
            verify = decode if s.get("speculative_attention_mode") == "decode" else prefill
            out["attention_backend"] = {"decode": decode, "verify": verify}
            out["moe_backend"] = s.get("moe_runner_backend")
            out["all_reduce"] = _sglang_all_reduce(s)
            out["graphs"] = self._sglang_graphs(s)
        else:
            self._vllm_backends(out, s)
            ar = list(self.all_reduce)
            if s.get("disable_custom_all_reduce") is True and "custom all-reduce disabled" not in ar:
                ar.insert(0, "custom all-reduce disabled")
            out["all_reduce"] = ", ".join(ar) or None
            out["graphs"] = self._vllm_graphs(s)
        self._all_reduce_ran(out)
        if self.decode_graph[1]:
            out["graphs_run"] = {"decode": round(self.decode_graph[0] / self.decode_graph[1], 4)}
        out["speculative"] = _speculative(s)
        out["prefix_cache_hit_rate"] = self.prefix_rate
        if self.prefix_rate is None and self.prefix_tokens[1]:
            out["prefix_cache_hit_rate"] = round(self.prefix_tokens[0] / self.prefix_tokens[1], 4)
        out["nccl"] = {
            "version": self.nccl_version,
            "set_by_environment": dict(sorted(self.nccl_env.items())),
            "tuning": [self.tuning[k] for k in sorted(self.tuning)],
        }
        if self.transports:
            out["nccl"]["transports"] = sorted(self.transports)
        if missing := _missing_on_ranks(self.nccl_env_by_rank):
            out["nccl"]["missing_on_ranks"] = missing
        out["settings"] = dict(sorted(s.items()))
        differ = _ranks_differ(self.per_rank)
        if differ:
            out["ranks_differ"] = differ
        return out

    def _sglang_graphs(self, s: dict[str, Any]) -> dict[str, Any] | None:
        """The graphs it captured (a phase with none runs eagerly); before the capture lines are seen,
        what disable_cuda_graph asked for."""
        if self.graphs:
            out = {ph: bool(self.graphs.get(ph)) for ph in ("decode", "verify", "draft", "extend")}
            if self.graphs.get("prefill"):
                out["prefill"] = True
            return out
        if "disable_cuda_graph" in s:
            graphed = s.get("disable_cuda_graph") is False
            return {ph: graphed for ph in ("decode", "verify", "draft", "extend")}
        return None

    def _vllm_backends(self, out: dict[str, Any], s: dict[str, Any]) -> None:
        """The target's attention and MoE backends, and the draft's where its own lines say."""
        target, draft = self.attention.get("target"), self.attention.get("draft")
        out["attention_backend"] = {"decode": target, "verify": target} if target else None
        if draft:
            out["attention_backend"] = {**(out["attention_backend"] or {}), "draft": draft}
        moe = self.moe.get("target")
        out["moe_backend"] = moe[0] if moe else s.get("moe_backend")
        if moe and moe[1]:
            out["moe_quant"] = moe[1]
        if "draft" in self.moe:
            out["draft_moe_backend"] = self.moe["draft"][0]

    def _vllm_graphs(self, s: dict[str, Any]) -> dict[str, Any] | None:
        """What ran: the mode asked, unless the engine said it set another (then both, and why)."""
        mode = s.get("cudagraph_mode")
        if self.downgrade is not None:
            run = self.downgrade["run"]
            graphed = run != "NONE" and s.get("enforce_eager") is not True
            out: dict[str, Any] = {"decode": graphed, "verify": graphed, "mode": run}
            out["mode_asked"] = mode or self.downgrade["asked"]
            d = self.downgrade
            out["downgraded"] = f"{d['asked']} asked, {run} run: not supported with {d['why']}"
        elif mode is None and s.get("enforce_eager") is None:
            out = None if not self.captured else {"decode": True, "verify": True, "mode": mode}
        else:
            graphed = s.get("enforce_eager") is not True and mode not in (None, "NONE")
            out = {"decode": graphed, "verify": graphed, "mode": mode}
        if self.captured and out is not None:
            out["captured"] = self.captured[-1] if len(self.captured) == 1 else list(self.captured)
            if self.downgrade is None:
                out["decode"] = out["verify"] = True
        return out

    def _all_reduce_ran(self, out: dict[str, Any]) -> None:
        """A custom all-reduce the engine refused at start runs as NCCL: say what ran, what was asked and
        why, and over which NCCL transport where NCCL said (P2P/IPC over PCIe is a path too)."""
        if self.ar_refused is None:
            return
        via = f" via {', '.join(sorted(self.transports))}" if self.transports else ""
        asked = out.get("all_reduce")
        out["all_reduce"] = f"nccl{via}"
        refused = (None, "custom", "custom all-reduce disabled")
        out["all_reduce_asked"] = "custom" if asked in refused else asked
        out["all_reduce_refused"] = self.ar_refused


def _missing_on_ranks(by_rank: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    """{variable: the NCCL processes that did not read it} where some did: one worker started without a
    variable the others had is the difference between them."""
    if len(by_rank) < 2:
        return {}
    names = {k for env in by_rank.values() for k in env}
    return {
        k: [r for r in sorted(by_rank) if k not in by_rank[r]]
        for k in sorted(names)
        if any(k not in env for env in by_rank.values())
    }


def _named(v: str, names: tuple[str, ...]) -> str:
    """NCCL's algorithm or protocol by name (older NCCL prints its index)."""
    return names[int(v)] if v.isdigit() and int(v) < len(names) else v.upper()


def _attention(line: str) -> str | None:
    for rx in _VLLM_ATTN:
        if m := rx.search(line):
            b = m["b"].strip()
            if "MoE" not in b and "sampl" not in b.lower():
                return b
    return None


def _sglang_all_reduce(s: dict[str, Any]) -> str | None:
    if not s:
        return None
    if s.get("enable_symm_mem"):
        return "symm-mem"
    if s.get("enable_flashinfer_allreduce_fusion"):
        return "flashinfer fusion"
    if s.get("disable_custom_all_reduce") is True:
        return "pynccl"
    return "custom" if "disable_custom_all_reduce" in s else None


def _speculative(s: dict[str, Any]) -> dict[str, Any] | None:
    """The speculative settings: SGLang's speculative_* arguments, or the fields of vLLM's
    SpeculativeConfig(method=..., model=..., num_spec_tokens=...)."""
    spec = {k: v for k, v in s.items() if k.startswith("speculative_") and k != "speculative_config"}
    spec = {k: v for k, v in spec.items() if v is not None}
    cfg = s.get("speculative_config")
    if isinstance(cfg, str) and (m := re.fullmatch(r"\w+\((.*)\)", cfg.strip())):
        spec.update({k: _unquote(v) for k, v in split_settings(m[1]).items()})
    elif cfg not in (None, "None"):
        spec["config"] = cfg
    return spec or None


def _rank(line: str) -> str:
    m = _RANK.search(line)
    return (m["nccl"] or m["tp"]) if m else "0"


def _ranks_differ(per_rank: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    if len(per_rank) < 2:
        return {}
    keys = {k for d in per_rank.values() for k in d}
    return {
        k: {r: d.get(k) for r, d in sorted(per_rank.items())}
        for k in sorted(keys)
        if len({repr(d.get(k)) for d in per_rank.values()}) > 1
    }


def graphs_at_run_time(
    graphs: dict[str, Any] | None, share: dict[str, Any] | None, modes: dict[str, Any] | None = None
) -> list[str]:
    """What the graphs did while the engine ran, phase by phase: the capture lines (or the graph mode
    asked) against the replays the hook saw in each phase (`graph_share`, `graph_modes` of an engine
    launch). A graph captured and never replayed, or a mode asked and another run, is one sentence."""
    g = graphs if isinstance(graphs, dict) else {}
    out = []
    if g.get("downgraded"):
        out.append(f"graphs: {g['downgraded']}")
    for phase, x in sorted((share or {}).items()):
        if not isinstance(x, (int, float)) or isinstance(x, bool):
            continue
        if g.get(phase) is True and x == 0:
            out.append(f"{phase}: CUDA graphs captured, never replayed: the {phase} ran eager in every cycle")
        elif g.get(phase) is True and x < 1:
            out.append(f"{phase}: CUDA graphs replayed in {100 * x:.0f} % of cycles, eager in the rest")
    asked = str(g.get("mode_asked") or g.get("mode") or "")
    for phase, seen in sorted((modes or {}).items()):
        if not isinstance(seen, dict) or not asked.startswith("FULL"):
            continue
        ran = {str(k).rsplit(".", 1)[-1]: v for k, v in seen.items() if isinstance(v, int)}
        other = {k: v for k, v in ran.items() if not k.startswith("FULL")}
        if other:
            said = ", ".join(f"{k} in {v} of {sum(ran.values())} cycles" for k, v in sorted(other.items()))
            out.append(f"{phase}: {asked} asked, ran {said}")
    return out
