"""Secrets never reach a record or the screen; harmless knobs keep their values."""

from __future__ import annotations

import json

import pytest
from snapshot_helpers import HARMLESS, PLANTED, planted_env

from regdiag.snapshot import env as env_group
from regdiag.snapshot.redact import is_harmless_scalar, is_hidden, is_sensitive_name, redact_env, scrub_text


def test_at_least_twenty_distinct_secret_shapes_are_planted() -> None:
    assert len(PLANTED) >= 20
    assert len({secret for _, _, secret in PLANTED}) == len(PLANTED)


def _leaks(text: str) -> list[str]:
    return [name for name, _, secret in PLANTED if secret in text]


def test_env_group_keeps_no_secret_and_every_knob() -> None:
    group = env_group.collect(planted_env())
    text = json.dumps(group)
    assert _leaks(text) == []
    values = {k: f["value"] for k, f in group["fields"].items()}
    for name, value in HARMLESS.items():
        assert values[name] == value, name
    # A secret under a sensitive name is still recorded as set, as a keyed hash, and listed.
    assert values["SGLANG_API_KEY"].startswith("hmac-sha256:")
    assert "SGLANG_API_KEY" in group["redacted"] and "SGLANG_API_KEY" in group["hashed"]
    # Every variable is recorded now, not only an allowlist: HF_TOKEN too, hashed.
    assert values["HF_TOKEN"].startswith("hmac-sha256:")
    # A secret inside an innocent-looking value: the field holds the hash and its length (so a change
    # shows), and nothing of the value stays readable (no `scrubbed` copy beside it).
    assert values["VLLM_S3_URL"].startswith("hmac-sha256:") and values["VLLM_S3_URL"].endswith(":len=50")
    assert "scrubbed" not in group
    assert set(group["redacted"]).isdisjoint(HARMLESS)


@pytest.mark.slow
def test_cli_json_and_human_output_leak_nothing(cli) -> None:
    env = planted_env()
    env["COLUMNS"] = "400"  # no wrapping: a secret split across lines would hide from the check
    as_json = cli("snapshot", "--json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    human = cli("snapshot", env=env)
    assert human.returncode == 0, human.stderr
    for out in (as_json.stdout, as_json.stderr, human.stdout, human.stderr):
        assert _leaks(out) == []
    record = json.loads(as_json.stdout)
    values = {k: f["value"] for k, f in record["groups"]["env"]["fields"].items()}
    assert values["VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD"] == "256"
    assert values["NCCL_PROTO"] == "LL"
    assert "VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD" in human.stdout and "256" in human.stdout
    assert "NCCL_PROTO" in human.stdout


@pytest.mark.parametrize(
    "text",
    [
        "hf_AbCdEfGhIjKlMnOpQrStUvWx",
        "ghp_0123456789abcdefghij0123456789abcd",
        "github_pat_11AAAAAAA0123456789_bbbbbbbbbbbbbbbbbbbbbbbbbbb",
        "sk-0123456789abcdefABCDEF",
        "AKIAABCDEFGHIJKLMNOP",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijk",
        "postgres://user:secretpw@db:5432/x",
        "api_key=0123456789abcdef",
        '"password": "s3cr3t-value"',
        "Bearer 0a1b2c3d4e5f6a7b8c9d",
    ],
)
def test_scrub_text_removes_each_shape(text: str) -> None:
    out = scrub_text(f"before {text} after")
    assert "<redacted" in out
    assert out.startswith("before ") and out.endswith(" after")


@pytest.mark.parametrize(
    "text",
    [
        "HEAD is now at 1e9b9a1d021452b6af1b0ba233963daed0270524",  # a git commit: not a secret
        "basic configuration of the scheduler",
        "max_tokens=256",
        "token_threshold=4",
        "https://github.com/sgl-project/sglang.git",
        "/root/.cache/flashinfer/task-0123456789abcdefgh",
        "expandable_segments:True",
    ],
)
def test_scrub_text_leaves_ordinary_text_alone(text: str) -> None:
    assert scrub_text(text) == text


def test_names_and_scalars() -> None:
    assert not is_sensitive_name("VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD")  # a knob about tokens
    assert not is_sensitive_name("HF_TOKEN_PATH") and is_sensitive_name("GCP_PRIVATE_KEY_ID")
    assert is_sensitive_name("HF_TOKEN") and is_sensitive_name("MY-API.KEY")
    for name in (
        "PGPASSWORD",
        "MYSQL_PWD",
        "SSHPASS",
        "CR_PAT",
        "LDAP_BINDPW",
        "clientSecret",
        "accessToken",
    ):
        assert is_sensitive_name(name), name
    assert not is_sensitive_name("NCCL_PROTO") and not is_sensitive_name("SGLANG_MAX_TOKENS")
    for ok in ("256", "0.25", "-1", "true", "OFF", "1e-3"):
        assert is_harmless_scalar(ok), ok
    for bad in ("12345678901", "abc", "0x1f", "256MB", ""):
        assert not is_harmless_scalar(bad), bad


def test_redact_env_reports_exactly_the_redacted_names() -> None:
    kept, redacted = redact_env({"NCCL_PROTO": "LL", "SGLANG_API_KEY": "x", "X_URL": "http://a:b@c"})
    assert kept["NCCL_PROTO"] == "LL" and is_hidden(kept["SGLANG_API_KEY"]) and is_hidden(kept["X_URL"])
    assert kept["X_URL"].endswith(":len=12") and "a:b" not in kept["X_URL"]
    assert redacted == ["SGLANG_API_KEY", "X_URL"]
