"""Every variable recorded; start-up files parsed (not run); nccl.conf in NCCL's order; the hash key."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from regdiag.bisect.factors import ENV, Factor, diff, load_side
from regdiag.snapshot import env as env_group
from regdiag.snapshot import keyedhash, startup
from regdiag.snapshot.diff import diff_snapshots

SOURCE = """
import os
from os import environ
os.environ["NCCL_PROTO"] = "LL"
environ["NCCL_ALGO"] = "Ring"
os.environ.setdefault("NCCL_P2P_LEVEL", "SYS")
os.environ.update({"OMP_NUM_THREADS": "4"}, )
os.environ.update(MKL_NUM_THREADS="2")
os.putenv("CUDA_MODULE_LOADING", "LAZY")
del os.environ["NCCL_DEBUG"]
os.environ.pop("NCCL_IB_DISABLE", None)
if os.path.exists("/nonexistent"):
    os.environ["TORCH_NCCL_BLOCKING_WAIT"] = "1"
os.environ["NCCL_BUFFSIZE"] = str(1 << 22)
with open("/this/would/fail/if/run") as f:
    pass
"""


def test_settings_are_read_from_the_source_in_order_without_running_it() -> None:
    got = [(s.name, s.op, s.value, s.literal) for s in startup.parse_settings(SOURCE)]
    assert got == [
        ("NCCL_PROTO", "set", "LL", True),
        ("NCCL_ALGO", "set", "Ring", True),
        ("NCCL_P2P_LEVEL", "default", "SYS", True),
        ("OMP_NUM_THREADS", "set", "4", True),
        ("MKL_NUM_THREADS", "set", "2", True),
        ("CUDA_MODULE_LOADING", "set", "LAZY", True),
        ("NCCL_DEBUG", "unset", None, True),
        ("NCCL_IB_DISABLE", "unset", None, True),
        ("TORCH_NCCL_BLOCKING_WAIT", "set", "1", True),
        ("NCCL_BUFFSIZE", "set", None, False),
    ]


def test_effective_environment_follows_python_then_nccl_precedence(tmp_path: Path) -> None:
    sc = tmp_path / "sitecustomize.py"
    sc.write_text(SOURCE)
    files = [startup.read_file("sitecustomize", str(sc))]
    home = tmp_path / "home"
    home.mkdir()
    (home / ".nccl.conf").write_text("# comment\nNCCL_SOCKET_IFNAME = eth0\nNCCL_PROTO=Simple\n")
    own = tmp_path / "mine.conf"
    own.write_text("NCCL_NTHREADS=256\n")
    initial = {"NCCL_ALGO": "Tree", "NCCL_P2P_LEVEL": "NVL", "NCCL_DEBUG": "INFO", "HOME": str(home)}
    confs = startup.nccl_files(initial, str(home))
    assert [c["path"] for c in confs if "/etc/" not in c["path"]] == [str(home / ".nccl.conf")]
    env, sources = startup.effective_env(initial, files, confs)
    assert env["NCCL_PROTO"] == "LL" and sources["NCCL_PROTO"] == str(sc)  # the file beats nccl.conf
    assert env["NCCL_ALGO"] == "Ring"  # an assignment beats the environment
    assert env["NCCL_P2P_LEVEL"] == "NVL" and "NCCL_P2P_LEVEL" not in sources  # setdefault does not
    assert "NCCL_DEBUG" not in env
    assert env["NCCL_SOCKET_IFNAME"] == "eth0" and sources["NCCL_SOCKET_IFNAME"] == str(home / ".nccl.conf")
    assert "NCCL_BUFFSIZE" not in env  # not a literal: not guessed
    # NCCL_CONF_FILE replaces ~/.nccl.conf (NCCL reads one or the other, then /etc/nccl.conf).
    confs = startup.nccl_files({**initial, "NCCL_CONF_FILE": str(own)}, str(home))
    assert [c["path"] for c in confs if "/etc/" not in c["path"]] == [str(own)]
    assert confs[0]["settings"] == {"NCCL_NTHREADS": "256"}
    missing = startup.nccl_files({"NCCL_CONF_FILE": str(tmp_path / "nope")}, None)
    assert missing[0]["path"] == str(tmp_path / "nope") and "FileNotFoundError" in missing[0]["error"]


def test_pth_import_lines_are_parsed_and_their_directories_searched(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    extra = tmp_path / "extra"
    site.mkdir()
    extra.mkdir()
    (site / "a.pth").write_text(f"{extra}\nimport os; os.environ['NCCL_PROTO'] = 'LL'\n")
    (extra / "sitecustomize.py").write_text("import os\nos.environ['NCCL_ALGO'] = 'Tree'\n")
    files = startup.find([], [str(site)], None)
    assert [(f.kind, f.path) for f in files] == [
        ("pth", str(site / "a.pth")),
        ("sitecustomize", str(extra / "sitecustomize.py")),
    ]
    assert [s.name for s in files[0].settings] == ["NCCL_PROTO"]
    assert startup.find([], [str(site)], None, no_site=True) == []  # python -S runs none of them


def test_the_hash_key_is_private_stable_and_never_recorded(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "rh"
    monkeypatch.setenv("REGDIAG_HOME", str(home))
    keyedhash._cache.clear()
    g1 = env_group.collect({"SGLANG_API_KEY": "s3cretvalue", "NCCL_PROTO": "LL"})
    key_file = home / "snapshot.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_bytes()
    g2 = env_group.collect({"SGLANG_API_KEY": "s3cretvalue", "NCCL_PROTO": "LL"})
    assert g1["fields"]["SGLANG_API_KEY"] == g2["fields"]["SGLANG_API_KEY"]
    assert g1["fields"]["NCCL_PROTO"]["value"] == "LL"
    text = json.dumps(g1)
    assert "s3cretvalue" not in text and key.hex() not in text
    # Another key: another hash, and diff refuses to call it a change it cannot judge.
    monkeypatch.setenv("REGDIAG_HOME", str(tmp_path / "other"))
    g3 = env_group.collect({"SGLANG_API_KEY": "s3cretvalue"})
    assert g3["fields"]["SGLANG_API_KEY"] != g1["fields"]["SGLANG_API_KEY"]
    items = diff_snapshots({"groups": {"env": g1}}, {"groups": {"env": g3}})
    it = next(i for i in items if i["field"] == "SGLANG_API_KEY")
    assert it["change"] == "unknown" and it["old"] == it["new"] == "<hashed>"
    # A key file that cannot be made is an error naming it, never a snapshot with hashing off.
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a directory")
    monkeypatch.setenv("REGDIAG_HOME", str(blocked))
    with pytest.raises(keyedhash.KeyFileError, match="snapshot.key: cannot"):
        env_group.collect({"SGLANG_API_KEY": "s3cretvalue"})


def test_every_variable_reaches_the_snapshot_diff_and_bisect(tmp_path: Path, cli) -> None:
    base = {"PYTHONTRACEMALLOC": "1", "PYTHONMALLOC": "malloc", "ATEN_CPU_CAPABILITY": "default"}
    a = cli("snapshot", "--json", "-o", str(tmp_path / "a.json"), env={**base, "MALLOC_ARENA_MAX": "2"})
    b = cli("snapshot", "--json", "-o", str(tmp_path / "b.json"), env={**base, "MALLOC_ARENA_MAX": "8"})
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    values = {k: f["value"] for k, f in json.loads(a.stdout)["groups"]["env"]["fields"].items()}
    for name, value in base.items():
        assert values[name] == value
    items = diff_snapshots(json.loads(a.stdout), json.loads(b.stdout))
    assert [(i["field"], i["old"], i["new"], i["rank"]) for i in items if i["group"] == "env"] == [
        ("MALLOC_ARENA_MAX", "2", "8", 4)
    ]
    d = diff(load_side(str(tmp_path / "a.json"), "--good"), load_side(str(tmp_path / "b.json"), "--bad"))
    assert Factor(ENV, "MALLOC_ARENA_MAX", "2", "8") in d.factors
    assert d.same_env["PYTHONMALLOC"] == "malloc"


def test_this_interpreters_sitecustomize_is_the_one_it_ran(tmp_path: Path) -> None:
    sc = tmp_path / "sitecustomize.py"
    sc.write_text("import os\nos.environ['NCCL_PROTO'] = 'LL'\n")
    env = {k: v for k, v in os.environ.items() if k != "NCCL_PROTO"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(Path(__file__).resolve().parent.parent)])
    code = "import json; from regdiag.snapshot import collect; print(json.dumps(collect()['groups']))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    groups = json.loads(out.stdout)
    assert groups["startup"]["fields"]["sitecustomize"]["value"]["path"] == str(sc)
    assert groups["env"]["fields"]["NCCL_PROTO"]["value"] == "LL"
    assert groups["env"]["sources"]["NCCL_PROTO"] == str(sc)
