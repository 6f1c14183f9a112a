"""The packages group: versions in `fields`, the rest in `metadata`, and /1 records read as before."""

from __future__ import annotations

import copy
import json
from typing import Any

from snapshot_v1 import GOLDEN, answers, v1_pair

from regdiag.records import SNAPSHOT_SCHEMA
from regdiag.snapshot import collect, packages


def _as_v2(snap: dict[str, Any]) -> dict[str, Any]:
    """A /1 snapshot written in the /2 layout: the metadata moved out of `fields`."""
    out = copy.deepcopy(snap)
    out["schema"] = SNAPSHOT_SCHEMA
    group = out["groups"]["packages"]
    fields = group["fields"]
    group["metadata"] = {n: fields.pop(n) for n in packages.METADATA if n in fields}
    return out


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


def test_old_layout_gives_the_answers_it_gave_before() -> None:
    # JSON round trip: the golden file has lists where the answers have tuples.
    assert json.loads(json.dumps(answers(*v1_pair()))) == _golden()


def test_both_layouts_give_the_same_answers() -> None:
    good, bad = v1_pair()
    assert json.loads(json.dumps(answers(_as_v2(good), _as_v2(bad)))) == _golden()
    mixed = answers(good, _as_v2(bad))  # an old snapshot against a new one
    assert json.loads(json.dumps(mixed)) == _golden()


def test_collect_keeps_versions_apart_from_metadata() -> None:
    snap = collect(timeout_s=5.0, all_packages=True)
    assert snap["schema"] == SNAPSHOT_SCHEMA == "regdiag.snapshot/2"
    group = snap["groups"]["packages"]
    assert list(group["fields"]) == list(packages.KEY_PACKAGES)
    assert list(group["metadata"]) == list(packages.METADATA)
    assert all(f["value"] is None or isinstance(f["value"], str) for f in group["fields"].values())
    versions, metadata = packages.split(group)
    assert versions == group["fields"] and metadata == group["metadata"]
    installed = {n: d.version for n, d in packages.installed().items()}
    expect = {**dict.fromkeys(packages.KEY_PACKAGES), **installed}
    expect.pop(packages.SELF, None)
    assert packages.versions_of(snap) == expect


def test_old_layout_split_by_name() -> None:
    good, _ = v1_pair()
    group = good["groups"]["packages"]
    versions, metadata = packages.split(group)
    assert list(metadata) == ["regdiag", "sources", "count", "hash", "nccl", "nccl_libraries", "all"]
    assert set(versions) == set(packages.KEY_PACKAGES)
    assert packages.metadata_value(group, "count") == 197
    assert packages.metadata_value(group, "torch") is None  # a version is not metadata


def test_unreadable_groups_have_no_versions() -> None:
    failed = {"status": "timeout", "fields": {}, "note": "packages did not answer within 10 s"}
    for group in (failed, None, {"fields": "garbage"}, {"fields": {}, "metadata": {"count": "x"}}):
        assert packages.split(group)[0] == {}
        assert packages.versions_of({"groups": {"packages": group}}) == {}
    error = {"status": "error", "value": None, "error": "x"}
    snap = {
        "groups": {"packages": {"fields": {"torch": error, "triton": {"status": "ok", "value": "3.6.0"}}}}
    }
    assert packages.versions_of(snap) == {"triton": "3.6.0"}


def test_malformed_metadata_is_refused_in_one_line(cli, tmp_path) -> None:
    good, _ = v1_pair()
    snap = _as_v2(good)
    snap["groups"]["packages"]["metadata"]["nccl"] = "2.28.9"
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snap))
    out = cli("snapshot", "--from", str(path))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == f"regdiag: error: {path}: snapshot group 'packages' has malformed metadata"
