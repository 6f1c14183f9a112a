"""nccl-tests stdout (`all_reduce_perf ... > out.txt`): one run record per file, named as `probe collectives`.

Each size of a test is a metric, named as the collectives probe names it (`ar_64KiB` eager,
`arg_64KiB` under `-G`, `rs_`, `ag_`, `aa_` for the other ops), with busbw and algbw beside it as
that probe's values (`busbw_64KiB`, computed from the time, so never judged on their own). The time
is the column the probe matches: in-place for all-reduce (the probe reduces in place), out-of-place
for the others. So the record compares with a `probe collectives` record (`probe.measures`) on
the config keys both hold: tp, dtype, ops, modes and sizes.

One test in the file is one launch (one process). A file that holds the same test several times
(`for i in 1 2 3; do all_reduce_perf ...; done > out.txt`) has that many launches; an eager and a
`-G` test side by side fill one launch's eager and graph metrics. Lines that are not nccl-tests'
own (a script's `=== RUN` markers, mpirun's chatter) are skipped. Format: nccl-tests' src/util.cu
(version 2.19; the per-iteration and timestamp columns of newer builds are read by their headers).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from regdiag.direction import HIGHER, LOWER, declare
from regdiag.errors import BadInput
from regdiag.importers import launch, new_import
from regdiag.sizes import bw_name

NAME = "nccl-tests"
TITLE = "nccl-tests stdout (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf, ...)"
MEASURES = "collectives"  # regdiag probe collectives
START = re.compile(r"^# Collective test starting: (\S+)")
VERSION = re.compile(r"^# nccl-tests version (\S+)")
SETUP = re.compile(r"^# nThread (\d+) nGpus (\d+) .*\bgraph: (\d+)")
RANK = re.compile(r"^#\s+Rank\s+\d+ ")
# nccl-tests' test binaries -> the op names and metric prefixes of probes/collectives.py
OPS = {
    "all_reduce_perf": ("all_reduce", "ar"),
    "all_gather_perf": ("all_gather", "ag"),
    "reduce_scatter_perf": ("reduce_scatter", "rs"),
    "alltoall_perf": ("all_to_all", "aa"),
}
DTYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16"}


def sniff(text: str) -> bool:
    return "# Collective test starting:" in text and "# nThread " in text


def parse(text: str, source: str) -> list[dict[str, Any]]:
    tests = _tests(text.splitlines(), source)
    if not tests:
        raise BadInput(
            f"{source}: no nccl-tests result table (a '# Collective test starting' line and its rows)"
        )
    tools = {t["version"] for t in tests if t["version"]}
    config = _config(tests)
    run = new_import(NAME, source, tool=NAME, config=config, primary=_primary(tests, config), select="sweep")
    run["imported"]["tool_version"] = ", ".join(sorted(tools)) or None
    run["probe"]["version"] = run["imported"]["tool_version"] or ""
    run["probe"]["measures"] = MEASURES
    metrics: dict[str, tuple[str, str]] = {}
    derived: dict[str, str] = {}
    by_key: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for t in tests:
        by_key[(t["op"], t["mode"])].append(t)
    for k in range(max(len(v) for v in by_key.values())):  # launch k: the k-th copy of each test
        samples, values, sizes = {}, {}, []
        for (op, mode), copies in by_key.items():
            if k >= len(copies):
                continue
            for row in copies[k]["rows"]:
                name = _metric(op, row["bytes"], mode)
                samples[name] = [row["time_us"]]
                metrics[name] = ("us", LOWER)
                for bw in ("algbw", "busbw"):
                    values[bw_name(bw, name)] = [row[bw]]
                    metrics[bw_name(bw, name)] = ("GB/s", HIGHER)
                    derived[bw_name(bw, name)] = name
                sizes.append({"op": op, "bytes": row["bytes"], "label": "", "metrics": {mode: name}})
        run["launches"].append(launch(k, samples, values=values, header={"sizes": _merged(sizes)}))
    declare(run, metrics)
    run["derived"] = derived
    return [run]


def _tests(lines: list[str], source: str) -> list[dict[str, Any]]:
    """Every test's setup and rows, in file order."""
    tests: list[dict[str, Any]] = []
    version = None
    cur: dict[str, Any] | None = None
    cols: dict[str, int] = {}
    for n, line in enumerate(lines, 1):
        if m := VERSION.match(line):
            version = m.group(1)
        elif m := START.match(line):
            test = m.group(1)
            op, _ = OPS.get(test, (test.removesuffix("_perf"), test.removesuffix("_perf")))
            cur = {"test": test, "op": op, "version": version, "mode": "eager", "ranks": 0, "rows": []}
            tests.append(cur)
        elif cur is None:
            continue
        elif m := SETUP.match(line):
            cur["mode"] = "graph" if int(m.group(3)) > 0 else "eager"
        elif RANK.match(line):
            cur["ranks"] += 1
        elif line.startswith("#") and " size " in line and " count " in line:
            cols = _columns(line, cur["op"])
        elif not line.startswith("#") and cols and (row := _row(line, cols, source, n)):
            cur["rows"].append(row)
    return [t for t in tests if t["rows"]]


