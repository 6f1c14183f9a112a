"""Read an engine's own log: SGLang scheduler decode statistics and vLLM's interval metrics.

Lines understood (all others are skipped and counted):

SGLang, one line per `decode_log_interval` decode steps (default 40), per scheduler rank:
  [2025-06-01 10:00:01 TP0] Decode batch. #running-req: 1, #token: 812, token usage: 0.01,
      accept len: 2.31, cuda graph: True, gen throughput (token/s): 93.80, #queue-req: 0
  [2025-11-20 10:00:01 DP0 TP0] Decode batch, #running-req: 1, #token: 812, token usage: 0.01,
      accept len: 2.31, accept rate: 0.44, cuda graph: True, gen throughput (token/s): 93.80, ...
  (the older "Decode batch." form and the newer "Decode batch," form; "cpu graph" on CPU builds,
  "#full token"/"#swa token" on hybrid models, an optional " [forward_ct]" after "Decode batch")
  and the "Prefill batch" lines, read only to see when a batch starts from an idle server.

vLLM, every log interval (10 s by default):
  Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 81.9 tokens/s,
      Running: 1 reqs, Waiting: 0 reqs, ...                      (V1; V0 has no "Engine NNN:")
  SpecDecoding metrics: Mean acceptance length: 2.31, Accepted throughput: ..., Accepted: 262
      tokens, Drafted: 600 tokens, Per-position acceptance rate: 0.650, 0.420, 0.240, Avg Draft
      acceptance rate: 43.7%                         (and the two older SpecDecoding forms)
  Speculative metrics: Draft acceptance rate: 0.437, ..., Number of speculative tokens: 3,
      Number of accepted tokens: 262, Number of draft tokens: 600, Number of emitted tokens: 762.
                                                     (V0 engine: cumulative counts, so deltas)

Each line is an interval. The first interval after idle (the first of the log or of a rank, one
that follows a prefill into an empty batch or a vLLM line with nothing running, or one after a
gap longer than `idle_gap_s`, plus vLLM's 10 s logging interval for vLLM lines) is
flagged warm-up: its rate divides the tokens of part of an interval by a clock that also ran
while the server sat idle, so it reads low.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

_TS = r"(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)"
_SGL_PREFIX = re.compile(r"\[" + _TS + r"(?P<ranks>(?:\s+[A-Z]{2,3}\d+)*)\s*\]\s*$")
_SGL_DECODE = re.compile(r"Decode batch(?: \[\d+\])?[.,]\s+(?P<rest>#running-req:.*)$")
_SGL_PREFILL = re.compile(r"Prefill batch.*?#running-req: (?P<running>\d+)")
_RANK = re.compile(r"([A-Z]{2,3})(\d+)")
_KV = re.compile(r"\s*([^:,]+?):\s*([^,]*)")

_VLLM_TS = re.compile(r"(?P<md>\d{2}-\d{2}) (?P<hms>\d{2}:\d{2}:\d{2})")
_VLLM_THROUGHPUT = re.compile(
    r"(?:Engine (?P<engine>\d+): )?Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<gen>[\d.]+) tokens/s, Running: (?P<running>\d+) reqs"
)
_NUM = r"([\d.]+|nan)"
_SPEC_HEAD = "SpecDecoding metrics:"
_SPEC_MEAN = re.compile(r"Mean acceptance length: " + _NUM)
_SPEC_ACCEPTED = re.compile(r"Accepted: (\d+) tokens")
_SPEC_DRAFTED = re.compile(r"Drafted: (\d+) tokens")
_SPEC_RATE = re.compile(r"Draft acceptance rate: " + _NUM + "%")
_SPEC_POS = re.compile(r"Per-position acceptance rate: ((?:[\d.]+|nan)(?:, (?:[\d.]+|nan))*)")
_V0_HEAD = "Speculative metrics:"
_V0_FIELDS = {
    "k": re.compile(r"Number of speculative tokens: (\d+)"),
    "accepted": re.compile(r"Number of accepted tokens: (\d+)"),
    "draft": re.compile(r"Number of draft tokens(?: tokens)?: (\d+)"),
    "emitted": re.compile(r"Number of emitted tokens(?: tokens)?: (\d+)"),
}

DEFAULT_IDLE_GAP_S = 5.0
VLLM_LOG_INTERVAL_S = 10.0


@dataclass
class LogParse:
    """Every interval found, in order, with the counts of what was read."""

    intervals: list[dict[str, Any]] = field(default_factory=list)
    lines: int = 0
    skipped: int = 0
    malformed: int = 0
    malformed_lines: list[int] = field(default_factory=list)
    prefill_lines: int = 0
    formats: set[str] = field(default_factory=set)
    ranks: set[str] = field(default_factory=set)

    @property
    def engine(self) -> str | None:
        engines = {f.split("-")[0] for f in self.formats if not f.endswith("prefill")}
        if not engines:
            return None
        return engines.pop() if len(engines) == 1 else "mixed"

    def counts(self) -> dict[str, Any]:
        by_source: dict[str, int] = {}
        for iv in self.intervals:
            by_source[iv["source"]] = by_source.get(iv["source"], 0) + 1
        return {
            "lines": self.lines,
            "intervals": len(self.intervals),
            "by_source": by_source,
            "warmup": sum(1 for iv in self.intervals if iv["warmup"]),
            "prefill_lines": self.prefill_lines,
            "skipped": self.skipped,
            "malformed": self.malformed,
            "malformed_lines": self.malformed_lines[:10],
        }


def _num(text: str) -> float | None:
    """A finite number, or None: "inf" or "Infinity" tok/s would become an ITL of 0.0 ms."""
    text = text.strip().rstrip("%")
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _sgl_time(ts: str) -> float | None:
    try:
        return _dt.datetime.fromisoformat(ts.replace(",", ".").replace("T", " ")).timestamp()
    except ValueError:
        return None


def _vllm_time(line: str) -> float | None:
    m = _VLLM_TS.search(line)
    if not m:
        return None
    try:
        # vLLM prints no year; 2000 is a leap year so 02-29 parses. Only differences are used.
        return _dt.datetime.strptime(f"2000-{m['md']} {m['hms']}", "%Y-%m-%d %H:%M:%S").timestamp()
    except ValueError:
        return None


def _sglang_decode(rest: str) -> dict[str, Any] | None:
    fields = {k.strip(): v.strip() for k, v in _KV.findall(rest)}
    running = _num(fields.get("#running-req", ""))
    gen = _num(fields.get("gen throughput (token/s)", ""))
    if running is None or gen is None:
        return None
    out: dict[str, Any] = {"running_req": int(running), "gen_tok_s": gen}
    for key, name in (
        ("accept len", "accept_len"),
        ("accept rate", "accept_rate"),
        ("#queue-req", "queue_req"),
        ("#token", "tokens_used"),
        ("#full token", "tokens_used"),
        ("token usage", "token_usage"),
        ("full token usage", "token_usage"),
    ):
        if key in fields:
            v = _num(fields[key])
            if v is None:
                return None
            out[name] = v
    graph = fields.get("cuda graph", fields.get("cpu graph"))
    if graph is not None:
        if graph not in ("True", "False"):
            return None
        out["cuda_graph"] = graph == "True"
    return out


class _Idle:
    """Per rank: is the next interval the first after idle?"""

    def __init__(self, gap_s: float) -> None:
        self.gap_s = gap_s
        self.last_t: dict[str, float | None] = {}
        self.after_idle: dict[str, bool] = {}

    def mark_idle(self, rank: str) -> None:
        self.after_idle[rank] = True

    def flag(self, rank: str, t: float | None, extra_gap_s: float = 0.0) -> bool:
        first = rank not in self.last_t
        prev = self.last_t.get(rank)
        gap = t is not None and prev is not None and t - prev > self.gap_s + extra_gap_s
        warm = first or gap or self.after_idle.get(rank, False)
        self.last_t[rank] = t
        self.after_idle[rank] = False
        return warm


@dataclass
class _Reader:
    """What parsing one log shares across its lines: the result so far, the idle state per rank, the
    rank filter and the last V0 totals (V0 prints counts since start: an interval is a difference)."""

    res: LogParse
    idle: _Idle
    want_rank: str | None
    v0_prev: dict[str, int] | None = None

    def skip(self) -> None:
        self.res.skipped += 1

    def malformed(self, n: int) -> None:
        self.res.malformed += 1
        self.res.malformed_lines.append(n)


def _rank_ids(label: str) -> dict[str, int]:
    """tp_rank / dp_rank of an SGLang rank label such as "DP1 TP1"."""
    ids: dict[str, int] = {}
    for key, prefix in (("tp_rank", "TP"), ("dp_rank", "DP")):
        m = re.search(prefix + r"(\d+)", label)
        if m:
            ids[key] = int(m.group(1))
    return ids


def _sglang_decode_interval(
    rd: _Reader, line: str, n: int, label: str, pm: re.Match[str] | None, rest: str
) -> dict[str, Any] | None:
    fields = _sglang_decode(rest)
    if fields is None:
        rd.malformed(n)
        return None
    head = line[line.find("Decode batch") :].split(" #", 1)[0].rstrip()
    rd.res.formats.add("sglang-decode-dot" if head.endswith(".") else "sglang-decode-comma")
    rd.res.ranks.add(label)
    iv: dict[str, Any] = {
        "source": "sglang-decode",
        "line": n,
        "rank": label,
        "time": pm["ts"] if pm else None,
        **fields,
        **_rank_ids(label),
    }
    iv["warmup"] = rd.idle.flag(label, _sgl_time(pm["ts"]) if pm else None)
    if fields["running_req"] == 0 or fields["gen_tok_s"] <= 0:
        rd.idle.mark_idle(label)
    return iv


def _sglang_line(rd: _Reader, line: str, n: int) -> dict[str, Any] | None:
    """An SGLang "Decode batch" line (an interval) or "Prefill batch" line (a batch may start from idle)."""
    cut = line.find("Decode batch") if "Decode batch" in line else line.find("Prefill batch")
    pm = _SGL_PREFIX.search(line[:cut])
    label = " ".join(pm["ranks"].split()) if pm else ""
    if rd.want_rank is not None and label != rd.want_rank:
        rd.skip()
        return None
    dm = _SGL_DECODE.search(line)
    if dm:
        return _sglang_decode_interval(rd, line, n, label, pm, dm["rest"])
    pf = _SGL_PREFILL.search(line)
    if pf:
        rd.res.prefill_lines += 1
        rd.res.formats.add("sglang-prefill")
        if int(pf["running"]) == 0:
            rd.idle.mark_idle(label)
    elif re.search(r"Decode batch(?: \[\d+\])?[.,]", line):
        rd.malformed(n)
    else:
        rd.skip()
    return None


def _vllm_throughput(rd: _Reader, line: str, n: int) -> dict[str, Any] | None:
    """vLLM's "Avg generation throughput" line; one with nothing running marks the engine idle."""
    m = _VLLM_THROUGHPUT.search(line)
    if not m:
        rd.malformed(n)
        return None
    label = f"engine{int(m['engine'])}" if m["engine"] else "engine0"
    gen, running = float(m["gen"]), int(m["running"])
    rd.res.formats.add("vllm-throughput")
    rd.res.ranks.add(label)
    if running == 0 or gen <= 0:
        rd.idle.mark_idle(label)
        rd.skip()  # an idle interval says nothing about speed
        return None
    return {
        "source": "vllm-throughput",
        "line": n,
        "rank": label,
        "gen_tok_s": gen,
        "running_req": running,
        "prompt_tok_s": float(m["prompt"]),
        # vLLM prints every 10 s (its default interval) while busy: only a longer gap is idle.
        "warmup": rd.idle.flag(label, _vllm_time(line), extra_gap_s=VLLM_LOG_INTERVAL_S),
    }


