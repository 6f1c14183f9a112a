"""The whole collector: every group, every status, bare interpreters, timeouts, NCCL, packages."""

from __future__ import annotations

import glob
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from snapshot_helpers import ROOT

from regdiag.records import check_record, dumps_record
from regdiag.snapshot import GROUPS, collect, gpu, host, nccl, packages
from regdiag.snapshot import fields as F

HAS_GPU = any(os.path.exists(d) for d in gpu.DEVICE_NODES)


def _check_fields(record: dict[str, Any]) -> None:
    for gname, g in record["groups"].items():
        assert g["status"] in F.STATUSES, gname
        if g["status"] != "ok":
            assert g["note"] and "\n" not in g["note"], gname
        for fname, f in {**g["fields"], **g.get("metadata", {})}.items():
            assert f["status"] in F.STATUSES, (gname, fname)
            assert "value" in f, (gname, fname)
            if f["status"] != "ok":
                assert f["error"] and "\n" not in f["error"], (gname, fname)


def test_collect_here_records_every_group() -> None:
    rec = collect(repo=str(ROOT))
    check_record(rec, "collected", expect="snapshot")
    assert list(rec["groups"]) == list(GROUPS)
    json.loads(dumps_record(rec))  # serializable, no NaN
    _check_fields(rec)
    assert rec["origin"] == {
        "host": rec["groups"]["host"]["fields"]["hostname"]["value"],
        "python": sys.executable,
        "via": "local",
    }
    assert rec["groups"]["engine"]["status"] == "ok"
    installed = {packages.normalize(d.metadata["Name"]): d.version for d in md.distributions()}
    assert packages.metadata_value(rec["groups"]["packages"], "regdiag") == installed.get("regdiag")


