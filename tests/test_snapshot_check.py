"""`snapshot --check` reasons and exit codes, on the real H200 snapshot in baselines/ and variations of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from snapshot_helpers import BASELINES, h200_gpu_fields, set_field, with_gpu, write

from regdiag.records import load_record
from regdiag.snapshot import gpu_smi
from regdiag.snapshot.check import check_snapshot, is_fit
from regdiag.snapshot.diff import VOLATILE_GPU

H200 = BASELINES / "h200-snapshot.json"


@pytest.fixture(scope="module")
def h200() -> dict[str, Any]:
    return load_record(H200, expect="snapshot")


def errors(rec: dict[str, Any]) -> list[str]:
    return [r["field"] for r in check_snapshot(rec) if r["severity"] == "error"]


def test_the_idle_h200_is_fit(h200: dict[str, Any]) -> None:
    reasons = check_snapshot(h200)
    assert is_fit(reasons), reasons
    assert h200["groups"]["gpu"]["fields"]["gpu0.clock_event_reasons"]["value"] == ["gpu_idle"]


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"utilization_gpu_pct": 87}, "gpu0.utilization_gpu_pct", "busy (utilization 87 %"),
        ({"compute_processes": 2}, "gpu0.utilization_gpu_pct", "2 compute processes"),
        ({"clock_event_reasons": ["sw_power_cap"]}, "gpu0.clock_event_reasons", "software power cap"),
        (
            {"clock_event_reasons": ["hw_thermal_slowdown", "hw_slowdown"]},
            "gpu0.clock_event_reasons",
            "thermal",
        ),
        ({"power_limit_w": 500.0}, "gpu0.power_limit_w", "500 W is below its default 700 W"),
        ({"pcie_width": 8}, "gpu0.pcie_width", "x8, below its x16"),
        (
            {"utilization_gpu_pct": 90, "clock_sm_mhz": 1100, "clock_event_reasons": []},
            "gpu0.clock_sm_mhz",
            "56 %",
        ),
        (
            {"utilization_gpu_pct": 90, "clock_sm_mhz": 1980, "pcie_gen": 3},
            "gpu0.pcie_gen",
            "gen3 while busy",
        ),
    ],
)
def test_each_problem_makes_the_machine_unfit(
    h200: dict[str, Any], over: dict[str, Any], field: str, words: str
) -> None:
    rec = with_gpu(h200, h200_gpu_fields(0, **over))
    reasons = [r for r in check_snapshot(rec) if r["severity"] == "error"]
    assert field in [r["field"] for r in reasons]
    assert any(words in r["message"] for r in reasons), reasons


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"persistence_mode": False}, "gpu0.persistence_mode"),
        ({"clock_sm_app_mhz": 1500}, "gpu0.clock_sm_app_mhz"),
        ({"temperature_c": 86}, "gpu0.temperature_c"),
        ({"mig_mode": "enabled"}, "gpu0.mig_mode"),
        ({"memory_used_mib": 40000}, "gpu0.memory_used_mib"),
        ({"clock_event_reasons": ["applications_clocks_setting"]}, "gpu0.clock_event_reasons"),
        ({"pcie_gen": 1}, None),  # an idle GPU lowers its link generation to save power: normal
    ],
)
def test_warnings_do_not_fail_the_check(
    h200: dict[str, Any], over: dict[str, Any], field: str | None
) -> None:
    rec = with_gpu(h200, h200_gpu_fields(0, **over))
    reasons = check_snapshot(rec)
    assert is_fit(reasons)
    if field:
        assert field in [r["field"] for r in reasons if r["severity"] == "warning"]


def test_host_reasons(h200: dict[str, Any]) -> None:
    rec = set_field(h200, "host", "cpu_governor", {"performance": 10, "powersave": 2})
    assert errors(rec) == ["cpu_governor"]
    ok = set_field(h200, "host", "cpu_governor", {"performance": 12})
    assert errors(ok) == []
    # 16 usable CPUs: a load of 10 competes (a warning), one of 20 is more work than CPUs (not fit)
    busy = set_field(h200, "host", "load_avg", [10.0, 5.0, 1.0])
    assert "load_avg" in [r["field"] for r in check_snapshot(busy)] and is_fit(check_snapshot(busy))
    over = set_field(h200, "host", "load_avg", [20.0, 5.0, 1.0])
    assert errors(over) == ["load_avg"] and not is_fit(check_snapshot(over))
    assert "20 on 16 usable CPUs" in next(
        r["message"] for r in check_snapshot(over) if r["field"] == "load_avg"
    )
    # SMT on and no isolated CPU, where readable: warnings; unreadable: nothing said
    smt = set_field(set_field(h200, "host", "smt_active", "1"), "host", "isolated_cpus", "")
    warned = {r["field"] for r in check_snapshot(smt) if r["severity"] == "warning"}
    assert {"smt_active", "isolated_cpus"} <= warned and is_fit(check_snapshot(smt))
    quiet = set_field(set_field(h200, "host", "smt_active", "0"), "host", "isolated_cpus", "2-15")
    assert not {"smt_active", "isolated_cpus"} & {r["field"] for r in check_snapshot(quiet)}


def test_several_gpus_each_named(h200: dict[str, Any]) -> None:
    rec = with_gpu(
        h200, h200_gpu_fields(0), h200_gpu_fields(1, power_limit_w=600.0), h200_gpu_fields(2, pcie_width=4)
    )
    msgs = [r["message"] for r in check_snapshot(rec) if r["severity"] == "error"]
    assert len(msgs) == 2 and msgs[0].startswith("GPU 1 ") and msgs[1].startswith("GPU 2 ")


def test_no_gpu_is_a_warning_and_an_unreadable_gpu_an_error(h200: dict[str, Any]) -> None:
    rec = json.loads(json.dumps(h200))
    rec["groups"]["gpu"] = {"status": "unsupported", "fields": {}, "note": "no NVIDIA driver on this host"}
    assert is_fit(check_snapshot(rec))
    rec["groups"]["gpu"] = {"status": "timeout", "fields": {}, "note": "gpu did not answer within 10 s"}
    assert not is_fit(check_snapshot(rec))


def test_cli_check_exit_codes(cli, h200: dict[str, Any], tmp_path: Path) -> None:
    good = cli("snapshot", "--check", "--from", str(H200))
    assert good.returncode == 0, good.stderr
    assert "fit for benchmarking" in good.stdout
    bad_rec = with_gpu(h200, h200_gpu_fields(0, power_limit_w=450.0, utilization_gpu_pct=99))
    bad = write(tmp_path / "bad.json", bad_rec)
    out = cli("snapshot", "--check", "--from", str(bad))
    assert out.returncode == 1, out.stderr
    # busy, power-capped, and (busy at the idle clock of the baseline) SM clock far below max
    assert "NOT fit for benchmarking: 3 problem(s)" in out.stdout
    assert "nvidia-smi -i 0 -pl 700" in " ".join(out.stdout.split())  # whole, wherever the line wraps
    js = cli("snapshot", "--check", "--json", "--from", str(bad))
    assert js.returncode == 1
    verdict = json.loads(js.stdout)
    assert verdict["fit"] is False and {
        r["field"] for r in verdict["reasons"] if r["severity"] == "error"
    } == {
        "gpu0.utilization_gpu_pct",
        "gpu0.power_limit_w",
        "gpu0.clock_sm_mhz",
    }


def test_cli_check_of_this_machine_agrees_with_the_library(cli) -> None:
    out = cli("snapshot", "--check", "--json")
    verdict = json.loads(out.stdout)
    assert out.returncode == (0 if verdict["fit"] else 1)


def test_nvidia_smi_csv_from_the_h200_parses_to_the_nvml_values(h200: dict[str, Any]) -> None:
    """The fallback parser on real nvidia-smi output captured on the same machine as the baseline."""
    text = (BASELINES / "h200-nvidia-smi-query.csv").read_text()
    g = gpu_smi.to_group(text, [q[0] for q in gpu_smi.QUERY])
    assert g["status"] == "ok" and g["source"] == "nvidia-smi"
    nvml = h200["groups"]["gpu"]["fields"]
    same = 0
    for key, f in g["fields"].items():
        sub = key.split(".", 1)[1] if key.startswith("gpu") else key
        if f["status"] != "ok" or sub in VOLATILE_GPU or key not in nvml:
            continue
        assert f["value"] == nvml[key]["value"], key
        same += 1
    assert same >= 20
    assert g["fields"]["gpu0.clock_event_reasons"]["value"] == ["gpu_idle"]
    assert g["fields"]["gpu0.violation_time_ns"]["status"] == "unsupported"


def test_human_output_of_the_h200(cli) -> None:
    out = cli("snapshot", "--from", str(H200), env={"COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    for words in (
        "NVIDIA H200",
        "gpu_idle",
        "1980",
        "700.0",
        "2.28.9  from nvidia-nccl-cu13",
        "NCCL_VERSION",
    ):
        assert words in out.stdout, words
    head = [ln.split()[0] for ln in out.stdout.splitlines() if ln and not ln.startswith(" ")]
    assert head == ["snapshot", "engine", "packages", "gpu", "env", "host"]


def test_what_looks_wrong_is_highlighted(h200: dict[str, Any]) -> None:
    import io

    from rich.console import Console

    from regdiag.report.snapshot import render_snapshot

    rec = with_gpu(h200, h200_gpu_fields(0, power_limit_w=450.0, persistence_mode=False))
    buf = io.StringIO()
    render_snapshot(rec, Console(file=buf, force_terminal=True, color_system="standard", width=200))
    lines = buf.getvalue().splitlines()
    power = next(ln for ln in lines if "power W / limit" in ln)
    persistence = next(ln for ln in lines if "persistence" in ln)
    pstate = next(ln for ln in lines if "pstate" in ln)
    assert "\x1b[1;31m" in power  # bold red: makes the machine unfit
    assert "\x1b[33m" in persistence  # yellow: a warning
    assert "\x1b[1;31m" not in pstate and "\x1b[33m" not in pstate


def test_every_gpu_reason_at_once_in_a_fixed_order(h200: dict[str, Any]) -> None:
    worst = {
        "utilization_gpu_pct": 97,
        "compute_processes": 1,
        "clock_event_reasons": ["sw_power_cap", "sync_boost", "0x400"],
        "clock_sm_mhz": 1200,
        "power_limit_w": 500.0,
        "pcie_width": 8,
        "pcie_gen": 3,
        "persistence_mode": False,
        "clock_sm_app_mhz": 1500,
        "temperature_c": 86,
        "mig_mode": "enabled",
    }
    idle_but_held = h200_gpu_fields(1, memory_used_mib=40000, pcie_gen=1)
    reasons = check_snapshot(with_gpu(h200, h200_gpu_fields(0, **worst), idle_but_held))
    gpu = [(r["severity"][0], r["field"]) for r in reasons if r["group"] == "gpu"]
    assert gpu == [
        ("e", "gpu0.utilization_gpu_pct"),
        ("e", "gpu0.clock_event_reasons"),
        ("e", "gpu0.clock_sm_mhz"),
        ("e", "gpu0.power_limit_w"),
        ("e", "gpu0.pcie_width"),
        ("e", "gpu0.pcie_gen"),
        ("w", "gpu0.clock_event_reasons"),
        ("w", "gpu0.persistence_mode"),
        ("w", "gpu0.clock_sm_app_mhz"),
        ("w", "gpu0.temperature_c"),
        ("w", "gpu0.mig_mode"),
        ("w", "gpu1.memory_used_mib"),
    ]
    assert reasons[0]["message"] == "GPU 0 is busy (utilization 97 %, 1 compute process)"
    assert "sync boost (clocks tied to other GPUs), 0x400" in reasons[6]["message"]
