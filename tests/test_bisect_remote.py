"""`regdiag bisect --host`: everything built and measured on the host over the real sshd on loopback,
as a login user whose shell is zsh, with the probe, the wheels and the git checkout in that user's home
(paths on the "remote" side): env vars, then packages from a --find-links directory there, then
commits of a checkout there; the connection killed mid-bisect (its sshd process, by pid) and resumed
to the same answer; `regdiag clean --host` leaving the home as it was."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from bisect_helpers import PROBE, make_repo, make_wheel
from conftest import run_cli
from sshd_helpers import Sshd, pids_holding_connection, sshd  # noqa: F401 - sshd is a fixture

from regdiag.bisect import Request, run_bisect
from regdiag.errors import HostError
from regdiag.hosts.resolve import open_host

pytestmark = [pytest.mark.ssh, pytest.mark.slow]

PY = "/usr/bin/python3"  # an interpreter the zsh user can run (this one lives under /root)


@pytest.fixture
def zsh_host(sshd: Sshd, tmp_path: Path):  # noqa: F811
    user = sshd.shell_users.get("zsh")
    if user is None or not os.access(PY, os.X_OK):
        pytest.skip("needs root (a zsh login user) and /usr/bin/python3")
    home = sshd.dir / "home-zsh"
    before = set(os.listdir(home))
    probe = home / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    shutil.chown(probe, user, user)
    cfg = sshd.write_config(tmp_path / "ssh_config", user=user)
    yield {"user": user, "home": home, "probe": str(probe), "cfg": str(cfg)}
    probe.unlink()
    for name in set(os.listdir(home)) - before:
        shutil.rmtree(home / name, ignore_errors=True)


def _chown_tree(path: Path, user: str) -> None:
    subprocess.run(["chown", "-R", f"{user}:{user}", str(path)], check=True)


def _launch_keys(journal: Path) -> list[tuple[str, int]]:
    lines = [json.loads(x) for x in journal.read_text().splitlines() if x.strip()]
    return [(e["point"], e["index"]) for e in lines if e.get("type") == "launch"]


def test_env_var_bisect_over_ssh_survives_a_dropped_connection(zsh_host, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    journal = tmp_path / "journal.jsonl"
    req = Request(
        good="NCCL_PROTO=LL OMP_NUM_THREADS=2 NCCL_ALGO=Ring",
        bad="NCCL_PROTO=Simple OMP_NUM_THREADS=4 NCCL_ALGO=Tree PROBE_EXTRA=verify:4",
        command=f"{{python}} {zsh_host['probe']}",
        journal=str(journal),
        launches=2,
        max_launches=6,
    )
    host = open_host("regdiag-test", PY, zsh_host["cfg"])
    client_port = host.transport.sock.getsockname()[1]  # type: ignore[attr-defined]
    killed: list[int] = []

    def cut(ev: dict) -> None:
        # The 5th launch starts: a moment later its connection's sshd process is killed, mid-launch.
        if ev.get("event") == "launch" and ev.get("run") == 4 and not killed:

            def later() -> None:
                time.sleep(0.05)
                for pid in pids_holding_connection(sshd.port, client_port):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)

            threading.Thread(target=later, daemon=True).start()

    try:
        with pytest.raises(HostError, match="connection"):
            run_bisect(req, progress=cut, host=host)
    finally:
        host.close()
    assert killed
    first = _launch_keys(journal)
    assert len(first) in (4, 5)  # every launch that finished is journalled; the cut one is not

    req.resume = True
    with open_host("regdiag-test", PY, zsh_host["cfg"]) as host:
        r = run_bisect(req, host=host)
    assert r["verdict"] == "CULPRIT"
    [c] = r["culprits"]
    assert [f["name"] for f in c["factors"]] == ["PROBE_EXTRA"]
    assert c["ms"]["verify"] == pytest.approx(4.0, abs=0.6)
    keys = _launch_keys(journal)
    assert keys[: len(first)] == first
    assert max(Counter(keys).values()) == 1  # nothing measured twice
    assert r["cost"]["launches_run"] == len(keys) - len(first)
    inputs = json.loads(journal.read_text().splitlines()[0])["inputs"]
    assert inputs["host"] == "regdiag-test"
    # an env-var bisect builds nothing: the home holds only what the test put there
    assert sorted(os.listdir(zsh_host["home"])) == ["probe.py"]


def test_package_bisect_from_wheels_on_the_host_then_clean(zsh_host, tmp_path: Path) -> None:
    home: Path = zsh_host["home"]
    wheels = home / "wheels"  # a directory on the host's side: the bisect reads it only over SSH
    for v, extra in (("1.0", {}), ("1.1", {}), ("1.2", {"verify": 4.0}), ("1.3", {"verify": 4.0})):
        make_wheel(wheels, "slowpkg", v, extra)
    _chown_tree(wheels, zsh_host["user"])
    journal = tmp_path / "journal.jsonl"
    r = run_cli(
        "bisect", "--good", "slowpkg==1.0 NCCL_PROTO=LL", "--bad", "slowpkg==1.3 NCCL_PROTO=Simple",
        "--command", f"{{python}} {zsh_host['probe']}", "--find-links", str(wheels), "--installer", "pip",
        "--launches", "2", "--max-launches", "6", "--journal", str(journal), "--json",
        "--host", "regdiag-test", "--python", PY, "--ssh-config", zsh_host["cfg"],
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    [c] = rep["culprits"]
    assert [(f["name"], f["good"], f["bad"]) for f in c["factors"]] == [("slowpkg", "1.1", "1.2")]
    assert c["ms"]["verify"] == pytest.approx(4.0, abs=0.6)
    cache = home / ".cache" / "regdiag" / "envs"
    envs = [p for p in cache.iterdir() if (p / "ready.json").exists()]
    assert len(envs) >= 3 and all((p / "venv" / "pyvenv.cfg").exists() for p in envs)
    assert rep["cost"]["environments_built"] == len(envs)

    # the second bisect reuses every environment on the host (cached by hash)
    r = run_cli(
        "bisect", "--good", "slowpkg==1.0 NCCL_PROTO=LL", "--bad", "slowpkg==1.3 NCCL_PROTO=Simple",
        "--command", f"{{python}} {zsh_host['probe']}", "--find-links", str(wheels), "--installer", "pip",
        "--launches", "2", "--max-launches", "6", "--journal", str(tmp_path / "j2.jsonl"), "--json",
        "--host", "regdiag-test", "--python", PY, "--ssh-config", zsh_host["cfg"],
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["cost"]["environments_built"] == 0

    # Two profile traces, as `probe --profile --host` leaves them on the host (results its run records
    # name, in ~/.regdiag/traces): clean counts them and leaves them.
    traces = home / ".regdiag" / "traces"
    traces.mkdir(parents=True)
    for name in ("run-a.json.profile-0.json.gz", "run-b.json.profile-0.json.gz"):
        (traces / name).write_bytes(os.urandom(3000))
    _chown_tree(home / ".regdiag", zsh_host["user"])
    r = run_cli("clean", "--host", "regdiag-test", "--python", PY, "--ssh-config", zsh_host["cfg"])
    assert r.returncode == 0, r.stderr
    assert f"removed {home}/.cache/regdiag" in r.stdout
    assert "regdiag-test: kept ~/.regdiag/traces: 2 profile trace(s)" in r.stdout, r.stdout
    assert not (home / ".cache" / "regdiag").exists()
    assert len(list(traces.iterdir())) == 2
    r = run_cli("clean", "--host", "regdiag-test", "--ssh-config", zsh_host["cfg"], "--json")
    assert r.returncode == 0, r.stderr
    [again] = json.loads(r.stdout)["hosts"]
    assert (
        again["existed"] is False and again["traces_kept"]["files"] == 2 and again["traces_kept"]["kib"] >= 6
    )
    shutil.rmtree(traces)
    r = run_cli("clean", "--host", "regdiag-test", "--ssh-config", zsh_host["cfg"])
    assert r.returncode == 0 and "nothing to remove" in r.stdout and "kept" not in r.stdout


def test_commit_bisect_of_a_checkout_on_the_host(zsh_host, tmp_path: Path) -> None:
    home: Path = zsh_host["home"]
    repo, shas = make_repo(home, 6, slow={3: {"verify": 4.0}})
    _chown_tree(repo, zsh_host["user"])
    with open_host("regdiag-test", PY, zsh_host["cfg"]) as host:
        r = run_bisect(
            Request(
                good=f"commit={shas[0][:8]}",
                bad=f"commit={shas[5][:8]}",
                command=f"{{python}} {zsh_host['probe']}",
                repo=str(repo),
                setup="sh build.sh",
                journal=str(tmp_path / "journal.jsonl"),
                launches=2,
                max_launches=6,
            ),
            host=host,
        )
    assert r["verdict"] == "CULPRIT"
    [c] = r["culprits"]
    [f] = c["factors"]
    assert (f["good"], f["bad"]) == (shas[2], shas[3]) and f["subject"] == "commit 3"
    assert c["ms"]["verify"] == pytest.approx(4.0, abs=0.6)
    cache = home / ".cache" / "regdiag" / "envs"
    built = [p for p in cache.iterdir() if (p / "ready.json").exists()]
    assert built and all((p / "src" / "built.txt").exists() for p in built)  # --setup ran in each worktree
    out = run_cli("clean", "--host", "regdiag-test", "--ssh-config", zsh_host["cfg"])
    assert out.returncode == 0, out.stderr
    # the worktrees are gone from the checkout's list too
    argv = [
        "git",
        "-c",
        f"safe.directory={repo}",
        "-C",
        str(repo),
        "worktree",
        "list",
    ]  # owned by the zsh user
    wt = subprocess.run(argv, capture_output=True, text=True).stdout
    assert len(wt.strip().splitlines()) == 1, wt


@pytest.mark.parametrize(
    "good, bad, extra, needle",
    [
        (
            "gpu0.sm_lock=1980",
            "gpu0.sm_lock=1410",
            [],
            "GPU clock factors are set through NVML on this machine only, not on regdiag-test (--host)",
        ),
        (
            "A=0",
            "A=1",
            ["--find-links", "/no/such/wheels"],
            "--find-links /no/such/wheels: no such directory on",
        ),
        (
            "commit=HEAD~1",
            "commit=HEAD",
            ["--repo", "/no/such/repo"],
            "is not in /no/such/repo on regdiag-test",
        ),
    ],
)
def test_bad_input_on_the_host_is_one_line(sshd: Sshd, tmp_path: Path, good, bad, extra, needle) -> None:  # noqa: F811
    r = run_cli(
        "bisect", "--good", good, "--bad", bad, "--command", "python3 -c pass", *extra,
        "--journal", str(tmp_path / "j.jsonl"), "--host", "regdiag-test", "--ssh-config", str(sshd.ssh_config),
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()[-1:]
    assert line.startswith("regdiag: error: ") and needle in line, r.stderr
    assert "Traceback" not in r.stderr


def _two_hosts(sshd: Sshd, zsh_host: dict, tmp_path: Path) -> str:  # noqa: F811
    """An ssh_config with two aliases of the loopback sshd, regdiag-test and regdiag-b: two hosts as
    regdiag sees them (two connections, two bundles), one machine and one home behind them."""
    text = Path(zsh_host["cfg"]).read_text()
    block = text[text.index("Host regdiag-test") :]
    cfg = tmp_path / "ssh_config_two"
    cfg.write_text(text + "\n" + block.replace("Host regdiag-test", "Host regdiag-b"), encoding="utf-8")
    return str(cfg)


def test_a_bisect_over_two_hosts_runs_its_rounds_on_both(zsh_host, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    # Each host is a lane: rounds at once, each environment built on each host (here one home behind
    # both, so the second finds it built), each launch in its own host's copy.
    home: Path = zsh_host["home"]
    wheels = home / "wheels"
    for v, extra in (("1.0", {}), ("1.3", {"verify": 4.0})):
        make_wheel(wheels, "slowpkg", v, extra)
    _chown_tree(wheels, zsh_host["user"])
    cfg = _two_hosts(sshd, zsh_host, tmp_path)
    journal = tmp_path / "journal.jsonl"
    argv = [
        "bisect", "--good", "slowpkg==1.0 NCCL_PROTO=LL", "--bad", "slowpkg==1.3 NCCL_PROTO=Simple",
        "--command", f"{{python}} {zsh_host['probe']}", "--find-links", str(wheels), "--installer", "pip",
        "--launches", "2", "--max-launches", "6", "--journal", str(journal), "--json",
        "--host", "regdiag-test", "--host", "regdiag-b", "--python", PY, "--ssh-config", cfg,
    ]  # fmt: skip
    r = run_cli(*argv)
    assert r.returncode == 0, r.stderr
    assert "lanes: 2 lanes (regdiag-test, regdiag-b), at once" in r.stderr, r.stderr
    assert (
        "environments are built on each of regdiag-test, regdiag-b (SSH hosts keep their own files)"
        in r.stderr
    )
    rep = json.loads(r.stdout)
    assert [f["name"] for c in rep["culprits"] for f in c["factors"]] == ["slowpkg"]
    assert rep["lanes"]["names"] == ["regdiag-test", "regdiag-b"] and rep["lanes"]["parallel"]
    lines = [json.loads(x) for x in journal.read_text().splitlines() if x.strip()]
    launches = [e for e in lines if e.get("type") == "launch"]
    assert {e["lane"] for e in launches} == {"regdiag-test", "regdiag-b"}
    assert all(e["lane"] == ("regdiag-test", "regdiag-b")[e["index"] % 2] for e in launches)
    assert lines[0]["inputs"]["target"] == {"hosts": ["regdiag-test", "regdiag-b"]}
    # --resume reopens both hosts from the journal alone, and measures nothing again
    again = run_cli("bisect", "--resume", "--journal", str(journal), "--json", "--ssh-config", cfg)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["cost"]["launches_run"] == 0


def test_a_host_lost_mid_bisect_is_dropped_and_the_other_finishes(
    zsh_host,
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    from regdiag.hosts.group import HostGroup

    cfg = _two_hosts(sshd, zsh_host, tmp_path)
    req = Request(
        good="NCCL_PROTO=LL OMP_NUM_THREADS=2",
        bad="NCCL_PROTO=Simple OMP_NUM_THREADS=4 PROBE_EXTRA=verify:4",
        command=f"{{python}} {zsh_host['probe']}",
        journal=str(tmp_path / "journal.jsonl"),
        launches=2,
        max_launches=6,
    )
    group = HostGroup([open_host("regdiag-test", PY, cfg), open_host("regdiag-b", PY, cfg)])
    client_port = group.hosts[1].transport.sock.getsockname()[1]  # type: ignore[attr-defined]
    killed: list[int] = []

    def cut(ev: dict) -> None:
        if ev.get("event") == "launch" and ev.get("run", 0) >= 3 and not killed:  # cut regdiag-b
            for pid in pids_holding_connection(sshd.port, client_port):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

    try:
        r = run_bisect(req, progress=cut, host=group)
    finally:
        group.close()
    assert killed
    assert r["verdict"] == "CULPRIT", r
    assert [f["name"] for c in r["culprits"] for f in c["factors"]] == ["PROBE_EXTRA"]
    lanes = r["lanes"]
    assert lanes["faults"] and all(f["lane"] == "regdiag-b" for f in lanes["faults"]), lanes
    assert "regdiag-b" in lanes["dropped"], lanes
    assert len(lanes["faults"]) == 1 and lanes["faults"][0]["again_on"] == "regdiag-test", lanes
    assert lanes["faults"][0]["what"].startswith("regdiag-b: the SSH connection"), lanes  # named once
    assert any(n.startswith("regdiag-b: the SSH connection") for n in lanes["notes"]), lanes["notes"]


def test_ctrl_c_over_two_hosts_then_a_resume_on_one(zsh_host, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    # Ctrl-C mid-round: exit 130, and the connections it closes are no lane's fault. The journal then
    # resumes on one of its two hosts (the other gone, say), which the report names.
    import sys

    cfg = _two_hosts(sshd, zsh_host, tmp_path)
    journal = tmp_path / "journal.jsonl"
    argv = [
        sys.executable, "-m", "regdiag", "bisect", "--good", "NCCL_PROTO=LL OMP_NUM_THREADS=2",
        "--bad", "NCCL_PROTO=Simple OMP_NUM_THREADS=4 PROBE_EXTRA=verify:4",
        "--command", f"{{python}} {zsh_host['probe']}", "--launches", "2", "--max-launches", "6",
        "--journal", str(journal), "--python", PY, "--ssh-config", cfg,
    ]  # fmt: skip
    proc = subprocess.Popen(
        [*argv, "--host", "regdiag-test", "--host", "regdiag-b"], stderr=subprocess.PIPE, text=True
    )

    def launches() -> int:
        text = journal.read_text() if journal.exists() else ""
        return sum(json.loads(x).get("type") == "launch" for x in text.splitlines() if x.strip())

    deadline = time.monotonic() + 120
    while launches() < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, err[-2000:]
    lines = [json.loads(x) for x in journal.read_text().splitlines() if x.strip()]
    assert not [e for e in lines if e.get("type") == "fault"], err[-2000:]
    assert "runs again on" not in err
    done = launches()

    r = run_cli(*argv[3:], "--host", "regdiag-test", "--resume", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    assert [f["name"] for c in rep["culprits"] for f in c["factors"]] == ["PROBE_EXTRA"]
    assert "resumed on regdiag-test: regdiag-b of the journal's hosts left out" in rep["notes"]
    assert rep["cost"]["launches_run"] == launches() - done  # nothing measured twice
