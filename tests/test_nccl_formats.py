"""nccl-tests output of the releases regdiag reads (regdiag/importers/nccl_tests.py), made here by small
generators that follow nccl-tests' own printf formats, quoted from its sources at the named tag:
v2.13.8 (before 2.16.7: no `# Collective test starting` nor version line, so the op is told from the
table), v2.10.0 (each op printed its own columns) and v2.19.6 (HEAD: src/util.cu), with `-C 1`, `-I 1`,
`-N 2`, and the `-J` JSON file. Each failure kind is a failed launch with its cause; a file with a good
and a failed test keeps the good one. The real output of 2.19.6 on two H200s is read in
tests/test_importers.py."""

# ruff: noqa: UP031 -- the generators use printf's own formats through %, so they read as the C they follow

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from regdiag import importers
from regdiag.compare import compare_runs
from regdiag.errors import BadInput

DATA = Path(__file__).resolve().parent / "data"
WORD = {"float": 4, "half": 2, "bfloat16": 2, "double": 8, "int8": 1}
SPLIT = {"all_gather", "reduce_scatter", "alltoall", "scatter", "gather", "hypercube"}  # per-rank buffers
REDUCES = {"all_reduce", "reduce_scatter", "reduce", "sendrecv"}  # print the reduction's name (2.13 on)
ROOTED = {"broadcast", "reduce", "scatter", "gather"}
# A sweep: (bytes, out-of-place us, in-place us)
SWEEP = [(1024, 13.9, 13.3), (65536, 13.58, 13.66), (1 << 20, 14.49, 14.94), (16 << 20, 78.42, 76.31)]


def _cells(op: str, nbytes: int, dtype: str, ranks: int) -> tuple[int, int]:
    """(printed size, printed count): setupArgs' max(sendBytes, expectedBytes) and paramcount."""
    ws = WORD[dtype]
    if op in SPLIT:
        count = nbytes // ws // ranks
        return count * ws * ranks, count
    return nbytes, nbytes // ws