def _vllm_spec(rd: _Reader, line: str, n: int) -> dict[str, Any] | None:
    """vLLM's "SpecDecoding metrics" line: counts of one interval."""
    body = line[line.find(_SPEC_HEAD) :]
    acc, dra = _SPEC_ACCEPTED.search(body), _SPEC_DRAFTED.search(body)
    if not acc or not dra:
        rd.malformed(n)
        return None
    mean, rate, pos = _SPEC_MEAN.search(body), _SPEC_RATE.search(body), _SPEC_POS.search(body)
    iv: dict[str, Any] = {
        "source": "vllm-spec",
        "line": n,
        "rank": "",
        "accepted": int(acc.group(1)),
        "drafted": int(dra.group(1)),
    }
    if mean and _num(mean.group(1)) is not None:
        iv["accept_len"] = _num(mean.group(1))
    if iv["drafted"] > 0:
        iv["accept_rate"] = iv["accepted"] / iv["drafted"]
    elif rate and _num(rate.group(1)) is not None:
        iv["accept_rate"] = (_num(rate.group(1)) or 0.0) / 100.0
    if pos:
        iv["per_position"] = [_num(x) for x in pos.group(1).split(",")]
    # The drafts count is not printed. Every draft proposes k tokens and the per-position list
    # has k entries, so drafts = drafted / k; else the rounded mean length gives it back.
    if pos and iv["drafted"]:
        iv["drafts"] = iv["drafted"] / len(iv["per_position"])
    elif iv.get("accept_len") and iv["accept_len"] > 1.0:
        iv["drafts"] = iv["accepted"] / (iv["accept_len"] - 1.0)
    iv["warmup"] = False  # counts of tokens, not rates over wall time
    rd.res.formats.add("vllm-specdecoding")
    return iv


