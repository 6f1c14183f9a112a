"""`probe engine --preset vllm` on a real vLLM (the CPU build, V1 model runner): n-gram and EAGLE-3
speculative decoding timed inside the engine, draft / verify / reject each measured, the accept
length from the engine's own rejection sampler; a plain-decode run of the same engine, and explain
on the two. Skipped only when the vLLM venv is absent (tests/vllm_helpers.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import vllm_helpers as vh
from conftest import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.engine]

PHASES = ["verify", "reject", "draft"]
V2 = "vllm.v1.worker.gpu"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    vh.python()
    return vh.build_models(tmp_path_factory.mktemp("vllm-models"))


@pytest.fixture(scope="module")
def ngram(models, tmp_path_factory):
    """One n-gram launch, read by two tests (each engine start costs tens of seconds here)."""
    out = tmp_path_factory.mktemp("ngram") / "ngram.json"
    return (out, *_probe(run_cli, out, "vllm", vh.gen_cmd(models, "ngram")))


def _probe(cli, out: Path, preset: str, cmd: str):
    r = cli("probe", "engine", "--preset", preset, "--python", vh.python(), "-L", "1", "--no-snapshot",
            "-o", str(out), "--json", "--launch-cmd", cmd, env=vh.engine_env(), timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    run = json.loads(out.read_text())
    return run, run["launches"][0], json.loads(r.stdout)


def _spec_checks(run, la, summary):
    assert run["phases"] == PHASES and la["phases_absent"] == []
    n = len(la["samples"]["cycle"])
    assert n >= 10
    for ph in PHASES:  # each phase measured in the cycles it ran in, none a column of zeros
        assert la["phase_cycles"][ph] > 0 and min(la["samples"][ph]) > 0, ph
        assert summary[f"{ph}_ms_median"] > 0
    acc = la["values"]["accept_len"]
    assert acc and all(1 <= a <= vh.K + 1 for a in acc)
    # acceptance as a series: its mean and, from 16 cycles on, the drift check of its blocks
    assert la["acceptance"]["accept_len_mean"] == pytest.approx(sum(acc) / len(acc), abs=1e-3)
    assert (la["acceptance"]["series"] is not None) == (len(acc) >= 16)
    # per draft position, the share of requests that accepted at least that many drafts: a curve
    # that never rises, and 1 + its sum is the mean accept length
    rates = la["engine_counters"]["per_position_rate"]
    assert len(rates) == vh.K and rates == sorted(rates, reverse=True) and all(0 <= r <= 1 for r in rates)
    assert 1 + sum(rates) == pytest.approx(la["acceptance"]["accept_len_mean"], abs=2e-3)
    # The CPU build runs the V1 runner eagerly, and says so through its forward context.
    assert la["graph_modes"]["verify"] == {"NONE": la["phase_cycles"]["verify"]}
    assert la["graph_share"]["verify"] == 0.0
    assert all(t <= 2 * (vh.K + 1) for t in la["values"]["verify_tokens"])  # 2 requests x (k + 1)
    # Start to start holds the cycle and the engine's time until the next one (its scheduler, its
    # output processing): never shorter than the cycle it belongs to.
    periods = la["samples"]["period"]
    assert len(periods) >= n - 1
    assert all(p >= c for c, p in zip(la["samples"]["cycle"], periods, strict=False))
    versions = la["header"]["engine_versions"]
    assert any(v.startswith("vllm") for v in versions), versions
    # The configuration in effect, from the engine core's start-up line (engine_config).
    cfg = la["engine_config"]
    assert cfg["engine"] == "vllm" and cfg["version"] == "0.32.0"
    assert cfg["settings"]["enforce_eager"] is True and cfg["graphs"]["verify"] is False
    assert cfg["speculative"]["num_spec_tokens"] == vh.K
    assert cfg["nccl_debug"] == "added by regdiag (INFO)"
    assert run["engine"]["cycle"]["kind"] == "start-to-start"  # vLLM: verify start to verify start
    return acc


def test_ngram_speculation_timed_inside_vllm(ngram):
    _, run, la, summary = ngram
    _spec_checks(run, la, summary)
    assert "vllm.v1.spec_decode.ngram_proposer:NgramProposer.propose" in la["hook"]["patched"]
    # The V2 runner's speculators exist in the wheel (the source check found them) but the V1 runner
    # on CPU never imports them.
    assert f"{V2}.spec_decode.ngram.speculator:NgramGPUSpeculator.propose" in la["hook"]["never_imported"]
    # The prompts repeat themselves: n-gram drafting finds matches, some drafts are accepted.
    assert la["scalars"]["accept_len_mean"] > 1.2


def test_diff_of_two_runs_names_the_engine_setting_that_differs_first(cli, tmp_path, models, ngram):
    """The same n-gram run with the engine's prefix cache off: `regdiag diff` of the two records names
    that setting, read from the engine's own start-up line, first."""
    out = tmp_path / "no-prefix.json"
    run, la, _ = _probe(cli, out, "vllm", vh.gen_cmd(models, "ngram") + " --no-prefix-caching")
    assert la["engine_config"]["settings"]["enable_prefix_caching"] is False
    r = cli("diff", str(ngram[0]), str(out), "--json")
    assert r.returncode == 0, r.stderr
    items = json.loads(r.stdout)["differences"]
    first = items[0]
    assert (first["group"], first["field"], first["old"], first["new"]) == (
        "engine_config",
        "settings.enable_prefix_caching",
        True,
        False,
    ), items
    assert [i for i in items if i["group"] == "engine_config"] == [first]
    r = cli("diff", str(ngram[0]), str(out))
    assert r.returncode == 0 and "settings.enable_prefix_caching" in r.stdout, r.stdout


def test_eagle3_speculation_timed_inside_vllm(cli, tmp_path, models):
    run, la, summary = _probe(cli, tmp_path / "eagle3.json", "vllm", vh.gen_cmd(models, "eagle3"))
    _spec_checks(run, la, summary)
    assert "vllm.v1.spec_decode.llm_base_proposer:SpecDecodeBaseProposer.propose" in la["hook"]["patched"]
    # Which draft: read from the checkpoint the engine printed in its speculative settings.
    draft = la["engine_config"]["draft"]
    assert (
        draft["kind"] == "EAGLE-3" and draft["path"].endswith("eagle3") and len(draft["config_sha256"]) == 64
    )
    assert la["engine_config"]["speculative"]["method"] == "eagle3"
    # An EAGLE-3 draft runs k forwards of its own layer per cycle: far more than an n-gram lookup.
    assert summary["draft_ms_median"] > summary["reject_ms_median"]


def test_plain_decode_baseline_and_explain(cli, tmp_path, models, ngram):
    dec, la, summary = _probe(cli, tmp_path / "decode.json", "vllm-decode", vh.gen_cmd(models, "none"))
    assert dec["phases"] == ["decode"] and summary["decode_ms_median"] > 0
    assert max(la["values"]["decode_tokens"][-5:]) <= 2  # one token per request per step
    r = cli("explain", str(ngram[0]), "--baseline", str(tmp_path / "decode.json"), "--json")
    assert r.returncode == 0, r.stderr
    ex = json.loads(r.stdout)
    tput = ex["throughput"]
    assert tput["decode_ms"] > 0 and tput["speedup"] > 0
    assert any("an engine run (preset 'vllm'" in n for n in ex["notes"])