def _bw(op: str, nbytes: int, t_us: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s as each op's GetBw computes them."""
    alg = nbytes / 1e9 / (t_us * 1e-6)
    factor = {"all_reduce": 2 * (ranks - 1) / ranks, "sendrecv": 1.0, "broadcast": 1.0, "reduce": 1.0}
    return alg, alg * factor.get(op, (ranks - 1) / ranks)


def _redop_root(op: str, version: str) -> tuple[str, int]:
    if version == "2.10":  # all_gather, alltoall, sendrecv and hypercube passed "" (2.10.0 src/*.cu)
        return ("sum" if op in REDUCES - {"sendrecv"} else ""), (0 if op in ROOTED else -1)
    return ("" if op == "hypercube" else "sum" if op in REDUCES else "none"), (0 if op in ROOTED else -1)


def _time_v2_13(t: float) -> str:
    # v2.13.8 src/common.cu BenchTime: sprintf(timeStr, "%7.0f" / "%7.1f" / "%7.2f", timeUsec)
    return ("%7.0f" if t >= 10000.0 else "%7.1f" if t >= 100.0 else "%7.2f") % t


def v2_13(
    op: str = "all_reduce",
    sweep: list[tuple[int, float, float]] = SWEEP,
    *,
    ranks: int = 2,
    dtype: str = "float",
    graph: int = 0,
    check: bool = False,
    wrong: dict[int, int] | None = None,
    errors: int = 0,
    cputime: bool = False,
) -> list[str]:
    """One run of a v2.13.8 test binary as its src/common.cu prints it (no starting or version line)."""
    lo, hi = sweep[0][0], sweep[-1][0]
    redop, root = _redop_root(op, "2.13")
    out = [
        # PRINT("# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d
        #        agg iters: %d validation: %d graph: %d\n", ...)
        "# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d "
        "agg iters: %d validation: %d graph: %d"
        % (1, ranks, lo, hi, 2, "factor", 5, 20, 1, int(check), graph),
        "#",
        "# Using devices",
    ]
    for r in range(ranks):  # "#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s\n"
        out.append("#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s" % (r, 0, 4242, "vm", r, 6 + r, "NVIDIA H200"))  # fmt: skip
    ts = "cputime" if cputime else "time"  # const char* timeStr = report_cputime ? "cputime" : "time";
    out += [
        "#",
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
        % ("", "", "", "", ""),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
        % ("size", "count", "type", "redop", "root", ts, "algbw", "busbw", "#wrong", ts, "algbw", "busbw", "#wrong"),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"
        % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]  # fmt: skip
    bws = []
    for nbytes, *times in sweep:
        size, count = _cells(op, nbytes, dtype, ranks)
        # PRINT("%12li  %12li  %8s  %6s  %6s", max(sendBytes, expectedBytes), nbytes / wordSize(type),
        #       typeName, opName, rootName) with sprintf(rootName, "%6i", root)
        line = "%12li  %12li  %8s  %6s  %6s" % (size, count, dtype, redop, "%6i" % root)
        for t in times:
            alg, bus = _bw(op, size, t, ranks)
            bws.append(bus)
            if check:  # PRINT("  %7s  %6.2f  %6.2f  %5g", timeStr, algBw, busBw, (double)wrongElts)
                line += "  %7s  %6.2f  %6.2f  %5g" % (
                    _time_v2_13(t),
                    alg,
                    bus,
                    float((wrong or {}).get(nbytes, 0)),
                )
            else:  # PRINT("  %7s  %6.2f  %6.2f  %5s", timeStr, algBw, busBw, "N/A")
                line += "  %7s  %6.2f  %6.2f  %5s" % (_time_v2_13(t), alg, bus, "N/A")
        out.append(line)
    return out + [
        # PRINT("# Out of bounds values : %d %s\n", errors[0], errors[0] ? "FAILED" : "OK");
        "# Out of bounds values : %d %s" % (errors, "FAILED" if errors else "OK"),
        # PRINT("# Avg bus bandwidth    : %g %s\n", bw[0], check_avg_bw == -1 ? "" : ...);
        "# Avg bus bandwidth    : %g %s" % (sum(bws) / len(bws), ""),
        "#",
        "%s" % "",  # PRINT("%s\n", ncclGetLastError(NULL));
    ]


def v2_10(op: str, sweep: list[tuple[int, float, float]] = SWEEP, *, ranks: int = 4) -> list[str]:
    """One run of a v2.10.0 test binary: each op's print_header() printed its own preamble columns."""
    redop, root = _redop_root(op, "2.10")
    pre = {
        "all_reduce": ["redop"], "reduce_scatter": ["redop"], "alltoall": ["redop"], "broadcast": ["root"],
        "scatter": ["root"], "gather": ["root"], "reduce": ["redop", "root"],
    }.get(op, [])  # fmt: skip
    wide = "".join("  %6s" for _ in pre)
    out = [
        # PRINT("# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d
        #        validation: %d \n", ...)
        "# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d validation: %d "
        % (1, ranks, sweep[0][0], sweep[-1][0], 2, "factor", 5, 20, 1),
        "#",
        "# Using devices",
    ]
    for r in range(ranks):  # "#   Rank %2d Pid %6d on %10s device %2d [0x%02x] %s\n"
        out.append(
            "#   Rank %2d Pid %6d on %10s device %2d [0x%02x] %s" % (r, 4242, "vm", r, 6 + r, "NVIDIA A100")
        )
    out += [
        "#",
        # all_reduce.cu: PRINT("# %10s  %12s  %8s  %6s            out-of-place ...", "", "", "", "");
        ("# %10s  %12s  %8s" + wide + "            out-of-place                       in-place          ")
        % ("", "", "", *[""] * len(pre)),
        # PRINT("# %10s  %12s  %8s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "size", "count", "type",
        #       "redop", "time", "algbw", "busbw", "error", "time", "algbw", "busbw", "error");
        ("# %10s  %12s  %8s" + wide + "  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s")
        % (
            "size",
            "count",
            "type",
            *pre,
            "time",
            "algbw",
            "busbw",
            "error",
            "time",
            "algbw",
            "busbw",
            "error",
        ),
        ("# %10s  %12s  %8s" + wide + "  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s")
        % (
            "(B)",
            "(elements)",
            "",
            *[""] * len(pre),
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
        ),
    ]
    vals = {"redop": redop, "root": "%6i" % root}
    bws = []
    for nbytes, *times in sweep:
        size, count = _cells(op, nbytes, "float", ranks)
        # print_line_header: PRINT("%12li  %12li  %8s  %6s", size, count, typeName, opName); ("%6i" root)
        line = ("%12li  %12li  %8s" + wide) % (size, count, "float", *[vals[c] for c in pre])
        for t in times:
            alg, bus = _bw(op, size, t, ranks)
            bws.append(bus)
            # PRINT("  %7s  %6.2f  %6.2f  %5.0le", timeStr, algBw, busBw, maxDelta);
            line += "  %7s  %6.2f  %6.2f  %5.0e" % (_time_v2_13(t), alg, bus, 0.0)
        out.append(line)
    return out + [
        "# Out of bounds values : %d %s" % (0, "OK"),
        "# Avg bus bandwidth    : %g %s" % (sum(bws) / len(bws), ""),
        "#",
    ]


def _float_str(value: float, width: int) -> str:
    """v2.19.6 src/util.cu getFloatStr: "%*.2f", then "%*.1f", "%*.0f", "%*.1e" that fits the width."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        s = fmt % (width, value)
        if len(s) <= width:
            return s
    return ("%*.1e" if width >= 7 else "%*.0e") % (width, value)


BINARY = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf", "alltoall": "alltoall_perf"}


def head(
    op: str = "all_reduce",
    sweep: list[tuple[int, float, float]] = SWEEP,
    *,
    ranks: int = 2,
    dtype: str = "float",
    graph: int = 0,
    check: bool = False,
    wrong: dict[int, int] | None = None,
    errors: int = 0,
    cputime: bool = False,
    per_iter: bool = False,
    cycles: int = 1,
    min_bw_failed: bool = False,
) -> list[str]:
    """One run of a v2.19.6 (HEAD) test binary, as src/util.cu's writers print it."""
    binary = BINARY.get(op, f"{op}_perf")
    redop, root = _redop_root(op, "2.19")
    out = [
        # writeDeviceReport: PRINT("# nccl-tests version %s nccl-headers=%d nccl-library=%d\n", ...)
        "# nccl-tests version %s nccl-headers=%d nccl-library=%d" % ("2.19.6", 22803, 22809),
        "# Collective test starting: %s" % binary,  # PRINT("# Collective test starting: %s\n", program_name);
        # PRINT("# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d
        #        agg iters: %d validation: %d graph: %d unalign: %d\n", ...)
        "# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d agg iters: %d "
        "validation: %d graph: %d unalign: %d"
        % (1, ranks, sweep[0][0], sweep[-1][0], 2, "factor", 5, 20, 1, int(check), graph, 0),
    ]
    if (
        per_iter
    ):  # PRINT("# Per-Iteration Report: CUDA event timing; i_* uses max over process rows"); PRINT(" \n");
        out.append("# Per-Iteration Report: CUDA event timing; i_* uses max over process rows" + " ")
    out += ["#", "# Using devices"]
    for r in range(ranks):  # "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n"
        out.append("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s" % (r, 0, 1412, "vm", r, 0, 6 + r, 0, "NVIDIA H200"))  # fmt: skip
    ts = "cputime" if cputime else "time"  # writeResultHeader: report_cputime ? "cputime" : "time"
    out.append("#")
    if per_iter:
        out += [
            "# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)                                in-place (+ per-iteration)"
            % ("", "", "", "", ""),
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s %*s"
            % ("size", "count", "type", "redop", "root", ts, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99",
               "i_cv%", ts, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", 0, ""),
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s %*s"
            % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)",
               "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", 0, ""),
        ]  # fmt: skip
    else:
        out += [
            "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
            % ("", "", "", "", ""),
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
            % ("size", "count", "type", "redop", "root", ts, "algbw", "busbw", "#wrong", ts, "algbw", "busbw", "#wrong", 0, ""),
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
            % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", 0, ""),
        ]  # fmt: skip
    bws = []
    for cycle in range(cycles):  # -N: the sweep again, in the same table
        for nbytes, *times in sweep:
            size, count = _cells(op, nbytes, dtype, ranks)
            # writeBenchmarkLinePreamble: PRINT("%12li  %12li  %8s  %6s  %6s", nBytes, nElem, typeName, opName, rootName)
            line = "%12li  %12li  %8s  %6s  %6s" % (size, count, dtype, redop, "%6i" % root)
            for t in times:
                t = t * (1 + 0.01 * cycle)
                alg, bus = _bw(op, size, t, ranks)
                bws.append(bus)
                cells = (_float_str(t, 7), _float_str(alg, 6), _float_str(bus, 6))
                if check:  # writeBenchmarkLineBody: PRINT("  %7s  %6s  %6s  %6g", timeStr, algBwStr, busBwStr, (double)wrongElts)
                    line += "  %7s  %6s  %6s  %6g" % (*cells, float((wrong or {}).get(nbytes, 0)))
                else:  # PRINT("  %7s  %6s  %6s    N/A", timeStr, algBwStr, busBwStr)
                    line += "  %7s  %6s  %6s    N/A" % cells
                if (
                    per_iter
                ):  # writePerIterReport: PRINT("  %7s  %7s  %7s  %7s", minStr, maxStr, p99Str, cvStr)
                    line += "  %7s  %7s  %7s  %7s" % tuple(
                        _float_str(x, 7) for x in (t * 0.9, t * 1.2, t * 1.1, 3.5)
                    )
            out.append(line)  # writeBenchmarkLineTerminator: PRINT("\n")
    return out + [
        # writeResultFooter: PRINT("# %-20s : %d %s\n", "Out of bounds values", errors[0], errors[0] ? "FAILED" : "OK");
        "# %-20s : %d %s" % ("Out of bounds values", errors, "FAILED" if errors else "OK"),
        # PRINT("# %-20s : %g %s\n", "Avg bus bandwidth", bw[0], check_avg_bw == -1 ? "" : (... ? "FAILED" : "OK"));
        "# %-20s : %g %s" % ("Avg bus bandwidth", sum(bws) / len(bws), "FAILED" if min_bw_failed else ""),
        "#",
        "# Collective test concluded: %s" % binary,
        "#",  # finalizeFooter: PRINT("#\n");
        "",  # writeErrors: PRINT("\n") without an error
    ]


