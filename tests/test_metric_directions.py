"""Every metric an instrument of regdiag writes declares its unit and which way is better, in the record.

Each instrument really runs here: the spec-decode probe (tiny preset, both modes, 2 gloo ranks), the
collectives probe (2 gloo ranks, all-reduce and all-gather), the server probe against the local SGLang and
vLLM emulators, and ingest-log on every log fixture. The walk covers every sample and value series of
every launch; a metric whose direction only the name-based fallback knows fails the test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from server_helpers import Emulator

from regdiag import direction
from regdiag.records import load_record

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parent / "data"
TINY = ["--preset", "tiny", "--context", "64", "--cycles", "4", "--warmup", "1", "--block", "2"]


def _record(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "run.json"
    p = run_cli(*args, "-o", str(out), env={"REGDIAG_HOME": str(tmp_path / "home")})
    assert p.returncode == 0, p.stderr[-3000:]
    return load_record(out, "run")


def _metrics(run: dict[str, Any]) -> set[str]:
    """Every series name of every launch: the samples (timed) and the values (per cycle or interval)."""
    names = {n for la in run["launches"] for key in ("samples", "values") for n in (la.get(key) or {})}
    assert names, "the run measured nothing"
    return names


def _walk(run: dict[str, Any]) -> set[str]:
    names = _metrics(run)
    assert direction.undeclared(run, names) == [], f"{run['probe']['name']}: no unit or direction declared"
    assert all(direction.direction(n, "", run["better"])[1] == "declared" for n in names)
    return names


@pytest.mark.parametrize("mode", ["eagle", "baseline"])
def test_spec_decode_declares_every_metric(tmp_path: Path, mode: str) -> None:
    run = _record(
        tmp_path,
        "probe",
        "spec-decode",
        *TINY,
        "--mode",
        mode,
        "--tp",
        "2",
        "--launches",
        "1",
        "--no-snapshot",
    )
    names = _walk(run)
    assert run["better"]["cycle"] == "lower"
    assert run["better"][f"experts_{'verify' if mode == 'eagle' else 'decode'}"] == "context"
    assert ("accept_len" in names) == (mode == "eagle")


@pytest.mark.parametrize("op", ["all_reduce", "all_gather"])
def test_collectives_declare_every_metric(tmp_path: Path, op: str) -> None:
    run = _record(tmp_path, "probe", "collectives", "--tp", "2", "--op", op, "--sizes", "4K,64K",
                  "--iters", "2", "--reps", "2", "--warmup", "1", "--launches", "1", "--no-snapshot")  # fmt: skip
    names = _walk(run)
    assert {run["better"][n] for n in names if n.startswith("busbw_")} == {"higher"}
    assert {run["units"][n] for n in names if n.startswith(("ar_", "ag_"))} == {"us"}


@pytest.mark.parametrize("engine, api", [("sglang", "sglang"), ("vllm", "openai-chat")])
def test_server_probe_declares_every_metric(tmp_path: Path, engine: str, api: str) -> None:
    emu = Emulator(engine=engine)
    try:
        run = _record(tmp_path, "probe", "server", "--url", emu.url, "--api", api,
                      "-L", "1", "-R", "3", "--max-tokens", "16", "--no-snapshot")  # fmt: skip
    finally:
        emu.stop()
    names = _walk(run)
    assert {"itl", "ttft", "e2e"} <= names and run["better"]["output_tokens"] == "context"


# the engines' start-up logs (the engine section's inputs) hold no measurements to ingest
LOGS = sorted(p.name for p in DATA.glob("*.log") if p.name != "garbage.log" and "startup" not in p.name)


@pytest.mark.parametrize("log", LOGS)
def test_ingest_log_declares_every_metric(tmp_path: Path, log: str) -> None:
    run = _record(tmp_path, "ingest-log", str(DATA / log))
    names = _walk(run)
    for setting in {"running_req", "queue_req", "tp_rank", "cuda_graph"} & names:
        assert run["better"][setting] == "context"


def test_an_undeclared_metric_is_caught() -> None:
    """The walk's own check: a series the record does not declare is named, even one the fallback knows."""
    run = {"units": {"itl": "ms", "gen_tok_s": "tok/s"}, "better": {"itl": "lower"}}
    assert direction.undeclared(run, {"itl", "gen_tok_s", "queue_req"}) == ["gen_tok_s", "queue_req"]


def test_old_records_without_better_fall_back_on_unit_and_name() -> None:
    """Records written before metrics declared a direction keep their verdicts' sense."""
    assert direction.direction("busbw_4MiB", "", None) == ("higher", "inferred")
    assert direction.direction("gen_tok_s", "tok/s", {}) == ("higher", "inferred")
    assert direction.direction("itl", "ms", {}) == ("lower", "inferred")
    for setting in ("running_req", "queue_req", "tp_rank", "cuda_graph", "experts_verify"):
        assert direction.direction(setting, "", None) == ("context", "inferred")
    # a declaration wins over the fallback, an unknown word is not trusted
    assert direction.direction("queue_req", "", {"queue_req": "lower"}) == ("lower", "declared")
    assert direction.declared({"better": {"x": "sideways", "y": "context"}}) == {"y": "context"}


def test_compare_refuses_a_primary_that_is_context_in_one_line() -> None:
    # The overall verdict is the primary's; a setting has none (it was a bare StopIteration).
    from compare_helpers import run_record

    from regdiag.compare import compare_runs
    from regdiag.errors import BadInput

    def run(v: float) -> dict[str, Any]:
        launches = [
            {
                "index": i,
                "status": "ok",
                "samples": {"running_req": [v + i, v + i + 1.0], "cycle": [5.0, 6.0]},
            }
            for i in range(3)
        ]
        return run_record(launches, primary="running_req", phases=[])

    with pytest.raises(BadInput, match="primary metric 'running_req' is a setting"):
        compare_runs(run(4.0), run(8.0))
