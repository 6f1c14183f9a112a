"""`probe engine --profile`: torch.profiler around the engine's own phase functions, through the hook
that times them, read per phase (GPU work, GPU idle, host dispatch, syncs, copies, collectives, top
kernels, a per-cycle spread); compare's split names a host sync planted in the engine's verify.

The launches run the fake engine (tests/engine_fake: FAKE_VERIFY_SYNCS plants `.item()` reads in its
verify) and Hugging Face transformers' assisted generation (hf_assisted.py --verify-syncs) on CPU, where
a sync is the op that on a GPU waits for it (aten::_local_scalar_dense). The CUDA reading of the same
hook runs on a GPU in bench/gpu_engine_profile.sh.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from server_helpers import free_port
from test_engine_probe import FAKE, FAKE_PHASES  # --accept too: the hook's reader beside the profile

from regdiag.profiles import profile_split, short_name, split_lines

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "probes"))

import _profile  # noqa: E402

PY = sys.executable  # the engine's interpreter: the one with torch (the profiler is its instrument)


def _fake(cli: Any, out: Path, syncs: int, launches: int) -> dict[str, Any]:
    port = free_port()
    cmd = f"FAKE_VERIFY_SYNCS={syncs} PYTHONPATH={FAKE}/site {PY} {FAKE}/fake_engine.py --port {port} --workers 1"
    r = cli("probe", "engine", "--launch-cmd", cmd, "--url", f"http://127.0.0.1:{port}", "--no-snapshot",
            *FAKE_PHASES, "-L", str(launches), "-R", "1", "--max-tokens", "45", "--profile",
            "--profile-cycles", "3", "-o", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "cycles after the warm-up" in r.stdout  # the probe summary's profile lines
    return json.loads(out.read_text())


@pytest.mark.launch
@pytest.mark.engine
def test_fake_engine_profile_splits_each_phase_and_a_planted_sync_reads_as_syncs(cli, tmp_path):
    old = _fake(cli, tmp_path / "old.json", 0, 1)  # one engine start
    new = _fake(cli, tmp_path / "new.json", 3, 2)  # two windows of one start: a profile each
    assert old["probe"]["config"]["profile_cycles"] == 3
    for run in (old, new):
        for la in run["launches"]:
            p = la["profile"]
            assert p["device"] == "cpu" and p["cycles"] == 3 and p["processes"] == 1, p
            for ph in ("draft", "verify", "extend"):
                f = p["phases"][ph]
                assert f["wall_ms"] > 0 and f["dispatch_ms"] > 0 and f["spread"]["n"] == 3
                assert f["wall_ms"] == pytest.approx(
                    f["busy_ms"] + f["idle_ms"] + f["collective_ms"], abs=1e-3
                )
            # the 2 warm-up cycles, the profiler's own and the 3 profiled are dropped: none is measured
            assert la["warmup_dropped"] == 6
    syncs = [la["profile"]["phases"]["verify"]["syncs"] for la in (*old["launches"], *new["launches"])]
    assert syncs == [0, 3, 3]  # the planted .item() reads, per cycle, in each window
    assert new["launches"][1]["profile"]["phases"]["verify"]["top"]  # the second window read its own
    r = cli("compare", str(tmp_path / "old.json"), str(tmp_path / "new.json"), env={"COLUMNS": "250"})
    verify = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("verify ") and "GPU work" in ln)
    assert "syncs +3" in verify, r.stdout
    assert "(±" in verify  # the noise gate: the change with its 95 % interval


@pytest.fixture
def transformers():
    return pytest.importorskip("transformers")


@pytest.mark.launch
@pytest.mark.engine
def test_transformers_engine_profile_reads_draft_and_verify_and_the_planted_sync(cli, tmp_path, transformers):
    paths = []
    for syncs in (0, 2):
        out = tmp_path / f"hf{syncs}.json"
        cmd = f"{PY} {FAKE}/hf_assisted.py --tokens 40 --verify-syncs {syncs}"
        r = cli("probe", "engine", "--preset", "transformers", "--no-snapshot", "-L", "1", "--profile",
                "--profile-cycles", "3", "-o", str(out), "--launch-cmd", cmd)  # fmt: skip
        assert r.returncode == 0, r.stderr
        la = json.loads(out.read_text())["launches"][0]
        p = la["profile"]
        for ph in ("draft", "verify"):  # the models' own aten ops, inside the engine's phase functions
            assert p["phases"][ph]["busy_ms"] > 0 and "aten::mm" in [
                k["name"] for k in p["phases"][ph]["top"]
            ]
        assert p["phases"]["verify"]["syncs"] == syncs
        paths.append(str(out))
    r = cli("compare", *paths, env={"COLUMNS": "250"})
    verify = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("verify ") and "GPU work" in ln)
    assert "syncs +2" in verify, r.stdout


# ------------------------------------------------------------------------- the reading, in process


def _profiled(body: Any) -> dict[str, Any]:
    """`body()` run twice as a cycle with one phase "verify" under the real torch.profiler on CPU."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        ranges = _profile.Ranges()
        for _ in range(2):
            ranges.range_push("cycle")
            ranges.range_push("verify")
            body()
            ranges.range_pop()
            ranges.range_pop()
    return _profile._read(prof, ["verify"], False, 2, None)["phases"]["verify"]