def _j(x: Any) -> str:
    """src/util.cu's ad-hoc writer: no spaces, doubles as "%lf", strings with '/' escaped, bools as strings."""
    if isinstance(x, dict):
        return "{" + ",".join(f"{_j(str(k))}:{_j(v)}" for k, v in x.items()) + "}"
    if isinstance(x, list):
        return "[" + ",".join(_j(v) for v in x) + "]"
    if isinstance(x, bool):
        return _j("true" if x else "false")  # jsonBool: jsonStr(val ? "true" : "false")
    if isinstance(x, float):
        return "%lf" % x  # jsonDouble: fprintf(json_report_fp, "%lf", val)
    if isinstance(x, int):
        return "%d" % x
    if x is None:
        return "null"
    return json.dumps(str(x)).replace("/", "\\/")  # sanitizeJson quotes '"', '\\', '/', tab, newline


def head_json(
    op: str = "all_reduce",
    sweep: list[tuple[int, float, float]] = SWEEP,
    *,
    ranks: int = 2,
    graph: int = 0,
    check: bool = False,
    wrong: dict[int, int] | None = None,
    cputime: bool = False,
    footer: bool = True,
    version: int = 3,
) -> str:
    """The `-J file.json` of one run, key by key as src/util.cu (v2.19.6; JSON_FILE_VERSION 3) writes it."""
    binary = BINARY.get(op, f"{op}_perf")
    redop, root = _redop_root(op, "2.19")
    config: dict[str, Any] = {
        "nthreads": 1, "ngpus": ranks, "minimum_bytes": sweep[0][0], "maximum_bytes": sweep[-1][0],
        "step_factor": 2, "warmup_iters": 5, "iterations": 20, "aggregated_iterations": 1,
        "validation": int(check), "graph": graph, "blocking_collectives": False,
    }  # fmt: skip
    if version >= 2:
        config["per_iter_timing"] = False
    if version >= 3:
        config["per_iter_skip"] = 0
    config["parallel_init"] = False
    # without MPI only the first line of the devices report is parsed: one entry for all -g GPUs
    config["devices"] = [{"rank": 0, "group": 0, "pid": 1412, "hostname": "vm", "device": 0,
                          "device_hex": "0000:00:06", "device_info": "NVIDIA H200"}]  # fmt: skip
    doc: dict[str, Any] = {
        "version": version,
        "start_time": "2026-12-01 10:00:00",
        "args": [f"./build/{binary}", "-b", "1K", "-e", "16M", "-f", "2", "-g", str(ranks), "-J", "out.json"],
        "env": ["PATH=/usr/bin", "HOME=/root"],
        "nccl_version": 22809,
        "config": config,
        "results": [],
    }
    for nbytes, *times in sweep:
        size, count = _cells(op, nbytes, "float", ranks)
        r: dict[str, Any] = {
            "size": size,
            "count": count,
            "type": "float",
            "redop": redop,
            "root": "%6i" % root,
        }
        for key, t in zip(("out_of_place", "in_place"), times, strict=True):
            alg, bus = _bw(op, size, t, ranks)
            nw = float((wrong or {}).get(nbytes, 0)) if check else None
            r[key] = {("cpu_time" if cputime else "time"): t, "alg_bw": alg, "bus_bw": bus, "nwrong": nw}
        r["actual_iterations"] = 20
        r["experiment_name"] = ""
        doc["results"].append(r)
    if footer:
        errors = sum(1 for v in (wrong or {}).values() if v) if check else 0
        doc["out_of_bounds"] = {"count": errors, "okay": errors == 0}
        doc["average_bus_bandwidth"] = {"bandwidth": 42.0, "okay": "unchecked"}
        doc["errors"] = [""]
    doc["end_time"] = "2026-12-01 10:00:09"
    return _j(doc)


