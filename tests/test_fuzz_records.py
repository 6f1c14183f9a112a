"""Fuzz the readers: any mutation of a real run record or bisect journal is either refused in one line
(RecordError / BadInput) or read into a result that is finite, valid JSON. Never another exception.

hypothesis drives the mutations (a value anywhere in the record replaced by a JSON value of another
type, NaN, infinity, a negative, zero or huge number, a deep list...); the readers are the library
functions the CLI calls, so that hundreds of cases run in seconds. tests/test_hostile_input.py covers
the same boundary through real processes.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

from conftest import ROOT
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from regdiag.errors import RegdiagError
from regdiag.records import RecordError, loads_record

RUN = json.loads((ROOT / "baselines" / "h200-kimi-tp1-eagle.json").read_text())
# A small copy: a few cycles per launch keep each example fast, the structure stays the real one.
for _la in RUN["launches"]:
    for _key in ("samples", "naive_samples", "bare_samples"):
        if isinstance(_la.get(_key), dict):
            _la[_key] = {k: v[:12] for k, v in _la[_key].items()}
RUN_TEXT = json.dumps(RUN)

ODD_VALUES = st.one_of(
    st.sampled_from([float("nan"), float("inf"), float("-inf"), -1.0, 0.0, 0, 1e300, -1e-300, True, None]),
    st.sampled_from(["", "nan", "fast", "cycle", "regdiag.run/1", "regdiag.run/2"]),
    # issue 27's shapes: words no field takes, text that is not text, numbers no float64 holds
    st.sampled_from(["banana", "failed", "ok", "error", "sideways", "higher", "\ud800", "a\nb", "m\x00s"]),
    st.sampled_from([5e-324, 1e-300, 2.2e-308, 10**400, -(10**400), 10**308, 2**64]),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(["cycle", "x", "samples"]), st.integers(-1, 1), max_size=2),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.recursive(st.just(1.0), lambda c: st.lists(c, max_size=2), max_leaves=60),
)


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in the record a value can be replaced (sampled: the record is large)."""
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            out += _paths(v, (*prefix, i))
    return out


PATHS = [p for p in _paths(RUN) if p and not (p[0] in ("snapshot_before", "snapshot_after") and len(p) > 3)]


def _set(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    obj[path[0]] = _set(obj[path[0]], path[1:], value)
    return obj


def _finite_json(obj: Any) -> None:
    json.dumps(obj, allow_nan=False, default=str)  # raises on NaN / inf anywhere in the result


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(st.tuples(st.sampled_from(PATHS), ODD_VALUES), min_size=1, max_size=3),
)
def test_a_mutated_run_is_refused_or_read_into_finite_results(edits: list[tuple[tuple, Any]]) -> None:
    from regdiag.compare import compare_runs
    from regdiag.explain import explain_run

    rec = copy.deepcopy(RUN)
    for path, value in edits:
        try:
            rec = _set(rec, path, copy.deepcopy(value))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit changed the shape above this path
    text = json.dumps(rec, allow_nan=True)
    try:
        run = loads_record(text, "fuzz.json", "run")
    except RecordError:
        event("refused when read")
        return
    for call in (
        lambda: compare_runs(RUN, run, n_boot=200).to_dict(),
        lambda: compare_runs(run, RUN, n_boot=200).to_dict(),
        lambda: explain_run(run).to_dict(),
        lambda: explain_run(RUN, run).to_dict(),
    ):
        try:
            _finite_json(call())
            event("read and used")
        except RegdiagError:
            event("read, then refused by compare/explain")


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    line=st.one_of(
        ODD_VALUES,
        st.fixed_dictionaries(
            {"type": st.sampled_from(["launch", "env", "decision", "end", "start", "x"])},
            optional={
                "point": st.one_of(st.just("p"), ODD_VALUES),
                "index": st.one_of(st.integers(-2, 3), ODD_VALUES),
                "status": st.sampled_from(["ok", "error", "skip"]),
                "medians": st.one_of(st.dictionaries(st.just("cycle"), ODD_VALUES, max_size=1), ODD_VALUES),
                "duration_s": ODD_VALUES,
                "cycles": ODD_VALUES,
                "build_s": ODD_VALUES,
                "what": ODD_VALUES,
                "verdict": ODD_VALUES,
            },
        ),
    )
)
def test_a_damaged_journal_line_is_refused_naming_its_line_or_is_usable(line: Any, tmp_path_factory) -> None:
    from regdiag.bisect.journal import SCHEMA, Journal
    from regdiag.bisect.measure import Launch

    inputs = {"factors": [], "command": "x"}
    from regdiag.bisect.journal import inputs_hash

    path: Path = tmp_path_factory.mktemp("j") / "j.jsonl"
    head = {"type": "start", "schema": SCHEMA, "inputs": inputs, "inputs_hash": inputs_hash(inputs)}
    path.write_text(json.dumps(head) + "\n" + json.dumps(line, allow_nan=True) + "\n")
    try:
        j = Journal(path, inputs, resume=True)
    except RegdiagError as e:
        event("journal refused")
        assert "line 2" in str(e) or "not a JSON object" in str(e) or "valid JSON" in str(e), str(e)
        return
    event("journal resumed")
    for launches in j.launches.values():
        for la in launches:
            assert isinstance(la, Launch)
            assert all(math.isfinite(v) and v > 0 for v in la.medians.values())
    assert math.isfinite(j.measured_s)
