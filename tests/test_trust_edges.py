"""Trust at the edges: what a record may set in a launch, a shared REGDIAG_HOME, config.toml read
safely, and readers that a hostile peer file cannot stall or crash."""

from __future__ import annotations

import itertools
import json
import os
import threading
from pathlib import Path

import pytest

from regdiag import config
from regdiag.bisect.factors import Spec, code_from_record, is_setting, load_side
from regdiag.errors import BadInput
from regdiag.files import append_text, atomic_write_text, check_home, set_shared_home
from regdiag.records import RecordError

NOBODY = 65534

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
