"""Every target of the engine presets exists in the released version docs/engine.md names for it,
read from that version's wheel (pip download, no dependencies) and never imported. The wheels are
cached in REGDIAG_TEST_WHEELS (default ~/.cache/regdiag-test-wheels). The four wheels are ~400 MB
(vLLM's alone 336 MB), so they are fetched only with REGDIAG_TEST_DOWNLOAD=1 (or when already cached);
otherwise, or without a package index, the test is skipped, saying so."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from regdiag.engine.precheck import check
from regdiag.engine.presets import PRESETS, VERSIONS
from regdiag.hosts.local import LocalHost

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("REGDIAG_TEST_WHEELS", Path.home() / ".cache" / "regdiag-test-wheels"))
# Inherited on purpose: PreTrainedModel takes __call__ from torch.nn.Module (the hook resolves it at
# run time; the transformers preset is exercised for real in test_engine_probe.py).
INHERITED = {"transformers.modeling_utils:PreTrainedModel.__call__"}


def _wheel(dist: str, version: str) -> Path:
    d = CACHE / f"{dist}-{version}"
    found = sorted(d.glob("*.whl")) if d.is_dir() else []
    if not found and os.environ.get("REGDIAG_TEST_DOWNLOAD") != "1":
        pytest.skip(f"{dist}=={version} not cached in {CACHE}; REGDIAG_TEST_DOWNLOAD=1 fetches it (large)")
    if not found:
        r = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(d), f"{dist}=={version}"],
            capture_output=True,
            text=True,
        )
        found = sorted(d.glob("*.whl"))
        if r.returncode != 0 or not found:
            pytest.skip(f"cannot download {dist}=={version}: {r.stderr.strip().splitlines()[-1:]}")
    return found[0]


def _extract(wheel: Path, modules: set[str], dest: Path) -> None:
    """The module files of the targets, their packages' __init__.py and the .dist-info: enough for the
    source check to find them and name the version."""
    want = set()
    for mod in modules:
        parts = mod.split(".")
        want |= {"/".join(parts[:i]) + "/__init__.py" for i in range(1, len(parts) + 1)}
        want.add("/".join(parts) + ".py")
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name in want or ".dist-info/" in name:
                z.extract(name, dest)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_targets_exist_in_the_named_release(preset, tmp_path):
    dist, version = VERSIONS[preset]
    targets = PRESETS[preset].all()
    _extract(_wheel(dist, version), {t.split(":")[0] for _, t in targets}, tmp_path)
    found = check(LocalHost(), targets, [], env={"PYTHONPATH": str(tmp_path)})
    assert len(found) == len(targets)
    for f in found:
        assert f["version"] == f"{dist} {version}"
        assert f["file"].startswith(str(tmp_path))  # read from the wheel, not from an installed copy
        assert f["state"] == ("unknown" if f["target"] in INHERITED else "ok"), f


def test_check_refuses_a_target_the_release_lacks(tmp_path):
    # SGLang 0.5.23 has only the v2 EAGLE worker: the v1 preset's module is gone there.
    targets = PRESETS["sglang-eagle-v1"].all()
    _extract(_wheel("sglang", "0.5.23"), {t.split(":")[0] for _, t in targets}, tmp_path)
    with pytest.raises(Exception) as e:
        check(LocalHost(), targets, [], env={"PYTHONPATH": str(tmp_path)})
    assert "module sglang.srt.speculative.eagle_worker is not installed" in str(e.value)


def test_docs_name_each_preset_version():
    text = (ROOT / "docs" / "engine.md").read_text()
    for preset, (dist, version) in VERSIONS.items():
        assert f"`{preset}`" in text and f"{dist} {version}" in text, preset