def _vllm_v0(rd: _Reader, line: str, n: int) -> dict[str, Any] | None:
    """The V0 engine's "Speculative metrics" line: totals since start, so an interval is a difference."""
    body = line[line.find(_V0_HEAD) :]
    got = {k: rx.search(body) for k, rx in _V0_FIELDS.items()}
    if not all(got.values()):
        rd.malformed(n)
        return None
    cur = {k: int(m.group(1)) for k, m in got.items() if m}
    rd.res.formats.add("vllm-speculative-v0")
    prev, rd.v0_prev = rd.v0_prev, cur
    if prev is None or cur["draft"] < prev["draft"]:  # the first line, or the engine restarted
        rd.skip()
        return None
    d_draft, d_acc, d_emit = (cur[k] - prev[k] for k in ("draft", "accepted", "emitted"))
    if d_draft <= 0 or cur["k"] <= 0:
        rd.skip()
        return None
    steps = d_draft / cur["k"]
    return {
        "source": "vllm-spec",
        "line": n,
        "rank": "",
        "accepted": d_acc,
        "drafted": d_draft,
        "accept_len": d_emit / steps,
        "drafts": steps,
        "accept_rate": d_acc / d_draft,
        "warmup": False,
    }


# One parser per family of log lines, tried in this order: the first whose marks are in a line reads it.
_FAMILIES: tuple[tuple[tuple[str, ...], Callable[[_Reader, str, int], dict[str, Any] | None]], ...] = (
    (("Decode batch", "Prefill batch"), _sglang_line),
    (("Avg generation throughput:",), _vllm_throughput),
    ((_SPEC_HEAD,), _vllm_spec),
    ((_V0_HEAD,), _vllm_v0),
)


