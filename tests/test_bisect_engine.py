"""`regdiag bisect --probe engine`: the engine itself as the measurement, one `probe engine --protocol`
per launch with the environment's interpreter as the engine's ({python} in --launch-cmd). The engine
here is tests/engine_fake (a scheduler loop with worker processes whose phase functions do real busy
work, sized by env vars): a stand-in for SGLang's shape where no real engine needs to be installed;
tests/test_vllm_*.py run the real vLLM."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_bisect_venv import make_loaded_wheel
from test_engine_probe import FAKE_PHASES as PHASES

from regdiag.report.bisect import engine_lines

pytestmark = pytest.mark.slow

FAKE = "tests/engine_fake"
LAUNCH = f"PYTHONPATH={FAKE}/site {{python}} {FAKE}/fake_engine.py --workers 1 --tokens 60"


def test_the_engine_measures_each_environment_and_names_the_env_var(cli, tmp_path) -> None:
    r = cli(
        "bisect", "--good", "FAKE_VERIFY_N=2000 FAKE_DRAFT_N=3000", "--bad", "FAKE_VERIFY_N=20000 FAKE_DRAFT_N=2500",
        "--probe", "engine", "--metric", "verify", "--launches", "3", "--max-launches", "6",
        "--journal", str(tmp_path / "j.jsonl"), "--json",
        "--", "--no-snapshot", *PHASES, "--launch-cmd", LAUNCH,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert [c["change"] for c in res["culprits"]] == ["FAKE_VERIFY_N '2000' -> '20000'"]
    lines = [json.loads(x) for x in (tmp_path / "j.jsonl").read_text().splitlines() if x.strip()]
    ok = [e for e in lines if e.get("type") == "launch" and e["status"] == "ok"]
    # each launch says what the engine's processes loaded (the hook's footer), here the interpreter's own
    assert ok and all(isinstance(e["loaded"], list) for e in ok)


def test_an_engine_configuration_that_changes_with_the_culprit_is_named_beside_it(cli, tmp_path) -> None:
    # the bad side's variable makes the engine choose another attention backend at start, which is
    # what slows verify: the culprit line names the variable, and the engine's choice beside it
    r = cli(
        "bisect", "--good", "FAKE_ATTN_BACKEND=FLASH_ATTN FAKE_DRAFT_N=3000",
        "--bad", "FAKE_ATTN_BACKEND=TORCH_SDPA FAKE_DRAFT_N=2500",
        "--probe", "engine", "--metric", "verify", "--launches", "3", "--max-launches", "6",
        "--journal", str(tmp_path / "j.jsonl"), "--json",
        "--", "--no-snapshot", *PHASES, "--launch-cmd", f"FAKE_VERIFY_N=2000 {LAUNCH}",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    [culprit] = json.loads(r.stdout)["culprits"]
    assert culprit["change"] == "FAKE_ATTN_BACKEND 'FLASH_ATTN' -> 'TORCH_SDPA'"
    verify = {
        "field": "attention_backend.verify",
        "old": "FLASH_ATTN",
        "new": "TORCH_SDPA",
        "change": "changed",
    }
    assert verify in culprit["engine_config"], culprit["engine_config"]
    assert (
        "with FAKE_ATTN_BACKEND 'FLASH_ATTN' -> 'TORCH_SDPA' the engine's verify attention backend changed "
        "from FLASH_ATTN to TORCH_SDPA"
    ) in engine_lines(json.loads(r.stdout))
    lines = [json.loads(x) for x in (tmp_path / "j.jsonl").read_text().splitlines() if x.strip()]
    ok = [e for e in lines if e.get("type") == "launch" and e["status"] == "ok"]
    assert all(isinstance(e.get("engine_config"), dict) for e in ok)  # the journal keeps it per launch


def _unused_bisect(cli, tmp_path: Path, good: str, bad: str):
    """A bisect of `unusedpkg` (never imported by the engine) and whatever else the sides give."""
    wheels = tmp_path / "wheels"
    for v in ("1.0", "2.0"):
        make_loaded_wheel(wheels, "unusedpkg", v, pth=False)
    return cli(
        "bisect", "--good", f"unusedpkg==1.0 {good}", "--bad", f"unusedpkg==2.0 {bad}",
        "--python", sys.executable, "--find-links", str(wheels), "--installer", "pip",
        "--probe", "engine", "--metric", "verify", "--launches", "2", "--journal", str(tmp_path / "j.jsonl"),
        "--json", "--", "--no-snapshot", *PHASES, "--launch-cmd", LAUNCH,
    )  # fmt: skip


def test_a_package_the_engine_never_loads_is_cleared_after_the_bad_endpoint(cli, tmp_path) -> None:
    r = _unused_bisect(cli, tmp_path, "FAKE_VERIFY_N=2000", "FAKE_VERIFY_N=20000")
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert [c["change"] for c in res["culprits"]] == ["FAKE_VERIFY_N '2000' -> '20000'"]
    assert [c["why"] for c in res["cleared"]] == [
        "unusedpkg 1.0 -> 2.0: cleared, never loaded by probe engine"
    ]


def test_a_package_alone_the_engine_never_loads_is_refused_after_the_bad_endpoint(cli, tmp_path) -> None:
    r = _unused_bisect(cli, tmp_path, "", "")
    assert r.returncode == 2, r.stderr[-3000:]
    [line] = [ln for ln in r.stderr.splitlines() if ln.startswith("regdiag: error")]
    assert "probe engine never loads unusedpkg" in line
    lines = [json.loads(x) for x in (tmp_path / "j.jsonl").read_text().splitlines() if x.strip()]
    launched = {e["label"] for e in lines if e.get("type") == "launch"}
    assert "bad" in launched and len([e for e in lines if e.get("type") == "launch"]) <= 2


def test_options_the_bisect_sets_are_refused_after_the_double_dash(cli, tmp_path) -> None:
    r = cli("bisect", "--good", "A=1", "--bad", "A=2", "--probe", "engine", "--journal", str(tmp_path / "j"),
            "--", "--python", "/usr/bin/python3", "--launch-cmd", LAUNCH)  # fmt: skip
    assert r.returncode == 2
    assert "--probe engine: --host, --python, --launches and --protocol are the bisect's to set" in r.stderr
    assert "Traceback" not in r.stderr
    assert not Path(tmp_path / "j").exists() or "launch" not in Path(tmp_path / "j").read_text()


def test_ab_with_the_engine_as_the_measurement(cli, tmp_path) -> None:
    out = tmp_path / "ab"
    r = cli(
        "ab", "--a", "FAKE_VERIFY_N=2000", "--b", "FAKE_VERIFY_N=20000", "--probe", "engine",
        "--launches", "5", "--margin", "25%", "--no-snapshot", "-o", str(out), "--json",
        "--", "--no-snapshot", *PHASES, "--launch-cmd", LAUNCH,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr[-3000:]  # REGRESSED: verify is ten times the work
    b = json.loads(Path(f"{out}-b.json").read_text())
    assert b["probe"]["name"] == "engine" and all(isinstance(la["loaded"], list) for la in b["launches"])
    verdicts = {m["name"]: m["verdict"] for m in json.loads(r.stdout)["metrics"]}
    assert verdicts["verify"] == "REGRESSED"


def test_ab_refuses_a_package_the_probe_never_loads_before_any_launch(cli, tmp_path) -> None:
    wheels = tmp_path / "wheels"
    for v in ("1.0", "2.0"):
        make_loaded_wheel(wheels, "unusedpkg", v, pth=False)
    out = tmp_path / "ab"
    r = cli(
        "ab", "--a", "unusedpkg==1.0", "--b", "unusedpkg==2.0", "--python", sys.executable,
        "--find-links", str(wheels), "--installer", "pip", "--probe", "spec-decode", "--launches", "2",
        "--no-snapshot", "-o", str(out), "--", "--preset", "tiny",
    )  # fmt: skip
    assert r.returncode == 2, r.stderr[-3000:]
    assert "probe spec-decode never loads unusedpkg" in r.stderr and "Traceback" not in r.stderr
    assert not Path(f"{out}-b.json").exists()
