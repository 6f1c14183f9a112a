"""nccl-tests results (`all_reduce_perf ... > out.txt`, or its own `-J out.json`): one run record per file,
named as `probe collectives`.

Each size of a test is a metric, named as the collectives probe names it (`ar_64KiB` eager,
`arg_64KiB` under `-G`, `rs_`, `ag_`, `aa_` for the other ops, the op's name for the rest), with busbw
and algbw beside it as that probe's values (`busbw_64KiB`, computed from the time, so never judged on
their own). The time is the column the probe matches: in-place for all-reduce (the probe reduces in
place), out-of-place for the others; in microseconds as nccl-tests prints them (`import_text` makes
them ms). So the record compares with a `probe collectives` record (`probe.measures`) on the config
keys both hold: tp, dtype, ops, modes and sizes. A size printed again in one test (`-N` run cycles)
is one more sample of that launch; a table of several types, reductions or roots (`-d all`, `-o all`,
`-r -1`) is refused, as its sizes would be one metric each.

One test in the file is one launch (one process); the same test several times (a shell loop) is that many
launches; an eager and a `-G` test side by side fill one launch's eager and graph metrics. Lines that are
not nccl-tests' own (a script's `=== RUN` markers, mpirun's chatter) are skipped.

Failed means failed. A test is a failed launch (status "error", no samples, the cause in one line) when a
`#wrong` value is not 0 (nor N/A: `-c 0`), its footer says `# Out of bounds values : N FAILED` (the launch
header's `wrong_values` counts them), a `Test NCCL failure` / `Test CUDA failure` / `Test timeout` / `Test
failure` line appears before its footer (the first is the cause: the failing check, then one trace line per
caller), or its footer (`# Avg bus bandwidth`) never comes (it died; killed, cut, or a -J file that ends
mid-way). A test that died says where: the last size it printed, of the sweep its setup line set out on. The
good tests of such a file still fill launches (the run is "partial"); a file of failed tests only loads as a
"failed" run, which compare refuses to judge. Not failures: `# Avg bus bandwidth : X FAILED`
(NCCL_TESTS_MIN_BW, a verdict on the numbers compare judges), and the ` .. Test failure` trace 2.17.3 on
print after a failed footer (run() returns an error to main's TESTCHECK). A NCCL/CUDA failure line after a
footer is a process that died before its setup line: one more failed launch, its op unknown; a trace line
alone there is passed over.

Formats, from nccl-tests' sources (src/common.cu, src/util.cu, and each op's .cu before 2.13):
- 2.16.7 on print `# Collective test starting: all_reduce_perf` before the setup line; 2.17.4 on print
  `# nccl-tests version 2.19.6 nccl-headers=... nccl-library=...` before that. Before 2.16.7 a test
  starts at its `# nThread 1 nGpus 2 minBytes ... maxBytes ...` line (2.10-2.11 without
  `agg iters`/`graph:`, so a `-G` test of theirs reads as eager); `#  Rank ...` lines count the ranks
  (`#   Rank  0 Pid ...` before 2.13); the column header and the rows are read by the header's names,
  so the extra columns of newer builds (`-I` per-iteration, `-S` timestamps) are passed over.
- The op of a test without the starting line (the binary's name is printed nowhere else) is told
  from what the table shows; `imported.inferred` lists each such test and what it was read as.
  Before 2.13 each op printed its own columns: `redop` (all_reduce, reduce_scatter; alltoall with an
  empty one), `root` (broadcast, scatter, gather), both (reduce), neither (all_gather, sendrecv,
  hypercube). From 2.13 every table has both, with redop `none` for ops that do not reduce and root
  -1 for ops without one. Within those, `size` / (`count` x the type's size) is the rank count for
  ops whose buffers are split per rank (all_gather, reduce_scatter, alltoall, scatter, gather) and 1
  otherwise. What stays ambiguous is read as the first of each pair, and `imported.inferred` says so:
  all_gather or alltoall (2.13-2.16.6; both `none`, -1, split), all_gather or hypercube (2.10-2.11),
  scatter or gather, and all_reduce or sendrecv (2.13-2.16.6: both reduce, -1, unsplit; told apart
  by busbw/algbw, 2(n-1)/n against 1, only beyond 2 ranks). `--from nccl-tests` reads such a file
  the same way (it skips sniffing, not the inference).
- `#wrong` (2.13 on) counts wrong elements per size; 2.10-2.11 print `error`, a largest difference
  that is not a failure by itself, so there only their footer's out-of-bounds count decides.
- `-C 1` (report cputime, 2.13.4 on) renames both time columns `cputime` (`cpu_time` in -J). That is
  the host's time to issue the timed iterations (timer started before the first collective is
  enqueued, read before the stream sync, divided by iters x agg iters; under -G the launch of all
  graphs divided the same way), on rank 0 only: a different quantity from the collective's time. It
  is read as the sample all the same, the config says `"time": "cputime"` (a cputime file compares
  only with cputime files) and the record claims no `measures` (none with `probe collectives`).
  algbw and busbw are still computed from the completed time, not from the cputime: judged on their
  own there, not as derived from it. A file that mixes both timers is refused.
- `-J file.json` (2.17.3 on; JSON_FILE_VERSION 1-3): `args[0]` names the binary, `config.graph` the
  mode, `results[]` one object per size (`out_of_place` / `in_place`: `time` or `cpu_time` in us,
  `alg_bw`, `bus_bw`, `nwrong`), `out_of_bounds` the footer (absent when the test died). `devices`
  holds one entry per process (only its first rank's line is parsed), so the ranks are
  len(devices) x nthreads x ngpus. No nccl-tests version is written (`nccl_version` is NCCL's).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

from regdiag.direction import HIGHER, LOWER, declare
from regdiag.errors import BadInput
from regdiag.importers import launch, new_import
from regdiag.records import UnusableJSON, loads_json
from regdiag.sizes import bw_name

NAME = "nccl-tests"
TITLE = (
    "nccl-tests stdout or -J JSON (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf, ...)"
)
MEASURES = "collectives"  # regdiag probe collectives
START = re.compile(r"^# Collective test starting: (\S+)")
VERSION = re.compile(r"^# nccl-tests version (\S+)")
SETUP = re.compile(r"^# nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+)(?:.*\bgraph: (\d+))?")
SETUP_ANYWHERE = re.compile(r"^# nThread \d+ nGpus \d+ minBytes \d+ maxBytes \d+ ", re.M)
RANK = re.compile(r"^#\s+Rank\s+\d+ ")
OUT_OF_BOUNDS = re.compile(r"^# Out of bounds values\s*:\s*(\d+)\s*(\S*)")
AVG_BUSBW = re.compile(r"^# Avg bus bandwidth\s*:")
# common.h: CUDACHECK / NCCLCHECK print "%s: Test CUDA failure %s:%d '%s'" (NCCL: '%s / %s' from 2.13),
# the timeout watchdog "%s: Test timeout (%ds) %s:%d", TESTCHECK " .. %s pid %d: Test failure %s:%d"
FAILURE = re.compile(r"Test (NCCL|CUDA) failure (\S+?):(\d+)\s*(.*)$")
TIMEOUT = re.compile(r"Test timeout \((\d+)s\) (\S+?):(\d+)")
TRACE = re.compile(r"Test failure (\S+?):(\d+)")
JSON_HEAD = re.compile(r'\A\s*\{\s*"version"\s*:\s*\d+\s*,\s*"start_time"\s*:')
NO_FOOTER = "no footer: the test stopped before its end"
# nccl-tests' test binaries -> the op names and metric prefixes of probes/collectives.py
OPS = {
    "all_reduce_perf": ("all_reduce", "ar"),
    "all_gather_perf": ("all_gather", "ag"),
    "reduce_scatter_perf": ("reduce_scatter", "rs"),
    "alltoall_perf": ("all_to_all", "aa"),
}
DTYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16"}
# bytes per element of nccl-tests' type names (test_typenames; "char" and "int" before NCCL 2)
_TYPES_OF_WIDTH = {
    1: ("int8", "uint8", "char", "f8e4m3", "f8e5m2"),
    2: ("half", "bfloat16"),
    4: ("int32", "uint32", "int", "float"),
    8: ("int64", "uint64", "double"),
}
WORD = {name: width for width, names in _TYPES_OF_WIDTH.items() for name in names}


def sniff(text: str) -> bool:
    if "# Collective test starting:" in text or SETUP_ANYWHERE.search(text):
        return True
    return bool(JSON_HEAD.match(text)) and '"args"' in text


def parse(text: str, source: str) -> list[dict[str, Any]]:
    if text.lstrip().startswith("{"):
        tests, extra = _json_tests(text, source)
    else:
        tests, extra = _tests(text.splitlines(), source), {}
    for t in tests:
        _settle(t, source)
    tests = [t for t in tests if t["rows"] or t["cause"]]  # a finished test without rows says nothing
    if not tests:
        raise BadInput(
            f"{source}: no nccl-tests result table (a '# nThread ...' setup line, its column header and rows)"
        )
    return [_record(tests, source, extra)]


def _new_test(name: str | None, version: str | None, line: int) -> dict[str, Any]:
    op = None
    if name:
        op = OPS.get(name, (name.removesuffix("_perf"),))[0]
    return {
        "test": name,
        "op": op,
        "version": version,
        "line": line,
        "setup": False,
        "mode": "eager",
        "ranks": 0,
        "cols": {},
        "rows": [],
        "out_of_bounds": None,
        "footer": False,
        "failure": None,
        "trace": None,
        "cause": None,
        "inferred": None,
    }


def _tests(lines: list[str], source: str) -> list[dict[str, Any]]:
    """Every test's setup, rows and outcome, in file order."""
    tests: list[dict[str, Any]] = []
    version = None
    cur: dict[str, Any] | None = None
    for n, line in enumerate(lines, 1):
        if m := VERSION.match(line):
            version = m.group(1)
        elif m := START.match(line):
            cur = _new_test(m.group(1), version, n)
            tests.append(cur)
        elif m := SETUP.match(line):
            if cur is None or cur["setup"] or cur["footer"] or cur["failure"]:
                cur = _new_test(None, version, n)  # before 2.16.7 a test starts at its setup line
                tests.append(cur)
            cur["setup"] = True
            cur["mode"] = "graph" if int(m.group(5) or 0) > 0 else "eager"
            cur["bytes"] = (int(m.group(3)), int(m.group(4)))  # the sweep it set out to run
        elif why := _failure(line):
            cause, specific = why
            if cur is None or cur["footer"]:
                if specific:  # a process that died before its first line (the trace alone: see above)
                    cur = _new_test(None, version, n)
                    cur["failure"] = cause
                    tests.append(cur)
            elif specific and cur["failure"] is None:
                cur["failure"] = cause
            elif cur["trace"] is None:
                cur["trace"] = cause
        elif cur is None or cur["footer"]:
            continue
        elif RANK.match(line):
            cur["ranks"] += 1
        elif line.startswith("#") and " size " in line and " count " in line:
            cur["cols"] = _columns(line.lstrip("#").split())
        elif m := OUT_OF_BOUNDS.match(line):
            cur["out_of_bounds"] = int(m.group(1)) or (1 if m.group(2) == "FAILED" else 0)
        elif AVG_BUSBW.match(line):
            cur["footer"] = True
        elif not line.startswith("#") and cur["cols"] and (row := _row(line, cur, source, n)):
            cur["rows"].append(row)
    return tests


