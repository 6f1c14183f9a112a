"""The engine group on real git repositories made here: clean, dirty, detached, none, empty."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from snapshot_helpers import git, make_repo

from regdiag.snapshot import engine, packages

# GitPython is an optional backend (absent on the GPU image).
HAS_GITPYTHON = importlib.util.find_spec("git") is not None

needs_gitpython = pytest.mark.skipif(not HAS_GITPYTHON, reason="GitPython is not installed")
BACKENDS = ["cli", pytest.param("gitpython", marks=needs_gitpython)]


def values(group: dict[str, Any]) -> dict[str, Any]:
    return {k: f["value"] for k, f in group["fields"].items() if f["status"] == "ok"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_clean_repo(tmp_path: Path, backend: str) -> None:
    repo = make_repo(tmp_path / "r", remote="https://deploy:gh0sTpw@github.com/org/engine.git")
    g = engine.collect(repo=str(repo), backend=backend)
    assert g["status"] == "ok" and g["backend"] == backend and g["selected_by"] == "--repo"
    v = values(g)
    assert v["commit"] == git(repo, "rev-parse", "HEAD") and len(v["commit"]) == 40
    assert v["branch"] == "main" and v["detached"] is False
    assert v["dirty"] is False and v["changed_files"] == 0 and v["diff_hash"] is None
    assert v["describe"] == "v0.1-1-g" + v["commit"][:7]
    assert v["commit_date"].startswith("2026-01-02T03:04:05")
    assert v["subject"] == "change 1"
    assert v["remote"] == "https://<redacted len=14>@github.com/org/engine.git"
    assert "gh0sTpw" not in json.dumps(g)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dirty_repo_hash_follows_the_diff(tmp_path: Path, backend: str) -> None:
    repo = make_repo(tmp_path / "r")
    (repo / "kernel.py").write_text("VERSION = 99\n")
    (repo / "new_untracked.py").write_text("x = 1\n")
    v1 = values(engine.collect(repo=str(repo), backend=backend))
    assert v1["dirty"] is True and v1["changed_files"] == 2
    assert v1["describe"].endswith("-dirty")
    assert v1["diff_hash"].startswith("sha256:")
    assert values(engine.collect(repo=str(repo), backend=backend))["diff_hash"] == v1["diff_hash"]
    (repo / "kernel.py").write_text("VERSION = 100\n")
    v2 = values(engine.collect(repo=str(repo), backend=backend))
    assert v2["diff_hash"] != v1["diff_hash"] and v2["commit"] == v1["commit"]


@needs_gitpython
def test_backends_agree_field_by_field(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", remote="git@github.com:org/engine.git")
    (repo / "kernel.py").write_text("VERSION = 7\n")
    (repo / "binary.bin").write_bytes(bytes(range(256)))
    git(repo, "add", "binary.bin")
    cli_v = values(engine.collect(repo=str(repo), backend="cli"))
    gp_v = values(engine.collect(repo=str(repo), backend="gitpython"))
    assert cli_v == gp_v


@pytest.mark.parametrize("backend", BACKENDS)
def test_detached_head(tmp_path: Path, backend: str) -> None:
    repo = make_repo(tmp_path / "r")
    first = git(repo, "rev-parse", "HEAD~1")
    git(repo, "checkout", "-q", "--detach", first)
    v = values(engine.collect(repo=str(repo), backend=backend))
    assert v["commit"] == first and v["detached"] is True and v["branch"] is None
    assert v["describe"] == "v0.1"


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_repository_is_one_line_unsupported(tmp_path: Path, backend: str) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    g = engine.collect(repo=str(plain), backend=backend)
    assert g["status"] == "unsupported" and g["fields"] == {}
    assert "not inside a git repository" in g["note"] and "\n" not in g["note"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_repository_without_commits(tmp_path: Path, backend: str) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.py").write_text("a\n")
    g = engine.collect(repo=str(repo), backend=backend)
    assert g["fields"]["commit"]["status"] == "unsupported"
    assert g["fields"]["dirty"] == {"status": "ok", "value": True}


def test_subdirectory_resolves_to_top(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    (repo / "python" / "pkg").mkdir(parents=True)
    v = values(engine.collect(repo=str(repo / "python" / "pkg")))
    assert v["path"] == str(repo)


def test_default_is_the_editable_engine_checkout(tmp_path: Path) -> None:
    """An editable sglang (PEP 610 direct_url.json) wins over the current directory."""
    checkout = make_repo(tmp_path / "sglang")
    (checkout / "python").mkdir()
    site = tmp_path / "site-packages"
    info = site / "sglang-0.5.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.2\n\nlong text\n")
    (info / "direct_url.json").write_text(
        json.dumps({"url": (checkout / "python").as_uri(), "dir_info": {"editable": True}})
    )
    dists = packages.installed([str(site)])
    assert dists["sglang"].version == "0.5.2"
    g = engine.collect(repo=None, dists=dists)
    assert g["selected_by"] == "editable install of sglang"
    assert values(g)["path"] == str(checkout)
    assert packages.source_of(dists["sglang"]) == {"url": (checkout / "python").as_uri(), "editable": True}


def test_git_missing_is_unsupported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "r")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    g = engine.collect(repo=str(repo), backend="cli")
    assert g["status"] == "unsupported" and g["note"] == "git is not installed here"


def test_missing_directory_is_an_error(tmp_path: Path) -> None:
    g = engine.collect(repo=str(tmp_path / "nope"))
    assert g["status"] == "error" and "no such directory" in g["note"]
