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

from regdiag.engine.precheck import check, inspect
from regdiag.engine.presets import ALSO, PRESETS, VERSIONS
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


@pytest.mark.parametrize("preset", sorted(p for p in PRESETS if p not in ALSO))
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


def _extract_packages(wheel: Path, modules: set[str], dest: Path) -> None:
    """Every module of the targets' packages (a reader's field may be built by a helper module)."""
    dirs = {"/".join(m.split(".")[:-1]) + "/" for m in modules}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.endswith(".py") and any(name.startswith(d) and "/" not in name[len(d) :] for d in dirs):
                z.extract(name, dest)


@pytest.mark.tool  # two wheels' packages read and checked: seconds of CPU
@pytest.mark.parametrize("preset", sorted(ALSO))
def test_a_preset_of_several_releases_has_each_target_and_reader_in_one(preset, tmp_path):
    """`sglang` names the spec-v2 worker of 0.5.23 and the v1 worker of 0.5.3 (whichever the server
    imports), `sglang-decode` TpModelWorker in both: each target and each reader's field is in the
    source of at least one named release (read from its wheel), never in none."""
    t = PRESETS[preset]
    ok: dict[tuple[str, str], list[str]] = {}
    for dist, version in [VERSIONS[preset], *ALSO[preset]]:
        d = tmp_path / version
        mods = {x.split(":")[0] for _, x in t.all()} | {r["target"].split(":")[0] for _, r in t.readers()}
        _extract(_wheel(dist, version), mods, d)
        _extract_packages(_wheel(dist, version), mods, d)  # helpers the workers import, for the readers
        for f in inspect(LocalHost(), t.all(), [], {"PYTHONPATH": str(d)}, t.readers()):
            key = (f["target"], f.get("field") or "")
            if f["state"] == "ok":
                assert f["version"] == f"{dist} {version}" and f["file"].startswith(str(d))
                ok.setdefault(key, []).append(version)
            else:
                ok.setdefault(key, [])
    assert [k for k, v in ok.items() if not v] == []


V1 = "sglang.srt.speculative.eagle_worker:EAGLEWorker.forward_batch_generation"
V2 = "sglang.srt.speculative.eagle_worker_v2:EAGLEWorkerV2.forward_batch_generation"


def test_sglang_v1_returns_num_accepted_tokens_not_accept_lens(tmp_path):
    """The 0.5.3 v1 worker's result has no accept_lens (the reader that asked for it read nothing);
    num_accepted_tokens, the batch's accepted drafts, is what the v1 reader divides by len(batch.reqs)."""
    _extract(_wheel("sglang", "0.5.3"), {V1.split(":")[0]}, tmp_path)
    readers = [("accept", {"target": V1, "ret": f}) for f in ("accept_lens", "num_accepted_tokens")]
    readers.append(("accept", {"target": V1, "arg": "batch"}))
    got = {
        f["field"]: f["state"] for f in inspect(LocalHost(), [], [], {"PYTHONPATH": str(tmp_path)}, readers)
    }
    assert got == {"accept_lens": "missing", "num_accepted_tokens": "ok", "batch": "ok"}
    _extract(_wheel("sglang", "0.5.23"), {V2.split(":")[0]}, tmp_path / "v2")
    _extract_packages(_wheel("sglang", "0.5.23"), {V2.split(":")[0]}, tmp_path / "v2")
    v2 = [("accept", {"target": V2, "ret": "accept_lens"})]
    (f,) = inspect(LocalHost(), [], [], {"PYTHONPATH": str(tmp_path / "v2")}, v2)
    assert f["state"] == "ok"


def _text(wheel: Path, prefix: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        return "\n".join(
            z.read(n).decode() for n in z.namelist() if n.startswith(prefix) and n.endswith(".py")
        )


@pytest.mark.parametrize("version", ["0.5.3", "0.5.23"])
def test_the_engine_config_reader_reads_what_sglang_prints(version):
    """The server_args fields regdiag.server.engine_config derives the backends, graphs and all-reduce
    from, and the graph runners' capture lines, as the release's source has them."""
    from regdiag.server.engine_config import _SGL_CAPTURE

    wheel = _wheel("sglang", version)
    fields = _text(wheel, "sglang/srt/server_args.py") + _text(wheel, "sglang/srt/arg_groups/fields/")
    for name in (
        "attention_backend",
        "decode_attention_backend",
        "prefill_attention_backend",
        "speculative_attention_mode",
        "moe_runner_backend",
        "disable_cuda_graph",
        "disable_custom_all_reduce",
        "enable_symm_mem",
        "enable_flashinfer_allreduce_fusion",
        "speculative_algorithm",
        "speculative_num_steps",
        "disable_radix_cache",
    ):
        assert f"    {name}:" in fields, (version, name)
    src = _text(wheel, "sglang/srt/")
    lines = {
        "0.5.3": [
            "Capture cuda graph begin.",
            "Capture draft cuda graph begin.",
            "Capture draft extend cuda graph begin.",
        ],
        "0.5.23": [
            "Capture target verify CUDA graph begin.",
            "Capture draft decode CUDA graph begin.",
            "Capture draft extend CUDA graph begin.",
        ],
    }[version]
    for line in lines:
        assert _SGL_CAPTURE.search(line), line
        stem = line.split(" begin")[0].replace("cuda graph", "").replace("CUDA graph", "").strip()
        assert stem.replace("Capture ", "") in src or "{capture_name}" in src, line
    assert "#cached-token: " in src and (
        "server_args=ServerArgs" in src or "server_args={" in src or "{server_args=}" in src
    )