def _text(*tests: list[str]) -> str:
    return "\n".join(line for t in tests for line in t) + "\n"


def _one(text: str) -> dict[str, Any]:
    (run,) = importers.import_text(text, "x.txt")
    return run


# --- formats ----------------------------------------------------------------------------------------


def test_a_2_13_file_without_a_starting_line_is_claimed_and_read() -> None:
    text = _text(v2_13("all_reduce"))
    assert "# Collective test starting" not in text and "# nccl-tests version" not in text
    assert importers.sniff(text) == "nccl-tests"
    run = _one(text)
    assert run["status"] == "complete" and run["imported"]["tool_version"] is None
    assert run["probe"]["config"] == {"tp": 2, "dtype": "float32", "ops": ["all_reduce"], "modes": ["eager"],
                                      "sizes": [1024, 65536, 1 << 20, 16 << 20]}  # fmt: skip
    (la,) = run["launches"]
    assert run["units"]["ar_1KiB"] == "ms" and run["primary"] == "ar_16MiB"
    # all-reduce is read in place (the probe reduces in place), in ms once imported
    assert la["samples"]["ar_1KiB"] == [pytest.approx(13.3e-3)]
    assert la["samples"]["ar_16MiB"] == [pytest.approx(76.31e-3)]
    assert la["values"]["busbw_16MiB"] == [pytest.approx(_bw("all_reduce", 16 << 20, 76.31, 2)[1], abs=0.01)]
    assert run["derived"]["busbw_16MiB"] == "ar_16MiB"
    (note,) = run["imported"]["inferred"]
    assert note.startswith("line 1: all_reduce (or sendrecv")  # 2 ranks: busbw = algbw for both


