"""bisect over package versions: wheels of a small package made here (one version adds real busy work
to verify, one is a broken wheel), installed pinned into real venvs layered on this interpreter
from --find-links (no network), then the versions in between searched."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from bisect_helpers import make_wheel, write_probe

from regdiag.bisect import Request, run_bisect

pytestmark = pytest.mark.slow

VERSIONS = {"1.0": {}, "1.1": {}, "1.2": {"verify": 4.0}, "1.3": {"verify": 4.0}, "2.0": {"verify": 4.0}}


def test_the_version_that_slows_verify_with_a_broken_one_in_between(tmp_path) -> None:
    wheels = tmp_path / "wheels"
    for v, extra in VERSIONS.items():
        make_wheel(wheels, "slowpkg", v, extra, corrupt=(v == "1.1"))
    probe = write_probe(tmp_path)
    req = Request(
        good="slowpkg==1.0 OMP_NUM_THREADS=1",
        bad="slowpkg==2.0 OMP_NUM_THREADS=2",
        command=f"python {probe}",
        find_links=str(wheels),
        installer="pip",
        journal=str(tmp_path / "journal.jsonl"),
        launches=2,
        max_launches=6,
    )
    r = run_bisect(req)
    assert r["verdict"] == "CULPRIT", r["statement"]
    [c] = r["culprits"]
    [f] = c["factors"]
    # 1.1 cannot be installed, so the change is "1.1 or 1.2": reported as the range 1.0 -> 1.2
    assert (f["kind"], f["name"], f["good"], f["bad"]) == ("package", "slowpkg", "1.0", "1.2")
    assert not c["exact"]
    [skip] = c["skipped"]
    assert skip["point"] == "slowpkg==1.1" and "installing slowpkg==1.1 failed" in skip["reason"]
    assert c["ms"]["verify"] == pytest.approx(4.0, abs=0.4)

    # The venvs are real: layered on this interpreter, holding exactly the pinned version.
    journal = [json.loads(x) for x in Path(r["journal"]).read_text().splitlines()]
    built = {
        e["values"]["package:slowpkg"]["value"]: e["env"]
        for e in journal
        if e["type"] == "env" and e["status"] == "ok"
    }
    assert set(built) == {"1.0", "1.2", "2.0"}
    home = Path(os.environ["REGDIAG_HOME"])
    for version, key in built.items():
        py = home / "envs" / key / "venv" / "bin" / "python"
        out = subprocess.run(
            [str(py), "-c", "import slowpkg, numpy, importlib.metadata as m; print(m.version('slowpkg'))"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == version  # and numpy comes from the base interpreter
    assert r["cost"]["environments_built"] == 3

    # A second bisect with the same inputs reuses the cached environments (content hash).
    req2 = Request(**{**req.__dict__, "journal": str(tmp_path / "again.jsonl")})
    r2 = run_bisect(req2)
    assert r2["cost"]["environments_built"] == 0
    assert r2["culprits"][0]["factors"][0]["bad"] == "1.2"


VANISH = r"""
import os, runpy, shutil, sys
probe, mark = sys.argv[1], sys.argv[2]
sys.argv = [probe]
runpy.run_path(probe, run_name="__main__")
# After the first launch of the first point to get here, its venv is removed, as `regdiag clean` beside
# this bisect would: the next launch there cannot start.
if os.environ.get("REGDIAG_LAUNCH_INDEX") == "0" and os.environ.get("VIRTUAL_ENV") and not os.path.exists(mark):
    open(mark, "w").close()
    shutil.rmtree(os.environ["VIRTUAL_ENV"])
"""


def test_an_environment_removed_while_in_use_is_built_again(cli, tmp_path) -> None:
    wheels = tmp_path / "wheels"
    for v, extra in {"1.0": {}, "2.0": {"verify": 4.0}}.items():
        make_wheel(wheels, "slowpkg", v, extra)
    probe = write_probe(tmp_path)
    vanish = tmp_path / "vanish.py"
    vanish.write_text(VANISH, encoding="utf-8")
    journal = tmp_path / "j.jsonl"
    r = cli("bisect", "--good", "slowpkg==1.0", "--bad", "slowpkg==2.0", "--find-links", str(wheels),
            "--command", f"python {vanish} {probe} {tmp_path / 'removed'}", "--launches", "2",
            "--journal", str(journal), "--json", timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "removed").exists()  # it did remove one
    out = json.loads(r.stdout)
    [c] = out["culprits"]
    assert [(f["name"], f["good"], f["bad"]) for f in c["factors"]] == [("slowpkg", "1.0", "2.0")]
    assert out["cost"]["environments_built"] == 3, r.stderr  # the two endpoints, and the removed one again
    # one note, whatever the width it wraps at (a long tmp path moves its words to the next lines)
    assert r.stderr.count("\nnote ") + r.stderr.startswith("note ") == 1, r.stderr[-3000:]
    assert "was removed while in use" in " ".join(r.stderr.split()), r.stderr[-3000:]
    # No failed launch is evidence: every journalled launch ran, in an environment that exists.
    launches = [json.loads(x) for x in journal.read_text().splitlines() if '"type": "launch"' in x]
    assert launches and all(la["status"] == "ok" for la in launches)