def _failure(line: str) -> tuple[str, bool] | None:
    """(the cause in one line, whether it is a failing check rather than a caller's trace), or None."""
    if m := FAILURE.search(line):
        return (
            f"Test {m.group(1)} failure {_file(m.group(2))}:{m.group(3)} {m.group(4).strip()}".strip(),
            True,
        )
    if m := TIMEOUT.search(line):
        return f"Test timeout ({m.group(1)}s) {_file(m.group(2))}:{m.group(3)}", True
    if m := TRACE.search(line):
        return f"Test failure {_file(m.group(1))}:{m.group(2)}", False
    return None


def _file(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def _columns(names: list[str]) -> dict[str, Any]:
    """Token positions from the column-name line: the preamble's, and (time, algbw, busbw, #wrong) of
    each placement; `time` is `cputime` under -C 1."""
    times = [i for i, c in enumerate(names) if c in ("time", "cputime")]
    if not times or "count" not in names:
        return {}
    places = []
    for t in times[:2]:
        wrong = t + 3 if t + 3 < len(names) and names[t + 3] == "#wrong" else None
        places.append((t, t + 1, t + 2, wrong))
    return {
        "count": names.index("count"),
        "type": names.index("type") if "type" in names else 2,
        "redop": names.index("redop") if "redop" in names else None,
        "root": names.index("root") if "root" in names else None,
        "places": places,  # out of place, in place
        "timer": names[times[0]],
    }


def _row(line: str, test: dict[str, Any], source: str, n: int) -> dict[str, Any] | None:
    cols = test["cols"]
    tok = line.split()
    if len(tok) < 2 or not (tok[0].isdigit() and tok[1].isdigit()):
        return None
    r = cols["redop"]
    if r is not None and len(tok) > r and not tok[r][:1].isalpha():
        tok.insert(r, "")  # an empty op name ("%6s" of ""): alltoall before 2.13, hypercube after
    places: list[tuple[float, float, float, float | None] | None] = []
    for t, a, b, w in cols["places"]:
        if len(tok) <= b:
            places.append(None)  # the row stops here: the test died within it
            continue
        try:
            time_us, algbw, busbw = float(tok[t]), float(tok[a]), float(tok[b])
        except ValueError:
            raise BadInput(
                f"{source}: line {n}: a result row whose time or bandwidth is not a number"
            ) from None
        if not time_us > 0:
            raise BadInput(f"{source}: line {n}: a time of {time_us} us")
        wrong = _wrong(tok[w]) if w is not None and len(tok) > w else None
        places.append((time_us, algbw, busbw, wrong))
    if not any(places):
        return None
    root = cols["root"]
    return {
        "bytes": int(tok[0]),
        "count": int(tok[1]),
        "type": tok[cols["type"]] if len(tok) > cols["type"] else "",
        "redop": tok[r] if r is not None else None,
        "root": _int(tok[root]) if root is not None and len(tok) > root else None,
        "places": places,
        "timer": cols["timer"],
    }


def _wrong(token: str) -> float | None:
    """A `#wrong` cell: the count of wrong elements, None for N/A (no check) or what is not a number."""
    try:
        return float(token)
    except ValueError:
        return None


def _int(token: str) -> int | None:
    try:
        return int(token)
    except ValueError:
        return None


def _settle(t: dict[str, Any], source: str) -> None:
    """The op of a test that does not name it, the time each row is read at, and the test's outcome."""
    if len({(r["type"], r["redop"], r["root"]) for r in t["rows"]}) > 1:
        raise BadInput(
            f"{source}: line {t['line']}: one table of several types, reductions or roots "
            "(-d all, -o all, -r -1): regdiag reads one of each per test"
        )
    if t["op"] is None and t["rows"]:
        t["op"], note = _infer(t)
        t["inferred"] = f"line {t['line']}: {t['op']}" + (f" ({note})" if note else "")
    place = 1 if t["op"] == "all_reduce" else 0
    rows, wrong = [], []
    for row in t["rows"]:
        for p in row["places"]:
            if p is not None and p[3]:
                wrong.append((row["bytes"], p[3]))
        p = row["places"][place] if place < len(row["places"]) else None
        if p is not None:
            rows.append({**row, "time_us": p[0], "algbw": p[1], "busbw": p[2]})
    t["rows"] = rows
    t["timer"] = rows[0]["timer"] if rows else "time"
    t["cause"] = _cause(t, wrong)


def _cause(t: dict[str, Any], wrong: list[tuple[int, float]]) -> str | None:
    if t["failure"]:  # a test that died: where, when it had printed a size
        return str(t["failure"]) + ("" if t["footer"] else _reached(t))
    found = []
    if wrong:
        nbytes, count = wrong[0]
        sizes = len({b for b, _ in wrong})
        more = f" (and at {sizes - 1} more size{'s' if sizes > 2 else ''})" if sizes > 1 else ""
        found.append(f"#wrong {count:g} at {_size_name(nbytes)}{more}")
    if t["out_of_bounds"]:
        found.append(f"{t['out_of_bounds']} out-of-bounds values (nccl-tests: FAILED)")
    if found:
        t["wrong_values"] = int(sum(c for _b, c in wrong)) or int(t["out_of_bounds"] or 0)
        return "; ".join(found)
    if not t["footer"]:
        return f"{t['trace']} ({NO_FOOTER}{_reached(t)})" if t["trace"] else NO_FOOTER + _reached(t)
    return None


def _reached(t: dict[str, Any]) -> str:
    """Where a test that died stopped: the last size it printed, of the sweep it set out to run."""
    last, sweep = (t["rows"][-1]["bytes"] if t["rows"] else None), t.get("bytes")
    if last is None or (sweep and last >= sweep[1]):
        return "" if last is None else f"; it died after its last size, {_size_name(last)}"
    of = f" of {_size_name(sweep[0])}..{_size_name(sweep[1])}" if sweep else ""
    return f"; it died after {_size_name(last)}{of}"


def _infer(t: dict[str, Any]) -> tuple[str, str | None]:
    """(op, what it may also be) of a table that does not name its test (see the module's docstring)."""
    cols, rows, n = t["cols"], t["rows"], t["ranks"]
    has_redop, has_root = cols.get("redop") is not None, cols.get("root") is not None
    first = rows[0]
    redop, root = first["redop"], first["root"]
    split = _split(rows, n)
    if has_redop and redop == "":
        return ("hypercube", None) if has_root else ("all_to_all", None)
    reduces = has_redop and redop != "none"
    rooted = has_root and root is not None and root >= 0
    if reduces and rooted:
        return "reduce", None
    if reduces:
        if split:
            return "reduce_scatter", None
        if not has_root:
            return "all_reduce", None
        factor = _bus_factor(rows) if n > 2 else None
        if factor is not None:
            return ("sendrecv", None) if factor < 1.15 else ("all_reduce", None)
        return (
            "all_reduce",
            "or sendrecv: below 3 ranks, or without a bandwidth to go by, their tables do not differ",
        )
    if rooted:
        return ("scatter", "or gather: their tables do not differ") if split else ("broadcast", None)
    if has_root:
        return "all_gather", "or alltoall: their tables do not differ"
    if split:
        return "all_gather", "or hypercube: their tables do not differ"
    return "sendrecv", None


def _split(rows: list[dict[str, Any]], ranks: int) -> bool:
    """Whether the printed size is `count` elements once per rank (ops whose buffers are split per rank)."""
    if ranks < 2:
        return False
    for row in sorted(rows, key=lambda r: -r["count"]):
        word = WORD.get(row["type"])
        if word and row["count"] > 0:
            return row["bytes"] / (row["count"] * word) > 1.5
    return False


def _bus_factor(rows: list[dict[str, Any]]) -> float | None:
    """busbw / algbw where algbw is largest (where the printed rounding matters least)."""
    alg, bus = max(((p[1], p[2]) for r in rows for p in r["places"] if p is not None), default=(0.0, 0.0))
    return bus / alg if alg >= 1 else None


def _json_tests(text: str, source: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The one test of a `-J` file, in the shape `_tests` gives a test of stdout."""
    try:
        doc = loads_json(text)
    except UnusableJSON as e:
        raise BadInput(f"{source}: {e}") from None
    except json.JSONDecodeError as e:
        cut = e.pos >= len(text.rstrip()) - 1 or e.msg.startswith("Unterminated string")
        if cut and JSON_HEAD.match(text):  # the writer died mid-file (as records.loads_record tells it)
            return [_cut_json_test(text, source)], {}
        raise BadInput(
            f"{source}: malformed nccl-tests JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results", []), list):
        raise BadInput(f'{source}: not an nccl-tests -J file (no "results" list)')
    args = doc.get("args")
    t = _new_test(_json_name(args[0] if isinstance(args, list) and args else None), None, 1)
    raw = doc.get("config")
    config: dict[str, Any] = raw if isinstance(raw, dict) else {}
    t["setup"] = True
    t["mode"] = "graph" if _num(config.get("graph")) else "eager"
    listed = config.get("devices")
    devices: list[Any] = listed if isinstance(listed, list) else []
    t["ranks"] = len(devices) * int(_num(config.get("nthreads")) or 1) * int(_num(config.get("ngpus")) or 1)
    t["cols"] = {"redop": 3, "root": 4}  # every -J result names both
    lo, hi = _num(config.get("minimum_bytes")), _num(config.get("maximum_bytes"))
    t["bytes"] = (int(lo), int(hi)) if lo is not None and hi is not None else None
    for i, r in enumerate(doc.get("results") or []):
        if row := _json_row(r, source, i):
            t["rows"].append(row)
    oob = doc.get("out_of_bounds")
    if isinstance(oob, dict):
        t["footer"] = True
        count = int(_num(oob.get("count")) or 0)
        t["out_of_bounds"] = count or (1 if str(oob.get("okay")).lower() == "false" else 0)
    extra = {"json_version": doc.get("version"), "nccl_version": doc.get("nccl_version")}
    return [t], extra


def _cut_json_test(text: str, source: str) -> dict[str, Any]:
    """A -J file cut mid-way (nccl-tests writes it as the sweep goes): the results written whole."""
    t = _new_test(_json_name(re.search(r'"args"\s*:\s*\[\s*"((?:[^"\\]|\\.)*)"', text)), None, 1)
    t["failure"], t["cols"] = f"{NO_FOOTER} (the JSON file ends mid-way)", {"redop": 3, "root": 4}
    lo, hi = (re.search(rf'"{k}"\s*:\s*(\d+)', text) for k in ("minimum_bytes", "maximum_bytes"))
    t["bytes"] = (int(lo.group(1)), int(hi.group(1))) if lo and hi else None
    pos = start.end() if (start := re.search(r'"results"\s*:\s*\[', text)) else len(text)
    while pos < len(text):
        pos = len(text) - len(text[pos:].lstrip(" \t\r\n,"))
        try:
            r, pos = json.JSONDecoder().raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError):
            break
        if row := _json_row(r, source, len(t["rows"])):
            t["rows"].append(row)
    return t


def _json_name(arg0: Any) -> str | None:
    if isinstance(arg0, re.Match):
        arg0 = arg0.group(1).replace("\\/", "/")
    return (_file(arg0) or None) if isinstance(arg0, str) else None


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _json_row(r: Any, source: str, i: int) -> dict[str, Any] | None:
    if not isinstance(r, dict) or _num(r.get("size")) is None or _num(r.get("count")) is None:
        return None
    places: list[tuple[float, float, float, float | None] | None] = []
    timer = "time"
    for key in ("out_of_place", "in_place"):
        p = r.get(key)
        if not isinstance(p, dict):
            places.append(None)  # null (trace replay), or cut off where the test died
            continue
        timer = "cputime" if "cpu_time" in p else "time"
        time_us, algbw, busbw = (
            _num(p.get(k)) for k in ("cpu_time" if timer == "cputime" else "time", "alg_bw", "bus_bw")
        )
        if time_us is None or algbw is None or busbw is None:
            places.append(None)  # "nan", or a key the test did not get to write
            continue
        if not time_us > 0:
            raise BadInput(f"{source}: result {i}: a time of {time_us} us")
        places.append((time_us, algbw, busbw, _num(p.get("nwrong"))))
    if not any(places):
        return None
    root, root_num = r.get("root"), _num(r.get("root"))
    return {
        "bytes": int(r["size"]),
        "count": int(r["count"]),
        "type": str(r.get("type") or ""),
        "redop": str(r.get("redop") if r.get("redop") is not None else ""),
        "root": _int(root.strip())
        if isinstance(root, str)
        else (None if root_num is None else int(root_num)),
        "places": places,
        "timer": timer,
    }


def _record(tests: list[dict[str, Any]], source: str, extra: dict[str, Any]) -> dict[str, Any]:
    good = [t for t in tests if not t["cause"]]
    # the config says what the file set out to measure (a failed test's setup too, not a process that
    # died before its setup line); the launches say what of it was measured
    described = [t for t in tests if t["setup"]] or tests
    basis = good or tests
    timers = {t["timer"] for t in basis if t["rows"]}
    if len(timers) > 1:
        raise BadInput(f"{source}: tests with -C 1 (cputime) and without side by side: split the file")
    cputime = timers == {"cputime"}
    tools = {t["version"] for t in tests if t["version"]}
    config = _config(described, cputime)
    primary = _primary(basis, config)
    run = new_import(NAME, source, tool=NAME, config=config, primary=primary, select="sweep")
    run["imported"]["tool_version"] = ", ".join(sorted(tools)) or None
    run["imported"].update({k: v for k, v in extra.items() if v is not None})
    inferred = [t["inferred"] for t in tests if t["inferred"]]
    if inferred:
        run["imported"]["inferred"] = inferred
    run["probe"]["version"] = run["imported"]["tool_version"] or ""
    if not cputime:
        run["probe"]["measures"] = MEASURES
    metrics: dict[str, tuple[str, str]] = {}
    derived: dict[str, str] = {}
    by_key: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for t in good:
        by_key[(t["op"], t["mode"])].append(t)
    for k in range(max((len(v) for v in by_key.values()), default=0)):  # launch k: the k-th copy of each
        samples: dict[str, list[float]] = {}
        values: dict[str, list[float]] = {}
        sizes = []
        for (op, mode), copies in by_key.items():
            if k >= len(copies):
                continue
            for row in copies[k]["rows"]:
                name = _metric(op, row["bytes"], mode)
                samples.setdefault(name, []).append(row["time_us"])
                metrics[name] = ("us", LOWER)
                for bw in ("algbw", "busbw"):
                    values.setdefault(bw_name(bw, name), []).append(row[bw])
                    metrics[bw_name(bw, name)] = ("GB/s", HIGHER)
                    if not cputime:  # under -C 1 the bandwidths come from the other (completed) time
                        derived[bw_name(bw, name)] = name
                sizes.append({"op": op, "bytes": row["bytes"], "label": "", "metrics": {mode: name}})
        run["launches"].append(launch(k, samples, values=values, header={"sizes": _merged(sizes)}))
    for t in tests:
        if t["cause"]:
            what = f"{t['test'] or t['op'] or 'nccl-tests'}{', graph' if t['mode'] == 'graph' else ''}"
            header = {"test": what, "line": t["line"], "wrong_values": t.get("wrong_values", 0)}
            error = f"{t['cause']} [{what}, line {t['line']}]" if len(tests) > 1 else str(t["cause"])
            run["launches"].append(
                launch(len(run["launches"]), {}, status="error", error=error, header=header)
            )
    run["status"] = "complete" if len(good) == len(tests) else ("partial" if good else "failed")
    declare(run, metrics)
    run["derived"] = derived
    return run


def _config(tests: list[dict[str, Any]], cputime: bool) -> dict[str, Any]:
    """What `probe collectives` also records, in its words: what must match for a comparison."""
    types = {r["type"] for t in tests for r in t["rows"]}
    config = {
        "tp": max(t["ranks"] for t in tests) or None,
        "dtype": ", ".join(sorted(DTYPES.get(x, x) for x in types)),
        "ops": sorted({t["op"] for t in tests if t["op"]}),
        "modes": [m for m in ("eager", "graph") if any(t["mode"] == m for t in tests)],
        "sizes": sorted({r["bytes"] for t in tests for r in t["rows"]}),
    }
    if cputime:
        config["time"] = "cputime"
    return config


def _primary(tests: list[dict[str, Any]], config: dict[str, Any]) -> str | None:
    """As the probe picks it for a sweep of sizes: the last size of the first test, in its first mode."""
    first = next((t for m in config["modes"] for t in tests if t["mode"] == m and t["rows"]), None)
    if first is None:
        return None
    return _metric(first["op"], first["rows"][-1]["bytes"], first["mode"])


def _metric(op: str, nbytes: int, mode: str) -> str:
    prefix = next((p for o, p in OPS.values() if o == op), op)
    return f"{prefix}{'g' if mode == 'graph' else ''}_{_size_name(nbytes)}"


def _size_name(n: int) -> str:
    for suffix, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n and n % mult == 0:
            return f"{n // mult}{suffix}"
    return f"{n}B"


def _merged(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One sweep item per (op, bytes) with its metric per mode, as the probe's header lists them."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for it in items:
        out.setdefault((it["op"], it["bytes"]), {**it, "metrics": {}})["metrics"].update(it["metrics"])
    return list(out.values())
