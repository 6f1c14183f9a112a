"""compare: a side whose launches fall into two groups is said as two populations, with what differs
between them (node, NCCL version, the host's readings), not as noise; ordinary noise never is."""

from __future__ import annotations

import re

import numpy as np

from regdiag.compare import compare_runs
from regdiag.compare.populations import split
from tests.compare_helpers import launch, run_record


def _side(centers: list[float], seed: int, noise: float = 0.01, **per_launch) -> dict:
    rng = np.random.default_rng(seed)
    las = []
    for i, c in enumerate(centers):
        la = launch({"cycle": list(rng.normal(c, noise * c, 40))}, index=i)
        for k, f in per_launch.items():
            f(la, i, c)
        las.append(la)
    return run_record(las, phases=[], units={"cycle": "ms"})


def _node(la: dict, i: int, c: float) -> None:
    slow = c > 12
    la["node"] = "gpu-b" if slow else "gpu-a"
    la["engine_config"] = {"engine": "sglang", "nccl": {"version": "2.27.3" if slow else "2.21.5"}}


def test_three_of_five_launches_38_pct_slower_are_two_populations():
    old = _side([10.0, 10.1, 9.9, 10.05, 10.0], seed=1)
    new = _side([10.0, 13.8, 13.9, 10.1, 13.7], seed=2, node=_node)
    c = compare_runs(old, new)
    assert len(c.populations) == 1
    p = c.populations[0]
    assert p["side"] == "NEW" and sorted(p["slow"]) == [1, 2, 4]
    assert sorted(p["fast"]) == [0, 3]
    assert "node gpu-b (the others: gpu-a)" in p["differs"]
    assert "engine_config.nccl.version 2.27.3 (the others: 2.21.5)" in p["differs"]
    line = next(x for x in c.phantom if "two populations" in x)
    assert line.startswith("NEW: two populations, not noise: 3 of 5 launches (")
    pct = int(re.search(r"(\d+) % slower than the other 2", line)[1])
    assert 33 <= pct <= 43  # 38 % planted, 1 % noise per cycle
    assert c.to_dict()["populations"][0]["slow_median"] > 13


def test_the_host_is_what_differs_between_the_groups():
    def host(la: dict, i: int, c: float) -> None:
        la["host"] = {
            "status": "proc", "window_s": 2.0, "cpus_usable": 8,
            "measured": {"per_process": [{"name": "python3", "user_s": 1.9, "sys_s": 0.05, "ctx_invol": 20}]},
            "system": {"steal_pct": 0.0, "iowait_pct": 0.0},
            "others": {"pct": 38.0 if c > 12 else 1.0, "top": []},
        }  # fmt: skip

    new = _side([10.0, 13.8, 13.9, 10.1, 13.7], seed=3, host=host)
    p = compare_runs(_side([10.0] * 5, seed=4), new).populations[0]
    assert any("other processes took 38 % of the CPUs (vs 1 %)" in d for d in p["differs"]), p["differs"]


def test_ordinary_noise_is_never_two_populations():
    rng = np.random.default_rng(11)
    fired = 0
    for n in (5, 6, 8, 10):
        for _ in range(500):
            fired += split(list(rng.normal(10.0, 0.3, n))) is not None  # 3 % launch-to-launch noise
    assert fired == 0
    # nor a single slow launch (an outlier, said by the host's reading), nor a smooth spread
    assert split([10.0, 10.1, 9.9, 10.0, 13.8]) is None
    assert split([10.0, 10.5, 11.0, 11.5, 12.0, 12.5]) is None
    c = compare_runs(_side([10.0] * 5, seed=5), _side([10.0, 10.2, 9.8, 10.1, 9.9], seed=6))
    assert c.populations == [] and not any("two populations" in x for x in c.phantom)
