"""A real `vllm serve` (the CPU build, OpenAI API, n-gram speculative decoding) measured three ways:
`probe server` (accept length from its /metrics counters), `vllm bench serve --save-result` read as a
run record that compare reads, and `ingest-log` of the server's own log (its SpecDecoding lines).
One server start for all three (a start costs about a minute here). Skipped only when the vLLM venv
is absent (tests/vllm_helpers.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request

import pytest
import vllm_helpers as vh
from server_helpers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.engine]

SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": vh.K, "prompt_lookup_max": 4})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    py = vh.python()
    d = tmp_path_factory.mktemp("vllm-serve")
    models = vh.build_models(d / "models")
    port = free_port()
    log = d / "server.log"
    cmd = [py, str(vh.VLLM_CLI), "serve", str(models / "target"), "--port", str(port), "--dtype", "float32",
           "--max-model-len", "512", "--enforce-eager", "--served-model-name", "tiny",
           "--speculative-config", SPEC]  # fmt: skip
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **vh.engine_env()},
                                start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    try:
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                urllib.request.urlopen(url + "/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() - t0 < 400, "vllm serve did not come up in 400 s"
                time.sleep(1)
        yield {
            "url": url,
            "log": log,
            "models": models,
            "proc": proc,
            "dir": d,
            "up_s": time.monotonic() - t0,
        }
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_probe_server_reads_speculation_from_vllm(cli, tmp_path, server):
    out = tmp_path / "server.json"
    r = cli("probe", "server", "--url", server["url"], "--api", "openai", "-L", "2", "-R", "3",
            "--max-tokens", "32", "--no-snapshot", "-o", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    run = json.loads(out.read_text())
    for la in run["launches"]:
        assert la["status"] == "ok" and la["scalars"]["requests_ok"] == 3
        assert la["header"]["accept_len_source"].startswith("vllm /metrics")
        # vLLM's own counters: drafts were made and some accepted; 1 + accepted / drafts within 1..k+1.
        assert la["engine_counters"]["drafts"] > 0 and la["engine_counters"]["accepted"] > 0
        assert 1 < la["scalars"]["accept_len_mean"] <= vh.K + 1
        assert min(la["samples"]["itl"]) > 0


def test_vllm_bench_serve_result_is_a_run_compare_reads(cli, tmp_path, server):
    files = []
    for name in ("a", "b"):
        r = subprocess.run(
            [vh.python(), str(vh.VLLM_CLI), "bench", "serve", "--backend", "vllm", "--base-url", server["url"],
             "--model", "tiny", "--tokenizer", str(server["models"] / "target"), "--dataset-name", "random",
             "--random-input-len", "16", "--random-output-len", "24", "--num-prompts", "6",
             "--max-concurrency", "2", "--seed", "0", "--save-result", "--save-detailed",
             "--result-dir", str(tmp_path), "--result-filename", f"{name}.json"],
            capture_output=True, text=True, env={**os.environ, **vh.engine_env()}, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        files.append(tmp_path / f"{name}.json")
    doc = json.loads(files[0].read_text())
    assert doc["completed"] == 6 and doc["spec_decode_num_drafts"] > 0
    r = cli("compare", str(files[0]), str(files[1]), "--json")
    # One benchmark run a side is one launch a side: no spread between launches, so no verdict (exit 3).
    assert r.returncode == 3, r.stderr
    c = json.loads(r.stdout)
    names = {m["name"]: m for m in c["metrics"]}
    assert c["primary"] == "tpot" and {"tpot", "ttft", "itl", "e2e"} <= set(names)
    assert names["tpot"]["unit"] == "ms"
    from regdiag.importers import load_run

    run = load_run(files[0])
    la = run["launches"][0]
    assert len(la["samples"]["e2e"]) == 6 and run["better"]["output_throughput"] == "higher"
    assert 1 <= la["scalars"]["spec_decode_acceptance_length"] <= vh.K + 1
    assert run["units"]["spec_decode_acceptance_length"] == "tokens/step"


def _traffic(url: str, seconds: float) -> None:
    """Requests one after another for `seconds`: the server logs its stats every second, so the log
    then holds several intervals with generation in them (a quiet machine served the tests above in
    about one interval: no token period to read)."""
    body = json.dumps(
        {"model": "tiny", "prompt": "the cat sat on the mat; the cat sat on the", "max_tokens": 64}
    )
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        req = urllib.request.Request(
            url + "/v1/completions", body.encode(), {"Content-Type": "application/json"}
        )
        urllib.request.urlopen(req, timeout=120).read()
    time.sleep(2.5)  # the next stats line, which covers the last requests


def test_ingest_log_of_the_servers_own_spec_decode_lines(cli, tmp_path, server):
    # Stats are logged every second (VLLM_LOG_STATS_INTERVAL=1): the log has SpecDecoding lines.
    _traffic(server["url"], 5.0)
    log = tmp_path / "server.log"
    log.write_bytes(server["log"].read_bytes())
    out = tmp_path / "log.json"
    r = cli("ingest-log", str(log), "-o", str(out))
    assert r.returncode == 0, r.stderr
    la = json.loads(out.read_text())["launches"][0]
    assert "vllm-specdecoding" in la["header"]["formats"]
    assert 1 < la["scalars"]["accept_len_mean"] <= vh.K + 1
    assert la["values"]["spec_accept_len"] and min(la["samples"]["itl"]) > 0