def test_item_reads_count_as_syncs_and_a_gloo_all_reduce_as_collectives(tmp_path):
    x = torch.ones(256, 256)
    v = _profiled(lambda: [x.sum().item() for _ in range(4)])
    assert v["syncs"] == 4 and v["collective_ms"] == 0 and v["spread"]["n"] == 2
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        v = _profiled(lambda: (x @ x, dist.all_reduce(x)))
    finally:
        dist.destroy_process_group()
    assert v["collectives"] >= 1 and v["collective_ms"] > 0
    names = [k["name"] for k in v["top"]]
    assert "aten::mm" in names  # the phase's work; the all-reduce is not in busy_ms
    assert v["wall_ms"] == pytest.approx(v["busy_ms"] + v["idle_ms"] + v["collective_ms"], abs=1e-3)


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def test_an_nccl_kernel_is_a_collective_not_gpu_work():
    # one cycle as Kineto writes it on CUDA: a GEMM, then a rank waiting 400 us in an NCCL all-reduce
    trace = {
        "traceEvents": [
            _x("user_annotation", "cycle", 0, 1000),
            _x("user_annotation", "verify", 10, 900),
            _x("cuda_runtime", "cudaLaunchKernel", 20, 5, correlation=1),
            _x(
                "kernel",
                "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128>(Params)",
                30,
                100,
                tid=7,
                correlation=1,
            ),  # fmt: skip
            _x("cuda_runtime", "cudaLaunchKernel", 40, 5, correlation=2),
            _x(
                "kernel",
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                130,
                400,
                tid=7,
                correlation=2,
            ),  # fmt: skip
        ]
    }
    v = _profile.analyze(trace, ["verify"], cuda=True, cycles=1)["phases"]["verify"]
    assert v["busy_ms"] == pytest.approx(0.1) and v["collective_ms"] == pytest.approx(0.4)
    assert v["collectives"] == 1 and v["idle_ms"] == pytest.approx(0.4)  # 900 wall - 100 work - 400 waiting


def test_kernel_names_keep_their_first_template_argument():
    attn = "void cutlass::device_kernel<flash::FlashAttnFwdSm90<cutlass::tuple<int>, 128>, flash::Tile>(flash::Params)"
    gemm = "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GemmShape<128> > >(P)"
    assert short_name(attn) == "cutlass::device_kernel<flash::FlashAttnFwdSm90>"
    assert short_name(gemm) == "cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal>"
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int)"
    assert (
        short_name(fill) == "at::native::vectorized_elementwise_kernel<at::native::FillFunctor>"
    )  # 4 skipped
    assert short_name("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == (
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    )


def _side(wall: float, sd: float, syncs: float = 0.0) -> list[dict[str, Any]]:
    f = {"wall_ms": wall, "busy_ms": 1.0, "idle_ms": wall - 1.0, "host_ms": wall, "dispatch_ms": wall - 1.0,
         "sync_wait_ms": 0.0, "syncs": syncs, "kernels": 10, "top": [],
         "spread": {"n": 5, "sd": {"wall_ms": sd, "busy_ms": 0.01, "idle_ms": sd, "dispatch_ms": sd,
                                   "sync_wait_ms": 0.0, "syncs": 0.0, "collective_ms": 0.0}}}  # fmt: skip
    return [
        {"profile": {"cycles": 5, "device": "cuda", "graph_kernels_visible": None, "phases": {"verify": f}}}
    ]


def test_the_noise_gate_says_how_sure_a_reading_is():
    # 1 ms moved with cycles spread 2 ms: within the noise, said so; the same 1 ms with spread 0.05 ms: sure
    noisy = profile_split(_side(10.0, 2.0), _side(11.0, 2.0), ["verify"])["phases"][0]
    assert noisy["noise"]["sure"]["wall_ms"] is False
    assert (
        "-> time within noise (±"
        in split_lines(profile_split(_side(10.0, 2.0), _side(11.0, 2.0), ["verify"]))[1]
    )
    sure = profile_split(_side(10.0, 0.05), _side(11.0, 0.05), ["verify"])
    assert sure["phases"][0]["noise"]["sure"]["wall_ms"] is True
    assert split_lines(sure)[1].endswith("-> GPU idle, host-bound")
    # two syncs more a cycle (the same in every cycle) are sure however small their time
    synced = profile_split(_side(10.0, 2.0), _side(10.01, 2.0, syncs=2.0), ["verify"])
    line = split_lines(synced)[1]
    assert "syncs +2" in line and line.endswith("syncs +2 a cycle, beyond it")
