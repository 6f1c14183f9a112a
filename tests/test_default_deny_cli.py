"""Every sink reached through the real CLI carries no generated secret; harmless values stay exact.

Secrets come from tests/secret_families.py (generated from templates). Sinks: `snapshot --json` and its
screen, `diff` of two snapshots, probe records (`launches[].header.env`, from a real tiny CPU run of
spec-decode), `compare` in every format (terminal, markdown, json, csv, html), the bisect journal and
screen of a real bisect, and error lines (both the full CLI and the fast `snapshot --json` path).
"""

from __future__ import annotations

import json
import random
import shlex
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from secret_families import FAMILIES, HARMLESS, Planted, env_name, planted

from regdiag.snapshot.redact import is_hidden


def _secret_env(seed: int, prefix: str = "VLLM_HINT_") -> tuple[dict[str, str], list[Planted]]:
    env: dict[str, str] = {}
    plants: list[Planted] = []
    for i, label in enumerate(sorted(FAMILIES)):
        p = planted(label, seed)
        env[env_name(p, i, prefix)] = p.value
        plants.append(p)
    return env, plants


def _harmless_env(seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    return dict(gen(rng) for gen in HARMLESS.values())


def _leaks(plants: list[Planted], *texts: str) -> list[str]:
    joined = "\n".join(texts)
    return sorted({p.core for p in plants if p.core in joined})


@pytest.mark.slow
def test_snapshot_json_screen_and_diff_leak_nothing_and_keep_knobs(tmp_path: Path) -> None:
    secrets_a, plants_a = _secret_env(0)
    secrets_b, plants_b = _secret_env(1)
    harmless = _harmless_env(0)
    env = {**secrets_a, **harmless, "COLUMNS": "400"}
    as_json = run_cli("snapshot", "--json", "-o", str(tmp_path / "a.json"), env=env)
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    screen = run_cli("snapshot", env=env)
    assert screen.returncode == 0, screen.stderr[-2000:]
    b = run_cli(
        "snapshot", "--json", "-o", str(tmp_path / "b.json"), env={**secrets_b, **harmless, "COLUMNS": "400"}
    )
    assert b.returncode == 0, b.stderr[-2000:]
    diff = run_cli("diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), env={"COLUMNS": "400"})
    assert diff.returncode in (0, 1), diff.stderr[-2000:]
    outs = [as_json.stdout, as_json.stderr, screen.stdout, screen.stderr, diff.stdout, diff.stderr]
    outs += [(tmp_path / "a.json").read_text(), (tmp_path / "b.json").read_text()]
    assert _leaks(plants_a + plants_b, *outs) == []
    fields = json.loads(as_json.stdout)["groups"]["env"]["fields"]
    assert {k: fields[k]["value"] for k in harmless} == harmless
    assert all(is_hidden(fields[k]["value"]) for k in secrets_a)
    # The hashed values differ between the two snapshots: diff still sees every planted one change.
    for name in [k for k in secrets_a if k.startswith("VLLM_HINT_")][:5]:
        assert name in diff.stdout, name


def _probe(out: Path, env: dict[str, str]) -> None:
    r = run_cli(
        "probe", "spec-decode", "--preset", "tiny", "--context", "64", "--cycles", "4", "--warmup", "1",
        "--block", "2", "--launches", "2", "--no-snapshot", "-o", str(out), env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.slow
def test_probe_records_and_every_compare_format_leak_nothing(tmp_path: Path) -> None:
    # The probe reports the NCCL_* variables each rank saw: plant the secrets there.
    secrets_a, plants_a = _secret_env(2, "NCCL_HINT_")
    secrets_b, plants_b = _secret_env(3, "NCCL_HINT_")
    knobs = {"NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "NCCL_PROTO": "LL128", "NCCL_BUFFSIZE": "8388608"}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _probe(a, {**secrets_a, **knobs})
    _probe(b, {**secrets_b, **knobs})
    outs = [a.read_text(), b.read_text()]
    for rec in (json.loads(outs[0]), json.loads(outs[1])):
        header_env = rec["launches"][0]["header"]["env"]
        assert {k: header_env[k] for k in knobs} == knobs
        assert all(is_hidden(header_env[k]) for k in header_env if k.startswith("NCCL_HINT_")), header_env
    html = tmp_path / "c.html"
    for fmt in ("terminal", "markdown", "json", "csv"):
        r = run_cli("compare", str(a), str(b), "--format", fmt, env={"COLUMNS": "400"})
        assert r.returncode in (0, 1, 3), r.stderr[-2000:]
        outs += [r.stdout, r.stderr]
    r = run_cli("compare", str(a), str(b), "--html", str(html), env={"COLUMNS": "400"})
    assert r.returncode in (0, 1, 3), r.stderr[-2000:]
    outs += [r.stdout, r.stderr, html.read_text()]
    assert _leaks(plants_a + plants_b, *outs) == []
    assert "NCCL_HINT_" in outs[-1] or "NCCL_HINT_" in outs[2]  # the env diff names what changed


@pytest.mark.slow
def test_bisect_journal_and_screen_leak_no_generated_secret(tmp_path: Path) -> None:
    named = [planted(label, 5) for label in ("PGPASSWORD", "MYSQL_PWD", "SSHPASS", "CR_PAT", "LDAP_BINDPW")]
    argv = [planted(label, 5) for label in ("sshpass -p", "--clientSecret", "-u user:pw", "wandb login")]
    token = planted("nvapi", 5)
    held = " ".join(f"{p.name}={shlex.quote(p.value)}" for p in named)
    script = (
        "import os, sys, json; t = 10.0 if os.environ['OMP_NUM_THREADS'] == '1' else 5.0; "
        f"print({token.value!r}, file=sys.stderr); "
        "[print(json.dumps({'type': 'cycle', 'i': i, 't': {'cycle': t}})) for i in range(5)]; "
        "print(json.dumps({'type': 'footer', 'cycles': 5, 'warmup_dropped': 0}))"
    )
    command = f"{sys.executable} -c {shlex.quote(script)} " + " ".join(p.value for p in argv)
    journal = tmp_path / "j.jsonl"
    r = run_cli(
        "bisect", "--good", f"OMP_NUM_THREADS=2 {held}", "--bad", f"OMP_NUM_THREADS=1 {held}",
        "--command", command, "--launches", "2", "--journal", str(journal), "--json", env={"COLUMNS": "400"},
    )  # fmt: skip
    assert r.returncode in (0, 3), r.stderr[-2000:]
    assert json.loads(r.stdout)["verdict"] == "CULPRIT"
    assert _leaks([*named, *argv, token], journal.read_text(), r.stdout, r.stderr) == []


@pytest.mark.launch
@pytest.mark.engine
def test_error_lines_carry_no_secret(tmp_path: Path) -> None:
    rng = random.Random(11)
    url_pw = FAMILIES["https url /"](rng)
    key = FAMILIES["openai project"](rng)
    ghp = FAMILIES["github classic"](rng)
    host = FAMILIES["ssh host spec"](rng)
    runs = [
        run_cli(
            "probe", "server", "--url", url_pw.value.replace("mirror.example.com/simple", "127.0.0.1:9/")
        ),
        run_cli("probe", "server", "--url", "http://127.0.0.1:9/", "--api-key-env", key.value),
        run_cli("compare", str(tmp_path / f"{ghp.value}.json"), str(tmp_path / "b.json")),
        run_cli("snapshot", "--json", "-o", str(tmp_path / ghp.value / "x.json")),  # the fast path
        run_cli("snapshot", "--host", host.value.replace("gpu-node3", "nosuchhost.invalid")),
    ]
    for r in runs:
        assert r.returncode != 0 and "regdiag: error: " in r.stderr, r.stderr[-1000:]
        assert "Traceback" not in r.stderr
    assert _leaks([url_pw, key, ghp, host], *(r.stderr + r.stdout for r in runs)) == []


def _protocol_script(stderr_text: str, stray: str) -> str:
    """A command that speaks the probe protocol, prints a secret on stderr and a stray stdout line."""
    return (
        "import os, sys, json; t = 10.0 if os.environ.get('OMP_NUM_THREADS') == '1' else 5.0; "
        f"print({stderr_text!r}, file=sys.stderr); print({stray!r}); "
        "[print(json.dumps({'type': 'cycle', 'i': i, 't': {'cycle': t}})) for i in range(5)]; "
        "print(json.dumps({'type': 'footer', 'cycles': 5, 'warmup_dropped': 0}))"
    )


@pytest.mark.slow
def test_ab_records_screen_and_compare_leak_nothing(tmp_path: Path) -> None:
    pw_a, pw_b = planted("PGPASSWORD", 21), planted("PGPASSWORD", 22)
    token, key, argv = planted("xai", 21), planted("openssh key", 21), planted("--accessToken", 21)
    script = _protocol_script(token.value, key.value)
    command = f"{sys.executable} -c {shlex.quote(script)} {argv.value}"
    prefix = tmp_path / "ab"
    r = run_cli(
        "ab", "--a", f"OMP_NUM_THREADS=2 PGPASSWORD={shlex.quote(pw_a.value)}",
        "--b", f"OMP_NUM_THREADS=1 PGPASSWORD={shlex.quote(pw_b.value)}", "--command", command,
        "--launches", "2", "--margin", "25%", "--no-snapshot", "-o", str(prefix), env={"COLUMNS": "400"},
    )  # fmt: skip
    assert r.returncode in (0, 1, 3), r.stderr[-2000:]
    a, b = Path(f"{prefix}-a.json"), Path(f"{prefix}-b.json")
    c = run_cli("compare", str(a), str(b), "--margin", "25%", "--format", "markdown", env={"COLUMNS": "400"})
    outs = [r.stdout, r.stderr, a.read_text(), b.read_text(), c.stdout, c.stderr]
    assert _leaks([pw_a, pw_b, token, key, argv], *outs) == []
    rec = json.loads(b.read_text())
    assert rec["env"]["OMP_NUM_THREADS"] == "1" and is_hidden(rec["env"]["PGPASSWORD"])


def test_snapshot_pid_leaks_nothing_of_a_running_process(tmp_path: Path) -> None:
    import os
    import subprocess

    pw, token, argv = planted("MYSQL_PWD", 31), planted("github classic", 31), planted("sshpass -p", 31)
    harmless = _harmless_env(31)
    env = {**os.environ, **harmless, "MYSQL_PWD": pw.value, "VLLM_HINT": token.value}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "--api_key", token.value, *argv.argv()],
        env=env,
    )
    try:
        r = run_cli("snapshot", "--pid", str(proc.pid), "--json", env={"COLUMNS": "400"})
    finally:
        proc.kill()
        proc.wait()
    assert r.returncode == 0, r.stderr[-2000:]
    assert _leaks([pw, token, argv], r.stdout, r.stderr) == []
    fields = json.loads(r.stdout)["groups"]["env"]["fields"]
    assert {k: fields[k]["value"] for k in harmless} == harmless


def test_the_remote_bundle_redacts_alike_without_detect_secrets(tmp_path: Path) -> None:
    """What a remote host runs: the bundle, by an interpreter without site-packages (-S -E: no
    detect-secrets there), hides the same values and keeps the same knobs."""
    import os
    import subprocess

    from regdiag.hosts import bundle

    plants = [
        planted(label, 41) for label in ("PGPASSWORD", "xai", "https url /", "rsa pem", "numeric password")
    ]
    harmless = _harmless_env(41)
    env = {"PATH": os.environ["PATH"], "REGDIAG_HOME": str(tmp_path / "home"), **harmless}
    env.update({env_name(p, i): p.value for i, p in enumerate(plants)})
    r = subprocess.run(
        [sys.executable, "-S", "-E", str(bundle.local_bundle_path()), "snapshot"],
        capture_output=True, text=True, env=env, timeout=240,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert _leaks(plants, r.stdout, r.stderr) == []
    fields = json.loads(r.stdout)["groups"]["env"]["fields"]
    assert {k: fields[k]["value"] for k in harmless} == harmless
    assert all(is_hidden(fields[env_name(p, i)]["value"]) for i, p in enumerate(plants))
