"""Files a shared machine cannot turn against root: planted links, a planted hash key, records that ask
for code (issue 27, items 2 and 3, and the code-loading and duplicate-key parts of item 4).

Real files, real links, real processes. Where another user is needed to plant a link, `setpriv` runs
`ln` as nobody in a sticky world-writable directory (as /tmp is), on this machine whose
fs.protected_symlinks may be 0: exactly where root followed such links before.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

from regdiag.bisect.factors import Spec, code_from_record, loads_code
from regdiag.files import FileLock, atomic_write_text, check_output_path, lock_path
from regdiag.records import RecordError, append_jsonl, load_record, loads_record, read_jsonl_numbered
from regdiag.snapshot import keyedhash

RUN = ROOT / "baselines" / "h200-kimi-tp1-baseline.json"
VICTIM_TEXT = "the file another user wants root to overwrite\n"
NOBODY = 65534
CAN_PLANT = os.geteuid() == 0 and shutil.which("setpriv") is not None


def one_error_line(r: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip().startswith("regdiag: error: ")]
    assert len(lines) == 1, r.stderr[-2000:]
    assert r.returncode == code, (r.returncode, r.stderr[-2000:])
    return lines[0]


@pytest.fixture
def shared() -> Iterator[Path]:
    """A sticky, world-writable directory that nobody can reach (tmp_path's parents are 0700)."""
    d = Path(tempfile.mkdtemp(prefix="regdiag-shared-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def victim(shared: Path) -> Path:
    v = shared / "victim"
    v.write_text(VICTIM_TEXT)
    v.chmod(0o644)
    return v


def plant_link(target: Path, link: Path) -> None:
    """`ln -s target link` as another user (nobody) where that is possible, else as this user."""
    if CAN_PLANT:
        cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "ln", "-s"]
        subprocess.run([*cmd, str(target), str(link)], check=True)
        assert link.lstat().st_uid == NOBODY
    else:
        link.symlink_to(target)


def unchanged(victim: Path) -> bool:
    return victim.read_text() == VICTIM_TEXT and stat.S_IMODE(victim.stat().st_mode) == 0o644


# ------------------------------------------------------------------------------------- locks


def test_a_lock_lives_in_regdiag_home_and_leaves_nothing_beside_the_file(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    with FileLock(out, "this run") as lock:
        home = Path(os.environ["REGDIAG_HOME"])
        assert lock.path.parent == home / "locks" and lock.path == lock_path(out)
        assert stat.S_IMODE((home / "locks").stat().st_mode) == 0o700
        assert stat.S_IMODE(lock.path.stat().st_mode) == 0o600
        assert lock.path.read_text() == f"{os.getpid()}\n"
    assert list(tmp_path.iterdir()) == []
    # Two names of one file (through `..` or a linked directory) share one lock.
    (tmp_path / "sub").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "sub")
    assert lock_path(tmp_path / "sub" / "x.json") == lock_path(tmp_path / "alias" / "x.json")
    assert lock_path(tmp_path / "sub" / ".." / "x.json") == lock_path(tmp_path / "x.json")


def test_a_link_planted_at_the_lock_is_refused_and_its_target_untouched(victim: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    lp = lock_path(out)
    lp.parent.mkdir(mode=0o700, parents=True)
    lp.symlink_to(victim)
    with pytest.raises(RecordError, match="cannot take its lock"):
        FileLock(out, "this run")
    assert unchanged(victim)
    lp.unlink()
    os.link(victim, lp)  # a hard link: this user's file, but not the lock's own
    with pytest.raises(RecordError, match="not a lock file of this user's own"):
        FileLock(out, "this run")
    assert unchanged(victim)


def test_a_locks_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    locks = Path(os.environ["REGDIAG_HOME"]) / "locks"
    locks.mkdir(parents=True)
    locks.chmod(0o777)
    with pytest.raises(RecordError, match="locks: writable by anyone"):
        FileLock(tmp_path / "out.json", "this run")
    locks.chmod(0o700)
    if os.geteuid() == 0:
        os.chown(locks, NOBODY, NOBODY)
        with pytest.raises(RecordError, match="locks: owned by another user"):
            FileLock(tmp_path / "out.json", "this run")


def test_a_waiting_lock_waits_for_the_holder(tmp_path: Path) -> None:
    # The environment builder's lock (bisect/envs.py): a second builder waits its turn, not refused.
    target = tmp_path / "env-key"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from regdiag.files import FileLock\n"
         f"l = FileLock({str(target)!r}, 'x'); print('held', flush=True); time.sleep(1.0)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    with holder:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        t0 = time.monotonic()
        with FileLock(target, "this environment", wait=True):
            waited = time.monotonic() - t0
    assert waited > 0.5


# ------------------------------------------------------------------------------ whole files


def test_an_atomic_write_replaces_a_planted_link_and_never_writes_through_it(
    victim: Path, shared: Path
) -> None:
    out = shared / "out.json"
    plant_link(victim, out)
    atomic_write_text(out, "{}\n")
    assert unchanged(victim)
    assert not out.is_symlink() and out.read_text() == "{}\n"
    assert out.stat().st_uid == os.geteuid() and stat.S_IMODE(out.stat().st_mode) == 0o600


def test_a_link_planted_at_a_temporary_name_is_never_opened(
    victim: Path, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import regdiag.files as files

    names = iter(["aaaa0000", "bbbb1111"])
    monkeypatch.setattr(files.secrets, "token_hex", lambda n: next(names))
    planted = shared / ".out.json.aaaa0000.tmp"
    plant_link(victim, planted)
    atomic_write_text(shared / "out.json", "new\n")
    assert unchanged(victim) and planted.is_symlink()
    assert (shared / "out.json").read_text() == "new\n"
    assert sorted(p.name for p in shared.iterdir()) == [".out.json.aaaa0000.tmp", "out.json", "victim"]


def test_an_appended_file_is_never_written_through_a_link_or_a_second_name(
    victim: Path, shared: Path
) -> None:
    journal = shared / "j.jsonl"
    plant_link(victim, journal)
    with pytest.raises(RecordError, match="symbolic link"):
        append_jsonl(journal, {"type": "start"})
    assert unchanged(victim)
    journal.unlink()
    os.link(victim, journal)
    with pytest.raises(RecordError, match="other hard links"):
        append_jsonl(journal, {"type": "start"})
    assert unchanged(victim)


@pytest.mark.skipif(not CAN_PLANT, reason="needs root and setpriv to plant as another user")
def test_baseline_save_in_a_team_home_with_planted_links(victim: Path, shared: Path) -> None:
    # REGDIAG_HOME shared by a team: its baselines directory is writable by all, and nobody plants
    # the old sidecar lock name and the baseline's own name, both pointing at the victim. A directory
    # anyone may write is refused at start (files.check_home), before anything is read or written.
    home = shared / "team-home"
    (home / "baselines").mkdir(parents=True)
    (home / "baselines").chmod(0o1777)
    plant_link(victim, home / "baselines" / ".x.json.lock")
    plant_link(victim, home / "baselines" / "x.json")
    r = run_cli("baseline", "save", "x", str(RUN), "--force", env={"REGDIAG_HOME": str(home)}, timeout=120)
    assert "baselines: writable by anyone (mode 1777)" in one_error_line(r)
    assert unchanged(victim)
    # Made private again, the planted link at the baseline's name is replaced, never written through.
    (home / "baselines").chmod(0o700)
    r = run_cli("baseline", "save", "x", str(RUN), "--force", env={"REGDIAG_HOME": str(home)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert unchanged(victim)
    stored = home / "baselines" / "x.json"
    assert not stored.is_symlink() and load_record(stored)["baseline"]["name"] == "x"
    assert (home / "baselines" / ".x.json.lock").is_symlink()  # left alone, neither followed nor removed


@pytest.mark.launch
@pytest.mark.skipif(not CAN_PLANT, reason="needs root and setpriv to plant as another user")
def test_probe_output_with_planted_links_changes_nothing_outside_it(victim: Path, shared: Path) -> None:
    # The reproduction: `ln -s /etc/motd DIR/.out.json.lock; regdiag probe ... -o DIR/out.json`.
    plant_link(victim, shared / ".out.json.lock")
    plant_link(victim, shared / "out.json")
    r = run_cli(
        "probe", "spec-decode", "--preset", "tiny", "--launches", "1", "--no-snapshot",
        "-o", str(shared / "out.json"), timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert unchanged(victim)
    assert load_record(shared / "out.json", "run")["status"] == "complete"
    assert sorted(p.name for p in shared.iterdir()) == [".out.json.lock", "out.json", "victim"]


PROBE = (
    "import json; [print(json.dumps({'type': 'cycle', 'i': i, 't': {'cycle': 5.0}})) for i in range(3)]; "
    "print(json.dumps({'type': 'footer', 'cycles': 3, 'warmup_dropped': 0}))"
)


def _bisect(*extra: str, good: str = "OMP_NUM_THREADS=2", bad: str = "OMP_NUM_THREADS=1") -> list[str]:
    return [
        "bisect", "--good", good, "--bad", bad, "--command", f"{sys.executable} -c {shlex.quote(PROBE)}",
        "--launches", "2", *extra,
    ]  # fmt: skip


@pytest.mark.skipif(not CAN_PLANT, reason="needs root and setpriv to plant as another user")
def test_a_planted_journal_link_is_refused_and_its_target_untouched(victim: Path, shared: Path) -> None:
    plant_link(victim, shared / ".j.jsonl.lock")
    plant_link(victim, shared / "j.jsonl")
    line = one_error_line(run_cli(*_bisect("--journal", str(shared / "j.jsonl")), timeout=120))
    assert "j.jsonl: is a symbolic link" in line
    assert unchanged(victim)


# --------------------------------------------------------------------------- output targets


def test_output_targets_are_checked_before_anything_is_made(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "d"
    line = one_error_line(
        run_cli("compare", str(RUN), str(RUN), "--html", str(missing / "x.html"), timeout=120)
    )
    assert line.endswith(f"{missing} does not exist; make the directory first "
                         "(regdiag makes missing directories only inside REGDIAG_HOME)")  # fmt: skip
    assert not (tmp_path / "nonexistent").exists()
    before = set(os.listdir("/dev"))
    line = one_error_line(run_cli("ab", "--a", "X=1", "--b", "X=2", "--command", "true", "-o", "/dev/full"))
    assert "-o /dev/full: not a regular file (a device or a pipe)" in line
    line = one_error_line(run_cli("ab", "--a", "X=1", "--b", "X=2", "--command", "true", "-o", "/dev/zz"))
    assert "-o /dev/zz: /dev holds devices or kernel files" in line
    assert set(os.listdir("/dev")) == before
    for name in ("a\nb.json", "x\x1b[2J.json", "tab\t.json"):
        line = one_error_line(run_cli("snapshot", "--json", "-o", str(tmp_path / name), timeout=60))
        assert "control character" in line and "\n" not in line
    assert list(tmp_path.iterdir()) == []
    # Inside REGDIAG_HOME a missing directory is made, 0700.
    deep = Path(os.environ["REGDIAG_HOME"]) / "a" / "b" / "x.json"
    atomic_write_text(check_output_path(deep), "x")
    assert stat.S_IMODE(deep.parent.stat().st_mode) == 0o700


# ------------------------------------------------------------------------------ the hash key


def _key_refused(why: str) -> None:
    keyedhash._cache.clear()
    with pytest.raises(keyedhash.KeyFileError, match=why):
        keyedhash.load_key()


def test_a_new_key_is_private_whole_and_agreed_on_by_concurrent_snapshots() -> None:
    home = Path(os.environ["REGDIAG_HOME"])
    code = "from regdiag.snapshot import keyedhash as k; print(k.key_id(k.load_key()))"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(6)
    ]
    ids = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert len(ids) == 1 and all(p.returncode == 0 for p in procs)
    key = home / "snapshot.key"
    st = key.lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 32
    assert sorted(p.name for p in home.iterdir()) == ["snapshot.key"]  # no temporary file left


@pytest.mark.parametrize(
    "plant, why",
    [
        (lambda k: os.mkfifo(k), "not a regular file"),
        (lambda k: k.symlink_to("/dev/zero"), "a symbolic link"),
        (lambda k: k.write_bytes(b""), "0 bytes, not 32"),
        (lambda k: k.write_bytes(b"x" * 33), "33 bytes, not 32"),
        (lambda k: k.write_bytes(b"x" * (1 << 20)), "1048576 bytes, not 32"),
        (lambda k: (k.write_bytes(b"x" * 32), k.chmod(0o644)), "mode 0644"),
        (lambda k: (k.write_bytes(b"x" * 32), k.chmod(0o620)), "mode 0620"),
    ],
    ids=["fifo", "link-to-dev-zero", "empty", "33-bytes", "1-MiB", "0644", "0620"],
)
def test_a_key_that_is_not_this_users_own_is_refused(plant, why: str) -> None:
    key = Path(keyedhash.key_path())
    key.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    umask = os.umask(0)
    try:
        plant(key)
        if key.exists() and not key.is_symlink() and stat.S_ISREG(key.stat().st_mode) and why.endswith("32"):
            key.chmod(0o600)
    finally:
        os.umask(umask)
    _key_refused(why)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the key to another user")
def test_a_key_owned_by_another_user_is_refused() -> None:
    key = Path(keyedhash.key_path())
    key.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    os.chown(key, NOBODY, NOBODY)
    _key_refused("owned by uid 65534")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_planted_key_stops_the_snapshot_in_one_line_without_waiting(kind: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    if kind == "fifo":
        os.mkfifo(home / "snapshot.key")
    else:
        (home / "snapshot.key").symlink_to("/dev/zero")
    for argv in (["snapshot", "--json"], ["snapshot", "-o", str(tmp_path / "s.json")]):
        t0 = time.monotonic()
        line = one_error_line(run_cli(*argv, env={"REGDIAG_HOME": str(home)}, timeout=60))
        assert time.monotonic() - t0 < 30 and f"{home}/snapshot.key: hash key refused" in line
    assert not (tmp_path / "s.json").exists()


def test_a_key_that_cannot_be_written_is_an_error_and_leaves_no_key(tmp_path: Path) -> None:
    # A full disk at the first snapshot left a 0-byte key that turned hashing off from then on.
    home = tmp_path / "home"

    def small() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (10, 10))

    r = subprocess.run(
        [sys.executable, "-m", "regdiag", "snapshot", "--json"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "REGDIAG_HOME": str(home)}, preexec_fn=small,
    )  # fmt: skip
    line = one_error_line(r)
    assert (
        line
        == f"regdiag: error: {home}/snapshot.key: cannot write the hash key (File too large); nothing was kept"
    )
    assert list(home.iterdir()) == []
    ok = run_cli("snapshot", "--json", env={"REGDIAG_HOME": str(home)}, timeout=60)
    assert ok.returncode == 0 and (home / "snapshot.key").stat().st_size == 32


# ---------------------------------------------------------------------------- duplicate keys


def test_a_key_given_twice_in_a_record_or_a_journal_line_is_refused(tmp_path: Path) -> None:
    two_schemas = '{"schema": "regdiag.run/1", "launches": [], "schema": "regdiag.snapshot/2", "groups": {}}'
    with pytest.raises(RecordError, match="r.json: key 'schema' appears twice in one object"):
        loads_record(two_schemas, "r.json")
    nested = json.loads(RUN.read_text())
    text = json.dumps(nested).replace('"samples": {', '"samples": {"cycle": [1.0], ', 1)
    (tmp_path / "dup.json").write_text(text)
    line = one_error_line(run_cli("compare", str(tmp_path / "dup.json"), str(RUN), timeout=120))
    assert "dup.json: key 'cycle' appears twice in one object" in line
    journal = tmp_path / "j.jsonl"
    journal.write_text(
        '{"type": "start"}\n{"type": "launch", "medians": {"cycle": 1}, "medians": {"cycle": 9}}\n'
    )
    with pytest.raises(RecordError, match="j.jsonl: line 2: key 'medians' appears twice"):
        read_jsonl_numbered(journal)


# ------------------------------------------------------------------------- code from records


SITECUSTOMIZE = "import os, pathlib\npathlib.Path(os.environ['MARKER']).write_text('ran')\n"


def _planted_snapshot(tmp_path: Path, env: dict[str, str]) -> Path:
    fields = {k: {"status": "ok", "value": v} for k, v in env.items()}
    snap = {"schema": "regdiag.snapshot/2", "groups": {"env": {"status": "ok", "fields": fields}}}
    path = tmp_path / f"snap-{len(list(tmp_path.glob('snap-*')))}.json"
    path.write_text(json.dumps(snap))
    return path


@pytest.mark.launch
def test_bisect_and_ab_refuse_a_record_that_loads_code_unless_allowed(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    marker = tmp_path / "marker"
    good = _planted_snapshot(tmp_path, {"OMP_NUM_THREADS": "2"})
    bad = _planted_snapshot(tmp_path, {"OMP_NUM_THREADS": "2", "PYTHONPATH": str(site),
                                       "LD_PRELOAD": "", "NCCL_NET_PLUGIN": "evil"})  # fmt: skip
    # This shell has other values (and MARKER, which the launches inherit).
    env = {"PYTHONPATH": "", "LD_PRELOAD": "", "NCCL_NET_PLUGIN": "", "MARKER": str(marker)}
    home = Path(os.environ["REGDIAG_HOME"])
    line = one_error_line(run_cli(*_bisect(good=str(good), bad=str(bad)), env=env, timeout=120))
    assert line.startswith(
        f"regdiag: error: --bad {bad}: the record sets NCCL_NET_PLUGIN, PYTHONPATH for every"
    )
    assert "--allow-code-from-record" in line
    probe = f"{sys.executable} -c {shlex.quote(PROBE)}"
    ab = ["ab", "--a", str(good), "--b", str(bad), "--command", probe, "--launches", "2", "--no-snapshot"]
    line = one_error_line(run_cli(*ab, env=env, timeout=120))
    assert "--b" in line and "PYTHONPATH" in line and "NCCL_NET_PLUGIN" in line
    assert not marker.exists() and not (home / "bisect").exists() and not (home / "runs").exists()
    # The refusal is real: allowed, the planted sitecustomize runs in the launches.
    r = run_cli(*ab, "--allow-code-from-record", env=env, timeout=300)
    assert r.returncode in (0, 1, 3), r.stderr[-2000:]
    assert marker.read_text() == "ran"


def test_what_counts_as_code_and_what_the_user_already_runs_with() -> None:
    for name in ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT",
                 "PYTHONUSERBASE", "BASH_ENV", "NCCL_NET_PLUGIN", "DYLD_INSERT_LIBRARIES", "PATH"):  # fmt: skip
        assert loads_code(name), name
    for name in ("NCCL_PROTO", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "PYTHONHASHSEED", "HF_HUB_OFFLINE"):
        assert not loads_code(name), name
    spec = Spec(env={"LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "PYTHONPATH": "/evil", "LD_PRELOAD": None,
                     "LD_AUDIT": "<redacted>", "NCCL_PROTO": "LL"})  # fmt: skip
    # The user's own LD_LIBRARY_PATH asks for nothing new; unsetting or a redacted value sets nothing.
    assert code_from_record(spec, {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}) == ["PYTHONPATH"]
    assert code_from_record(spec, {}) == ["LD_LIBRARY_PATH", "PYTHONPATH"]