def test_collector_never_imports_torch_or_the_cli() -> None:
    code = (
        "import sys; from regdiag.snapshot import collect; collect(); "
        "bad = [m for m in ('torch', 'typer', 'rich', 'git', 'pandas') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.skipif(HAS_GPU, reason="this machine has an NVIDIA driver")
def test_no_driver_gpu_group_says_so_in_one_line() -> None:
    for source in ("auto", "nvml", "nvidia-smi"):
        g = gpu.collect(source=source)
        assert g["status"] == "unsupported" and g["fields"] == {}, source
        assert "\n" not in g["note"]
        assert ("no NVIDIA driver" in g["note"]) or ("pynvml" in g["note"]), (source, g["note"])


def _bare_python_snapshot(python: str, tmp_path: Path) -> dict[str, Any]:
    """The collector as a remote host runs it: no site-packages at all (-S), only regdiag's files."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    out = subprocess.run(
        [python, "-S", "-m", "regdiag.snapshot", "--repo", str(ROOT)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_bare_interpreter_uses_proc_and_git_cli(tmp_path: Path) -> None:
    rec = _bare_python_snapshot(sys.executable, tmp_path)
    _check_fields(rec)
    assert rec["groups"]["host"]["psutil"] is False
    assert rec["groups"]["engine"]["backend"] == "cli"
    assert rec["groups"]["packages"]["fields"]["torch"]["value"] is None  # site-packages not visible
    mine = collect(repo=str(ROOT))
    assert mine["groups"]["host"]["psutil"] is True
    # /proc and psutil agree on what does not move.
    for name in ("cpu_count", "cpu_physical_cores", "memory_total_mib", "kernel", "cpu_model", "cpus_usable"):
        assert rec["groups"]["host"]["fields"][name] == mine["groups"]["host"]["fields"][name], name
    assert rec["groups"]["engine"]["fields"]["commit"] == mine["groups"]["engine"]["fields"]["commit"]


def _python39() -> str | None:
    """A working python3.9 (the oldest the collector supports), if this machine has one."""
    candidates = [
        shutil.which("python3.9"),
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9"))),
    ]
    for c in candidates:
        if (
            c
            and subprocess.run(
                [c, "-c", "import sys; assert sys.version_info[:2] == (3, 9)"], capture_output=True
            ).returncode
            == 0
        ):
            return c
    return None


PYTHON39 = _python39()


@pytest.mark.skipif(PYTHON39 is None, reason="no python3.9 here")
def test_runs_on_python_3_9(tmp_path: Path) -> None:
    python = PYTHON39
    assert python is not None
    rec = _bare_python_snapshot(python, tmp_path)
    _check_fields(rec)
    assert rec["groups"]["host"]["fields"]["python_version"]["value"].startswith("3.9.")


def test_package_scan_matches_importlib_metadata() -> None:
    mine = {k: d.version for k, d in packages.installed().items()}
    theirs: dict[str, str] = {}
    for d in md.distributions():
        name = d.metadata["Name"]
        if name:
            theirs.setdefault(packages.normalize(name), d.version)
    assert mine == theirs


def test_all_packages_and_hash() -> None:
    g = packages.collect(all_packages=True)
    allp = packages.metadata_value(g, "all")
    assert allp["pytest"] == md.version("pytest")
    assert packages.metadata_value(g, "count") == len(allp)
    assert packages.metadata_value(g, "hash") == packages.list_hash(packages.installed())
    assert "all" not in packages.collect()["metadata"]


NCCL_C = r"""
int ncclGetVersion(int *version) { *version = %d; return 0; }
"""


@pytest.fixture
def fake_libnccl(tmp_path: Path) -> Path:
    """A real shared library exporting ncclGetVersion (the real one needs a CUDA build)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "nccl.c"
    src.write_text(NCCL_C % 22809)
    lib = tmp_path / "libnccl.so.2"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def test_nccl_version_from_the_library_itself(fake_libnccl: Path, tmp_path: Path) -> None:
    broken = tmp_path / "libnccl.so.2.18.3"
    broken.write_bytes(b"not an ELF file")
    env = {"LD_PRELOAD": f"{fake_libnccl}", "VLLM_NCCL_SO_PATH": str(broken)}
    libs = nccl.find_libraries({}, environ=env)
    sources = [lib["source"] for lib in libs]  # a system libnccl, where there is one, sits between
    assert sources[0] == "LD_PRELOAD" and sources[-1] == "VLLM_NCCL_SO_PATH"
    chosen, all_libs = nccl.versions(libs)
    assert chosen == {
        "status": "ok",
        "value": {"version": "2.28.9", "path": str(fake_libnccl), "source": "LD_PRELOAD"},
    }
    second = all_libs["value"][-1]
    assert (
        second["version"] == "2.18.3"
        and second["version_from"] == "file name"
        and "OSError" in second["error"]
    )


def test_nccl_from_an_installed_package(fake_libnccl: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    lib_dir = site / "nvidia" / "nccl" / "lib"
    lib_dir.mkdir(parents=True)
    shutil.copy(fake_libnccl, lib_dir / "libnccl.so.2")
    info = site / "nvidia_nccl_cu13-2.28.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Name: nvidia-nccl-cu13\nVersion: 2.28.9\n\n")
    (info / "RECORD").write_text(
        "nvidia/nccl/lib/libnccl.so.2,sha256=x,1\nnvidia_nccl_cu13-2.28.9.dist-info/METADATA,,\n"
    )
    tinfo = site / "torch-2.11.0.dist-info"
    tinfo.mkdir()
    (tinfo / "METADATA").write_text(
        'Name: torch\nVersion: 2.11.0\nRequires-Dist: nvidia-nccl-cu13==2.28.9; platform_system == "Linux"\n\n'
    )
    dists = packages.installed([str(site)])
    libs = nccl.find_libraries(dists, environ={})
    assert libs[0] == {
        "path": str(lib_dir / "libnccl.so.2"),
        "source": "nvidia-nccl-cu13 (required by torch)",
    }
    chosen, _ = nccl.versions(libs)
    assert chosen["value"]["version"] == "2.28.9"


def test_no_nccl_anywhere_is_unsupported() -> None:
    chosen, libs = nccl.versions([])
    assert chosen["status"] == "unsupported" and libs == {"status": "ok", "value": []}
    assert nccl.decode_version(2708) == "2.7.8" and nccl.decode_version(22809) == "2.28.9"


def test_a_hanging_source_times_out_and_the_snapshot_still_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A git that never answers (a hung NFS mount does this) costs the deadline, not the snapshot."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    hang = bin_dir / "git"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    t0 = time.monotonic()
    rec = collect(repo=str(tmp_path), timeout_s=1.0)
    took = time.monotonic() - t0
    assert took < 3.0
    assert rec["groups"]["engine"]["status"] == "timeout"
    assert rec["groups"]["host"]["status"] == "ok" and rec["groups"]["packages"]["status"] == "ok"


def test_run_threads_reports_errors_and_timeouts() -> None:
    def boom() -> None:
        raise RuntimeError("disk on fire\nsecond line")

    out = F.run_threads({"ok": lambda: 1, "boom": boom, "slow": lambda: time.sleep(5)}, F.Deadline(0.3))
    assert out["ok"] == ("ok", 1)
    assert out["boom"] == ("error", "RuntimeError: disk on fire second line")
    assert out["slow"] == ("timeout", None)


def test_host_fields_are_plausible() -> None:
    g = host.collect()
    v = {k: f["value"] for k, f in g["fields"].items() if f["status"] == "ok"}
    assert v["cpu_count"] >= 1 and v["memory_total_mib"] > 100
    assert 0 < v["memory_available_mib"] <= v["memory_total_mib"]
    assert len(v["load_avg"]) == 3
    assert v["python_executable"] == sys.executable


def test_collector_table_names_each_group_and_its_failure() -> None:
    from regdiag.snapshot import _run_collectors, _Taking

    def two(t: Any) -> dict[str, Any]:
        return {"a": {"status": "ok", "fields": {}}, "b": {"status": "ok", "fields": {"x": F.ok(1)}}}

    def broken(t: Any) -> dict[str, Any]:
        raise RuntimeError("no such device")

    def stuck(t: Any) -> dict[str, Any]:
        time.sleep(5)
        return {}

    taking = _Taking(None, False, 0.1, F.Deadline(0.5), "auto", "auto", True, None, None, None)
    table = {"two": (two, ("a", "b")), "broken": (broken, ("c", "d")), "stuck": (stuck, ("e",))}
    out = _run_collectors(taking, table)
    assert [(g, out[g][0]) for g in "abcde"] == [
        ("a", "ok"),
        ("b", "ok"),
        ("c", "error"),
        ("d", "error"),
        ("e", "timeout"),
    ]
    assert out["b"][1]["fields"]["x"]["value"] == 1 and out["a"][2] == out["b"][2] is not None
    assert out["c"][1] == out["d"][1] == "RuntimeError: no such device"