@pytest.mark.parametrize(
    ("op", "ranks", "read_as", "ambiguous"),
    [
        ("all_reduce", 4, "all_reduce", False),  # busbw/algbw 2(n-1)/n tells it from sendrecv
        ("sendrecv", 4, "sendrecv", False),
        ("reduce_scatter", 4, "reduce_scatter", False),
        ("all_gather", 4, "all_gather", True),  # or alltoall
        ("alltoall", 4, "all_gather", True),
        ("broadcast", 4, "broadcast", False),
        ("reduce", 4, "reduce", False),
        ("scatter", 4, "scatter", True),  # or gather
        ("hypercube", 4, "hypercube", False),  # its empty op name leaves a gap where redop is
    ],
)
def test_the_op_of_a_2_13_table_is_told_from_its_columns(
    op: str, ranks: int, read_as: str, ambiguous: bool
) -> None:
    run = _one(_text(v2_13(op, ranks=ranks)))
    assert run["probe"]["config"]["ops"] == [read_as] and run["probe"]["config"]["tp"] == ranks
    (note,) = run["imported"]["inferred"]
    assert note.startswith(f"line 1: {read_as}") and (" (or " in note) == ambiguous
    prefix = {"all_reduce": "ar", "reduce_scatter": "rs", "all_gather": "ag"}.get(read_as, read_as)
    (la,) = run["launches"]
    t_ip = SWEEP[-1][2] if read_as == "all_reduce" else SWEEP[-1][1]  # in place for all-reduce only
    size = _cells(op, SWEEP[-1][0], "float", ranks)[0]
    name = f"{prefix}_{size // (1 << 20)}MiB" if size % (1 << 20) == 0 else f"{prefix}_{size}B"
    assert la["samples"][name] == [pytest.approx(t_ip * 1e-3)]


@pytest.mark.parametrize(
    ("op", "read_as"),
    [("all_reduce", "all_reduce"), ("reduce_scatter", "reduce_scatter"), ("alltoall", "all_to_all"),
     ("all_gather", "all_gather"), ("sendrecv", "sendrecv"), ("broadcast", "broadcast"), ("reduce", "reduce")],
)  # fmt: skip
def test_a_2_10_table_names_its_op_by_its_own_columns(op: str, read_as: str) -> None:
    text = _text(v2_10(op))
    assert importers.sniff(text) == "nccl-tests"
    run = _one(text)
    assert run["probe"]["config"]["ops"] == [read_as] and run["probe"]["config"]["modes"] == ["eager"]
    assert run["status"] == "complete"  # the `error` column of 2.10 is a largest difference, not a count


def test_a_head_file_reads_eager_graph_per_iteration_and_run_cycles() -> None:
    text = _text(head("all_reduce"), head("all_reduce", graph=10, per_iter=True, cycles=2))
    run = _one(text)
    assert run["imported"]["tool_version"] == "2.19.6" and "inferred" not in run["imported"]
    assert run["probe"]["config"]["modes"] == ["eager", "graph"] and run["primary"] == "ar_16MiB"
    (la,) = run["launches"]
    assert la["samples"]["ar_64KiB"] == [pytest.approx(13.66e-3)]
    # -I 1 puts four per-iteration columns between out-of-place and in-place; -N 2 prints each size twice
    assert la["samples"]["arg_64KiB"] == [
        pytest.approx(13.66e-3),
        pytest.approx(13.80e-3),
    ]  # "%7.2f" of 13.7966
    assert len(la["values"]["busbw_arg_64KiB"]) == 2


def test_a_table_of_several_types_is_refused() -> None:
    lines = head()
    half = lines[-7].replace("   float     sum", "    half     sum")  # -d all: the same sizes again in half
    with pytest.raises(BadInput, match=r"line 2: one table of several types, reductions or roots \(-d all"):
        _one(_text([*lines[:-6], half, *lines[-6:]]))


def test_the_same_table_in_2_13_and_head_is_the_same_record() -> None:
    old, new = _one(_text(v2_13("all_gather"))), _one(_text(head("all_gather")))
    assert old["probe"]["config"] == new["probe"]["config"] and old["primary"] == new["primary"] == "ag_16MiB"
    assert old["launches"][0]["samples"] == new["launches"][0]["samples"]


