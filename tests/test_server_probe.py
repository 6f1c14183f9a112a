"""`regdiag probe server` end to end: the CLI as a subprocess against real server processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from server_helpers import DEFAULTS, SECRET, Emulator, free_port, launch_cmd
from sshd_helpers import Sshd, sshd  # noqa: F401 - sshd is a fixture

from regdiag.records import load_record
from regdiag.snapshot.redact import is_hidden

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def emu():
    e = Emulator()
    yield e
    e.stop()


@pytest.fixture
def sgl(emu: Emulator) -> Emulator:
    return emu.reset()


def probe(cli, *args: str, **kw):  # type: ignore[no-untyped-def]
    """`regdiag probe server ARGS`; a string argument with spaces is split, except after --launch-cmd."""
    argv: list[str] = []
    for i, a in enumerate(args):
        argv += [a] if (i and args[i - 1] == "--launch-cmd") or a.startswith("http") else a.split()
    return cli("probe", "server", *argv, **kw)


def _only_run(home: Path) -> dict:
    files = list((home / "runs").glob("*.json"))
    assert len(files) == 1, files
    return load_record(files[0], "run")


def home() -> Path:
    return Path(os.environ["REGDIAG_HOME"])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_sglang_run_record(cli, sgl: Emulator, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    args = f"-L 2 -R 5 -C 2 --max-tokens 24 --no-snapshot -o {out} --json --api-key-env EMU_KEY"
    p = probe(cli, "--url", sgl.url, args, env={"EMU_KEY": "k-7f3a9c1e55"})
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    assert summary["status"] == "complete" and summary["ok_launches"] == 2
    assert summary["accept_len_mean"] == pytest.approx(24 / 12)
    run = load_record(out, "run")
    assert run["kind"] == "server" and run["primary"] == "itl"
    assert run["phases"] == ["ttft", "itl", "e2e"] and run["phases_sum_to_primary"] is False
    for la in run["launches"]:
        assert la["status"] == "ok" and la["warmup_dropped"] == 1
        assert {k: len(v) for k, v in la["samples"].items()} == {
            "ttft": 5,
            "itl": 5,
            "e2e": 5,
            "tpot": 5,
            "cycle": 5,
        }
        # tok/s of a stream = accept_len / cycle: the cycle is itl x accept_len.
        assert la["samples"]["cycle"] == pytest.approx([x * 2.0 for x in la["samples"]["itl"]], abs=1e-3)
        assert la["values"]["accept_len"] == [2.0] * 5
        assert la["scalars"]["requests_ok"] == 5 and la["scalars"]["output_tokens"] == 120
        assert la["scalars"]["tok_s_per_request"] == pytest.approx(
            1000 / la["scalars"]["itl_ms_median"], rel=1e-3
        )
        assert la["header"]["accept_len_source"].startswith("sglang meta_info")
        assert la["header"]["engine_version"] == "0.5.0rc0"
        assert [r["index"] for r in la["requests"]] == list(range(5))
    assert is_hidden(run["server_info"]["server_info"]["api_key"])  # its keyed hash and length
    text = out.read_text() + p.stdout + p.stderr
    assert SECRET not in text and "k-7f3a9c1e55" not in text
    assert all(r["auth"] == "Bearer k-7f3a9c1e55" for r in sgl.received())


def test_vllm_accept_length_from_metrics(cli, emu: Emulator) -> None:
    emu.reset(engine="vllm")
    p = probe(cli, "--url", emu.url, "--api openai-chat -L 1 -R 3 --max-tokens 20 --no-snapshot")
    assert p.returncode == 0, p.stderr
    la = _only_run(home())["launches"][0]
    # 20 tokens: 1 at prefill + steps 3,2,1,2,3,2,1,2,3 -> 9 drafts and 10 accepted per request.
    assert la["engine_counters"]["drafts"] == 27 and la["engine_counters"]["accepted"] == 30
    assert la["scalars"]["accept_len_mean"] == pytest.approx(1 + 30 / 27, abs=1e-4)
    assert la["scalars"]["accept_rate"] == pytest.approx(30 / 81, abs=1e-4)
    assert la["header"]["model"] == DEFAULTS["model"] and la["header"]["engine_version"] == "0.10.1.1"
    assert la["samples"]["cycle"] == pytest.approx(
        [x * (1 + 30 / 27) for x in la["samples"]["itl"]], abs=1e-3
    )
    assert "accept len 2.11" in p.stderr


def test_failed_requests_are_kept_and_exit_5(cli, sgl: Emulator) -> None:
    sgl.configure(status_every=3)  # the warm-up is request 1: server requests 3 and 6 fail
    p = probe(cli, "--url", sgl.url, "-L 1 -R 6 --max-tokens 8 --no-snapshot")
    assert p.returncode == 5
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("regdiag: error: 1 of 1 launches failed; first: 2 of 6 requests failed;")
    run = _only_run(home())
    la = run["launches"][0]
    assert run["status"] == "failed" and la["status"] == "error"
    assert la["scalars"]["requests_ok"] == 4 and len(la["samples"]["itl"]) == 4
    assert [r["status"] for r in la["requests"]] == ["ok", "error", "ok", "ok", "error", "ok"]
    assert {r["error"] for r in la["requests"] if r["error"]} == {"HTTP 503: emulated overload"}


def test_unreachable_server_stops_the_run(cli) -> None:
    p = probe(cli, "--url", f"http://127.0.0.1:{free_port()}", "-L 3 -R 2 --no-snapshot --warmup 0")
    assert p.returncode == 5
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "regdiag: error: launch 0: 2 of 2 requests failed; first (request 0): connection refused"
    )
    assert len(_only_run(home())["launches"]) == 1


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--api", "grpc"], "--api 'grpc': choose one of sglang, openai, openai-chat"),
        (["--url", "ftp://h"], "ftp://h: only http:// and https:// URLs are supported"),
        (
            ["--api-key-env", "REGDIAG_NO_SUCH_VAR"],
            "--api-key-env REGDIAG_NO_SUCH_VAR: that variable is not set",
        ),
        (
            ["--host", "gpu"],
            "--host is where --launch-cmd starts the server; without --launch-cmd give only --url",
        ),
        (["--launch-cmd", "A=1"], "--launch-cmd: no command"),
        (["--launch-cmd", "python 'unclosed"], "--launch-cmd: No closing quotation"),
    ],
)
def test_bad_input_is_one_line(cli, args: list[str], msg: str) -> None:
    base = ["probe", "server", "--url", "http://127.0.0.1:9"]
    p = cli(*base, *args)
    assert p.returncode == 2
    assert p.stderr == f"regdiag: error: {msg}\n"


def test_empty_prompt_file(cli, tmp_path: Path) -> None:
    f = tmp_path / "empty.txt"
    f.write_text("\n")
    p = cli("probe", "server", "--url", "http://127.0.0.1:9", "--prompts", str(f))
    assert p.returncode == 2 and p.stderr == f"regdiag: error: {f}: no prompts in the file\n"


def test_help_states_defaults(cli) -> None:
    p = cli("probe", "server", "--help")
    assert p.returncode == 0
    flat = re.sub(r"[\s│]+", " ", p.stdout)  # the option table wraps its cells
    for n in ("3", "8", "128", "sglang", "1800"):
        assert f"Default: {n}." in flat, n


# ---- --launch-cmd: the launches share server starts (a fresh one at the first and third) ----------


@pytest.mark.launch
@pytest.mark.engine
def test_launch_cmd_starts_measures_and_stops_each_server(cli) -> None:
    port = free_port()
    cmd = launch_cmd(port, health_delay_s=0.6, log_every_steps=2)
    url = f"http://127.0.0.1:{port}"
    p = probe(
        cli,
        "--url",
        url,
        "--launch-cmd",
        f"EMU_FLAG=1 {cmd}",
        "-L 3 -R 4 --max-tokens 32 --no-snapshot",
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    run = _only_run(home())
    # launches share server starts: the first and the third start it (docs/engine.md, "Reused starts")
    assert [la["start"] for la in run["launches"]] == ["fresh", "reused", "fresh"]
    assert "server_process" not in run["launches"][0]  # its start's last launch says how it stopped
    pids = [la["server_process"]["pid"] for la in run["launches"][1:]]
    assert len(set(pids)) == 2
    for la in run["launches"]:
        assert la["status"] == "ok"
        assert la["header"].get("healthy_after_s", 1.0) >= 0.6 and ("healthy_after_s" in la["header"]) == (
            la["start"] == "fresh"
        )
        if "server_process" in la:
            assert la["server_process"]["stopped_by"] == "SIGTERM" and la["server_process"]["exit_code"] == 0
        # The engine's own decode lines, read from its output while this launch ran.
        assert la["engine_log"]["counts"]["by_source"]["sglang-decode"] > 0
        assert la["engine_log"]["formats"] == ["sglang-decode-comma"]
        assert is_hidden(la["header"]["server"]["server_info"]["api_key"])
    assert run["probe"]["config"]["launch_cmd"][0] == "EMU_FLAG=1"
    assert not any(_pid_alive(pid) for pid in pids)
    assert SECRET not in json.dumps(run)


def test_server_that_dies_mid_launch(cli) -> None:
    port = free_port()
    # Request 1 is the warm-up; the server exits when request 4 arrives: 2 measured requests finish.
    cmd = launch_cmd(port, die_after_requests=3)
    url = f"http://127.0.0.1:{port}"
    args = "-L 2 -R 5 --max-tokens 16 --no-snapshot --cold"  # a start per launch: each dies alike
    p = probe(cli, "--url", url, "--launch-cmd", cmd, args, timeout=120)
    assert p.returncode == 5
    run = _only_run(home())
    assert run["status"] == "failed" and len(run["launches"]) == 2
    for la in run["launches"]:
        assert la["status"] == "error"
        assert re.match(
            r"server exited during the launch \(code 3; last output: .*\| emulator: dying as asked\); "
            r"3 of 5 requests failed; first \(request 2\): ",
            la["error"],
        ), la["error"]
        assert la["scalars"]["requests_ok"] == 2 and len(la["samples"]["itl"]) == 2
        assert la["server_process"]["stopped_by"] == "exited by itself"


def test_server_that_ignores_sigterm_is_killed(cli) -> None:
    port = free_port()
    cmd = launch_cmd(port, ignore_sigterm=True)
    args = "-L 1 -R 2 --max-tokens 8 --no-snapshot --stop-grace 0.5"
    p = probe(cli, "--url", f"http://127.0.0.1:{port}", "--launch-cmd", cmd, args, timeout=120)
    assert p.returncode == 0, p.stderr
    sp = _only_run(home())["launches"][0]["server_process"]
    assert sp["stopped_by"] == "SIGKILL" and sp["exit_code"] == -9
    assert not _pid_alive(sp["pid"])


def test_server_that_never_comes_up(cli) -> None:
    cmd = f"{sys.executable} -c \"import sys; print('CUDA out of memory, api_key={SECRET}'); sys.exit(4)\""
    p = probe(cli, "--url", f"http://127.0.0.1:{free_port()}", "--launch-cmd", cmd, "-L 2 --no-snapshot")
    assert p.returncode == 5
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "regdiag: error: launch 0: server exited before it became healthy (code 4; last output: CUDA out of memory, "
        "api_key=<redacted len="
    )
    assert SECRET not in p.stderr
    run = _only_run(home())
    assert len(run["launches"]) == 1 and run["launches"][0]["status"] == "error"


def test_missing_server_program(cli) -> None:
    p = probe(
        cli, "--url", "http://127.0.0.1:9", "--launch-cmd", "regdiag-no-such-engine --port 1", "--no-snapshot"
    )
    assert p.returncode == 5
    assert "cannot start the server: regdiag-no-such-engine: No such file or directory" in p.stderr


# ---- nothing measured is lost ---------------------------------------------------------------------


def _start_cli(url: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "regdiag", "probe", "server", "--url", url]
    argv += "-L 2 -R 40 --max-tokens 16 --no-snapshot --warmup 0".split()
    return subprocess.Popen(argv, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_finished_requests(n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = list((home() / "runs").glob("*.json"))
        if files:
            try:
                run = load_record(files[0], "run")
            except Exception:
                run = None
            if run and run["launches"] and len(run["launches"][0].get("requests", [])) >= n:
                return
        time.sleep(0.1)
    raise AssertionError("no finished requests on disk")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupt_keeps_finished_requests(sgl: Emulator, sig: int) -> None:
    sgl.configure(step_ms=40.0)  # 16 tokens in ~8 steps: ~0.35 s a request
    proc = _start_cli(sgl.url)
    try:
        _wait_for_finished_requests(3)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run = _only_run(home())
    la = run["launches"][0]
    assert la["status"] == "interrupted"
    assert len(la["requests"]) >= 3 and all(r["status"] == "ok" for r in la["requests"])
    assert len(la["samples"]["itl"]) == len(la["requests"])
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and run["status"] == "interrupted"
        assert "Traceback" not in err
    else:
        assert run["status"] == "running"  # the process had no chance to say more


@pytest.mark.ssh
def test_launch_cmd_on_a_host_over_ssh(cli, sshd: Sshd) -> None:  # noqa: F811
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = f"--host regdiag-test --ssh-config {sshd.ssh_config} --python {sys.executable}"
    p = probe(
        cli, "--url", url, "--launch-cmd", launch_cmd(port), args, "-L 1 -R 3 --max-tokens 16", timeout=120
    )
    assert p.returncode == 0, p.stderr
    run = _only_run(home())
    la = run["launches"][0]
    assert la["status"] == "ok" and la["server_process"]["stopped_by"] == "SIGTERM"
    assert run["host"]["via"] == "ssh"
    # The snapshot of the server's host, taken over the same connection.
    assert run["snapshot_before"]["schema"] == "regdiag.snapshot/2"
    assert run["snapshot_after"]["origin"]["via"] == "ssh"
    assert not _pid_alive(la["server_process"]["pid"])


@pytest.mark.slow
def test_server_runs_go_through_compare_and_explain(cli, sgl: Emulator, tmp_path: Path) -> None:
    runs = []
    for step_ms in (2.0, 20.0):  # the verify step ten times slower in the new run
        sgl.configure(step_ms=step_ms)
        out = tmp_path / f"step{step_ms:g}.json"
        p = probe(cli, "--url", sgl.url, f"-L 3 -R 4 --max-tokens 16 --no-snapshot -o {out}")
        assert p.returncode == 0, p.stderr
        runs.append(str(out))
    p = cli("compare", *runs)
    assert p.returncode == 1, p.stdout + p.stderr  # a regression
    assert "REGRESSED" in p.stdout and "itl" in p.stdout
    p = cli("explain", runs[1])
    assert p.returncode == 0, p.stderr


def test_plain_responses_make_an_e2e_run(cli, sgl: Emulator) -> None:
    p = probe(cli, "--url", sgl.url, "-L 1 -R 3 --max-tokens 12 --no-stream --no-snapshot")
    assert p.returncode == 0, p.stderr
    run = _only_run(home())
    assert run["primary"] == "e2e" and run["phases"] == ["e2e"]
    assert set(run["launches"][0]["samples"]) == {"e2e", "tpot"}


def _wait_dead(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_no_server_outlives_regdiag(sig: int) -> None:
    """Ctrl-C or kill -9 of regdiag mid-launch: the server it started is stopped all the same."""
    port = free_port()
    argv = [sys.executable, "-m", "regdiag", "probe", "server", "--url", f"http://127.0.0.1:{port}"]
    argv += [
        "--launch-cmd",
        launch_cmd(port, step_ms=40.0),
        *"-L 2 -R 40 --max-tokens 16 --no-snapshot".split(),
    ]
    proc = subprocess.Popen(argv, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_finished_requests(2)
        pid = _only_run(home())["launches"][0]["header"]["server_pid"]
        assert _pid_alive(pid)
        proc.send_signal(sig)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _wait_dead(pid), f"server {pid} outlived regdiag"
    if sig == signal.SIGINT:
        la = _only_run(home())["launches"][0]
        assert la["status"] == "interrupted" and la["server_process"]["stopped_by"] == "SIGTERM"