def parse_lines(
    lines: Iterable[str], *, idle_gap_s: float = DEFAULT_IDLE_GAP_S, rank: str | None = None
) -> LogParse:
    """Parse log lines. `rank` keeps only SGLang lines of that rank label ("TP0", "DP1 TP1")."""
    rd = _Reader(LogParse(), _Idle(idle_gap_s), " ".join(rank.split()) if rank else None)
    for n, raw in enumerate(lines, start=1):
        rd.res.lines += 1
        line = raw.rstrip("\r\n")
        parser = next((f for marks, f in _FAMILIES if any(m in line for m in marks)), None)
        if parser is None:
            rd.skip()
            continue
        iv = parser(rd, line, n)
        if iv is not None:
            rd.res.intervals.append(iv)
    return rd.res


# What ingest-log reads of one file (docs/server.md): larger files are refused before reading, and a
# "line" longer than MAX_LINE (a sparse file of NULs has none) is read in pieces of that size, so memory
# stays bounded whatever the file holds; no engine writes a metrics line of 64 KiB.
MAX_LOG_BYTES = 1 << 30
MAX_LINE = 1 << 16


def _bounded_lines(f: Any) -> Iterable[str]:
    while line := f.readline(MAX_LINE):
        yield line


def parse_file(path: str, **kw: Any) -> LogParse:
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse_lines(_bounded_lines(f), **kw)
