"""Synthetic run records for the statistics and compare tests: literal data, known values, seeded
simulations. Real probe runs are made by the tests that need them (test_compare_probe.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from regdiag.records import RUN_SCHEMA, SNAPSHOT_SCHEMA, save_record


def run_record(
    launches: list[dict[str, Any]],
    *,
    primary: str = "cycle",
    phases: list[str] | None = None,
    probe: str = "spec-decode",
    config: dict[str, Any] | None = None,
    units: dict[str, str] | None = None,
    snapshot: dict[str, Any] | None = None,
    status: str = "complete",
    run_id: str = "test-run",
) -> dict[str, Any]:
    return {
        "schema": RUN_SCHEMA,
        "id": run_id,
        "created": "2026-11-29T09:00:00+00:00",
        "regdiag_version": "0.1.0",
        "status": status,
        "kind": "probe",
        "probe": {
            "name": probe,
            "version": "1",
            "config": config if config is not None else {"preset": "tiny"},
        },
        "primary": primary,
        "phases": phases if phases is not None else ["draft", "verify", "extend"],
        "units": units if units is not None else {},
        "host": {"name": "local"},
        "snapshot_before": snapshot,
        "snapshot_after": None,
        "launches": launches,
    }


def launch(
    samples: dict[str, list[float]],
    *,
    index: int = 0,
    values: dict[str, list[float]] | None = None,
    scalars: dict[str, Any] | None = None,
    clocks: list[dict[str, Any]] | None = None,
    status: str = "ok",
) -> dict[str, Any]:
    return {
        "index": index,
        "status": status,
        "error": None if status == "ok" else "rank 1 died",
        "started": "2026-11-29T09:00:01+00:00",
        "duration_s": 1.0,
        "header": {},
        "warmup_dropped": 5,
        "samples": samples,
        "values": values or {},
        "scalars": scalars or {},
        "clocks": clocks or [],
        "footer": {},
    }


def simulate_spec_run(
    seed: int,
    *,
    launches: int = 8,
    cycles: int = 30,
    draft: float = 3.0,
    verify: float = 15.0,
    extend: float = 2.0,
    other: float = 0.0,
    accept: float = 2.0,
    within: float = 0.03,
    between: float = 0.02,
    sm_mhz: float | None = None,
    reasons: list[str] | None = None,
    config: dict[str, Any] | None = None,
    snapshot: dict[str, Any] | None = None,
    measured_tok_s: bool = True,
) -> dict[str, Any]:
    """A spec-decode run: each phase log-normal with launch-level and cycle-level noise; the cycle is
    the sum of the phases plus `other`. accept_len per cycle is 1..3 with mean `accept` (for 2.0:
    uniform on {1, 2, 3})."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(launches):
        shift = rng.normal(0, between)
        phases = {}
        for name, base in (("draft", draft), ("verify", verify), ("extend", extend)):
            phases[name] = base * np.exp(shift + rng.normal(0, within, cycles))
        cycle = phases["draft"] + phases["verify"] + phases["extend"] + other
        acc = _accept(rng, cycles, accept)
        samples = {"cycle": cycle.round(4).tolist(), **{k: v.round(4).tolist() for k, v in phases.items()}}
        scalars: dict[str, Any] = {"accept_len_mean": float(acc.mean()), "accept_len_simulated": True}
        if measured_tok_s:
            scalars["tok_s"] = float(acc.sum() / cycle.sum() * 1000.0)
        clocks = []
        if sm_mhz is not None:
            clocks = [
                {
                    "t": 0.05 * j,
                    "gpu": 0,
                    "sm_mhz": sm_mhz,
                    "mem_mhz": 3201,
                    "power_w": 400.0,
                    "temp_c": 40,
                    "reasons": reasons or ["none"],
                }
                for j in range(20)
            ]
        out.append(
            launch(samples, index=i, values={"accept_len": acc.tolist()}, scalars=scalars, clocks=clocks)
        )
    return run_record(out, config=config, snapshot=snapshot)


def _accept(rng: np.random.Generator, n: int, mean: float) -> np.ndarray:
    if mean == 2.0:
        return np.tile([1.0, 2.0, 3.0], n // 3 + 1)[:n][rng.permutation(n)]
    return np.clip(np.round(rng.normal(mean, 0.7, n)), 1, None)


def snapshot(
    *,
    gpu_name: str = "NVIDIA H200",
    power_limit_w: float = 700.0,
    hostname: str = "gpu-box",
    env: dict[str, str] | None = None,
    packages: dict[str, str] | None = None,
) -> dict[str, Any]:
    def ok(v: Any) -> dict[str, Any]:
        return {"status": "ok", "value": v}

    return {
        "schema": SNAPSHOT_SCHEMA,
        "created": "2026-11-29T08:59:01+00:00",
        "regdiag_version": "0.1.0",
        "duration_s": 0.2,
        "origin": {"host": hostname, "python": "/usr/bin/python3", "via": "local"},
        "groups": {
            "gpu": {
                "status": "ok",
                "fields": {"gpu0.name": ok(gpu_name), "gpu0.power_limit_w": ok(power_limit_w)},
            },
            "host": {"status": "ok", "fields": {"hostname": ok(hostname)}},
            "env": {"status": "ok", "fields": {k: ok(v) for k, v in (env or {}).items()}},
            "packages": {"status": "ok", "fields": {k: ok(v) for k, v in (packages or {}).items()}},
        },
    }


def write(path: Path, record: dict[str, Any]) -> Path:
    save_record(path, record)
    return path


def with_changes(record: dict[str, Any], **top: Any) -> dict[str, Any]:
    r = copy.deepcopy(record)
    r.update(top)
    return r
