"""`regdiag probe ... --host a --host b`: the same probe on several hosts at once over the real sshd
on loopback (two Host aliases of one sshd are two hosts; a third alias points at a closed port), one
run record per host, and `compare` of two hosts' runs showing how the machines differ first."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from sshd_helpers import Sshd, free_port, sshd  # noqa: F401 - sshd is a fixture

pytestmark = [pytest.mark.ssh, pytest.mark.slow]

SMALL = ["--preset", "tiny", "--context", "64", "--cycles", "4", "--warmup", "1", "--launches", "1"]


def _alias(sshd: Sshd, name: str, port: int) -> str:  # noqa: F811
    return (
        f"Host {name}\n  HostName 127.0.0.1\n  Port {port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {sshd.known_hosts}\n"
        "  GlobalKnownHostsFile none\n  ConnectTimeout 5\n"
    )


def test_probe_on_three_hosts_one_refusing(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    cfg = sshd.write_config(
        tmp_path / "config",
        _alias(sshd, "node-a", sshd.port)
        + _alias(sshd, "node-b", sshd.port)
        + _alias(sshd, "node-dead", free_port()),
    )
    out = tmp_path / "run.json"
    r = run_cli(
        "probe", "spec-decode", *SMALL, "--no-snapshot", "-o", str(out), "--json",
        "--host", "node-a", "--host", "node-dead", "--host", "node-b",
        "--python", sys.executable, "--ssh-config", str(cfg),
    )  # fmt: skip
    # the worst exit status of the three: node-dead cannot be reached (4)
    assert r.returncode == 4, r.stderr
    res = json.loads(r.stdout)["hosts"]
    assert [x["host"] for x in res] == ["node-a", "node-dead", "node-b"]
    assert [x["ok"] for x in res] == [True, False, True]
    assert "connection refused" in res[1]["error"] and res[1]["exit_code"] == 4
    assert "1 of 3 hosts failed: node-dead" in r.stderr
    assert "Traceback" not in r.stderr
    for name in ("node-a", "node-b"):
        run = json.loads((tmp_path / f"run.{name}.json").read_text())
        assert run["host"]["name"] == name and run["host"]["via"] == "ssh"
        assert [la["status"] for la in run["launches"]] == ["ok"]
        # the host's CPUs, recorded on that host by the bundle's supervisor (probes/_hoststat.py)
        host = run["launches"][0]["host"]
        assert host["status"] == "proc" and host["measured"]["processes"] >= 1, host
    assert not (tmp_path / "run.node-dead.json").exists()

    # all hosts well: exit 0, one record each, the terminal summary names each host
    r = run_cli(
        "probe", "spec-decode", *SMALL, "-o", str(out), "--host", "node-a", "--host", "node-b",
        "--python", sys.executable, "--ssh-config", str(cfg),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "node-a" in r.stdout and "node-b" in r.stdout
    assert "node-a: ok" in r.stderr and "node-b: ok" in r.stderr

    # compare of the two hosts' runs: the machines' differences come first. The two aliases are one
    # machine, so its snapshot is edited the way a second node would differ (PCIe link, power cap,
    # driver, NCCL), and the compare must show exactly those, before the metrics.
    a = json.loads((tmp_path / "run.node-a.json").read_text())
    b = json.loads((tmp_path / "run.node-b.json").read_text())
    assert a["snapshot_before"] and b["snapshot_before"]
    gpus = {"a": (16, 5, 700.0, "580.65"), "b": (8, 4, 600.0, "570.1")}
    for side, run in (("a", a), ("b", b)):
        gpu = run["snapshot_before"]["groups"].setdefault("gpu", {})
        gpu["status"] = "ok"
        width, gen, power, driver = gpus[side]
        fields = {"gpu0.name": "NVIDIA H200", "gpu0.pcie_width": width, "gpu0.pcie_gen_max": gen,
                  "gpu0.power_limit_w": power, "driver_version": driver}  # fmt: skip
        gpu["fields"] = {k: {"status": "ok", "value": v} for k, v in fields.items()}
        env = run["snapshot_before"]["groups"]["env"].setdefault("fields", {})
        env["NCCL_ALGO"] = {"status": "ok", "value": "Ring" if side == "a" else "Tree"}
        env["SOME_TOOL_HOME"] = {"status": "ok", "value": f"/opt/{side}"}  # not the machine: left out
        (tmp_path / f"{side}2.json").write_text(json.dumps(run))
    r = run_cli("compare", str(tmp_path / "a2.json"), str(tmp_path / "b2.json"), "--json")
    assert r.returncode in (0, 1, 3), r.stderr
    c = json.loads(r.stdout)
    diff = c["machine_diff"]
    assert diff is not None
    assert {d["field"] for d in diff} == {
        "gpu0.pcie_width",
        "gpu0.pcie_gen_max",
        "gpu0.power_limit_w",
        "driver_version",
        "NCCL_ALGO",
    }
    # wide enough for the table whatever the tmp path's length (a pytest-xdist worker's is longer)
    r = run_cli("compare", str(tmp_path / "a2.json"), str(tmp_path / "b2.json"), env={"COLUMNS": "200"})
    lines = r.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("two hosts:"))
    table = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("metric"))
    assert at < table, r.stdout
    assert "node-a" in lines[at] and "node-b" in lines[at]
    assert any("pcie_width" in ln for ln in lines[at:table])


def test_ab_over_two_hosts_pairs_each_launch_on_one_host(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    # The pairs are spread over the hosts as over a Slurm allocation's nodes: pair p on host p mod 2,
    # both halves of a pair on one host, and the verdict paired within each.
    cfg = sshd.write_config(
        tmp_path / "config", _alias(sshd, "node-a", sshd.port) + _alias(sshd, "node-b", sshd.port)
    )
    prefix = tmp_path / "ab"
    r = run_cli(
        "ab", "--a", "NCCL_ALGO=Ring", "--b", "NCCL_ALGO=Tree REGDIAG_PROBE_SLOW=verify:20", "--launches", "6",
        "--margin", "25%", "--no-snapshot", "-o", str(prefix), "--json", "--host", "node-a", "--host", "node-b",
        "--python", sys.executable, "--ssh-config", str(cfg), "--probe", "spec-decode", "--",
        "--preset", "tiny", "--cycles", "12",
    )  # fmt: skip
    assert r.returncode == 1, r.stderr  # REGRESSED: compare's exit code
    out = json.loads(r.stdout)
    verify = next(m for m in out["metrics"] if m["name"] == "verify")
    assert verify["verdict"] == "REGRESSED" and verify["estimate"]["method"] == "paired"
    a, b = (json.loads(Path(f"{prefix}-{s}.json").read_text()) for s in "ab")
    assert a["design"]["nodes"] == {"node-a": [0, 2, 4], "node-b": [1, 3, 5]}
    assert set(a["node_snapshots"]) == {"node-a", "node-b"}  # each host's own, checked before the pairs
    for rec in (a, b):
        assert rec["host"]["via"] == "ssh"
        assert {la["pair"]: la["node"] for la in rec["launches"]} == {
            p: ("node-a", "node-b")[p % 2] for p in range(6)
        }
    assert [n["node"] for n in out["fleet"]["nodes"]] == ["node-a", "node-b"]
    assert all(n["ratio"] > 2 for n in out["fleet"]["nodes"]), out["fleet"]["nodes"]
    assert any("needs at least 3" in n for n in out["fleet"]["notes"]), out["fleet"]["notes"]
    # the progress names each launch's host
    assert "on node-a" in r.stderr and "on node-b" in r.stderr, r.stderr
