"""A package bisect run the way engines are installed: from a virtual environment that holds torch.

The user's interpreter is a venv (the one the tests run in, as README's commands make it; otherwise one
made here with torch from this machine's disk). Each bisect environment is an overlay on *that*
interpreter: torch and everything else of the user's stay importable, the pinned versions shadow the
user's, and the measured processes report what they loaded. Wheels made here stand for kernel
libraries: `kernpkg` is loaded into every process by its .pth (as packages that patch an engine at
start-up are) and its 2.0 adds busy work to verify; `otherpkg` is loaded alike and harmless;
`flashinfer_python` is installed but never imported, so no measurement can see it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from bisect_helpers import _record_line
from conftest import run_cli
from sshd_helpers import Sshd, sshd  # noqa: F401 - sshd is a fixture

from regdiag.report.bisect import to_markdown

pytestmark = pytest.mark.slow

SLOW_MS = 15.0


def make_loaded_wheel(dist: Path, name: str, version: str, slow: str | None = None, pth: bool = True) -> Path:
    """A real wheel whose package is imported at start-up by its own .pth file (when `pth`), and which
    then asks the probe for `slow` extra work (REGDIAG_PROBE_SLOW, the probe kit's planting hook)."""
    dist.mkdir(parents=True, exist_ok=True)
    path = dist / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    init = "import os\n" + (f"os.environ['REGDIAG_PROBE_SLOW'] = {slow!r}\n" if slow else "")
    files = {
        f"{name}/__init__.py": init.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: bisect-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if pth:
        files[f"{name}-boot.pth"] = f"import {name}\n".encode()
    record = [_record_line(a, d) for a, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w") as z:
        for arc, data in files.items():
            z.writestr(arc, data)
    return path


def unzip_into(wheel: Path, site: Path) -> None:
    """Install a pure wheel by hand (what pip does for one): for a venv that has no pip of its own."""
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)


@pytest.fixture(scope="module")
def user_venv(tmp_path_factory) -> str:
    """The user's interpreter: a venv with torch. The one running the tests when it is a venv that does
    not see its base's packages only (README's layout); else one made here."""
    if sys.prefix != sys.base_prefix:
        return sys.executable
    venv = tmp_path_factory.mktemp("ml-env")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "-q", "torch==2.13.0"], check=True)
    return py


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("wheels")
    for v in ("1.0", "2.0"):
        make_loaded_wheel(d, "kernpkg", v, f"verify:{SLOW_MS}" if v == "2.0" else None)
        make_loaded_wheel(d, "otherpkg", v)
        make_loaded_wheel(d, "flashinfer_python", v, pth=False)
    return d