def test_cputime_is_read_as_its_own_quantity() -> None:
    for lines in (head("all_reduce", cputime=True), v2_13("all_reduce", cputime=True)):
        run = _one(_text(lines))
        assert run["status"] == "complete" and run["probe"]["config"]["time"] == "cputime"
        assert "measures" not in run["probe"]  # not the collective's time: no pairing with probe collectives
        assert run["derived"] == {}  # its bandwidths come from the completed time, not from the cputime
        assert run["launches"][0]["samples"]["ar_64KiB"] == [pytest.approx(13.66e-3)]
    gpu, cpu = _one(_text(head())), _one(_text(head(cputime=True)))
    with pytest.raises(BadInput, match="probe configs differ: time"):
        compare_runs(gpu, cpu)
    with pytest.raises(BadInput, match=r"-C 1 \(cputime\) and without"):
        _one(_text(head(), head(graph=10, cputime=True)))


def test_the_json_file_is_the_record_its_stdout_is() -> None:
    text = head_json("all_reduce", ranks=2)
    assert text.startswith('{"version":3,"start_time":') and ".\\/build\\/all_reduce_perf" in text
    assert importers.sniff(text) == "nccl-tests"
    js, out = _one(text), _one(_text(head("all_reduce")))
    assert js["probe"]["config"] == out["probe"]["config"] and js["primary"] == out["primary"]
    assert js["probe"]["measures"] == "collectives" and js["imported"]["nccl_version"] == 22809
    assert js["launches"][0]["samples"] == out["launches"][0]["samples"]
    assert js["launches"][0]["header"] == out["launches"][0]["header"]
    for k, v in out["launches"][0]["values"].items():
        assert js["launches"][0]["values"][k] == [pytest.approx(v[0], abs=0.006)]  # stdout rounds to 0.01
    graph = _one(head_json("all_gather", ranks=8, graph=10, version=1))
    assert graph["probe"]["config"]["tp"] == 8 and graph["probe"]["config"]["modes"] == ["graph"]
    assert "agg_16MiB" in graph["launches"][0]["samples"]
    cpu = _one(head_json(cputime=True))
    assert cpu["probe"]["config"]["time"] == "cputime" and cpu["derived"] == {}


def test_other_tools_files_are_not_claimed() -> None:
    for f in sorted(DATA.iterdir()):
        if f.is_file():
            assert importers.sniff(f.read_text(errors="replace")) != "nccl-tests", f.name
    hyperfine = '{"results": [{"command": "sleep 0.1", "times": [0.1]}]}'
    pyperf = '{"version": "1.0", "benchmarks": [{"runs": [{"values": [1.0]}]}]}'
    assert importers.sniff(hyperfine) == "hyperfine" and importers.sniff(pyperf) == "pyperf"
    assert importers.sniff('{"version": 3, "results": []}') is None
    assert importers.sniff("# nThread is a word here\n") is None


# --- failures ---------------------------------------------------------------------------------------


def _failed(text: str) -> dict[str, Any]:
    """The one launch of a file whose only test failed: loaded, but nothing in it counts."""
    run = _one(text)
    assert run["status"] == "failed"
    (la,) = run["launches"]
    assert la["status"] == "error" and la["samples"] == {}
    return la


def test_a_wrong_count_fails_the_test() -> None:
    la = _failed(_text(head(check=True, wrong={65536: 12}, errors=12)))
    assert la["error"] == "#wrong 12 at 64KiB; 12 out-of-bounds values (nccl-tests: FAILED)"
    la = _failed(_text(v2_13(check=True, wrong={1024: 3, 1 << 20: 1})))  # the footer's count aside
    assert la["error"] == "#wrong 3 at 1KiB (and at 1 more size)"
    la = _failed(head_json(check=True, wrong={65536: 12}))
    assert la["error"].startswith("#wrong 12 at 64KiB; 1 out-of-bounds values")
    assert _one(_text(head(check=True)))["status"] == "complete"  # #wrong 0 throughout


def test_out_of_bounds_in_the_footer_fails_the_test() -> None:
    la = _failed(_text(head(errors=3)))
    assert la["error"] == "3 out-of-bounds values (nccl-tests: FAILED)"
    la = _failed(_text(v2_10("all_reduce")).replace("values : 0 OK", "values : 3 FAILED"))
    assert la["error"] == "3 out-of-bounds values (nccl-tests: FAILED)"


def _died(lines: list[str], row: int, *failure: str) -> list[str]:
    """The test cut within its row `row`: the failure printed on that row's line, as printf leaves it."""
    first = next(i for i, ln in enumerate(lines) if ln[:12].strip().isdigit())
    preamble = lines[first + row][:52]  # "%12li  %12li  %8s  %6s  %6s": the size, count, type, redop, root
    return [*lines[: first + row], preamble + failure[0], *failure[1:]]


