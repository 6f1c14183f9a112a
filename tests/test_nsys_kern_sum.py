"""nsys `nvtx_kern_sum` (NVTX Range Kernel Summary) read as phases: each NVTX range a phase of the
launch's profile with the kernels it launched, so `regdiag compare old.csv new.csv` splits each range's
change by kernel, good against bad, as it does for two `--profile` runs (issue 39, item 3).

The files are hand-made fixtures laid out from Nsight Systems' documented columns (tests/data/peer/
README.md): nsys does not run here. The pair: the probe's ranges (cycle holding draft, verify, extend),
50 instances each; in the new file verify's attention kernel takes 3.6 ms a cycle instead of 1.8 and an
index kernel appears in verify (0.3 ms); draft and extend are the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from test_cli_bad_input import one_error_line

from regdiag import importers
from regdiag.errors import BadInput
from regdiag.importers import nsys
from regdiag.profiles import profile_split, split_lines

PEER = Path(__file__).resolve().parent / "data" / "peer"
OLD, NEW = PEER / "nsys_nvtx_kern_sum_old.csv", PEER / "nsys_nvtx_kern_sum_new.csv"
OLD_TXT, NEW_TXT = PEER / "nsys_nvtx_kern_sum_old_console.txt", PEER / "nsys_nvtx_kern_sum_new_console.txt"
ATTN = "void flash::flash_fwd_splitkv_kernel<"
INDEX = "void at::native::index_elementwise_kernel<"
NVTX_SUM = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Style,Range\n"


def _split(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    split = profile_split(old["launches"], new["launches"], [])
    assert split is not None
    return split


def _row(split: dict[str, Any], phase: str) -> dict[str, Any]:
    return next(r for r in split["phases"] if r["phase"] == phase)


def test_a_kernel_grown_and_one_new_in_verify_read_as_gpu_work_and_draft_unchanged() -> None:
    old, new = importers.load_run(OLD), importers.load_run(NEW)
    assert old["select"] == "nvtx_kern_sum"
    assert old["probe"]["config"] == {"report": "nvtx_kern_sum", "sample": "kernels"}
    # the probe's phases; `cycle` (which holds them all again) is left out
    assert set(old["launches"][0]["profile"]["phases"]) == {"draft", "verify", "extend"}
    assert new["launches"][0]["samples"]["verify"] == [pytest.approx(10.7)]  # its kernels' ms per cycle
    assert old["launches"][0]["samples"]["verify"] == [pytest.approx(8.6)]
    split = _split(old, new)
    verify = _row(split, "verify")
    assert verify["moved"] and verify["delta"]["busy_ms"] == pytest.approx(2.1)
    assert verify["reading"]["kind"] == "gpu-work" and verify["reading"]["kernel"].startswith(ATTN)
    assert verify["reading"]["text"] == "GPU work, kernel flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits>"
    grown, added = verify["kernels"][:2]
    assert grown["name"].startswith(ATTN) and grown["name"].endswith("(Flash_fwd_params)")  # whole name
    assert grown["count"] == [61, 61] and grown["total_ms"] == [pytest.approx(1.8), pytest.approx(3.6)]
    assert added["name"].startswith(INDEX) and added["listed"] == [False, True]
    assert added["total_ms"] == [0.0, pytest.approx(0.3)]
    for phase in ("draft", "extend"):
        row = _row(split, phase)
        assert not row["moved"] and row["delta"]["wall_ms"] == 0
        assert all(k["delta_ms"] == 0 for k in row["kernels"])
    text = "\n".join(split_lines(split))
    assert (
        "verify +2.1 ms: GPU work +2.1 ms" in text
        and "-> GPU work, kernel flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits>" in text
    )
    assert "at::native::index_elementwise_kernel<at::native::gpu_index_kernel>: - -> 61 calls, - -> 0.3 ms (+0.3 ms)" in text
    assert "draft" not in text and "extend" not in text
    assert "'-': not run on that side" in text  # nsys lists every kernel: one missing did not run


@pytest.mark.cli  # two regdiag command lines
def test_compare_of_the_two_files_prints_the_split_and_keeps_whole_names_in_json() -> None:
    p = run_cli("compare", str(OLD), str(NEW))
    assert p.returncode == 3, p.stderr  # one report a side: no CI
    out = " ".join(p.stdout.split())  # the terminal wraps lines
    assert "verify +2.1 ms: GPU work +2.1 ms (kernels flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits> +1.8 ms" in out
    assert "-> GPU work, kernel flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits>" in out
    assert "flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits>: 61 -> 61 calls, 1.8 -> 3.6 ms (+1.8 ms)" in out
    assert "no nvtx_sum or nvtx_gpu_proj_sum beside nvtx_kern_sum" in out
    j = json.loads(run_cli("compare", str(OLD), str(NEW), "--json").stdout)
    verify = next(r for r in j["profile"]["phases"] if r["phase"] == "verify")
    assert (
        verify["reading"]["kernel"] == verify["kernels"][0]["name"]
        and len(verify["kernels"][0]["name"]) > 200
    )
    assert {m["name"] for m in j["metrics"]} == {"draft", "verify", "extend"}


def test_csv_and_console_layouts_give_the_same() -> None:
    text = NEW_TXT.read_text()
    assert "--format" not in text and importers.sniff(text) == "nsys"
    for csv_file, console in ((OLD, OLD_TXT), (NEW, NEW_TXT)):
        a, b = importers.load_run(csv_file), importers.load_run(console)
        assert a["launches"][0]["samples"] == b["launches"][0]["samples"]
        assert a["launches"][0]["profile"] == b["launches"][0]["profile"]
    assert (
        _split(importers.load_run(OLD), importers.load_run(NEW))["phases"]
        == (_split(importers.load_run(OLD_TXT), importers.load_run(NEW_TXT))["phases"])
    )
    mixed = _row(_split(importers.load_run(OLD), importers.load_run(NEW_TXT)), "verify")
    assert mixed["reading"]["kernel"].startswith(ATTN)  # a CSV against a console file


def _with_walls(kern: Path, tmp_path: Path, verify_ns: float) -> Path:
    """The kernel summary with the nvtx_sum of the same profile before it (one `nsys stats` of both)."""
    rows = [(":verify", verify_ns), (":draft", 1_400_000.0), (":extend", 900_000.0), (":cycle", 12_000_000.0)]
    walls = "".join(
        f"70.0,{v * 50:.0f},50,{v:.1f},{v:.1f},{v:.0f},{v:.0f},1000.0,PushPop,{r}\n" for r, v in rows
    )
    f = tmp_path / f"{kern.stem}-{verify_ns:.0f}.csv"
    f.write_text(NVTX_SUM + walls + "\n" + kern.read_text())
    return f


def test_with_nvtx_sum_beside_it_a_slower_range_with_the_same_kernels_reads_host_bound(
    tmp_path: Path,
) -> None:
    good, bad = _with_walls(OLD, tmp_path, 9_000_000.0), _with_walls(OLD, tmp_path, 14_000_000.0)
    with pytest.raises(BadInput, match=r"holds 2 results \('nvtx_sum', 'nvtx_kern_sum'\)"):
        importers.load_run(good)
    old, new = (importers.load_run(f, select="nvtx_kern_sum") for f in (good, bad))
    assert old["probe"]["config"] == {"report": "nvtx_kern_sum", "sample": "nvtx_sum"}
    assert old["launches"][0]["samples"]["verify"] == [pytest.approx(9.0)]  # the range's own time
    verify = old["launches"][0]["profile"]["phases"]["verify"]
    assert verify["wall_ms"] == pytest.approx(9.0) and verify["idle_ms"] == pytest.approx(0.4)
    row = _row(_split(old, new), "verify")
    assert row["delta"]["idle_ms"] == pytest.approx(5.0) and row["delta"]["busy_ms"] == 0
    assert row["reading"]["text"] == "GPU idle, host-bound"
    # and the kernel change of the fixture pair, walls alike, is still GPU work
    grown = importers.load_run(_with_walls(NEW, tmp_path, 9_000_000.0), select="nvtx_kern_sum")
    assert _row(_split(old, grown), "verify")["reading"]["text"].startswith("GPU work, kernel flash::")
    # a file with the range times against one without: refused as two configs that differ
    line = one_error_line(run_cli("compare", f"{good}#nvtx_kern_sum", str(NEW)))
    assert "probe configs differ" in line and "sample" in line


PROJ_HEAD = (
    "Range,Style,Total Proj Time (ns),Total Range Time (ns),Range Instances,Proj Avg (ns),Proj Med (ns),"
    "Proj Min (ns),Proj Max (ns),Proj StdDev (ns),Total GPU Ops,Avg GPU Ops,Avg Range Lvl,Avg Num Child\n"
)


def _with_projection(kern: Path, tmp_path: Path, verify_proj_ns: float) -> Path:
    """The kernel summary after nvtx_gpu_proj_sum (documented columns): verify's range projected onto the
    GPU takes verify_proj_ns, its CPU range 9.5 ms."""
    rows = [(":verify", verify_proj_ns, 9_500_000.0, 549), (":draft", 1_300_000.0, 1_350_000.0, 90)]
    text = "".join(
        f"{r},PushPop,{p * 50:.0f},{h * 50:.0f},50,{p:.1f},{p:.1f},{p:.0f},{p:.0f},100.0,{ops * 50},{ops},1.0,0.0\n"
        for r, p, h, ops in rows
    )
    f = tmp_path / f"{kern.stem}-proj-{verify_proj_ns:.0f}.csv"
    f.write_text(PROJ_HEAD + text + "\n" + kern.read_text())
    return f


def test_with_the_gpu_projection_beside_it_idle_is_the_gpu_time_its_kernels_leave(tmp_path: Path) -> None:
    good, bad = _with_projection(OLD, tmp_path, 8_800_000.0), _with_projection(OLD, tmp_path, 11_800_000.0)
    proj = importers.load_run(good, select="nvtx_gpu_proj_sum")  # a report of its own: the median projection
    assert proj["launches"][0]["samples"] == {"verify": [pytest.approx(8.8)], "draft": [pytest.approx(1.3)]}
    old, new = (importers.load_run(f, select="nvtx_kern_sum") for f in (good, bad))
    assert old["probe"]["config"] == {"report": "nvtx_kern_sum", "sample": "nvtx_gpu_proj_sum"}
    verify = old["launches"][0]["profile"]["phases"]["verify"]
    assert verify["wall_ms"] == pytest.approx(8.8) and verify["busy_ms"] == pytest.approx(8.6)
    assert verify["idle_ms"] == pytest.approx(0.2) and verify["host_ms"] == pytest.approx(9.5)
    # extend has no projection row: its wall is its kernels' time
    assert old["launches"][0]["profile"]["phases"]["extend"]["idle_ms"] == 0
    row = _row(_split(old, new), "verify")
    assert row["delta"]["idle_ms"] == pytest.approx(3.0) and row["reading"]["text"] == "GPU idle, host-bound"
    assert "nvtx_gpu_proj_sum" in _split(old, new)["note"]


def test_the_gpu_projection_as_a_console_table_gives_the_same_walls(tmp_path: Path) -> None:
    csv_file = _with_projection(OLD, tmp_path, 8_800_000.0)
    cols = PROJ_HEAD.strip().split(",")
    cells = [
        [":verify", "PushPop", "440,000,000", "475,000,000", "50", "8,800,000.0", "8,800,000.0", "8,800,000"]
        + ["8,800,000", "100.0", "27,450", "549", "1.0", "0.0"],
        [":draft", "PushPop", "65,000,000", "67,500,000", "50", "1,300,000.0", "1,300,000.0", "1,300,000"]
        + ["1,300,000", "100.0", "4,500", "90", "1.0", "0.0"],
    ]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]

    def line(row: list[str]) -> str:
        return " " + "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )

    table = [" ** NVTX GPU Projection Summary (nvtx_gpu_proj_sum):", "", line(cols)]
    table += [" " + "  ".join("-" * w for w in widths), *(line(r) for r in cells), ""]
    console = tmp_path / "proj.txt"
    console.write_text("\n".join(table) + "\n" + OLD_TXT.read_text())
    a, b = (importers.load_run(f, select="nvtx_kern_sum") for f in (csv_file, console))
    assert b["probe"]["config"]["sample"] == "nvtx_gpu_proj_sum"
    assert a["launches"][0]["profile"] == b["launches"][0]["profile"]


HEAD = (
    "NVTX Range,Style,PID,TID,NVTX Inst,Kern Inst,Total Time (ns),Avg (ns),Med (ns),Min (ns),Max (ns),"
    "StdDev (ns),Kernel Name\n"
)


def test_ranks_are_summed_and_kernels_outside_a_range_left_out() -> None:
    rows = [
        ":verify,PushPop,100,100,10,20,4000000,200000.0,200000.0,1,1,0,gemm\n",
        ":verify,PushPop,100,100,8,8,800000,100000.0,100000.0,1,1,0,fill\n",
        ":verify,PushPop,200,200,10,20,6000000,300000.0,300000.0,1,1,0,gemm\n",
        ",,100,100,0,5,500000,100000.0,100000.0,1,1,0,outside\n",
        ":cycle,PushPop,100,100,10,28,4800000,1.0,1.0,1,1,0,gemm\n",
    ]
    (run,) = importers.import_text(HEAD + "".join(rows), "ranks.csv")
    prof = run["launches"][0]["profile"]
    assert prof["occurrences"] == {"verify": 20} and set(prof["phases"]) == {"verify"}
    verify = prof["phases"]["verify"]
    assert verify["busy_ms"] == pytest.approx(10.8 / 20) and verify["kernels"] == pytest.approx(48 / 20)
    assert [(k["name"], k["count"]) for k in verify["top"]] == [("gemm", 2.0), ("fill", 0.4)]


@pytest.mark.cli  # two regdiag command lines
def test_a_bad_kernel_summary_is_one_line(tmp_path: Path) -> None:
    lines = NEW.read_text().splitlines()
    n = next(i for i, ln in enumerate(lines) if ln.startswith(":verify"))
    lines[n] = lines[n].replace(",12200,", ",n/a,")
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    line = one_error_line(run_cli("compare", str(OLD), str(bad)))
    assert line == f"regdiag: error: {bad}: line {n + 1}: 'Kern Inst' is not a number"
    empty = tmp_path / "empty.csv"
    empty.write_text(HEAD + ":cycle,PushPop,1,1,1,1,1,1.0,1.0,1,1,0,gemm\n")
    line = one_error_line(run_cli("compare", str(OLD), str(empty)))
    assert "holds no kernel inside a named NVTX range" in line
    assert nsys.KERN in nsys.TITLE
