"""Secrets told from diagnosis values by structure (issue 42, item 4): the held-out style shapes of
tests/secret_heldout.py, drawn fresh, through every redaction function; bench/redaction_heldout.py
prints the same table for any tree (docs/reliability.md has today's and the one before)."""

from __future__ import annotations

from secret_heldout import DIAGNOSIS, SHAPES, measure

from regdiag.errors import error_line
from regdiag.snapshot import redact
from regdiag.snapshot.known import known_kind

SINKS = {n: getattr(redact, n) for n in ("scrub_text", "redact_argv", "redact_value", "redact_tree")}


def test_held_out_shapes_leak_at_most_one_and_diagnosis_values_stay_readable() -> None:
    assert len(SHAPES) >= 52 and len(DIAGNOSIS) == 68
    m = measure(SINKS, seeds=2)
    assert len(m["leaks"]) <= 1, m["leaks"]  # type: ignore[arg-type]
    assert m["readable"] >= 62, m["hidden"]
    hashes = DIAGNOSIS[56:]  # Triton's cache key, commits, a wheel's sha256 (issue 51): every one readable
    assert not [h for h in m["hidden"] if h in hashes], m["hidden"]  # type: ignore[union-attr]


def test_a_host_spec_with_a_password_holding_a_slash_is_not_shown_in_the_error_line() -> None:
    line = error_line("--host 'svc:Maple44/x!Q@gpu-node-03': cannot resolve gpu-node-03")
    assert "Maple44" not in line and "gpu-node-03" in line


def test_known_kinds_are_structures_not_random_words() -> None:
    for v in (
        "2.8.0a0+5228986c39.nv25.06",
        "12.9.79-1",
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "fp8_e4m3",
        "H200",
        "NVIDIA H100 80GB HBM3",
        "80GiB",
        "awq_marlin",
        "nvjet_tst_192x192_64x4_2x1_v_bz_coopA_NTN",
    ):
        assert known_kind(v), v
    for v in (
        "1.0+aK8sLq2Zx9Pw4Rt7Yu3",
        "Xk9aQ2mZ/pL7rT4wQ8sN1vB6",
        "ghp_" + "a1B2" * 9,
        "sbp_" + "a1" * 20,
        "svc:pw@h",
        "8f3a" * 10,
    ):
        assert not known_kind(v), v