def test_a_nccl_cuda_or_timeout_failure_fails_the_test_with_its_line() -> None:
    nccl = _died(head(), 2, "vm: Test NCCL failure common.cu:391 'unhandled system error / net.cc:12 connect'",
                 " .. vm pid 1412: Test failure common.cu:903", " .. vm pid 1412: Test failure common.cu:1054")  # fmt: skip
    assert (
        _failed(_text(nccl))["error"]
        == "Test NCCL failure common.cu:391 'unhandled system error / net.cc:12 connect'; "
        "it died after 64KiB of 1KiB..16MiB"  # where: the last size it printed, of the sweep it set out on
    )
    # NCCL before 2.13: "%s: Test NCCL failure %s:%d '%s'"; a full path is shortened to its file
    old = _died(
        v2_13(), 1, "vm: Test NCCL failure /src/nccl-tests/src/common.cu:391 'unhandled system error'"
    )
    assert (
        _failed(_text(old))["error"]
        == "Test NCCL failure common.cu:391 'unhandled system error'; it died after 1KiB of 1KiB..16MiB"
    )
    cuda = _died(head(), 0, "vm: Test CUDA failure common.cu:742 'an illegal memory access was encountered'")
    assert (
        _failed(_text(cuda))["error"]
        == "Test CUDA failure common.cu:742 'an illegal memory access was encountered'"
    )
    timeout = _died(head(), 1, "vm: Test timeout (30s) common.cu:523")
    assert (
        _failed(_text(timeout))["error"]
        == "Test timeout (30s) common.cu:523; it died after 1KiB of 1KiB..16MiB"
    )


def test_a_test_without_its_footer_failed() -> None:
    lines = head()
    cut = lines[: next(i for i, ln in enumerate(lines) if ln.startswith("# Out of bounds"))]
    assert (
        _failed(_text(cut))["error"]
        == "no footer: the test stopped before its end; it died after its last size, 16MiB"
    )
    mid = lines[: next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("1048576 "))]  # stdout cut
    assert (
        _failed(_text(mid))["error"]
        == "no footer: the test stopped before its end; it died after 64KiB of 1KiB..16MiB"
    )
    trace = [*head()[:8], " .. vm pid 1412: Test failure common.cu:1454"]  # run() returned early (no rows)
    assert (
        _failed(_text(trace))["error"]
        == "Test failure common.cu:1454 (no footer: the test stopped before its end)"
    )
    la = _failed(head_json(footer=False))
    assert la["error"] == "no footer: the test stopped before its end; it died after its last size, 16MiB"
    cut_json = head_json()[:700]
    (run,) = importers.import_text(cut_json, "x.json", "nccl-tests")
    assert run["status"] == "failed" and run["launches"][0]["error"].startswith("no footer")
    # -J written as the sweep goes, cut within its third result: the two whole ones say where it died
    whole = head_json()
    third = whole.index('{"size":%d,' % (1 << 20))
    (run,) = importers.import_text(whole[: third + 40], "x.json", "nccl-tests")
    assert run["launches"][0]["error"] == (
        "no footer: the test stopped before its end (the JSON file ends mid-way); it died after 64KiB of 1KiB..16MiB"
    )


def test_what_is_not_a_failure() -> None:
    # NCCL_TESTS_MIN_BW's verdict is on the numbers compare judges; 2.17.3 on then leave a trace on their way out
    lines = [*head(min_bw_failed=True), " .. vm pid 1412: Test failure common.cu:1454"]
    run = _one(_text(lines))
    assert run["status"] == "complete" and [la["status"] for la in run["launches"]] == ["ok"]


def test_a_good_and_a_failed_test_in_one_file() -> None:
    bad = head(graph=10, check=True, wrong={1 << 20: 7}, errors=7)
    run = _one(_text(head(), bad))
    assert run["status"] == "partial" and run["probe"]["config"]["modes"] == ["eager", "graph"]  # as set out
    good, failed = run["launches"]
    assert (
        good["status"] == "ok"
        and "ar_64KiB" in good["samples"]
        and not any("arg_" in k for k in good["samples"])
    )
    assert failed["status"] == "error" and failed["samples"] == {}
    line = len(head()) + 2  # its "# Collective test starting" line, after its version line
    assert (
        failed["error"]
        == f"#wrong 7 at 1MiB; 7 out-of-bounds values (nccl-tests: FAILED) [all_reduce_perf, graph, line {line}]"
    )
    # a loop of three runs whose last died at start-up, after the second's footer
    died = ["vm: Test CUDA failure common.cu:1530 'no CUDA-capable device is detected'"]
    run = _one(_text(head(), head(), died))
    assert run["status"] == "partial" and [la["status"] for la in run["launches"]] == ["ok", "ok", "error"]
    assert run["launches"][2]["error"].startswith("Test CUDA failure common.cu:1530")
    # compare judges the launches that finished, and says what it left out
    c = compare_runs(_one(_text(head(), head(), head())), run)
    assert "NEW run status is 'partial': using its 2 finished launches" in c.warnings
    assert c.new.skipped == [f"launch 2: error: {run['launches'][2]['error']}"]


