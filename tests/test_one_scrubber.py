"""Every field through one scrubber (issue 42, item 3): a planted token in every string of every record
kind and output the schemas describe (docs/schemas, regdiag/schemas.py), and in the fields that once
kept it verbatim: a --command's header config and labels, its footer and teardown, hyperfine's command
and parameters, nsys range names, vllm-bench labels, a bisect journal's --good/--bad."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path
from typing import Any

from conftest import ROOT

from regdiag import importers
from regdiag.bisect.journal import Journal
from regdiag.records import RUN, load_record
from regdiag.runs import RunWriter, new_run
from regdiag.snapshot.redact import scrub_record

SCHEMAS = sorted((ROOT / "docs" / "schemas").glob("*.schema.json"))


def token(rng: random.Random) -> str:
    return "ghp_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(36))


# Free-form objects (a probe's config, a header) get the fields that held a token before.
FREE_FORM = ("config", "labels", "command", "teardown", "name", "select", "range", "summary")


def instance(schema: dict[str, Any], defs: dict[str, Any], tok: str, depth: int = 0) -> Any:
    """A value the schema allows, with `tok` in every string (inside text, so it must be found)."""
    if "$ref" in schema:
        return instance(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, tok, depth + 1)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            subs = [s for s in schema[key] if s.get("type") != "null"]
            return instance(subs[0] if subs else {"type": "null"}, defs, tok, depth)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "string":
        return f"see {tok} here"
    if kind in ("number", "integer"):
        return 1
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if kind == "array":
        return [instance(schema.get("items") or {"type": "string"}, defs, tok, depth + 1)]
    out = {k: instance(s, defs, tok, depth + 1) for k, s in (schema.get("properties") or {}).items()}
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        out["extra"] = instance(extra, defs, tok, depth + 1)
    if not schema.get("properties") and depth < 6:
        out.update({k: {"x": f"{k}: {tok}"} if k in ("config", "labels") else f"{tok}" for k in FREE_FORM})
    return out


def strings(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in [str(k), *strings(v)]]
    if isinstance(obj, list):
        return [s for v in obj for s in strings(v)]
    return [obj] if isinstance(obj, str) else []


def test_every_string_of_every_schema_kind_goes_through_the_scrubber() -> None:
    assert len(SCHEMAS) >= 20
    rng = random.Random(42)
    for path in SCHEMAS:
        schema = json.loads(path.read_text())
        tok = token(rng)
        doc = instance(schema, schema.get("$defs") or {}, tok)
        planted = [s for s in strings(doc) if tok in s]
        assert planted, path.name  # the generator reached strings at all
        leaks = [s for s in strings(scrub_record(doc)) if tok in s]
        assert leaks == [], (path.name, leaks[:3])


def test_a_command_runs_header_footer_and_teardown_are_scrubbed_when_written(tmp_path: Path) -> None:
    tok = token(random.Random(1))
    run = new_run(
        kind="command",
        probe_name="command",
        probe_version="1",
        config={"cmd": f"x --t {tok}"},
        primary="cycle",
        phases=["cycle"],
    )
    path = tmp_path / "ab-a.json"
    with RunWriter(path, run) as w:
        w.add_launch(
            {
                "status": "ok",
                "header": {
                    "type": "header",
                    "config": {"url": f"https://h/?x={tok}", "note": tok},
                    "labels": {"who": tok},
                    "primary": "cycle",
                    "phases": ["cycle"],
                },
                "samples": {"cycle": [1.0, 2.0]},
                "footer": {"type": "footer", "cycles": 2, "note": f"done {tok}"},
                "teardown": f"rm -rf /tmp/x # {tok}",
            }
        )
        shown = json.dumps(w.run)
    text = path.read_text()
    assert tok not in text and tok not in shown
    assert load_record(path, RUN)["launches"][0]["samples"]["cycle"] == [1.0, 2.0]


def test_imported_commands_labels_and_range_names_are_scrubbed() -> None:
    tok = token(random.Random(2))
    hf = {
        "results": [
            {"command": f"curl -H 'X: {tok}' x", "times": [0.1, 0.2], "parameters": {"key": tok, "n": "1"}}
        ]
    }
    nsys_csv = (ROOT / "tests/data/nsys_nvtx_sum_fixture.csv").read_text().replace(":draft", f":draft {tok}")
    vllm = json.loads((ROOT / "tests/data/vllm-bench-serve-0.32.0.json").read_text())
    vllm["label"] = f"run with {tok}"
    for text, fmt in ((json.dumps(hf), "hyperfine"), (nsys_csv, "nsys"), (json.dumps(vllm), "vllm-bench")):
        records = importers.import_text(text, f"x.{fmt}", fmt)
        assert records and tok not in json.dumps(records), fmt


def test_the_journal_keeps_good_and_bad_as_the_screen_shows_them(tmp_path: Path) -> None:
    secret = "Zq" + "".join(random.Random(3).choice(string.ascii_letters) for _ in range(10)) + "9x"
    sides = {
        "good": f"OMP_NUM_THREADS=2 DB_PASSPHRASE_X={secret}",
        "bad": f"OMP_NUM_THREADS=1 MIRROR={secret}",
        "ignore": [],
        "only": [],
    }
    factor = {"kind": "env", "name": "MIRROR", "good": None, "bad": secret}
    inputs = {"factors": [factor], "fixed_env": {"DB_HOST_X": secret}, "metric": "cycle", "command": "x"}
    j = Journal(tmp_path / "j.jsonl", inputs, resume=False, sides=sides)
    text = j.path.read_text()
    assert secret not in text and "OMP_NUM_THREADS=2" in text


def test_a_record_written_before_is_scrubbed_as_compare_reads_it(tmp_path: Path) -> None:
    tok = token(random.Random(4))
    rec = json.loads((ROOT / "baselines" / "h200-kimi-tp1-baseline.json").read_text())
    for la in rec["launches"]:
        la["header"]["labels"] = {"who": tok}
        la["footer"]["note"] = f"done {tok}"
    path = tmp_path / "old.json"
    path.write_text(json.dumps(rec))
    run = importers.load_run(path)
    assert tok not in json.dumps(run) and run["launches"][0]["samples"] == rec["launches"][0]["samples"]
