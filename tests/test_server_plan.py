"""The library pieces behind `probe server`, `probe engine` and `ingest-log`: requests checked into plans,
the one launch-record builder, and the per-family log-line parsers. No server needed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from regdiag.engine.plan import EngineRequest, plan_engine
from regdiag.engine.plan import run_summary as engine_summary
from regdiag.errors import BadInput
from regdiag.server.client import Endpoint, RequestResult
from regdiag.server.logparse import parse_lines
from regdiag.server.plan import ServerRequest, failed_launches, is_local_url, plan_probe
from regdiag.server.record import cycle_samples, log_launch, new_launch, server_launch_header

DATA = Path(__file__).parent / "data"

SERVER = ServerRequest(
    url="http://127.0.0.1:30000",
    api="sglang",
    model=None,
    launches=3,
    requests=8,
    concurrency=1,
    max_tokens=128,
    prompts=None,
    warmup=1,
    stream=True,
    ignore_eos=True,
    connect_timeout=10.0,
    read_timeout=300.0,
    api_key_env=None,
    launch_cmd=None,
    startup_timeout=1800.0,
    stop_grace=30.0,
    host=None,
)


def test_new_launch_has_the_documented_layout_and_every_launch_kind_starts_from_it() -> None:
    la = new_launch(4, "2026-11-29T09:01:03+00:00", {"url": "u"})
    assert list(la) == [
        "index", "status", "error", "started", "header",
        "warmup_dropped", "samples", "values", "scalars", "clocks",
    ]  # fmt: skip
    assert (la["index"], la["status"], la["header"]) == (4, "interrupted", {"url": "u"})
    assert (
        new_launch(0, None)["header"] == {}
        and new_launch(0, None)["samples"] is not new_launch(0, None)["samples"]
    )
    # ingest-log's launches keep that layout and add their footer after it.
    p = parse_lines((DATA / "sglang_decode_dot.log").read_text(errors="replace").splitlines())
    log = log_launch(p, str(DATA / "sglang_decode_dot.log"), 2)
    assert list(log)[: len(la)] == list(la) and list(log)[len(la) :] == ["footer"]
    assert log["header"]["source"] == "log" and log["index"] == 2 and log["status"] == "ok"


def test_server_launch_header_names_the_endpoint() -> None:
    ep = Endpoint("localhost:8000/v1/", api="openai", model="m")
    assert server_launch_header(ep) == {"url": "http://localhost:8000/v1", "api": "openai", "model": "m"}


def test_cycle_prefers_the_requests_own_accept_length() -> None:
    own = RequestResult(0, 0, ok=True, output_tokens=9, chunk_times=[0.0, 0.8], chunk_tokens=[1, 8])
    own.spec_verify_ct = 3  # accept length 3.0, itl 100 ms
    counted = RequestResult(1, 0, ok=True, output_tokens=5, chunk_times=[0.0, 0.2], chunk_tokens=[1, 4])
    assert cycle_samples([own, counted], 2.0) == [300.0, 100.0]
    assert cycle_samples([counted], None) == []  # no accept length anywhere: no cycle


def test_plan_probe_checks_options_in_order_with_one_line_each(tmp_path: Path) -> None:
    def bad(**kw: object) -> str:
        with pytest.raises(BadInput) as e:
            plan_probe(dataclasses.replace(SERVER, **kw), environ={})  # type: ignore[arg-type]
        return str(e.value)

    assert bad(api="grpc", api_key_env="NOPE").startswith("--api 'grpc': choose one of")
    assert bad(api_key_env="NOPE") == "--api-key-env NOPE: that variable is not set"
    assert "credentials" in bad(url="http://u:p@h:1", prompts=str(tmp_path / "missing"))
    assert "missing" in bad(prompts=str(tmp_path / "missing"))
    assert bad(host="gpu1").startswith("--host is where --launch-cmd starts the server")

    plan = plan_probe(SERVER, environ={})
    assert (plan.argv, plan.env, plan.needs_host, plan.prompts_desc) == (None, {}, False, "built-in")
    assert plan.config()["launch_cmd"] is None and plan.config()["prompt_count"] == len(plan.prompts)
    assert plan.can_snapshot(None)  # 127.0.0.1: this machine is the server's
    withkey = plan_probe(dataclasses.replace(SERVER, api_key_env="K"), environ={"K": "sk-secret"})
    assert withkey.ep.api_key == "sk-secret" and "sk-secret" not in repr(withkey.config())


def test_plan_probe_launch_command_is_redacted_in_the_config() -> None:
    plan = plan_probe(
        dataclasses.replace(SERVER, launch_cmd="HF_TOKEN=hf_abcdefghijklmnopqrstuv python -m srv --port 1"),
        environ={},
    )
    assert plan.argv == ["python", "-m", "srv", "--port", "1"] and plan.needs_host
    assert "hf_abcdefghijklmnopqrstuv" not in str(plan.config()["launch_cmd"])
    assert plan.probe(None).launch_env == {"HF_TOKEN": "hf_abcdefghijklmnopqrstuv"}


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:30000", True),
        ("localhost:8000", True),
        ("http://[::1]:80", True),
        ("http://10.0.0.5:30000", False),
        ("http://gpu-box:30000", False),
    ],
)
def test_is_local_url(url: str, local: bool) -> None:
    assert is_local_url(url) is local


def test_failed_launches_names_the_first_error() -> None:
    run = {"launches": [{"status": "ok"}, {"status": "error", "error": "boom"}, {"status": "interrupted"}]}
    assert failed_launches(run) == "2 of 3 launches failed; first: boom"
    assert failed_launches({"launches": [{"status": "ok"}]}) is None


ENGINE = EngineRequest(
    launch_cmd="python serve.py",
    preset=None,
    phase=("draft=m:A.draft", "verify=m:A.verify"),
    sync=None,
    cycle=None,
    accept=None,
    url=None,
    api="sglang",
    requests=8,
    max_tokens=128,
    launches=3,
    warmup=2,
    block=1,
    timeout=1800.0,
    check=True,
)


def test_plan_engine_checks_and_keeps_the_phase_order() -> None:
    plan = plan_engine(ENGINE)
    assert plan.phases == ["draft", "verify"] and plan.ep is None and plan.argv == ["python", "serve.py"]
    assert plan.config()["load"] is False and plan.config()["requests"] is None
    with pytest.raises(BadInput, match="choose one of"):
        plan_engine(dataclasses.replace(ENGINE, url="http://h:1", api="grpc"))
    with pytest.raises(BadInput, match="no phases"):
        plan_engine(dataclasses.replace(ENGINE, phase=()))
    with_url = plan_engine(dataclasses.replace(ENGINE, url="http://h:1"))
    assert with_url.config()["requests"] == 8 and with_url.probe(None).load is not None  # type: ignore[arg-type]


def test_engine_summary_is_the_median_of_launch_medians() -> None:
    def la(status: str, cycle: list[float], acc: float | None) -> dict:  # type: ignore[type-arg]
        return {
            "status": status,
            "samples": {"cycle": cycle, "draft": [1.0]},
            "scalars": {"accept_len_mean": acc},
        }

    run = {"launches": [la("ok", [10.0, 12.0, 30.0], 2.0), la("ok", [14.0], 3.0), la("error", [99.0], 9.0)]}
    s = engine_summary(run, ["draft", "verify"])
    assert s["launches"] == 2 and s["cycle_ms_median"] == 13.0 and s["draft_ms_median"] == 1.0
    assert s["verify_ms_median"] is None and s["accept_len_mean"] == 2.5 and s["overhead_pct"] is None


def test_ingest_logs_one_launch_per_file_and_the_cycle_phase_when_sglang_gave_accept_len(
    tmp_path: Path,
) -> None:
    from regdiag.server.ingest import ingest_logs, ingest_summary

    dot, comma = str(DATA / "sglang_decode_dot.log"), str(DATA / "sglang_decode_comma.log")
    run = ingest_logs([dot, comma], idle_gap_s=5.0, rank=None)
    assert [la["index"] for la in run["launches"]] == [0, 1] and run["phases"] == ["itl", "cycle"]
    assert run["probe"]["config"] == {"idle_gap_s": 5.0, "rank": None} and run["status"] == "complete"
    summary = ingest_summary(run, "/r.json")
    assert [la["file"] for la in summary["launches"]] == [dot, comma] and summary["path"] == "/r.json"

    vllm = ingest_logs([str(DATA / "vllm_v1.log")], idle_gap_s=5.0, rank=None)
    assert vllm["phases"] == ["itl"]  # vLLM's accept length is per interval of counts, not per decode line
    with pytest.raises(BadInput, match="cannot read"):
        ingest_logs([str(tmp_path / "gone.log")], idle_gap_s=5.0, rank=None)
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    with pytest.raises(
        BadInput, match=r"empty.log: no SGLang 'Decode batch' or vLLM metrics lines among 1 lines"
    ):
        ingest_logs([dot, str(empty)], idle_gap_s=5.0, rank=None)
