"""`probe server --launch-cmd` against a real engine: llama.cpp's llama-server with a draft model.

Skipped unless a llama-server binary is on PATH or named by REGDIAG_LLAMA_SERVER: no PyPI package
ships one prebuilt for Linux, and building llama.cpp from source costs more than this suite's
whole time budget on a 2-core machine (docs/server.md). The models are tiny random GGUF files
written by the test; nothing is downloaded.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest
from llamacpp_helpers import write_tiny_llama
from server_helpers import free_port

from regdiag.records import load_record

LLAMA_SERVER = os.environ.get("REGDIAG_LLAMA_SERVER") or shutil.which("llama-server")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.engine,
    pytest.mark.skipif(
        not LLAMA_SERVER, reason="no llama-server (set REGDIAG_LLAMA_SERVER); see docs/server.md"
    ),
]


def test_llama_server_with_draft_model(cli, tmp_path: Path) -> None:
    assert LLAMA_SERVER is not None
    target = write_tiny_llama(tmp_path / "target.gguf", n_layer=2, seed=1)
    # The draft is the target itself: greedy drafts are then always accepted, so the accept length
    # is known in advance (1 + 4 per full draft) and checks the counters end to end.
    draft = write_tiny_llama(tmp_path / "draft.gguf", n_layer=2, seed=1)
    port = free_port()
    cmd = shlex.join(
        [LLAMA_SERVER, "-m", str(target), "-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", "4", "--metrics",
         "--host", "127.0.0.1", "--port", str(port), "-c", "1024", "-t", "2"]
    )  # fmt: skip
    out = tmp_path / "run.json"
    p = cli(
        "probe", "server", "--url", f"http://127.0.0.1:{port}", "--api", "openai", "--launch-cmd", cmd,
        *"-L 2 -R 3 --max-tokens 24 --no-snapshot --cold --startup-timeout 120 -o".split(), str(out),
        timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    run = load_record(out, "run")
    assert len({la["server_process"]["pid"] for la in run["launches"]}) == 2
    for la in run["launches"]:
        assert la["status"] == "ok", la["error"]
        assert la["server_process"]["stopped_by"] == "SIGTERM"
        assert la["scalars"]["requests_ok"] == 3
        assert all(r["output_tokens"] == 24 for r in la["requests"])
        assert len(la["samples"]["itl"]) == 3 and all(x > 0 for x in la["samples"]["itl"])
        c = la["engine_counters"]
        assert c["engine"] == "llama.cpp" and c["drafts"] > 0 and c["accepted"] == c["draft_tokens"]
        assert la["scalars"]["accept_len_mean"] == pytest.approx(1 + c["accepted"] / c["drafts"], abs=1e-4)
        assert la["scalars"]["accept_len_mean"] > 2
        assert la["header"]["accept_len_source"].startswith("llama.cpp /metrics")
