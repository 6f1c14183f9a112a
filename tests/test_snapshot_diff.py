"""`regdiag diff`: what changed between two snapshots, most likely culprit first."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from snapshot_helpers import BASELINES, field, h200_gpu_fields, with_gpu, write

from regdiag.records import RUN_SCHEMA, load_record
from regdiag.snapshot.diff import diff_snapshots


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    rec = with_gpu(load_record(BASELINES / "h200-snapshot.json", expect="snapshot"), h200_gpu_fields(0))
    rec["groups"]["engine"]["fields"]["commit"] = field("a" * 40)
    return rec


def changed(base: dict[str, Any]) -> dict[str, Any]:
    """The seeds' situation: new engine commit, new kernels, an NCCL knob, a power cap, and noise."""
    new = copy.deepcopy(base)
    g = new["groups"]
    g["engine"]["fields"]["commit"] = field("b" * 40)
    g["packages"]["fields"]["sgl-kernel"] = field("0.3.9")
    g["packages"]["fields"]["torch"] = field("2.12.0")
    g["packages"]["fields"]["transformers"] = field("5.18.0")
    g["env"]["fields"]["NCCL_ALGO"] = field("Tree")
    g["env"]["fields"]["SGLANG_ENABLE_TORCH_COMPILE"] = field("1")
    g["gpu"]["fields"]["gpu0.power_limit_w"] = field(500.0)
    g["gpu"]["fields"]["gpu0.clock_sm_mhz"] = field(1980)  # a momentary reading
    g["host"]["fields"]["cpu_governor"] = field({"powersave": 16})
    g["host"]["fields"]["load_avg"] = field([3.0, 2.0, 1.0])  # a momentary reading
    return new


def test_culprits_come_in_rank_order(base: dict[str, Any]) -> None:
    items = diff_snapshots(base, changed(base))
    order = [(it["group"], it["field"]) for it in items]
    assert order == [
        ("engine", "commit"),
        ("packages", "sgl-kernel"),
        ("packages", "torch"),
        ("env", "NCCL_ALGO"),
        ("env", "SGLANG_ENABLE_TORCH_COMPILE"),
        ("gpu", "gpu0.power_limit_w"),
        ("packages", "transformers"),
        ("host", "cpu_governor"),
    ]
    assert [it["rank"] for it in items] == [1, 2, 2, 3, 4, 5, 6, 7]
    first = items[0]
    assert first["old"] == "a" * 40 and first["new"] == "b" * 40
    assert first["change"] == "changed" and "engine" in first["why"]
    env_added = next(it for it in items if it["field"] == "SGLANG_ENABLE_TORCH_COMPILE")
    assert env_added["change"] == "added" and env_added["old"] == "<absent>"


def test_momentary_readings_only_on_request(base: dict[str, Any]) -> None:
    items = diff_snapshots(base, changed(base), include_volatile=True)
    tail = [(it["field"], it["rank"]) for it in items if it["rank"] == 8]
    assert sorted(tail) == [("gpu0.clock_sm_mhz", 8), ("load_avg", 8)]


def test_identical_snapshots_have_no_differences(base: dict[str, Any]) -> None:
    assert diff_snapshots(base, copy.deepcopy(base)) == []


def test_a_field_that_failed_on_one_side_is_a_difference(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    new["groups"]["gpu"]["fields"]["gpu0.power_limit_w"] = {"status": "error", "value": None, "error": "x"}
    (item,) = diff_snapshots(base, new)
    assert item["new"] == "<error>" and item["old"] == 700.0


def test_run_records_stand_for_their_snapshot_before(base: dict[str, Any]) -> None:
    run = {"schema": RUN_SCHEMA, "launches": [], "snapshot_before": changed(base)}
    assert diff_snapshots(base, run) == diff_snapshots(base, changed(base))


def test_all_packages_compared_name_by_name(base: dict[str, Any]) -> None:
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    a["groups"]["packages"]["fields"]["all"] = field({"numpy": "2.5.2", "six": "1.17.0"})
    b["groups"]["packages"]["fields"]["all"] = field({"numpy": "2.5.3", "six": "1.17.0"})
    items = diff_snapshots(a, b)
    assert [(it["field"], it["old"], it["new"]) for it in items] == [("all.numpy", "2.5.2", "2.5.3")]


def test_cli_diff(cli, base: dict[str, Any], tmp_path: Path) -> None:
    old = write(tmp_path / "old.json", base)
    new = write(tmp_path / "new.json", changed(base))
    human = cli("diff", str(old), str(new), env={"COLUMNS": "200"})
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert lines[0].startswith("8 difference(s), most likely culprits first")
    assert lines[1].startswith("1. engine code")
    pos = [
        human.stdout.index(s)
        for s in (
            "engine.commit",
            "packages.sgl-kernel",
            "NCCL_ALGO",
            "gpu0.power_limit_w",
            "host.cpu_governor",
        )
    ]
    assert pos == sorted(pos)
    js = cli("diff", "--json", str(old), str(new))
    assert [it["field"] for it in json.loads(js.stdout)["differences"]][:2] == ["commit", "sgl-kernel"]
    same = cli("diff", "--exit-code", str(old), str(old))
    assert same.returncode == 0 and "no differences" in same.stdout
    differ = cli("diff", "--exit-code", "--json", str(old), str(new))
    assert differ.returncode == 1 and len(json.loads(differ.stdout)["differences"]) == 8


def test_a_gpu_on_one_side_only_is_one_difference(base: dict[str, Any]) -> None:
    two = with_gpu(base, h200_gpu_fields(0), h200_gpu_fields(1))
    two["groups"]["gpu"]["fields"]["count"] = field(2)
    one = with_gpu(base, h200_gpu_fields(0))
    items = diff_snapshots(one, two)
    assert [(it["field"], it["old"], it["new"]) for it in items] == [
        ("count", 1, 2),
        ("gpu1", "<absent>", "NVIDIA H200"),
    ]
