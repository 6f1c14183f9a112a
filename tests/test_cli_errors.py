"""Errors at the CLI boundary: one line on stderr, the documented exit code, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT, run_cli

DATA = ROOT / "tests" / "data"
RUN = ROOT / "baselines" / "h200-kimi-tp1-baseline.json"


def _one_line(r, code: int) -> str:
    assert r.returncode == code, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    return lines[-1]


@pytest.mark.parametrize("args", [["probe", "server"], ["ingest-log"], ["compare", str(RUN)]])
def test_missing_required_arguments_are_usage_errors(args) -> None:
    r = run_cli(*args)
    assert r.returncode == 2, (args, r.returncode)
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [[], ["probe"], ["baseline"]])
def test_a_bare_group_shows_help_and_succeeds(args) -> None:
    r = run_cli(*args)
    assert r.returncode == 0 and "Usage" in r.stdout + r.stderr


def test_unwritable_output_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = run_cli("ingest-log", str(DATA / "sglang_decode_dot.log"), "-o", str(blocker / "run.json"))
    line = _one_line(r, 2)
    assert line.startswith("regdiag: error:") and str(blocker) in line


def test_binary_journal_is_refused_in_one_line(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    journal.write_bytes(b"\xff\xfe\x00garbage\n")
    r = run_cli(
        "bisect", "--good", "NCCL_PROTO=LL", "--bad", "NCCL_PROTO=Simple",
        "--command", "true", "--resume", "--journal", str(journal),
    )  # fmt: skip
    line = _one_line(r, 2)
    assert "not a text file" in line


def test_negative_seed_is_a_usage_error() -> None:
    r = run_cli("compare", str(RUN), str(RUN), "--seed", "-5")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_comparing_a_record_with_itself_says_so() -> None:
    r = run_cli("compare", str(RUN), str(RUN))
    assert "Traceback" not in r.stderr
    assert "same run" in (r.stdout + r.stderr).replace("\n", " ")


@pytest.mark.launch
def test_bisect_unknown_metric_is_refused_after_one_launch() -> None:
    r = run_cli(
        "bisect", "--good", "NCCL_PROTO=LL", "--bad", "NCCL_PROTO=Simple", "--probe", "spec-decode",
        "--metric", "bogus", "--", "--preset", "tiny", "--cycles", "5", "--warmup", "1",
    )  # fmt: skip
    line = _one_line(r, 2)
    assert "--metric 'bogus'" in line and "verify" in line


def test_ingest_log_refuses_to_mix_engines() -> None:
    r = run_cli("ingest-log", str(DATA / "sglang_decode_dot.log"), str(DATA / "vllm_v1.log"))
    line = _one_line(r, 2)
    assert "different engines" in line and "sglang" in line and "vllm" in line
