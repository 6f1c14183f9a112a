"""A record nested too deep or holding too much text is refused in one line at once, before any reader
walks it (the scrubber, compare's and explain's views, the HTML report)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import ROOT

from regdiag.errors import BadInput
from regdiag.importers import load_run
from regdiag.records import MAX_DEPTH, MAX_RECORD_TEXT, load_record

BASELINE = ROOT / "baselines" / "h200-kimi-tp1-baseline.json"


def _with_probe(tmp_path: Path, key: str, value: object) -> Path:
    run = json.loads(BASELINE.read_text())
    run["probe"][key] = value
    path = tmp_path / f"{key}.json"
    path.write_text(json.dumps(run))
    return path


def test_a_config_nested_500_deep_is_one_line_not_a_recursion_error(tmp_path: Path) -> None:
    deep: dict[str, object] = {}
    cur = deep
    for _ in range(500):
        cur["k"] = cur = {}
    path = _with_probe(tmp_path, "config", deep)
    with pytest.raises(BadInput) as e:
        load_run(path)  # what compare, explain and the HTML report read a run with
    assert (
        str(e.value)
        == f"{path}: JSON nested more than {MAX_DEPTH} levels deep (a regdiag record nests a few)"
    )
    assert load_record(BASELINE)["probe"]["config"] is not None  # a real record stays readable


def test_a_label_past_the_text_cap_is_refused_within_seconds(tmp_path: Path) -> None:
    path = _with_probe(tmp_path, "labels", {"big": "x" * (MAX_RECORD_TEXT + 1)})
    t0 = time.monotonic()
    with pytest.raises(BadInput) as e:
        load_run(path)
    assert time.monotonic() - t0 < 4.0  # scrubbing it took 12 s (0.7 s a MiB)
    line = str(e.value)
    assert "\n" not in line and "probe.labels.big" in line and "16 MiB of text" in line, line
