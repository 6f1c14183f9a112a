"""Leaks of issue 51, item 5, at their sinks: a probe header's config and labels in ab's records, credential
flags of a program started after another, split secrets, a `--host` password; and hashes that stay
readable (commits in records, Triton's cache key). The shapes themselves are drawn by
tests/secret_families.py, so test_default_deny checks them at every sink function."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from secret_families import planted

from regdiag.errors import BadInput, error_line
from regdiag.hosts.sshconfig import parse_spec
from regdiag.snapshot.redact import is_hidden, redact_env, scrub_record

SHA = "1e9b9a1d021452b6af1b0ba233963daed0270524"
TRITON = "c3ab8ff13720e8ad9047dd39466b3c8974e592c2fa383d4a3960714caef0c4f2"


@pytest.mark.cli
@pytest.mark.launch
def test_ab_scrubs_the_protocol_headers_config_and_labels_and_a_later_programs_flags(tmp_path: Path) -> None:
    key, url_pw, label_key = planted("xai", 51), planted("https url /", 51), planted("github classic", 51)
    proxy = planted("curl --proxy-user after timeout", 51)
    header = {
        "type": "header", "protocol": 1, "version": "1",
        "config": {"api_key": "Falcon4417", "mirror": url_pw.value, "note": key.value, "model": "org/m-8B"},
        "labels": {"ci_token_note": label_key.value, "build": "nightly"},
    }  # fmt: skip
    (tmp_path / "header.json").write_text(json.dumps(header))  # the probe's words, not the command's
    script = (
        "import os, json; t = 10.0 if os.environ.get('OMP_NUM_THREADS') == '1' else 5.0; "
        f"print(open({str(tmp_path / 'header.json')!r}).read()); "
        "[print(json.dumps({'type': 'cycle', 'i': i, 't': {'cycle': t}})) for i in range(5)]; "
        "print(json.dumps({'type': 'footer', 'cycles': 5, 'warmup_dropped': 0}))"
    )
    command = f"{sys.executable} -c {shlex.quote(script)} {proxy.value}"
    prefix = tmp_path / "ab"
    r = run_cli(
        "ab", "--a", "OMP_NUM_THREADS=2", "--b", "OMP_NUM_THREADS=1", "--command", command,
        "--launches", "2", "--margin", "25%", "--no-snapshot", "-o", str(prefix), env={"COLUMNS": "400"},
    )  # fmt: skip
    assert r.returncode in (0, 1, 3), r.stderr[-2000:]
    a, b = Path(f"{prefix}-a.json"), Path(f"{prefix}-b.json")
    outs = "\n".join([r.stdout, r.stderr, a.read_text(), b.read_text()])
    for secret in ("Falcon4417", url_pw.core, key.core, label_key.core, proxy.core):
        assert secret not in outs, secret
    rec = json.loads(b.read_text())
    assert rec["probe"]["config"]["model"] == "org/m-8B" and rec["labels"]["build"] == "nightly"
    assert is_hidden(rec["probe"]["config"]["api_key"])
    assert "launch 1 ran with a different resolved config" not in outs


def test_a_secret_split_over_two_variables_is_hidden_in_both_and_harmless_parts_stay() -> None:
    env = {
        "DB_PASS_1": "river", "DB_PASS_2": "stone",  # a credential name, each part alone a word
        "X_PART1": "kQzPwLmRtX", "X_PART2": "aBcDeFgHiJ",  # one random key in two letter-only halves
        "GPU_0": "0", "GPU_1": "1", "MODEL_1": "/models/a", "MODEL_2": "/models/b",
        "TRITON_CACHE_KEY": TRITON, "SGLANG_COMMIT": SHA,
    }  # fmt: skip
    kept, hidden = redact_env(env)
    assert set(hidden) == {"DB_PASS_1", "DB_PASS_2", "X_PART1", "X_PART2"}
    assert {k: kept[k] for k in env if k not in hidden} == {k: v for k, v in env.items() if k not in hidden}


def test_records_keep_commits_and_digests_by_their_field_and_hide_a_bare_token_elsewhere() -> None:
    token = planted("bare 40 hex", 51).value
    rec = {
        "engine": {"commit": {"status": "ok", "value": SHA}, "describe": {"value": "v0.5-g1e"}},
        "libs": {"libnccl.so": {"build_id": SHA[::-1]}}, "wheel": {"sha256": TRITON},
        "probe": {"config": {"triton_cache_key": TRITON, "cache": f"/root/.triton/cache/{TRITON}"}},
        "labels": {"note": token, "ci": f"using {token} for the mirror"},
    }  # fmt: skip
    out = scrub_record(rec)
    assert out["engine"] == rec["engine"] and out["libs"] == rec["libs"] and out["wheel"] == rec["wheel"]
    assert out["probe"] == rec["probe"]
    assert token not in json.dumps(out["labels"])


@pytest.mark.parametrize(
    "spec",
    ["alice:Falcon4417@gpu-node-03", "alice:Falcon4417@", "ssh://alice:Falcon4417@gpu-node-03:22/",
     "alice:Falcon4417#x@-bad", "alice:Fal con4417@gpu-node-03"],
)  # fmt: skip
def test_a_host_spec_with_a_password_is_refused_without_showing_it(spec: str) -> None:
    with pytest.raises(BadInput) as e:
        parse_spec(spec)
    line = error_line(str(e.value))
    assert "4417" not in line and line.startswith("regdiag: error: --host ")
