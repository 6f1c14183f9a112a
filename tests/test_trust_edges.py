"""Trust at the edges: what a record may set in a launch, a shared REGDIAG_HOME, config.toml read
safely, and readers that a hostile peer file cannot stall or crash."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import os
import resource
import threading
import zlib
from pathlib import Path

import pytest
from conftest import ROOT
from rich.console import Console

from regdiag import config, importers
from regdiag.bandwidth import gpu_bandwidth, lookup
from regdiag.bisect import journal
from regdiag.bisect.envs import envs_dir
from regdiag.bisect.factors import Spec, code_from_record, is_setting, load_side
from regdiag.cli.clean_cmd import clean_local
from regdiag.cli.target import target_from_options
from regdiag.errors import BadInput
from regdiag.files import FileLock, append_text, atomic_write_text, check_home, lease_of, set_shared_home
from regdiag.hosts.knownhosts import append_known_host
from regdiag.importers import hyperfine, nsys
from regdiag.records import RecordError, load_record
from regdiag.report.snapshot import MANY_ROWS, render_diff

NOBODY = 65534
BASELINE_RUN = ROOT / "baselines" / "h200-kimi-tp1-baseline.json"

# ------------------------------------------------------------------------- code from records

# Tools whose variables load code or configuration that loads code; none of them is a tuning family.
_TOOLS = ("OPENSSL", "SSL", "GIT", "NVTX", "GST", "QT", "LIBVA", "VK", "MESA", "JAVA", "LUA", "GCONV", "PIP")
_LOADER_TAILS = ("_CONF", "_MODULES", "_PATH", "_INIT", "_OPTIONS", "_PLUGIN_PATH", "_DRIVER", "_ENGINES")
# Tuning families, and name parts within them that say the value is a location or chooses code.
_FAMILIES = ("NCCL_", "CUDA_", "TORCH_", "VLLM_", "SGLANG_", "OMP_", "TRITON_", "NVSHMEM_")
_LOCATION_PARTS = ("CONF_FILE", "NET_PLUGIN", "HOME", "EXTENSIONS_DIR", "INJECTION64_PATH", "LIB", "PLUGINS")
# Values that point at code, or make a shell run some, under a name that is otherwise a setting.
_CODE_VALUES = (
    "/tmp/x/libevil.so",
    "./evil.so",
    "../up/evil.py",
    "~/.x/evil.py",
    "$(touch /tmp/p)",
    "`id`",
    "file:///tmp/x",
    "eth0:/tmp/evil.so",
    "plugin.so",
    "${HOME}/x",
)
# Named in the report that led to the allow-list: each ran code, or could, with no refusal.
_REPORTED = {
    "OPENSSL_CONF": "/tmp/p.cnf",
    "SHELLOPTS": "xtrace",
    "PS4": "$(id>/tmp/p)",
    "NCCL_CONF_FILE": "/tmp/nccl.conf",
    "NVTX_INJECTION64_PATH": "/tmp/n.so",
    "TRITON_HOME": "/tmp/t",
    "CC": "/tmp/cc",
    "OPENSSL_MODULES": "/tmp/m",
    "PYTHONWARNINGS": "error::evil.Warn",
    "BASH_FUNC_ls%%": "() { id; }",
}

SETTINGS = {
    "NCCL_PROTO": "LL",
    "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1",
    "NCCL_SOCKET_IFNAME": "eth0",
    "CUDA_VISIBLE_DEVICES": "0,1,2,3",
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    "OMP_NUM_THREADS": "8",
    "TORCH_CUDA_ARCH_LIST": "8.0 9.0+PTX",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "VLLM_ATTENTION_BACKEND": "FLASHINFER",
    "VLLM_ENABLE_PREFIX_CACHING": "1",
    "VLLM_SPEC_DRAFT_MODEL": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "SGLANG_ENABLE_TORCH_COMPILE": "0",
    "NV_LIBCUBLAS_VERSION": "12.9.1.4-1",
    "PYTHONHASHSEED": "0",
    "MASTER_PORT": "29500",
}


def loader_variables() -> dict[str, str]:
    """Variables that load code, generated beyond any list the code keeps (over 150 of them)."""
    out = dict(_REPORTED)
    for tool, tail in itertools.product(_TOOLS, _LOADER_TAILS):
        out[tool + tail] = "/opt/x/" + tail.lower().strip("_")
    for fam, part in itertools.product(_FAMILIES, _LOCATION_PARTS):
        out[fam + part] = "evil"  # a bare word: the name alone says it is a location
    for (name, _), value in zip(itertools.cycle(SETTINGS.items()), _CODE_VALUES * 3, strict=False):
        out[name + "_X" if name in out else name] = value
    for i, value in enumerate(_CODE_VALUES):
        out[f"{_FAMILIES[i % len(_FAMILIES)]}SETTING_{i}"] = value
    return out


def test_a_record_may_set_settings_only_generated_loaders_refused() -> None:
    loaders = loader_variables()
    assert len(loaders) > 150
    passed = [f"{n}={v}" for n, v in loaders.items() if is_setting(n, v)]
    assert passed == []
    assert [n for n, v in SETTINGS.items() if not is_setting(n, v)] == []
    spec = Spec(env={**SETTINGS, **loaders})
    assert sorted(code_from_record(spec, {})) == sorted(loaders)
    # What this shell already runs with asks for nothing new.
    assert (
        code_from_record(
            Spec(env={"OPENSSL_CONF": "/etc/ssl/openssl.cnf"}), {"OPENSSL_CONF": "/etc/ssl/openssl.cnf"}
        )
        == []
    )


def test_a_snapshot_side_that_sets_openssl_conf_or_ps4_is_refused_unless_allowed(tmp_path: Path) -> None:
    env = {**SETTINGS, "OPENSSL_CONF": "/tmp/p.cnf", "SHELLOPTS": "xtrace", "PS4": "$(id)"}
    fields = {k: {"status": "ok", "value": v} for k, v in env.items()}
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"schema": "regdiag.snapshot/2", "groups": {"env": {"fields": fields}}}))
    with pytest.raises(BadInput) as e:
        load_side(str(snap), "--bad")
    line = str(e.value)
    assert "\n" not in line and "--allow-code-from-record" in line
    assert "OPENSSL_CONF, PS4, SHELLOPTS" in line and "NCCL_PROTO" not in line
    assert load_side(str(snap), "--bad", allow_code=True).env["PS4"] == "$(id)"


# ------------------------------------------------------------------------- a shared REGDIAG_HOME


def _home() -> Path:
    home = Path(os.environ["REGDIAG_HOME"])
    home.chmod(0o700)
    return home


def _refused(why: str) -> str:
    with pytest.raises(RecordError) as e:
        check_home()
    line = str(e.value)
    assert "\n" not in line and why in line, line
    return line


def test_a_home_others_may_write_or_another_user_owns_is_refused_at_start(tmp_path: Path) -> None:
    home = _home()
    check_home()  # a home of this user's, 0700: used
    home.chmod(0o1777)  # sticky or not, anyone may plant names in it
    _refused("writable by anyone")
    home.chmod(0o2770)  # a team's home: refused unless asked for
    _refused("--shared-home")
    set_shared_home(True)
    try:
        check_home()
    finally:
        set_shared_home(False)
    home.chmod(0o700)
    (home / "baselines").mkdir()
    os.chown(home / "baselines", NOBODY, NOBODY)
    _refused("owned by another user")
    (home / "baselines").rmdir()
    (home / "runs").symlink_to(tmp_path)
    _refused("runs: a symbolic link")


def test_a_link_swapped_in_after_the_check_is_never_written_through(tmp_path: Path) -> None:
    # A race: the home is checked, then another user swaps runs/ for a link to their directory.
    home = _home()
    (home / "runs").mkdir()
    check_home()
    elsewhere = tmp_path / "theirs"
    elsewhere.mkdir()
    (home / "runs").rmdir()
    (home / "runs").symlink_to(elsewhere)
    for write in (lambda p: atomic_write_text(p, "{}"), lambda p: append_text(p, "x\n")):
        with pytest.raises(RecordError, match="runs: a symbolic link inside REGDIAG_HOME"):
            write(home / "runs" / "x.json")
    assert list(elsewhere.iterdir()) == []


def _load_within(seconds: float) -> BaseException | None:
    """config.load() in a thread: what it raised, or a failure when it did not return in time."""
    out: list[BaseException | None] = []

    def go() -> None:
        try:
            config.load()
            out.append(None)
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out.append(e)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"config.load() did not return within {seconds} s"
    return out[0]


def test_config_toml_as_a_fifo_or_a_link_to_dev_zero_is_refused_at_once() -> None:
    home = _home()
    cfg = home / "config.toml"
    os.mkfifo(cfg)
    e = _load_within(10)
    assert isinstance(e, BadInput) and "not a regular file" in str(e)
    cfg.unlink()
    cfg.symlink_to("/dev/zero")
    e = _load_within(10)
    assert isinstance(e, BadInput) and "not a regular file" in str(e)
    cfg.unlink()
    cfg.write_text("# " + "x" * 100_000 + "\n")
    e = _load_within(10)
    assert isinstance(e, BadInput) and "larger than 64 KiB" in str(e)
    cfg.write_text('[defaults]\nhost = "gpu-box"\nshared_home = true\n')
    assert _load_within(10) is None and config.shared_home_wanted(config.load())


# ------------------------------------------------------------------------- readers that trust types


def test_a_journal_launch_without_the_metrics_median_is_a_damaged_line_on_resume(tmp_path: Path) -> None:
    inputs = {"metric": "cycle", "command": "x"}
    path = tmp_path / "j.jsonl"
    start = {
        "type": "start",
        "schema": journal.SCHEMA,
        "inputs": inputs,
        "inputs_hash": journal.inputs_hash(inputs),
    }
    for medians in ({}, {"other": 1.0}):
        launch = {"type": "launch", "point": "p0", "index": 0, "status": "ok", "medians": medians}
        path.write_text(json.dumps(start) + "\n" + json.dumps(launch) + "\n")
        with pytest.raises(BadInput) as e:
            journal.Journal(path, inputs, resume=True)
        assert "line 2: a measured launch without a median of cycle" in str(e.value)
    # A failed launch has no medians, rightly.
    launch = {"type": "launch", "point": "p0", "index": 0, "status": "error", "medians": {}}
    path.write_text(json.dumps(start) + "\n" + json.dumps(launch) + "\n")
    assert journal.Journal(path, inputs, resume=True).launches["p0"][0].status == "error"


def test_a_record_whose_design_is_not_an_object_is_refused_in_one_line(tmp_path: Path) -> None:
    rec = load_record(BASELINE_RUN)
    for design in ("abba", ["ABBA"], {"kind": "interleaved", "differences": "NCCL_PROTO"}):
        p = tmp_path / "r.json"
        p.write_text(json.dumps({**rec, "design": design}))
        with pytest.raises(RecordError, match="design") as e:
            load_record(p)
        assert "\n" not in str(e.value)


def test_a_gzip_bomb_stops_at_the_cap_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importers, "MAX_INFLATED_BYTES", 1 << 20)
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = z.compress(b'{"benchmarks": [' + b" " * (16 << 20)) + z.flush()  # 16 MiB from ~16 kB
    p = tmp_path / "bench.json.gz"
    p.write_bytes(bomb)
    with pytest.raises(BadInput, match="inflates to more than 1 MiB") as e:
        importers.read_text(p)
    assert "\n" not in str(e.value)
    p.write_bytes(gzip.compress(b'{"a": 1}' * 1000)[:-12])
    with pytest.raises(BadInput, match="cannot be read"):
        importers.read_text(p)
    p.write_bytes(gzip.compress(b'{"a": 1}'))
    assert importers.read_text(p) == '{"a": 1}'


def test_long_peer_files_are_refused_in_one_line_naming_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hyperfine, "MAX_TIMES", 100)
    doc = {"results": [{"command": "sleep 0", "times": [0.01] * 150, "exit_codes": [0] * 150}]}
    with pytest.raises(BadInput, match="holds 150 times; regdiag imports at most 100"):
        importers.import_text(json.dumps(doc), "hf.json")
    monkeypatch.setattr(nsys, "MAX_ROWS", 100)
    head = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
    rows = "".join(f"1.0,100,1,100,100,100,100,0,kernel_{i}\n" for i in range(150))
    with pytest.raises(BadInput, match="151 lines; regdiag reads nsys stats exports of at most 100 rows"):
        importers.import_text(head + rows, "k.csv", "nsys")


def test_a_diff_of_many_variables_prints_aligned_columns_in_one_piece() -> None:
    items = [
        {"group": "env", "field": f"WIDE_{i}", "old": f"v{i}", "new": f"w{i}", "change": "changed", "rank": 6}
        for i in range(MANY_ROWS + 50)
    ]
    console = Console(file=io.StringIO(), width=100)
    render_diff(items, console, "a.json", "b.json")
    lines = [ln for ln in console.file.getvalue().splitlines() if "WIDE_" in ln]  # type: ignore[attr-defined]
    assert len(lines) == MANY_ROWS + 50
    assert len({ln.index("→") for ln in lines}) == 1 and lines[7].split() == ["WIDE_7", "v7", "→", "w7"]


# ------------------------------------------------------------------------- the smaller ones


def test_clean_skips_an_environment_a_running_bisect_holds_and_removes_the_rest() -> None:
    envs = envs_dir()
    used, stale = envs / "used", envs / "stale"
    for d in (used, stale):
        (d / "venv").mkdir(parents=True)
    lease = FileLock(lease_of(used), "this environment", shared=True)  # as Builder.build holds it
    try:
        out = clean_local()
        assert used.is_dir() and not stale.exists()
        assert out["in_use"] == {str(used): f"in use by a running bisect (pid {os.getpid()})"}
    finally:
        lease.release()
    assert clean_local()["in_use"] == {} and not envs.exists()


def test_an_empty_host_is_refused() -> None:
    with pytest.raises(BadInput, match="--host '': an empty host name"):
        target_from_options({"host": [""]})


def test_gpu_names_are_matched_by_their_words_or_refused_when_several_fit() -> None:
    assert gpu_bandwidth("A100 40GB")[0] == pytest.approx(1.555e12)  # not the 80 GB card's 2.039
    assert lookup("NVIDIA A100-SXM4-40GB")[1] == pytest.approx(1.555e12)  # type: ignore[index]
    assert lookup("NVIDIA A100-SXM4-80GB")[1] == pytest.approx(2.039e12)  # type: ignore[index]
    with pytest.raises(BadInput, match="'A100' fits A100 80GB PCIe, A100 80GB, A100 40GB PCIe, A100 40GB"):
        gpu_bandwidth("A100")


def test_trust_on_a_full_disk_names_the_file_and_keeps_the_old_known_hosts(tmp_path: Path) -> None:
    kh = tmp_path / "ssh" / "known_hosts"
    kh.parent.mkdir()
    old = "".join(f"gpu-{i} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{i:040d}\n" for i in range(4))
    kh.write_text(old)
    fresh = tmp_path / "ssh" / "new_known_hosts"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(old) - 10, hard))  # a full disk, for this process
    try:
        with pytest.raises(RecordError) as e:
            append_known_host(str(kh), "gpu-9 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + "9" * 40)
        with pytest.raises(RecordError):
            append_known_host(str(fresh), "gpu-9 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + "9" * 40 * 10)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert str(kh) in str(e.value) and "previous version is kept" in str(e.value)
    assert kh.read_text() == old and not fresh.exists()
    assert sorted(p.name for p in kh.parent.iterdir()) == ["known_hosts"]
    append_known_host(str(kh), "gpu-9 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + "9" * 40)
    assert kh.read_text().startswith(old) and kh.read_text().count("\n") == 5
