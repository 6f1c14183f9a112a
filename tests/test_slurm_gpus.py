"""What `--slurm` asks for a probe's GPUs (regdiag/measure/needs.py, regdiag/hosts/slurm_check.py), as
arguments: the probe's options read, salloc's request added unless --slurm-args makes one, a step's own
share of a node. On the real local Slurm (tests/test_slurm.py) the request is granted on fake GPUs and
the start check refuses a CUDA probe whose steps see no GPU."""

from __future__ import annotations

import pytest

from regdiag.hosts.slurm_check import names_gpus, per_node, salloc_gpus, step_gpus
from regdiag.measure.needs import GpuNeed, gpu_need


@pytest.mark.parametrize(
    ("probe", "args", "count"),
    [
        ("spec-decode", ["--preset", "tiny", "--cycles", "12"], 0),  # the CI shape: CPU
        ("spec-decode", ["--preset", "tiny", "--device", "cuda"], 1),
        ("spec-decode", ["--preset", "kimi-k2", "--tp", "8"], 8),
        ("spec-decode", ["--tp=4"], 4),  # preset auto: kimi-k2 where there is a GPU
        ("spec-decode", ["--preset", "kimi-k2", "--tp", "8", "--device", "cpu"], 0),
        ("collectives", [], 2),  # its --tp is 2 by default
        ("collectives", ["--device", "cpu"], 0),
        ("engine", ["--tp", "8"], 0),  # nothing regdiag can read: --slurm-args says
        (None, [], 0),  # a --command
    ],
)
def test_the_gpus_a_launch_needs_come_from_the_probe_options(probe, args, count):
    need = gpu_need(probe, args)
    assert need.count == count
    if count:
        assert "--tp" in need.why


def test_salloc_asks_for_the_probe_gpus_unless_slurm_args_do(monkeypatch):
    for var in ("SALLOC_GPUS", "SALLOC_GPUS_PER_NODE", "SALLOC_GPUS_PER_TASK", "SALLOC_GRES"):
        monkeypatch.delenv(var, raising=False)
    need = GpuNeed(8, "--preset kimi-k2 --tp 8")
    assert salloc_gpus(["--partition=gpu", "--time=90"], need) == ["--gpus-per-node=8"]
    assert salloc_gpus([], GpuNeed(0, "--preset tiny")) == [] and salloc_gpus([], None) == []
    for given in (
        ["--gpus-per-node=4"],
        ["-G", "8"],
        ["--gres=gpu:h200:8"],
        ["--gres", "gpu:2"],
        ["--gpus=16"],
    ):
        assert names_gpus(given) and salloc_gpus(given, need) == [], given
    assert not names_gpus(["--gres=nic:1", "--partition=gpu"])
    monkeypatch.setenv("SALLOC_GPUS_PER_NODE", "8")
    assert salloc_gpus([], need) == []


def test_a_step_takes_its_own_gpus_and_its_share_of_the_cpus():
    job = {"cpus": 128, "gres_detail": ["gpu:h200:8(IDX:0-7)", "gpu:h200:8(IDX:0-7)"], "node_count": 2}
    assert per_node(job) == (64, 8)
    assert step_gpus(GpuNeed(1, ""), 64, 8) == ["--exact", "--gpus=1", "--cpus-per-task=8"]  # 8 lanes
    assert step_gpus(GpuNeed(8, ""), 64, 8) == ["--exact", "--gpus=8", "--cpus-per-task=64"]
    assert step_gpus(GpuNeed(0, ""), 64, 8) == []  # no GPU wanted: the whole node, as before
    assert step_gpus(GpuNeed(8, ""), 64, 4) == []  # too few held: the start check says so
    assert per_node({"cpus": 4, "node_count": 2}) == (2, 0)
