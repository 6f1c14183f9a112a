"""The HTTP client against a real server process that answers in SGLang's and vLLM's formats."""

from __future__ import annotations

import time

import pytest
from server_helpers import DEFAULTS, Emulator, free_port

from regdiag.server import metrics
from regdiag.server.client import API_CHAT, API_OPENAI, API_SGLANG, Endpoint, EndpointError, send
from regdiag.server.load import LoadSpec, load_prompts, run_load


@pytest.fixture(scope="module")
def emu():
    e = Emulator()
    yield e
    e.stop()


@pytest.fixture
def sgl(emu: Emulator) -> Emulator:
    return emu.reset()


@pytest.fixture
def vllm(emu: Emulator) -> Emulator:
    return emu.reset(engine="vllm")


def ep(e: Emulator, api: str = API_SGLANG, **kw) -> Endpoint:  # type: ignore[no-untyped-def]
    model = DEFAULTS["model"] if api != API_SGLANG else None
    return Endpoint(e.url, api=api, model=model, **kw)


def test_sglang_stream_counts_tokens_from_meta_info(sgl: Emulator) -> None:
    r = send(ep(sgl), "hello", max_tokens=32)
    assert r.ok, r.error
    assert r.output_tokens == 32
    assert r.token_source == "meta_info.completion_tokens"
    # 1 token at prefill, then steps of 3, 2, 1, 2 ... tokens: one chunk each.
    assert r.chunk_tokens[:6] == [1, 3, 2, 1, 2, 3]
    assert sum(r.chunk_tokens) == 32
    assert r.spec_verify_ct == len(r.chunk_tokens) - 1 == 16
    assert r.accept_len == pytest.approx(2.0)
    assert r.finish_reason == "length"
    assert 0 < r.ttft_s < r.e2e_s  # type: ignore[operator]
    assert r.itl_s == pytest.approx((r.chunk_times[-1] - r.chunk_times[0]) / 31)
    body = sgl.received()[-1]["body"]
    assert body["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 32, "ignore_eos": True}
    assert body["stream"] is True


def test_sglang_plain_response(sgl: Emulator) -> None:
    r = send(ep(sgl), "hello", max_tokens=20, stream=False)
    assert r.ok, r.error
    assert r.output_tokens == 20 and r.ttft_s is None and r.itl_s is None
    assert r.e2e_s and r.e2e_s > 0
    assert r.spec_verify_ct == 9


@pytest.mark.parametrize("api", [API_OPENAI, API_CHAT])
def test_openai_stream_with_continuous_usage(vllm: Emulator, api: str) -> None:
    r = send(ep(vllm, api), "hello", max_tokens=20)
    assert r.ok, r.error
    assert r.output_tokens == 20 and r.token_source == "usage.completion_tokens"
    assert r.chunk_tokens[:4] == [1, 3, 2, 1]  # the chat role chunk carries no token and is not the first
    body = vllm.received()[-1]["body"]
    assert body["temperature"] == 0.0 and body["max_tokens"] == 20 and body["model"] == DEFAULTS["model"]
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert ("messages" in body) == (api == API_CHAT)


def test_openai_stream_usage_only_at_the_end(vllm: Emulator) -> None:
    vllm.configure(usage="final")
    r = send(ep(vllm, API_OPENAI), "hello", max_tokens=20)
    assert r.ok, r.error
    assert r.output_tokens == 20
    assert r.token_source == "chunks; total from usage.completion_tokens"
    # ITL divides by the engine's total, not by the number of chunks.
    assert r.itl_s == pytest.approx((r.chunk_times[-1] - r.chunk_times[0]) / 19)


def test_openai_stream_without_usage_counts_chunks_and_says_so(vllm: Emulator) -> None:
    vllm.configure(usage="none")
    r = send(ep(vllm, API_OPENAI), "hello", max_tokens=20)
    assert r.ok and r.token_source == "chunks" and r.output_tokens == len(r.chunk_times)


def test_openai_plain_response(vllm: Emulator) -> None:
    for api in (API_OPENAI, API_CHAT):
        r = send(ep(vllm, api), "hello", max_tokens=12, stream=False)
        assert r.ok and r.output_tokens == 12 and r.token_source == "usage.completion_tokens"


def test_http_5xx_is_one_line_with_the_server_message(sgl: Emulator) -> None:
    sgl.configure(status_every=1)
    r = send(ep(sgl), "hello", max_tokens=8)
    assert not r.ok and r.http_status == 503
    assert r.error == "HTTP 503: emulated overload"


def test_unknown_model_is_reported(vllm: Emulator) -> None:
    r = send(Endpoint(vllm.url, api=API_OPENAI, model="nope"), "hello", max_tokens=8)
    assert not r.ok and r.error == "HTTP 404: The model `nope` does not exist."


def test_error_event_mid_stream_keeps_what_arrived(sgl: Emulator, vllm: Emulator) -> None:
    for api, e in ((API_SGLANG, sgl), (API_OPENAI, vllm)):
        e.configure(error_after_chunks=3)
        r = send(ep(e, api), "hello", max_tokens=32)
        assert not r.ok
        assert r.error == "server error in the stream: emulated engine failure mid-stream"
        assert len(r.chunk_times) == 3 and r.output_tokens == 6 and r.ttft_s is not None


def test_connection_closed_mid_stream(sgl: Emulator) -> None:
    sgl.configure(cut_after_chunks=4)
    r = send(ep(sgl), "hello", max_tokens=32)
    assert not r.ok
    assert r.error in (
        "server closed the connection in the middle of a response after 4 stream events",
        "stream ended without [DONE] after 4 events",
    )
    assert r.output_tokens == 7


def test_malformed_json_event(sgl: Emulator) -> None:
    sgl.configure(malformed_after_chunks=2)
    r = send(ep(sgl), "hello", max_tokens=32)
    assert not r.ok and r.error is not None
    assert r.error.startswith("malformed JSON in stream event 3: ")
    assert r.output_tokens == 4


def test_malformed_plain_response(sgl: Emulator) -> None:
    sgl.configure(malformed_body=True)
    r = send(ep(sgl), "hello", max_tokens=8, stream=False)
    assert not r.ok and r.error == 'malformed JSON in the response: \'{"text": "cut\''


def test_read_timeout(sgl: Emulator) -> None:
    sgl.configure(hang_s=1.5)
    t0 = time.monotonic()
    r = send(ep(sgl, read_timeout=0.3), "hello", max_tokens=8)
    assert time.monotonic() - t0 < 1.4
    assert not r.ok and r.error == "read timeout: no data for 0.3 s"


def test_connection_refused() -> None:
    r = send(Endpoint(f"http://127.0.0.1:{free_port()}", api=API_SGLANG), "hello")
    assert not r.ok and r.error is not None and r.error.startswith("connection refused by 127.0.0.1:")


def test_api_key_is_sent_as_bearer(sgl: Emulator) -> None:
    send(ep(sgl, api_key="k-123"), "hello", max_tokens=4)
    assert sgl.received()[-1]["auth"] == "Bearer k-123"
    assert "k-123" not in repr(ep(sgl, api_key="k-123"))


@pytest.mark.parametrize(
    "url,msg",
    [
        ("ftp://x", "only http:// and https:// URLs are supported"),
        ("http://:80", "no host in the URL"),
        ("http://h:port", "the port is not a number"),
        ("http://u:p@h:1", "put credentials in --api-key-env, not in the URL"),
    ],
)
def test_bad_urls(url: str, msg: str) -> None:
    with pytest.raises(EndpointError, match=msg):
        Endpoint(url)


def test_load_keeps_every_request_and_failures(sgl: Emulator) -> None:
    sgl.configure(status_every=3)
    seen = []
    results, wall = run_load(
        ep(sgl), ["a", "b", "c"], LoadSpec(requests=9, concurrency=4, max_tokens=8), on_result=seen.append
    )
    assert sorted(r.index for r in results) == list(range(9)) and len(seen) == 9
    assert sorted(r.prompt_index for r in results) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert sum(not r.ok for r in results) == 3 and wall > 0


def test_load_prompts_formats(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "p.txt").write_text("one\n\ntwo\n")
    (tmp_path / "p.jsonl").write_text('{"prompt": "one"}\n"two"\n{"text": "three"}\n')
    (tmp_path / "bad.jsonl").write_text('{"prompt": 1}\n')
    (tmp_path / "empty.txt").write_text("\n\n")
    assert load_prompts(str(tmp_path / "p.txt")) == ["one", "two"]
    assert load_prompts(str(tmp_path / "p.jsonl")) == ["one", "two", "three"]
    with pytest.raises(ValueError, match='line 1 has no "prompt" or "text" string'):
        load_prompts(str(tmp_path / "bad.jsonl"))
    with pytest.raises(ValueError, match="no prompts in the file"):
        load_prompts(str(tmp_path / "empty.txt"))


PROM = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 50.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 450.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="a \\"quoted\\" name"} 180
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 120.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 60.0
vllm:num_requests_running{engine="0"} NaN
garbage line without a value
"""


def test_prometheus_counters_and_deltas() -> None:
    before = metrics.spec_counters(PROM)
    assert before["drafts"] == 150.0 and before["draft_tokens"] == 450.0 and before["accepted"] == 180.0
    assert before["per_position"] == {0: 120.0, 1: 60.0}
    after_text = (
        PROM.replace("} 100.0", "} 180.0")
        .replace("} 450.0", "} 690.0")
        .replace("} 180\n", "} 300\n")
        .replace('position="0"} 120.0', 'position="0"} 190.0')
        .replace('position="1"} 60.0', 'position="1"} 110.0')
    )
    d = metrics.spec_delta(before, metrics.spec_counters(after_text))
    assert d["drafts"] == 80 and d["accepted"] == 120 and d["draft_tokens"] == 240
    assert d["accept_len"] == pytest.approx(1 + 120 / 80)
    assert d["accept_rate"] == pytest.approx(0.5)
    assert d["per_position_rate"] == pytest.approx([70 / 80, 50 / 80])
    # A restarted server's counters go down: no delta, and it says so.
    reset = metrics.spec_delta(metrics.spec_counters(after_text), before)
    assert reset["counter_reset"] and "accept_len" not in reset
    assert metrics.spec_delta(None, before) == {}


def test_launch_command_is_redacted_for_the_record() -> None:
    from regdiag.server.launch import split_launch_cmd
    from regdiag.server.record import redact_argv

    argv, env = split_launch_cmd(
        "HF_TOKEN=hf_abcdefghijklmnopqrstu NCCL_PROTO=LL python -m sglang.launch_server "
        "--api-key s3cr3t-value --admin-token=t0ken123 --model-path '/models/my model' --port 30000"
    )
    assert env == {"HF_TOKEN": "hf_abcdefghijklmnopqrstu", "NCCL_PROTO": "LL"}
    assert argv[-4:] == ["--model-path", "/models/my model", "--port", "30000"]
    from regdiag.snapshot.redact import is_hidden

    # A hidden value is its keyed hash and length (docs/redaction.md): shown here as <redacted>.
    shown = [
        t.partition("=")[0] + "=<redacted>"
        if is_hidden(t.partition("=")[2])
        else "<redacted>"
        if is_hidden(t)
        else t
        for t in redact_argv([*(f"{k}={v}" for k, v in env.items()), *argv])
    ]
    assert shown == [
        "HF_TOKEN=<redacted>", "NCCL_PROTO=LL", "python", "-m", "sglang.launch_server",
        "--api-key", "<redacted>", "--admin-token=<redacted>", "--model-path", "/models/my model", "--port", "30000",
    ]  # fmt: skip


# Read from a llama-server (llama.cpp, --metrics) after one 32-token request with a draft model
# identical to the target: every drafted token accepted.
LLAMACPP_PROM = """\
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 8
llamacpp:tokens_predicted_total 32
llamacpp:spec_decode_num_draft_tokens_total 24
llamacpp:spec_decode_num_accepted_tokens_total 24
llamacpp:spec_decode_num_drafts_total 6
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 6
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 6
"""


def test_llamacpp_counters_have_the_same_meaning() -> None:
    zero = metrics.spec_counters(
        "\n".join(
            ln.rsplit(" ", 1)[0] + " 0" if not ln.startswith("#") else ln for ln in LLAMACPP_PROM.splitlines()
        )
    )
    d = metrics.spec_delta(zero, metrics.spec_counters(LLAMACPP_PROM))
    assert d["engine"] == "llama.cpp" and d["generation_tokens"] == 32
    assert d["accept_len"] == 5.0 and d["accept_rate"] == 1.0 and d["per_position_rate"] == [1.0, 1.0]
    assert metrics.spec_counters(PROM)["engine"] == "vllm"
    assert metrics.spec_counters("# nothing here\n")["engine"] is None
