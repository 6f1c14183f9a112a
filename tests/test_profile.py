"""`probe spec-decode --profile`: per-phase GPU busy / idle, host time, syncs and top kernels from
torch.profiler after the measured window, the trace beside the record, and compare's split of a
phase's change into GPU work and GPU idle (docs/probes.md, "Profile").

The launch tests run the real probe on CPU, where the "GPU" is the aten ops (busy: time inside them,
idle: host time between them). The CUDA reading of a trace (kernels, runtime calls, graph launches,
syncs) cannot run here: it is checked on a trace shaped as torch.profiler exports one on CUDA (the
event categories and fields Kineto writes), and on the H200 by bench/gpu_profile.sh.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch.profiler  # imported once at collection, as the probe kit's tests do (not inside a unit test)
from probe_helpers import PROBES, TINY

from regdiag.compare import compare_runs
from regdiag.hosts.local import LocalHost
from regdiag.measure.probe import run_probe
from regdiag.measure.summary import summarize_run
from regdiag.profiles import profile_split, short_name, split_lines

sys.path.insert(0, str(PROBES))

import _profile  # noqa: E402

ARGS = [*TINY, "--profile", "--profile-cycles", "2"]


def _run(tmp: Path, name: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    res = run_probe(
        LocalHost(), "spec-decode", ARGS, launches=2, output=tmp / f"{name}.json", env=env, snapshot=False
    )
    assert all(la["status"] == "ok" for la in res.run["launches"]), res.run["launches"][-1].get("error")
    return res.run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("profile")
    return {
        "tmp": tmp,
        "good": _run(tmp, "good"),
        "host": _run(tmp, "host", {"REGDIAG_PROBE_HOST_SLOW": "verify:40"}),
        "extra": _run(tmp, "extra", {"REGDIAG_PROBE_EXTRA_OP": "verify:40x384"}),
    }


@pytest.mark.launch
@pytest.mark.slow
def test_a_profiled_launch_records_per_phase_figures_and_a_trace(runs: dict[str, Any]) -> None:
    run = runs["good"]
    first, second = run["launches"]
    for la in (first, second):
        p = la["profile"]
        assert p["device"] == "cpu" and p["cycles"] == 2 and p["syncs"].startswith("aten::_local_scalar_dense")
        assert set(p["phases"]) == {"draft", "verify", "extend"}
        for f in p["phases"].values():
            assert f["wall_ms"] > 0 and f["busy_ms"] > 0 and f["kernels"] > 0
            assert f["idle_ms"] == pytest.approx(f["wall_ms"] - f["busy_ms"], abs=1e-3)
            assert f["host_ms"] == f["wall_ms"] and f["syncs"] == 0
            top = f["top"][0]
            assert top["name"].startswith("aten::") and top["count"] > 0 and 0 < top["share"] <= 1
        assert p["cost"]["profile_s"] > 0 and p["cost"]["cycle_ms_measured"] > 0
        assert "footer" in la and "profile" not in la["footer"]  # moved out of the footer, kept once
    # the first launch keeps its trace beside the record; it opens as Chrome / Perfetto JSON
    trace = first["profile"]["trace"]
    assert trace["here"] is True and second["profile"].get("trace") is None
    path = Path(trace["path"])
    assert path == runs["tmp"] / "good.profile-0.json.gz"  # beside the record (good.json)
    assert path.stat().st_size == trace["bytes"] and path.stat().st_mode & 0o077 == 0
    with gzip.open(path, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    names = {e.get("name") for e in events if e.get("cat") == "user_annotation"}
    assert {"cycle", "draft", "verify", "extend"} <= names
    s = summarize_run(run)["profile"]
    assert s["launches"] == 2 and s["cost_s_per_launch"] > 0 and s["traces"][0]["path"] == trace["path"]


@pytest.mark.launch
@pytest.mark.slow
def test_a_host_side_slowdown_of_verify_reads_gpu_idle_host_bound(runs: dict[str, Any]) -> None:
    c = compare_runs(runs["good"], runs["host"], host_reading=False)
    verify = next(r for r in c.profile["phases"] if r["phase"] == "verify")
    assert verify["moved"] and verify["delta"]["idle_ms"] > 25, verify["delta"]
    assert verify["reading"] == {"kind": "gpu-idle", "bound": "host-bound", "text": "GPU idle, host-bound"}
    assert verify["delta"]["dispatch_ms"] > 25
    text = "\n".join(split_lines(c.profile))
    assert "-> GPU idle, host-bound" in text and "on CPU, GPU work is the time inside aten ops" in text
    assert c.to_dict()["profile"]["phases"][1]["phase"] == "verify"


@pytest.mark.launch
@pytest.mark.slow
def test_an_extra_op_in_verify_reads_gpu_work_and_names_the_kernel(runs: dict[str, Any]) -> None:
    c = compare_runs(runs["good"], runs["extra"], host_reading=False)
    verify = next(r for r in c.profile["phases"] if r["phase"] == "verify")
    assert verify["delta"]["busy_ms"] > abs(verify["delta"]["idle_ms"]), verify["delta"]
    assert verify["reading"]["kind"] == "gpu-work" and verify["reading"]["kernel"] == "aten::mm"
    mm = next(k for k in verify["kernels"] if k["name"] == "aten::mm")
    assert mm["count"][1] - mm["count"][0] == pytest.approx(40)  # the 40 planted matmuls, per cycle
    assert "-> GPU work, kernel aten::mm" in "\n".join(split_lines(c.profile))


# ------------------------------------------------------------------ a CUDA trace, read (no GPU here)


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def _cuda_trace() -> dict[str, Any]:
    """One cycle as Kineto writes it on CUDA: draft a graph replay (its two kernels carry the launch's
    correlation id), verify eager with two kernels, a blocking device-to-host copy and a sync; the host
    sits 300 us between verify's launches (GPU idle there)."""
    k = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
    )
    return {
        "traceEvents": [
            _x("user_annotation", "cycle", 0, 1000),
            _x("user_annotation", "draft", 10, 40),
            _x("cuda_runtime", "cudaGraphLaunch_v10000", 20, 10, correlation=1),
            _x("kernel", "graph_kernel_a", 40, 50, tid=7, correlation=1),
            _x("kernel", "graph_kernel_b", 90, 30, tid=7, correlation=1),
            _x("user_annotation", "verify", 60, 600),
            _x("cuda_runtime", "cudaLaunchKernel", 70, 5, correlation=2),
            _x("kernel", k, 120, 100, tid=7, correlation=2),
            _x("cuda_runtime", "cudaLaunchKernel", 400, 5, correlation=3),
            _x("kernel", "gemm_kernel", 410, 100, tid=7, correlation=3),
            _x("cuda_runtime", "cudaMemcpyAsync", 420, 5, correlation=4),
            _x("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 510, 10, tid=7, correlation=4),
            _x("cuda_runtime", "cudaStreamSynchronize", 430, 95, correlation=5),
            {"ph": "M", "name": "process_name", "args": {"name": "python"}},
        ]
    }


def test_a_cuda_trace_is_read_per_phase() -> None:
    out = _profile.analyze(_cuda_trace(), ["draft", "verify", "extend"], cuda=True, cycles=1)
    d, v = out["phases"]["draft"], out["phases"]["verify"]
    assert out["graph_kernels_visible"] is True
    assert d["graph_launches"] == 1 and d["kernels"] == 2 and d["busy_ms"] == pytest.approx(0.08)
    assert d["wall_ms"] == pytest.approx(0.11)  # host enters at 10, the graph's last kernel ends at 120
    # verify: the GPU can start at 120 (draft's end), ends at 660 (the host leaves); busy 100 + 100 + 10
    assert v["wall_ms"] == pytest.approx(0.54) and v["busy_ms"] == pytest.approx(0.21)
    assert v["idle_ms"] == pytest.approx(0.33)
    assert v["syncs"] == 1 and v["dtoh"] == 1 and v["sync_wait_ms"] == pytest.approx(0.095)
    assert v["host_ms"] == pytest.approx(0.6) and v["dispatch_ms"] == pytest.approx(0.505)
    assert v["launches"] == 2 and v["kernels"] == 2
    assert v["top"][0]["count"] == 1 and v["top"][0]["share"] == pytest.approx(100 / 540, abs=1e-3)
    assert out["phases"]["extend"]["wall_ms"] == 0  # not in the trace: zeros, not an error
    fill = "at::native::vectorized_elementwise_kernel<at::native::FillFunctor>"  # the first named argument kept
    assert short_name(v["top"][0]["name"]) in ("gemm_kernel", fill)
    assert short_name(_cuda_trace()["traceEvents"][7]["name"]) == fill


def _launch(**phases: dict[str, Any]) -> dict[str, Any]:
    base = {"wall_ms": 1.0, "busy_ms": 0.8, "idle_ms": 0.2, "host_ms": 0.5, "dispatch_ms": 0.5}
    full = {ph: {**base, "syncs": 0, "kernels": 10, "sync_wait_ms": 0.0, **f} for ph, f in phases.items()}
    return {"profile": {"cycles": 3, "device": "cuda", "graph_kernels_visible": True, "phases": full}}


def test_the_split_names_syncs_and_leaves_unprofiled_runs_alone() -> None:
    good = [_launch(verify={"top": [{"name": "k", "count": 5, "total_ms": 0.8}]})] * 2
    synced = {"wall_ms": 3.0, "idle_ms": 2.2, "syncs": 4, "sync_wait_ms": 2.0, "host_ms": 2.6}
    bad = [_launch(verify={**synced, "top": [{"name": "k", "count": 5, "total_ms": 0.8}]})] * 2
    split = profile_split(good, bad, ["verify"])
    assert split is not None
    assert split["phases"][0]["reading"]["text"] == "GPU idle, host syncs"
    assert "syncs +4" in split_lines(split)[1]
    assert profile_split(good, [{"samples": {}}], ["verify"]) is None
    # a graph phase whose replays' kernels were not traced reads busy 0: not split, and said so
    hidden = [_launch(verify={**synced, "kernels": 0, "graph_launches": 1, "top": []})] * 2
    assert profile_split(good, hidden, ["verify"])["phases"][0]["reading"]["kind"] == "unknown"


@pytest.mark.cli
@pytest.mark.launch
@pytest.mark.slow
def test_ab_with_profile_splits_the_change_and_keeps_each_sides_trace(cli: Any, tmp_path: Path) -> None:
    prefix = tmp_path / "ab"
    opts = "ab --probe spec-decode --launches 2 --margin 25% --no-snapshot --json".split()
    side_b = "REGDIAG_PROBE_HOST_SLOW=verify:40"
    home = {"REGDIAG_HOME": str(tmp_path / "home")}
    r = cli(*opts, "--a", "", "--b", side_b, "-o", str(prefix), "--", *ARGS, env=home)
    assert r.returncode in (1, 3), r.stderr[-2000:]  # REGRESSED, or INCONCLUSIVE on 2 pairs
    out = json.loads(r.stdout)
    verify = next(p for p in out["profile"]["phases"] if p["phase"] == "verify")
    assert verify["reading"]["text"] == "GPU idle, host-bound", verify["delta"]
    traces = sorted((tmp_path / "home" / "runs").glob("*.profile-0.json.gz"))
    assert len(traces) == 2  # pair 0 of each side keeps its trace, beside that side's stored record


@pytest.mark.launch
@pytest.mark.slow
def test_explain_says_which_keeps_a_profiled_phase_off_its_floor(runs: dict[str, Any]) -> None:
    from regdiag.explain import explain_run

    verify = next(r for r in explain_run(runs["host"]).phases if r.phase == "verify")
    assert verify.note.startswith("far from the floor: GPU idle") and "host-bound" in verify.note
    assert verify.profile is not None and verify.profile["idle_ms"] > verify.profile["busy_ms"]


@pytest.mark.launch
@pytest.mark.slow
def test_bisect_with_profile_names_the_culprit_and_splits_its_change(tmp_path: Path) -> None:
    from regdiag.bisect import Request, run_bisect
    from regdiag.report.bisect import to_markdown

    req = Request(
        good="-REGDIAG_PROBE_HOST_SLOW",
        bad="REGDIAG_PROBE_HOST_SLOW=verify:40",
        probe="spec-decode",
        probe_args=ARGS,
        journal=str(tmp_path / "journal.jsonl"),
        launches=2,
        max_launches=3,
        margin=0.25,
    )
    r = run_bisect(req)
    assert r["verdict"] == "CULPRIT", r["statement"]
    [c] = r["culprits"]
    assert [f["name"] for f in c["factors"]] == ["REGDIAG_PROBE_HOST_SLOW"]
    verify = next(p for p in c["profile"]["phases"] if p["phase"] == "verify")
    assert verify["reading"]["text"] == "GPU idle, host-bound", verify["delta"]
    assert "-> GPU idle, host-bound" in to_markdown(r)


def test_a_profiler_that_fails_keeps_the_cycles_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(**kw: Any) -> Any:
        raise RuntimeError("no Kineto here")

    monkeypatch.setattr(torch.profiler, "profile", broken)
    ran: list[Any] = []
    out = _profile.run_profiled(2, False, lambda r: ran.append(r) or [2.0, 1.0], ["verify"], None, 1.5)
    assert ran == [None, None]  # the cycles still ran (other ranks wait in them), without ranges
    assert out["error"].startswith("RuntimeError: the profiler did not start") and "phases" not in out
    assert out["events_ms"] == {"cycle": 2.0, "verify": 1.0} and out["cost"]["cycle_ms_measured"] == 1.5
    assert summarize_run({"launches": [{"status": "ok", "samples": {"cycle": [1.0]}, "profile": out}]})[
        "profile"
    ] == {"error": out["error"], "launches": 1}


@pytest.mark.launch
@pytest.mark.slow
def test_two_trace_files_compare_with_the_same_split(runs: dict[str, Any]) -> None:
    from regdiag.importers import load_run

    tmp = runs["tmp"]
    good, extra = (load_run(tmp / f"{name}.profile-0.json.gz") for name in ("good", "extra"))
    assert good["probe"]["name"] == "torch.profiler" and {"draft", "verify", "extend"} <= set(good["units"])
    c = compare_runs(good, extra, host_reading=False)
    verify = next(r for r in c.profile["phases"] if r["phase"] == "verify")
    assert verify["reading"]["kind"] == "gpu-work" and verify["reading"]["kernel"] == "aten::mm"
    assert c.metric("verify").new_centers[0] > c.metric("verify").old_centers[0]


def test_a_kernel_new_on_one_side_and_above_the_other_s_list_is_the_one_named() -> None:
    # as on the H200 with 20 planted GEMMs of a new shape: that kernel is in no old top list, yet its time
    # is above the old side's smallest listed kernel, so it was not there at all, and it is what moved
    from regdiag.profiles import _kernels

    old = {"layer_norm": {"count": 33.0, "total_ms": 0.2}, "splitK": {"count": 16.0, "total_ms": 0.047}}
    new = {
        **old,
        "nvjet_256x128": {"count": 20.0, "total_ms": 3.331},
        "tail": {"count": 1.0, "total_ms": 0.01},
    }
    ks = _kernels(old, new)
    assert ks[0]["name"] == "nvjet_256x128" and ks[0]["count"] == [0.0, 20.0]
    assert ks[-1]["name"] == "tail"  # below the old list's floor: it may have been there unlisted