def _columns(header: str, op: str) -> dict[str, int]:
    """Token positions of the time, algbw, busbw and type columns, from the column-name line."""
    names = header.lstrip("#").split()
    times = [i for i, c in enumerate(names) if c == "time"]
    if not times:
        return {}
    t = times[1] if op == "all_reduce" and len(times) > 1 else times[0]  # in place / out of place
    return {"time": t, "algbw": t + 1, "busbw": t + 2, "type": names.index("type") if "type" in names else 2}


def _row(line: str, cols: dict[str, int], source: str, n: int) -> dict[str, Any] | None:
    tok = line.split()
    if len(tok) <= cols["busbw"] or not (tok[0].isdigit() and tok[1].isdigit()):
        return None
    try:
        time_us, algbw, busbw = (float(tok[cols[c]]) for c in ("time", "algbw", "busbw"))
    except ValueError:
        raise BadInput(f"{source}: line {n}: a result row whose time or bandwidth is not a number") from None
    if not time_us > 0:
        raise BadInput(f"{source}: line {n}: a time of {time_us} us")
    return {
        "bytes": int(tok[0]),
        "type": tok[cols["type"]],
        "time_us": time_us,
        "algbw": algbw,
        "busbw": busbw,
    }


def _config(tests: list[dict[str, Any]]) -> dict[str, Any]:
    """What `probe collectives` also records, in its words: what must match for a comparison."""
    types = {r["type"] for t in tests for r in t["rows"]}
    return {
        "tp": max(t["ranks"] for t in tests) or None,
        "dtype": ", ".join(sorted(DTYPES.get(x, x) for x in types)),
        "ops": sorted({t["op"] for t in tests}),
        "modes": [m for m in ("eager", "graph") if any(t["mode"] == m for t in tests)],
        "sizes": sorted({r["bytes"] for t in tests for r in t["rows"]}),
    }


def _primary(tests: list[dict[str, Any]], config: dict[str, Any]) -> str:
    """As the probe picks it for a sweep of sizes: the last size of the first test, in its first mode."""
    mode = config["modes"][0]
    first = next(t for t in tests if t["mode"] == mode)
    return _metric(first["op"], first["rows"][-1]["bytes"], mode)


def _metric(op: str, nbytes: int, mode: str) -> str:
    prefix = next((p for o, p in OPS.values() if o == op), op)
    return f"{prefix}{'g' if mode == 'graph' else ''}_{_size_name(nbytes)}"


def _size_name(n: int) -> str:
    for suffix, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n % mult == 0:
            return f"{n // mult}{suffix}"
    return f"{n}B"


def _merged(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One sweep item per (op, bytes) with its metric per mode, as the probe's header lists them."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for it in items:
        out.setdefault((it["op"], it["bytes"]), {**it, "metrics": {}})["metrics"].update(it["metrics"])
    return list(out.values())