def test_a_side_whose_only_test_failed_gets_no_verdict(tmp_path: Path) -> None:
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text(_text(head(check=True), head(check=True), head(check=True)))
    new.write_text(_text(head(check=True, wrong={1 << 20: 7}, errors=7)))
    p = run_cli("compare", str(old), str(new), "--json")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "UNCHANGED" not in p.stdout and "IMPROVED" not in p.stdout
    assert json.loads(p.stdout)["exit_code"] == 2  # --json: the refusal as regdiag.error/1
    assert "the run has no launch with samples (1 launch, status 'failed')" in p.stderr
    assert "launch 0 failed: #wrong 7 at 1MiB" in p.stderr  # the cause, not only the count


# --- a dead run against a good one; wrong values in NEW ----------------------------------------------

REAL = Path(__file__).resolve().parent.parent / "baselines" / "h200x2-collectives" / "nccl-tests.txt"


def _real_first_test() -> list[str]:
    """The first test of the real 2.19.6 output on two H200s, verbatim (its `=== RUN` section)."""
    lines = REAL.read_text().splitlines()
    end = next(i for i, ln in enumerate(lines) if ln.startswith("=== END"))
    return lines[: end + 1]


@pytest.mark.parametrize("fmt", ["2.19.6 stdout", "2.13 stdout", "-J"])
def test_a_dead_run_against_a_good_one_is_said_dead(fmt: str) -> None:
    if fmt == "2.19.6 stdout":
        good = _real_first_test()
        dead = good[: next(i for i, ln in enumerate(good) if ln.lstrip().startswith("262144 "))]
        good_text, dead_text, where = _text(good), _text(dead), "it died after 128KiB of 1KiB..256MiB"
    elif fmt == "2.13 stdout":
        lines = v2_13()
        cut = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("1048576 "))
        good_text, dead_text, where = (
            _text(lines),
            _text(lines[: cut + 1])[:-30],
            "died after 64KiB of 1KiB..16MiB",
        )
    else:
        whole = head_json()
        good_text, where = whole, "it died after 64KiB of 1KiB..16MiB"
        dead_text = whole[: whole.index('{"size":%d,' % (1 << 20)) + 40]
    good_run = _one(good_text)
    (dead_run,) = importers.import_text(dead_text, "dead", "nccl-tests")
    for old, new, allow in (
        (good_run, dead_run, False),
        (dead_run, good_run, False),
        (good_run, dead_run, True),
    ):
        with pytest.raises(BadInput) as e:
            compare_runs(old, new, allow_mismatch=allow, old_label="A", new_label="B")
        msg = str(e.value)
        assert "run died (launch 0: no footer: the test stopped before its end" in msg and where in msg
        assert msg.endswith("no launch of it finished, nothing to compare") and "configs differ" not in msg


def test_wrong_values_in_new_are_named_and_regress(tmp_path: Path) -> None:
    from regdiag.report.text import headline

    old = _one(_text(head(check=True), head(check=True), head(check=True)))
    new = _one(_text(head(check=True), head(check=True), head(check=True, wrong={1 << 20: 7}, errors=7)))
    c = compare_runs(old, new)
    assert c.verdict == "REGRESSED" and all(m.verdict != "REGRESSED" for m in c.metrics)
    assert c.verdict_note is not None and c.verdict_note.startswith(
        "NEW computed wrong results (launch 2: #wrong 7 at 1MiB"
    )
    assert c.verdict_note in headline(c)
    assert any(w.startswith("wrong results in NEW: 1 launch left out of the numbers") for w in c.warnings)
    back = compare_runs(new, old)  # wrong values in OLD only: said, not a regression of NEW
    assert back.verdict != "REGRESSED" and any(w.startswith("wrong results in OLD") for w in back.warnings)


@pytest.mark.cli
def test_wrong_values_exit_1_and_the_text_names_them(tmp_path: Path) -> None:
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text(_text(head(check=True), head(check=True), head(check=True)))
    new.write_text(_text(head(check=True), head(check=True), head(check=True, wrong={1 << 20: 7}, errors=7)))
    p = run_cli("compare", str(old), str(new))
    assert p.returncode == 1, p.stdout + p.stderr
    text = " ".join(p.stdout.split())
    assert (
        text.startswith("REGRESSED per size")
        and "new.txt computed wrong results (launch 2: #wrong 7 at 1MiB" in text
    )
    assert "[all_reduce_perf, line" in text  # the warning's own brackets are printed, not read as markup
