"""The real vLLM (CPU build, in its own venv) as the measurement of `ab` and `bisect` (`--probe engine
--preset vllm`): its n-gram speculative decoding timed inside the engine in every launch.

The cause is a package the engine loads the way vLLM loads third-party code: a general plugin
(entry point group `vllm.general_plugins`, run by vLLM in every engine process at start-up).
`vllm-slowsampler` 2.0's plugin makes the rejection sampler wait 60 ms per call; 1.0 registers a
plugin that does nothing. (20 ms, an eighth of a ~150 ms cycle, was found by the search but not
always confirmed on a 2-core machine loaded by other test runs: INCONCLUSIVE after 10 launches.) It is installed only in the bisect's environments (an overlay on the vLLM
venv), so the engine, torch and vLLM are the user's. The harmless factor is VLLM_LOGGING_LEVEL.
A thread-count variable was tried first (VLLM_CPU_OMP_THREADS_BIND 0 against 0-1): on this 2-core
machine, shared with other work, its effect on the tiny model was lost in the noise (verify 3.9-8.5
ms against 3.2-14.3 ms in four launches), so it could not be a test's cause.
Skipped only when the vLLM venv is absent (tests/vllm_helpers.py)."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
import vllm_helpers as vh
from bisect_helpers import _record_line

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.launch]

GOOD = "vllm-slowsampler==1.0 VLLM_LOGGING_LEVEL=INFO"
BAD = "vllm-slowsampler==2.0 VLLM_LOGGING_LEVEL=WARNING"
SLEEP_MS = 60.0

PLUGIN = """\
import functools, time

SLEEP_S = {sleep!r}


def register():
    if not SLEEP_S:
        return
    from vllm.v1.sample import rejection_sampler as rs

    forward = rs.RejectionSampler.forward
    if getattr(forward, "_slowsampler", False):
        return

    @functools.wraps(forward)
    def slow(self, *args, **kwargs):
        time.sleep(SLEEP_S)
        return forward(self, *args, **kwargs)

    slow._slowsampler = True
    rs.RejectionSampler.forward = slow
"""


def plugin_wheel(dist: Path, version: str, sleep_s: float) -> Path:
    """A real wheel of a vLLM general plugin (its entry point is how vLLM finds it)."""
    dist.mkdir(parents=True, exist_ok=True)
    name = "vllm_slowsampler"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": PLUGIN.format(sleep=sleep_s).encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: vllm-slowsampler\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: vllm-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[vllm.general_plugins]\nslowsampler = {name}:register\n".encode(),
    }
    record = [_record_line(a, d) for a, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = dist / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for arc, data in files.items():
            z.writestr(arc, data)
    return path


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("plugin-wheels")
    plugin_wheel(d, "1.0", 0.0)
    plugin_wheel(d, "2.0", SLEEP_MS / 1000)
    return d


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    vh.python()
    return vh.build_models(tmp_path_factory.mktemp("vllm-models"))


def _engine_args(models: Path) -> list[str]:
    launch = f"{{python}} {vh.GEN} {models} --spec ngram --k {vh.K} --tokens 96"
    return ["--", "--preset", "vllm", "--no-snapshot", "--launch-cmd", launch]


def test_bisect_with_vllm_as_the_measurement_names_the_plugin(cli, models, wheels, tmp_path) -> None:
    journal = tmp_path / "j.jsonl"
    r = cli(
        "bisect", "--good", GOOD, "--bad", BAD, "--python", vh.python(), "--probe", "engine",
        "--find-links", str(wheels), "--installer", "pip", "--metric", "cycle", "--launches", "2", "--max-launches", "6", "--journal", str(journal), "--json",
        *_engine_args(models), env=vh.engine_env(), timeout=1800,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    [c] = rep["culprits"]
    assert [(f["name"], f["good"], f["bad"]) for f in c["factors"]] == [("vllm-slowsampler", "1.0", "2.0")]
    # the planted sleep: a loaded machine stretches a cycle around it (158 ms seen), never shortens it
    assert SLEEP_MS * 0.5 <= c["ms"]["cycle"] <= SLEEP_MS * 4
    lines = [json.loads(x) for x in journal.read_text().splitlines() if x.strip()]
    ok = [e for e in lines if e.get("type") == "launch" and e["status"] == "ok"]
    # every launch ran the user's vLLM, and says so: vllm-cpu and torch loaded from its venv
    venv = os.path.realpath(vh.venv())  # loaded paths are resolved (a cached venv may be a link)
    for e in ok:
        names = {d["name"]: d["path"] for d in e["loaded"]}
        assert names["vllm-cpu"].startswith(venv) and names["torch"].startswith(venv), names
        assert not names["vllm-slowsampler"].startswith(venv)  # the overlay's pinned copy
        assert {"verify", "draft", "reject"} <= set(e["medians"])


def test_ab_with_vllm_as_the_measurement(cli, models, wheels, tmp_path) -> None:
    out = tmp_path / "ab"
    r = cli(
        "ab", "--a", GOOD, "--b", BAD, "--python", vh.python(), "--probe", "engine", "--launches", "5",
        "--find-links", str(wheels), "--installer", "pip",
        "--margin", "25%", "--no-snapshot", "-o", str(out), "--json", *_engine_args(models),
        env=vh.engine_env(), timeout=1800,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr[-3000:]  # REGRESSED
    verdicts = {m["name"]: m["verdict"] for m in json.loads(r.stdout)["metrics"]}
    assert verdicts["cycle"] == "REGRESSED", verdicts
    b = json.loads(Path(f"{out}-b.json").read_text())
    assert b["probe"]["name"] == "engine"
    assert all(la["values"]["accept_len"] for la in b["launches"])