def test_the_base_interpreter_alone_has_no_torch(user_venv) -> None:
    """The case this file is about: torch lives in the venv, not under it (a --system-site-packages
    venv of the base would lose it)."""
    base = subprocess.run(
        [user_venv, "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    here = subprocess.run([user_venv, "-c", "import torch"], capture_output=True)
    assert here.returncode == 0
    base_python = Path(base) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    if base_python.exists():
        there = subprocess.run([str(base_python), "-c", "import torch"], capture_output=True)
        if there.returncode == 0:
            pytest.skip("this machine's base interpreter has torch too: the venv case cannot be told apart")


def _venv_bisect(user_venv: str, wheels: Path, journal: Path, good: str, bad: str):
    """A bisect of the tiny spec-decode probe over package specs, layered on the user's venv."""
    return run_cli(
        "bisect", "--python", user_venv, "--find-links", str(wheels), "--installer", "pip",
        "--good", good, "--bad", bad,
        "--probe", "spec-decode", "--metric", "verify", "--launches", "2", "--max-launches", "4",
        "--journal", str(journal), "--json", "--", "--preset", "tiny", "--cycles", "8",
        timeout=900,
    )  # fmt: skip


def test_package_bisect_from_a_venv_names_the_version(user_venv, wheels, tmp_path) -> None:
    journal = tmp_path / "journal.jsonl"
    r = _venv_bisect(user_venv, wheels, journal, "kernpkg==1.0 otherpkg==1.0", "kernpkg==2.0 otherpkg==2.0")
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    [c] = rep["culprits"]
    assert [(f["name"], f["good"], f["bad"]) for f in c["factors"]] == [("kernpkg", "1.0", "2.0")]
    # the planted busy work: a loaded CPU stretches it (24 ms seen at load 8), never shrinks it much
    assert SLOW_MS * 0.5 <= c["ms"]["verify"] <= SLOW_MS * 3
    lines = [json.loads(x) for x in journal.read_text().splitlines() if x.strip()]
    launches = [e for e in lines if e.get("type") == "launch" and e["status"] == "ok"]
    assert launches and not [e for e in lines if e.get("type") == "env" and e["status"] == "skip"]
    # every launch said what it loaded: torch from the user's venv, the pinned packages from the overlay
    user_site = subprocess.run(
        [user_venv, "-c", "import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    envs = Path(os.environ["REGDIAG_HOME"]) / "envs"
    for la in launches:
        by_name = {d["name"]: d for d in la["loaded"]}
        assert os.path.realpath(by_name["torch"]["path"]) == os.path.realpath(user_site)
        assert by_name["kernpkg"]["path"].startswith(str(envs.resolve()))
        assert by_name["kernpkg"]["version"] in ("1.0", "2.0")


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_an_overlay_shadows_the_users_version_and_keeps_the_rest(
    user_venv, wheels, tmp_path, installer
) -> None:
    """What importlib.metadata and import say inside a built environment, with the user's venv holding
    another version of the pinned package (installed into a venv of our own, not the user's); made
    with pip and with uv (a test dependency, on the venv's PATH)."""
    import shutil

    from regdiag.bisect.envs import Builder

    if installer == "uv" and shutil.which("uv") is None:
        pytest.skip("uv is not on PATH (pip install -e '.[test]' installs it)")

    home = tmp_path / "ml-env"
    subprocess.run([user_venv, "-m", "venv", "--without-pip", str(home)], check=True)
    py = str(home / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    unzip_into(wheels / "kernpkg-1.0-py3-none-any.whl", Path(site))
    # the user's venv sees the test venv's torch the way a user's own venv would hold it: a .pth of its own
    torch_site = subprocess.run([user_venv, "-c", "import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))"],
                                capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (Path(site) / "torch-home.pth").write_text(torch_site + "\n")
    b = Builder(base_python=py, find_links=str(wheels), installer=installer, root=tmp_path / "envs")
    assert b.installs({"kernpkg": "2.0"}) == {"kernpkg": "2.0"}
    assert b.installs({"kernpkg": "1.0"}) == {}
    built = b.build({"kernpkg": "2.0"}, None)
    out = subprocess.run(
        [built.python, "-c", "import importlib.metadata as m, kernpkg, torch, sys; "
         "print(m.version('kernpkg'), kernpkg.__file__.startswith(sys.prefix), torch.__version__)"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    version, in_overlay, torch_version = out.stdout.split()
    assert (version, in_overlay) == ("2.0", "True") and torch_version.startswith("2.")
    # the user's copy is untouched
    user = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('kernpkg'))"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert user == "1.0"


def test_a_package_the_probe_never_loads_is_cleared_and_the_culprit_named(
    user_venv, wheels, tmp_path
) -> None:
    """The P/six case: the probe loads kernpkg (the culprit) and never flashinfer_python; the bisect
    clears the second without a launch of its own and names the first."""
    journal = tmp_path / "journal.jsonl"
    good, bad = "kernpkg==1.0 flashinfer_python==1.0", "kernpkg==2.0 flashinfer_python==2.0"
    r = _venv_bisect(user_venv, wheels, journal, good, bad)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    [c] = rep["culprits"]
    assert [f["name"] for f in c["factors"]] == ["kernpkg"]
    [cl] = rep["cleared"]
    assert cl["factor"]["name"] == "flashinfer-python"
    assert cl["why"] == "flashinfer-python 1.0 -> 2.0: cleared, never loaded by probe spec-decode"
    lines = [json.loads(x) for x in journal.read_text().splitlines() if x.strip()]
    # no point of the search but the bad endpoint has flashinfer_python at 2.0: it got no launch of its own
    envs = [e for e in lines if e.get("type") == "env"]
    assert {e["label"] for e in envs if e["values"]["package:flashinfer-python"]["value"] == "2.0"} == {"bad"}
    assert "- flashinfer-python 1.0 -> 2.0: cleared, never loaded by probe spec-decode" in to_markdown(rep)


def test_only_packages_the_probe_never_loads_are_refused_before_any_launch(
    user_venv, wheels, tmp_path
) -> None:
    journal = tmp_path / "journal.jsonl"
    r = run_cli(
        "bisect", "--python", user_venv, "--find-links", str(wheels), "--installer", "pip",
        "--good", "flashinfer_python==1.0", "--bad", "flashinfer_python==2.0",
        "--probe", "spec-decode", "--journal", str(journal), "--", "--preset", "tiny",
        timeout=600,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    [line] = [ln for ln in r.stderr.splitlines() if ln.startswith("regdiag: error")]
    assert "probe spec-decode never loads flashinfer-python" in line and "--allow-unloaded" in line
    lines = [json.loads(x) for x in journal.read_text().splitlines() if x.strip()]
    assert not [e for e in lines if e.get("type") == "launch"]


PROBE_IMPORTING = """\
import json, sys, time
import basepkg  # the user's environment: without it this is not the user's engine
import slowpkg
print(json.dumps({"type": "header", "protocol": 1, "probe": "venv-probe", "units": {"verify": "ms"}}))
for i in range(6):
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1000 < 2.0 + slowpkg.EXTRA.get("verify", 0.0):
        pass
    print(json.dumps({"type": "cycle", "i": i, "t": {"verify": (time.perf_counter() - t0) * 1000, "cycle": 1.0}}))
print(json.dumps({"type": "footer", "cycles": 6}))
"""


@pytest.mark.ssh
def test_package_bisect_over_ssh_layers_on_the_hosts_venv(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    """Over the real sshd, the host's interpreter a venv holding a package the probe imports (as an
    engine imports torch): each environment built there must keep it."""
    from bisect_helpers import make_wheel

    user = sshd.shell_users.get("zsh")
    if user is None or not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs root (a zsh login user) and /usr/bin/python3")
    home = sshd.dir / "home-zsh"
    work = home / "venv-case"
    try:
        venv = work / "ml-env"
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
                       check=True)  # fmt: skip
        site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        unzip_into(make_wheel(tmp_path / "base", "basepkg", "1.0", {}), Path(site))
        wheels = work / "wheels"
        # 20 ms planted: large against a loaded box's launch-to-launch noise (several ms here)
        for v, extra in (("1.0", {}), ("1.1", {}), ("2.0", {"verify": 20.0})):
            make_wheel(wheels, "slowpkg", v, extra)
        probe = work / "probe.py"
        probe.write_text(PROBE_IMPORTING, encoding="utf-8")
        subprocess.run(["chown", "-R", f"{user}:{user}", str(work)], check=True)
        cfg = sshd.write_config(tmp_path / "ssh_config", user=user)
        r = run_cli(
            "bisect", "--good", "slowpkg==1.0", "--bad", "slowpkg==2.0", "--metric", "verify",
            "--command", f"{{python}} {probe}", "--find-links", str(wheels), "--installer", "pip",
            "--launches", "2", "--max-launches", "6", "--journal", str(tmp_path / "j.jsonl"), "--json",
            "--host", "regdiag-test", "--python", str(venv / "bin" / "python"), "--ssh-config", str(cfg),
            timeout=600,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        rep = json.loads(r.stdout)
        [c] = rep["culprits"]
        journal = (tmp_path / "j.jsonl").read_text()
        assert [(f["name"], f["good"], f["bad"]) for f in c["factors"]] == [("slowpkg", "1.1", "2.0")], (
            journal[-4000:]
        )
        assert c["ms"]["verify"] == pytest.approx(20.0, rel=0.5)
    finally:
        subprocess.run(["rm", "-rf", str(work), str(home / ".cache")], check=False)


def test_two_venvs_on_one_base_get_two_overlays(user_venv, wheels, tmp_path) -> None:
    """Both venvs' pythons link to one base binary; each overlay is layered on its own venv."""
    from regdiag.bisect.envs import Builder

    pys = []
    for name in ("env-a", "env-b"):
        subprocess.run([user_venv, "-m", "venv", "--without-pip", str(tmp_path / name)], check=True)
        pys.append(str(tmp_path / name / "bin" / "python"))
    keys = {
        Builder(base_python=py, find_links=str(wheels), root=tmp_path / "envs").key({"kernpkg": "2.0"}, None)
        for py in pys
    }
    assert len(keys) == 2
