"""Record files that cannot be used: exit 2 and exactly one line naming the file, never a traceback.

Each case runs the real CLI (`python -m regdiag ...`) as a user would, on a real file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from snapshot_helpers import BASELINES

from regdiag.records import RecordError, dumps_record, load_record, save_record

GOOD = BASELINES / "h200-snapshot.json"


def _good_text() -> str:
    return GOOD.read_text(encoding="utf-8")


CASES: dict[str, tuple[bytes | None, str]] = {
    # name: (file content, or None for "no such file"; words the one line must contain)
    "malformed": (b'{"schema": "regdiag.snapshot/1", "groups": {,}}', "malformed JSON at line 1"),
    # cut after a complete value, as a killed writer without atomic rename leaves it
    "truncated": (
        _good_text()[: _good_text().index("\n", len(_good_text()) // 2)].encode(),
        "truncated JSON",
    ),
    "empty": (b"", "file is empty"),
    "blank": (b"  \n\n", "file is empty"),
    "future": (json.dumps({"schema": "regdiag.snapshot/99", "groups": {}}).encode(), "upgrade regdiag"),
    "wrong-kind": (json.dumps({"schema": "regdiag.journal/1"}).encode(), "journal"),
    "other-tool": (json.dumps({"name": "left-pad", "version": "1.3.0"}).encode(), 'no "schema" field'),
    "array": (b"[1, 2, 3]", "top level is list"),
    "no-groups": (json.dumps({"schema": "regdiag.snapshot/1"}).encode(), 'without a "groups" object'),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "not UTF-8"),
    "run-without-snapshot": (
        json.dumps({"schema": "regdiag.run/1", "launches": [], "snapshot_before": None}).encode(),
        "no snapshot_before",
    ),
    "missing": (None, "no such file"),
}


def _one_line(stderr: str, path: Path, words: str) -> None:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("regdiag: error: "), lines[0]
    assert str(path) in lines[0] and words in lines[0], lines[0]
    assert "Traceback" not in stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_record_files(cli, tmp_path: Path, case: str) -> None:
    content, words = CASES[case]
    path = tmp_path / f"{case}.json"
    if content is not None:
        path.write_bytes(content)
    # Alternate the two commands that read snapshot files, so both paths are covered.
    if sorted(CASES).index(case) % 2:
        out = cli("diff", str(GOOD), str(path))
    else:
        out = cli("snapshot", "--from", str(path))
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stdout == ""
    _one_line(out.stderr, path, words)


def test_file_cut_inside_a_string_is_called_truncated(cli, tmp_path: Path) -> None:
    text = _good_text()
    cut = text.index('"mitigations') + 20  # inside the kernel command line string
    path = tmp_path / "cut.json"
    path.write_text(text[:cut])
    out = cli("snapshot", "--from", str(path))
    assert out.returncode == 2
    _one_line(out.stderr, path, "truncated JSON")


def test_directory_instead_of_a_file(cli, tmp_path: Path) -> None:
    out = cli("diff", str(tmp_path), str(GOOD))
    assert out.returncode == 2 and out.stdout == ""
    _one_line(out.stderr, tmp_path, "is a directory")


def test_bad_options_are_one_line_too(cli, tmp_path: Path) -> None:
    out = cli("snapshot", "--repo", str(tmp_path / "nowhere"))
    assert out.returncode == 2
    _one_line(out.stderr, tmp_path / "nowhere", "no such directory")
    mixed = cli("snapshot", "--from", str(GOOD), "--repo", str(tmp_path))
    assert mixed.returncode == 2 and mixed.stderr.startswith("regdiag: error: --from")


def test_unknown_fields_survive_a_round_trip(tmp_path: Path) -> None:
    rec = load_record(GOOD, expect="snapshot")
    rec["added_by_a_newer_minor_version"] = {"x": [1, 2]}
    rec["groups"]["gpu"]["future_note"] = "kept"
    save_record(tmp_path / "r.json", rec)
    again = load_record(tmp_path / "r.json", expect="snapshot")
    assert again == rec
    assert dumps_record(again) == dumps_record(rec)


def test_writes_are_atomic_and_leave_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "snap.json"
    target.write_text("old content")
    rec = load_record(GOOD)
    save_record(target, rec)
    assert load_record(target) == rec
    assert [p.name for p in tmp_path.iterdir()] == ["snap.json"]
    with pytest.raises(RecordError):
        save_record(tmp_path / "bad.json", {"schema": "regdiag.snapshot/9", "groups": {}})
    assert not (tmp_path / "bad.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["snap.json"]


def test_cli_output_file_is_a_valid_record(cli, tmp_path: Path) -> None:
    # A missing directory outside REGDIAG_HOME is not made (as root it could be anywhere): one line, exit 2.
    refused = cli("snapshot", "--json", "-o", str(tmp_path / "deep" / "snap.json"))
    assert refused.returncode == 2 and "does not exist" in refused.stderr and not (tmp_path / "deep").exists()
    out_path = tmp_path / "snap.json"
    out = cli("snapshot", "--json", "-o", str(out_path))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == load_record(out_path, expect="snapshot")
    assert re.fullmatch(r"regdiag\.snapshot/2", json.loads(out.stdout)["schema"])
