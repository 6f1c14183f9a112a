"""`regdiag probe engine`: the hook inside real processes — a fake HTTP engine with worker processes
and its own sitecustomize, and Hugging Face transformers' own assisted-generation loop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from server_helpers import free_port

from regdiag.engine.run import paired_overhead

ROOT = Path(__file__).resolve().parent.parent
FAKE = "tests/engine_fake"
FAKE_PHASES = [
    "--phase", "draft=fake_spec:SpecWorker.draft",
    "--phase", "verify=fake_spec:SpecWorker.verify",
    "--phase", "extend=fake_spec:SpecWorker.extend",
    "--sync", "fake_spec:SpecWorker.commit",
    "--accept", "fake_spec:SpecWorker.commit=n_accepted",
]  # fmt: skip


def _fake_server(port: int, workers: int = 2, env: str = "") -> list[str]:
    cmd = f"{env} PYTHONPATH={FAKE}/site python3 {FAKE}/fake_engine.py --port {port} --workers {workers}"
    return ["--launch-cmd", cmd.strip(), "--url", f"http://127.0.0.1:{port}", "--no-snapshot"]


@pytest.mark.launch
@pytest.mark.engine
def test_fake_server_engine_timed_in_every_worker(cli, tmp_path):
    port = free_port()
    out = tmp_path / "run.json"
    r = cli("probe", "engine", *_fake_server(port), *FAKE_PHASES, "-L", "1", "-R", "3",
            "--max-tokens", "45", "-o", str(out), "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = json.loads(out.read_text())
    la = run["launches"][0]
    assert la["status"] == "ok" and run["kind"] == "engine" and run["phases"] == ["draft", "verify", "extend"]
    # Both worker processes (fresh interpreters, PYTHONPATH inherited) timed cycles; the server did not.
    assert la["processes_timed"] == 2
    # The engine's own sitecustomize ran (the engine exits 3 otherwise) and the hook says it chained to it.
    assert la["header"]["chained_sitecustomize"].endswith("engine_fake/site/sitecustomize.py")
    assert la["header"]["timer"] == "perf-counter"
    assert sorted(la["hook"]["patched"]) == sorted(
        f"fake_spec:SpecWorker.{f}" for f in ("commit", "draft", "extend", "verify")
    )
    # 45 tokens per request at 3 tokens per cycle (FAKE_ACCEPT=2 accepted + 1): 15 cycles x 3 requests.
    n = len(la["samples"]["cycle"]) + len(la["bare_samples"]["cycle"]) + la["warmup_dropped"]
    assert n == 45
    assert la["values"]["accept_len"] == [3.0] * len(la["samples"]["cycle"])
    assert la["calls_per_cycle"] == {"draft": 1.0, "verify": 1.0, "extend": 1.0}
    for ph in ("draft", "verify", "extend"):
        assert len(la["samples"][ph]) == len(la["samples"]["cycle"]) and min(la["samples"][ph]) > 0
    assert "overhead_pct" in la["scalars"] and la["scalars"]["overhead_pairs"] >= 3
    assert la["server_process"]["stopped_by"] == "SIGTERM"
    summary = json.loads(r.stdout)
    assert summary["accept_len_mean"] == 3.0 and summary["launches"] == 1


@pytest.mark.launch
@pytest.mark.engine
def test_phase_sum_matches_cycle_with_one_worker(cli, tmp_path):
    port = free_port()
    out = tmp_path / "run.json"
    r = cli("probe", "engine", *_fake_server(port, workers=1), *FAKE_PHASES, "-L", "1", "-R", "2",
            "--max-tokens", "60", "-o", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    la = json.loads(out.read_text())["launches"][0]
    # The cycle is draft -> verify -> extend -> commit; nothing else in it but the wrappers.
    assert la["scalars"]["phase_sum_gap_pct_median"] < 5
    # the summary a probe shows: one number per metric, the run's (stats.run_value), named once
    assert "run: the geometric mean of the launch medians" in r.stdout
    assert any(ln.split()[:1] == ["cycle"] for ln in r.stdout.splitlines()), r.stdout


@pytest.mark.launch
@pytest.mark.engine
def test_verify_regression_found_by_compare_and_explain(cli, tmp_path):
    runs = []
    for name, verify_n in (("old", 1000), ("new", 30000)):  # 30x: robust to a loaded 2-core VM
        port = free_port()
        out = tmp_path / f"{name}.json"
        r = cli("probe", "engine", *_fake_server(port, workers=1, env=f"FAKE_VERIFY_N={verify_n}"),
                *FAKE_PHASES, "-L", "4", "-R", "1", "--max-tokens", "60", "-o", str(out))  # fmt: skip
        assert r.returncode == 0, r.stderr
        runs.append(str(out))
    r = cli("compare", *runs, "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 1 and d["verdict"] == "REGRESSED", r.stdout
    verdicts = {m["name"]: m["verdict"] for m in d["metrics"]}
    assert verdicts["verify"] == "REGRESSED"
    assert verdicts["accept_len"] != "REGRESSED"
    r = cli("explain", runs[1])
    assert r.returncode == 0, r.stderr
    assert "3 tokens per" in r.stdout


def test_missing_target_is_one_line_exit_2_before_starting(cli):
    port = free_port()
    r = cli("probe", "engine", *_fake_server(port), "--phase", "draft=fake_spec:SpecWorker.draft",
            "--phase", "verify=fake_spec:SpecWorker.no_such_verify")  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "regdiag: error: verify: fake_spec:SpecWorker.no_such_verify does not exist in the installed "
        "fake_spec (version unknown: not an installed distribution)"
    ]


@pytest.mark.launch
@pytest.mark.engine
def test_missing_target_found_by_the_hook_at_run_time(cli, tmp_path):
    # --no-check: the engine starts; the hook finds the target missing when the module is imported.
    port = free_port()
    r = cli("probe", "engine", *_fake_server(port), "--no-check", *FAKE_PHASES,
            "--phase", "extend=fake_spec:SpecWorker.extend_gone", "-L", "2", "-R", "1")  # fmt: skip
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith(
        "regdiag: error: extend: fake_spec:SpecWorker.extend_gone does not exist in the installed fake_spec"
    )
    run = json.loads(Path(lines[-1].rsplit("; record: ", 1)[1]).read_text())
    assert [la["status"] for la in run["launches"]] == ["error"]  # no second launch
    assert run["launches"][0]["server_process"]["stopped_by"] == "SIGTERM"


def test_targets_never_imported_fail_the_launch(cli):
    # The target exists (the source check passes) but the engine never imports its module.
    r = cli("probe", "engine", "--launch-cmd", f"python3 {FAKE}/hf_noop.py", "--no-snapshot",
            "--phase", "draft=xml.dom.minidom:parseString", "-L", "1")  # fmt: skip
    assert r.returncode == 5
    assert (
        "no cycle was timed; targets never patched (module never imported by any process of the "
        "engine): xml.dom.minidom:parseString" in r.stderr
    )


def test_bad_phase_syntax(cli):
    r = cli("probe", "engine", "--launch-cmd", "true", "--phase", "verify=nocolon")
    assert r.returncode == 2 and "is not module:Qualified.name" in r.stderr
    r = cli("probe", "engine", "--launch-cmd", "true", "--preset", "tgi")
    assert r.returncode == 2 and "unknown --preset 'tgi'" in r.stderr


def test_paired_overhead_cancels_drift():
    # Cycles slow down steadily (a growing KV cache); the hook adds nothing: paired says ~0,
    # the unpaired medians would not.
    cycles, t = [], 10.0
    for i in range(40):
        bare = (i // 1) % 4 in (1, 2)
        cycles.append({"i": i, "bare": bare, "t": {"cycle": t}})
        t += 0.5
    pct, pairs = paired_overhead(cycles)
    assert pairs > 10 and abs(pct) < 5.1


def test_sitecustomize_chains_without_the_hook(tmp_path):
    # No REGDIAG_ENGINE_HOOK: the hook's sitecustomize only runs the next one on sys.path.
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import sys\nsys.chained_marker = __file__\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "probes/_engine_hook"), str(other)])}
    env.pop("REGDIAG_ENGINE_HOOK", None)
    out = subprocess.run([sys.executable, "-c", "import sys; print(sys.chained_marker)"],
                         capture_output=True, text=True, env=env, check=True)  # fmt: skip
    assert out.stdout.strip() == str(other / "sitecustomize.py")


@pytest.fixture
def transformers():
    return pytest.importorskip("transformers")


def _hf(cli, tmp_path, *script_args: str):
    out = tmp_path / "hf.json"
    r = cli("probe", "engine", "--preset", "transformers", "--no-snapshot", "-L", "1", "-o", str(out),
            "--launch-cmd", f"python3 {FAKE}/hf_assisted.py " + " ".join(script_args))  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())["launches"][0]


def test_transformers_assisted_generation_draft_equal_to_target(cli, tmp_path, transformers):
    la = _hf(cli, tmp_path, "--same", "--tokens", "100")
    assert la["header"]["engine_versions"] == [f"transformers {transformers.__version__}"]
    acc = la["values"]["accept_len"]
    # A draft equal to the target: all 4 drafted tokens accepted, + the target's own token.
    assert acc and sum(acc) / len(acc) >= 4.5
    assert la["calls_per_cycle"] == {"draft": 1.0, "verify": 1.0}
    assert la["scalars"]["phase_sum_gap_pct_median"] < 5


def test_transformers_assisted_generation_random_draft(cli, tmp_path, transformers):
    la = _hf(cli, tmp_path, "--tokens", "30")
    acc = la["values"]["accept_len"]
    # A random draft over a 256-token vocabulary almost never agrees with the target.
    assert len(acc) >= 10 and sum(acc) / len(acc) < 1.3
    assert la["scalars"]["phase_sum_gap_pct_median"] < 5


def test_transformers_target_missing_names_the_version(cli, transformers):
    r = cli("probe", "engine", "--preset", "transformers", "--launch-cmd", "true",
            "--phase", "verify=transformers.generation.utils:no_such_loop")  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "regdiag: error: verify: transformers.generation.utils:no_such_loop does not exist "
        f"in the installed transformers {transformers.__version__}"
    )


@pytest.mark.launch
@pytest.mark.engine
@pytest.mark.tool
def test_ctrl_c_keeps_the_cycles_and_stops_the_engine(tmp_path):
    port = free_port()
    # Its own temporary directory: the hook files waited for below are this probe's, not those of a
    # probe another test (or another suite on this machine) is running at the same moment.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "REGDIAG_HOME": str(tmp_path), "TMPDIR": str(scratch)}
    args = [sys.executable, "-m", "regdiag", "probe", "engine", *_fake_server(port, workers=2), *FAKE_PHASES,
            "-L", "2", "-R", "400", "--max-tokens", "90"]  # fmt: skip
    proc = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        hooks: list[Path] = []
        while time.monotonic() < deadline and not any(h.stat().st_size > 2000 for h in hooks):
            time.sleep(0.3)  # until the workers have written a few cycles
            hooks = list(scratch.glob("regdiag-*/out/hook-*.jsonl"))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.communicate()  # reaped and its pipes closed here, not in whichever test runs the GC next
    assert proc.returncode == 130, err
    run = json.loads(next((tmp_path / "runs").glob("*.json")).read_text())
    assert run["status"] == "interrupted" and len(run["launches"]) == 1
    la = run["launches"][0]
    assert la["status"] == "interrupted" and len(la["samples"]["cycle"]) > 0
    # The engine's process group, workers included, is gone (zombies waiting for a reaper aside).
    assert _live_members(la["server_process"]["pid"]) == []


def _live_members(pgid: int) -> list[int]:
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            live.append(int(stat.parent.name))
    return live


@pytest.mark.launch
@pytest.mark.engine
def test_protocol_output_drives_bisect(cli, tmp_path):
    # bisect runs `probe engine --protocol` per launch; the env var that makes verify 10x slower is found.
    engine = (
        f"python -m regdiag probe engine --protocol -L 1 --no-snapshot {' '.join(FAKE_PHASES)} "
        f"--launch-cmd 'PYTHONPATH={FAKE}/site python3 {FAKE}/fake_engine.py --workers 1 --tokens 60'"
    )
    r = cli("bisect", "--good", "FAKE_VERIFY_N=2000 FAKE_DRAFT_N=3000", "--bad",
            "FAKE_VERIFY_N=20000 FAKE_DRAFT_N=3000", "--command", engine, "--metric", "verify",
            "--launches", "3", "--max-launches", "6", "--journal", str(tmp_path / "j.jsonl"), "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["verdict"] == "CULPRIT", res
    assert [c["change"] for c in res["culprits"]] == ["FAKE_VERIFY_N '2000' -> '20000'"]
    assert res["culprits"][0]["ms"]["verify"] > 10 * abs(res["culprits"][0]["ms"]["draft"])


def test_protocol_error_line_and_exit_2(cli):
    r = cli("probe", "engine", "--protocol", "--no-snapshot", "--launch-cmd", f"python3 {FAKE}/fake_engine.py",
            "--phase", "verify=fake_spec:SpecWorker.gone_verify")  # fmt: skip
    assert r.returncode == 2
    line = json.loads(r.stdout)
    assert line["type"] == "error" and line["kind"] == "usage" and "gone_verify" in line["message"]
