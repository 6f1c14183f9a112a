"""`snapshot --pid`: a real running python process with a planted environment, a sitecustomize.py on
its PYTHONPATH and a real shared library loaded (psutil's extension module), snapshotted by pid;
two such snapshots diffed, and bisect taking the difference as a factor."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest
from snapshot_helpers import PLANTED

from regdiag.bisect.factors import ENV, Factor, diff, load_side
from regdiag.snapshot import collect, keyedhash

# What the "engine" does: load a real shared object that a pip distribution owns, say so, wait.
ENGINE = textwrap.dedent(
    """
    import sys, time
    import psutil  # maps psutil/_psutil_linux.abi3.so
    print("ready", flush=True)
    time.sleep(120)
    """
)
SITE_SECRET = "sitecustomizeSecret0123456789"


class Engine:
    def __init__(self, proc: subprocess.Popen[str]):
        self.proc = proc
        self.pid = proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.communicate(timeout=10)  # reaps it and closes its pipes


@pytest.fixture
def engines():
    started: list[Engine] = []

    def start(sc_dir: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> Engine:
        full = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        full["PYTHONPATH"] = str(sc_dir)
        full.update(env or {})
        proc = subprocess.Popen(
            [sys.executable, "-c", ENGINE, *args],
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(sc_dir),
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.stderr.read() if proc.stderr else ""
        e = Engine(proc)
        started.append(e)
        return e

    yield start
    for e in started:
        e.stop()


def write_sitecustomize(sc_dir: Path, body: str) -> Path:
    sc_dir.mkdir(parents=True, exist_ok=True)
    p = sc_dir / "sitecustomize.py"
    p.write_text("import os\n" + textwrap.dedent(body))
    return p


def fields(group: dict) -> dict:
    return {k: f.get("value") for k, f in group["fields"].items()}


def test_snapshot_by_pid_sees_its_environment_its_sitecustomize_and_its_libraries(tmp_path, engines) -> None:
    sc = write_sitecustomize(
        tmp_path / "sc",
        f"""
        os.environ["NCCL_PROTO"] = "LL"
        os.environ.setdefault("NCCL_ALGO", "Ring")   # the shell's value wins
        os.environ.setdefault("NCCL_P2P_LEVEL", "SYS")
        os.environ["HF_TOKEN"] = "{SITE_SECRET}"
        os.environ["NCCL_MAX_NCHANNELS"] = str(4 * 2)  # not a literal: listed, not guessed
        """,
    )
    e = engines(
        tmp_path / "sc",
        env={
            "PYTHONMALLOC": "malloc",
            "MALLOC_ARENA_MAX": "2",
            "ATEN_CPU_CAPABILITY": "default",
            "NCCL_ALGO": "Tree",
            "SGLANG_API_KEY": "plainsecretvalue42xyz",
        },
        args=("--api-key", "cmdlineSecret0123456789", "--tp", "8"),
    )
    snap = collect(pid=e.pid)
    assert snap["origin"]["pid"] == e.pid
    env = snap["groups"]["env"]
    values = fields(env)
    # The process's environment, not this test's: variables an allowlist missed are there.
    assert values["PYTHONMALLOC"] == "malloc"
    assert values["MALLOC_ARENA_MAX"] == "2"
    assert values["ATEN_CPU_CAPABILITY"] == "default"
    assert values["PYTHONPATH"] == str(tmp_path / "sc")
    # What the sitecustomize.py sets, with where it came from; setdefault does not beat the shell.
    assert values["NCCL_PROTO"] == "LL" and env["sources"]["NCCL_PROTO"] == str(sc)
    assert values["NCCL_P2P_LEVEL"] == "SYS" and env["sources"]["NCCL_P2P_LEVEL"] == str(sc)
    assert values["NCCL_ALGO"] == "Tree" and "NCCL_ALGO" not in env["sources"]
    assert "NCCL_MAX_NCHANNELS" not in values
    # Secrets: hashed, whether they came from the environment or from the sitecustomize.py.
    key = keyedhash.load_key()
    # A hidden value is its keyed hash and its length (docs/redaction.md).
    secret = "plainsecretvalue42xyz"
    assert (
        values["SGLANG_API_KEY"]
        == keyedhash.keyed_hash(key, "SGLANG_API_KEY", secret) + f":len={len(secret)}"
    )
    assert (
        values["HF_TOKEN"] == keyedhash.keyed_hash(key, "HF_TOKEN", SITE_SECRET) + f":len={len(SITE_SECRET)}"
    )
    assert {"SGLANG_API_KEY", "HF_TOKEN"} <= set(env["hashed"])
    assert env["hash_key_id"] == keyedhash.key_id(key)

    startup = fields(snap["groups"]["startup"])
    assert startup["sitecustomize"]["path"] == str(sc)
    assert startup["sitecustomize"]["sets"]["NCCL_PROTO"] == "LL"
    assert startup["sitecustomize"]["sets"]["HF_TOKEN"].startswith("hmac-sha256:")
    assert startup["sitecustomize"]["unparsed"] == ["NCCL_MAX_NCHANNELS"]

    proc = fields(snap["groups"]["process"])
    assert proc["pid"] == e.pid and proc["exe"] == os.path.realpath(sys.executable)
    assert proc["cwd"] == str(tmp_path / "sc")
    assert proc["cmdline"][-4:-2] == [
        "--api-key",
        keyedhash.keyed_hash(key, "api-key", "cmdlineSecret0123456789") + ":len=23",
    ]
    assert proc["cmdline"][-2:] == ["--tp", "8"]

    # The library it loaded, identified by the build id readelf reads, owned by the psutil wheel.
    libs = fields(snap["groups"]["libraries"])
    name = next(n for n in libs if n.startswith("_psutil_linux"))
    lib = libs[name]
    assert lib["distribution"] == "psutil" and lib["version"] == version("psutil")
    assert Path(lib["path"]).parent.name == "psutil"
    if shutil.which("readelf"):
        notes = subprocess.run(["readelf", "-n", lib["path"]], capture_output=True, text=True).stdout
        m = re.search(r"Build ID: ([0-9a-f]+)", notes)
        assert m and lib.get("build_id") == m.group(1)
    # The packages are those of the process's interpreter path, and the snapshot says nothing leaked.
    assert snap["groups"]["packages"]["status"] == "ok"
    text = json.dumps(snap)
    for secret in ("plainsecretvalue42", "cmdlineSecret0123456789", SITE_SECRET, key.hex()):
        assert secret not in text


def test_children_are_listed_and_workers_that_differ_are_flagged(tmp_path, engines) -> None:
    code = textwrap.dedent(
        """
        import os, subprocess, sys, time
        kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                 env={**os.environ, "RANK": str(r), "NCCL_PROTO": "LL" if r else "Simple"})
                for r in range(2)]
        print("ready", flush=True)
        time.sleep(120)
        """
    )
    (tmp_path / "sc").mkdir()
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.Popen([sys.executable, "-c", code], env=full, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        kids = fields(collect(pid=proc.pid)["groups"]["process"])["children"]
        assert len(kids["processes"]) == 2
        assert all(set(k["env_differs"]) == {"RANK", "NCCL_PROTO"} for k in kids["processes"])
        assert set(kids["differ_between_workers"]) == {"RANK", "NCCL_PROTO"}
    finally:
        for child in _children(proc.pid):
            os.kill(child, signal.SIGKILL)
        proc.kill()
        proc.communicate(timeout=10)


def _children(pid: int) -> list[int]:
    from regdiag.snapshot.process import children_of

    return children_of(pid)


def _snapshot_cli(cli, pid: int, out: Path) -> dict:
    r = cli("snapshot", "--pid", str(pid), "--json", "-o", str(out))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_two_engines_differing_only_in_sitecustomize_diff_first_and_bisect_factor(
    tmp_path, engines, cli
) -> None:
    sc_dir = tmp_path / "sc"
    write_sitecustomize(sc_dir, 'os.environ.setdefault("NCCL_ALGO", "Ring")\n')
    a = engines(sc_dir)
    _snapshot_cli(cli, a.pid, tmp_path / "good.json")
    a.stop()
    sc = write_sitecustomize(
        sc_dir, 'os.environ.setdefault("NCCL_ALGO", "Ring")\nos.environ["NCCL_PROTO"] = "LL"\n'
    )
    b = engines(sc_dir)
    _snapshot_cli(cli, b.pid, tmp_path / "bad.json")

    r = cli("diff", str(tmp_path / "good.json"), str(tmp_path / "bad.json"), "--json")
    assert r.returncode == 0, r.stderr
    items = json.loads(r.stdout)["differences"]
    first = items[0]
    assert (first["group"], first["field"], first["old"], first["new"]) == (
        "env",
        "NCCL_PROTO",
        "<absent>",
        "LL",
    )
    assert first["source"] == {"old": None, "new": str(sc)}
    # The only other difference is the file itself (its hash and what it sets).
    assert [(it["group"], it["field"]) for it in items[1:]] == [("startup", "sitecustomize")]
    human = cli("diff", str(tmp_path / "good.json"), str(tmp_path / "bad.json"), env={"COLUMNS": "300"})
    assert f"(from {sc})" in human.stdout

    # bisect's factor extraction: exactly one factor, the variable, with its two values. Both snapshots
    # set PYTHONPATH (the engines' own), which loads code: allowed here, as --allow-code-from-record does.
    good, bad = (load_side(str(tmp_path / f"{s}.json"), f"--{s}", allow_code=True) for s in ("good", "bad"))
    d = diff(good, bad)
    assert d.factors == [Factor(ENV, "NCCL_PROTO", None, "LL")]
    assert d.same_env["NCCL_ALGO"] == "Ring"
    assert "SHLVL" not in d.same_env and "_" not in d.same_env
    # The bisect puts its environment's interpreter first on PATH: a snapshot's PATH must not win.
    assert "PATH" not in d.same_env and "HOME" not in d.same_env


@pytest.mark.launch
def test_bisect_takes_a_sitecustomize_variable_as_its_culprit(tmp_path, engines, cli) -> None:
    from bisect_helpers import command, write_probe

    sc_dir = tmp_path / "sc"
    write_sitecustomize(sc_dir, "")
    a = engines(sc_dir)
    _snapshot_cli(cli, a.pid, tmp_path / "good.json")
    a.stop()
    write_sitecustomize(sc_dir, 'os.environ["PROBE_EXTRA"] = "verify:4"\n')
    b = engines(sc_dir)
    _snapshot_cli(cli, b.pid, tmp_path / "bad.json")
    b.stop()
    shutil.rmtree(sc_dir)  # the launches share PYTHONPATH: only the factor may bring the slowdown
    probe = write_probe(tmp_path)
    r = cli(
        "bisect",
        "--good",
        str(tmp_path / "good.json"),
        "--bad",
        str(tmp_path / "bad.json"),
        "--command",
        command(probe),
        "--launches",
        "2",
        "--max-launches",
        "6",
        "--journal",
        str(tmp_path / "j.jsonl"),
        "--json",
        "--allow-code-from-record",  # the snapshots' PYTHONPATH is held fixed in every launch
    )
    assert r.returncode == 0, r.stdout + r.stderr  # 0: a culprit was named
    report = json.loads(r.stdout)
    assert report["verdict"] == "CULPRIT"
    assert [f["name"] for f in report["factors"]] == ["PROBE_EXTRA"]
    assert report["culprits"][0]["factors"][0]["name"] == "PROBE_EXTRA"


@pytest.mark.cli
def test_secrets_in_environment_cmdline_and_sitecustomize_leak_nowhere(tmp_path, engines, cli) -> None:
    planted = {name: value for name, value, _ in PLANTED}
    sc_dir = tmp_path / "sc"
    write_sitecustomize(sc_dir, f'os.environ["HF_TOKEN"] = "{SITE_SECRET}"\n')
    args = ("--api-key", "cmdlineSecret0123456789", "--url", "https://bob:pw0rdSecret77@host/x")
    a = engines(sc_dir, env=planted, args=args)
    b = engines(sc_dir, env={**planted, "SGLANG_API_KEY": "anotherSecretValue987"}, args=args)
    outs = []
    for e, name in ((a, "a.json"), (b, "b.json")):
        r = cli("snapshot", "--pid", str(e.pid), "--json", "-o", str(tmp_path / name))
        assert r.returncode == 0, r.stderr
        outs += [r.stdout, r.stderr, (tmp_path / name).read_text()]
        human = cli("snapshot", "--pid", str(e.pid), env={"COLUMNS": "400"})
        assert human.returncode == 0, human.stderr
        outs += [human.stdout, human.stderr]
    for extra in ((), ("--json",), ("--all",)):
        r = cli("diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), *extra, env={"COLUMNS": "400"})
        assert r.returncode == 0, r.stderr
        outs += [r.stdout, r.stderr]
    secrets = [s for _, _, s in PLANTED] + [
        "cmdlineSecret0123456789",
        "pw0rdSecret77",
        SITE_SECRET,
        "anotherSecret",
    ]
    for text in outs:
        assert [s for s in secrets if s in text] == []
    # The changed secret is still a difference, shown without its value.
    items = json.loads(cli("diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json").stdout)[
        "differences"
    ]
    changed = [it for it in items if it["field"] == "SGLANG_API_KEY"]
    assert changed and (changed[0]["old"], changed[0]["new"], changed[0]["change"]) == (
        "<hashed>",
        "<hashed>",
        "changed",
    )


def test_a_pid_that_does_not_exist_is_one_line_exit_2(cli) -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # a pid that existed a moment ago and is gone now
    r = cli("snapshot", "--pid", str(p.pid))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"regdiag: error: --pid {p.pid}: no such process"]
    r = cli("snapshot", "--pid", "1", "--host", "gpu-3", "--host", "gpu-4")  # a pid belongs to one machine
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--pid" in r.stderr


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
    reason="needs root, setpriv and a system python3 to run the snapshot as another user",
)
def test_another_users_process_is_one_line_exit_2(tmp_path, engines, request) -> None:
    write_sitecustomize(tmp_path / "sc", "")
    target = engines(tmp_path / "sc")  # runs as root
    # The other user must be able to read the code it runs and reach its home. The checkout need not be
    # readable by it (a root user's clone under a mode-700 home, pytest's private temp directory), so
    # both go into a directory of their own under /tmp, open to every user, removed afterwards.
    shared = Path(tempfile.mkdtemp(prefix="regdiag-other-user-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    os.chmod(shared, 0o755)
    root = shared / "code"
    src = Path(__file__).resolve().parent.parent
    shutil.copytree(src / "regdiag", root / "regdiag", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(src / "probes", root / "probes", ignore=shutil.ignore_patterns("__pycache__"))
    for d, _dirs, files in os.walk(root):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)
    home = shared / "home"
    home.mkdir()
    os.chmod(home, 0o777)
    r = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-m",
            "regdiag.snapshot",
        ]
        + ["--pid", str(target.pid)],
        capture_output=True,
        text=True,
        cwd=str(root),
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "REGDIAG_HOME": str(home), "HOME": str(home)},
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"python -m regdiag.snapshot: error: --pid {target.pid}: cannot read its environment: the process "
        "belongs to uid 0, you are uid 65534; run regdiag as that user (or root)"
    ]
