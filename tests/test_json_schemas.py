"""Every --json output, made by the CLI as users run it, validated against its JSON Schema (docs/schemas/).

The schemas are made from regdiag.outputs (python -m regdiag.schemas); the first test holds the files
in docs/ to what the types make. `COVERED` names every command that has --json: a new one without an
entry here fails test_every_json_command_is_covered. Each output names its own schema ("schema"),
and is validated against the file of that id with the `jsonschema` package."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated as D
from typing import Any, TypedDict

import jsonschema
import pytest
from bisect_helpers import command, write_probe
from server_helpers import Emulator, free_port
from sshd_helpers import Sshd, sshd  # noqa: F401 - sshd is a fixture

from regdiag import schemas
from regdiag.records import parse_schema

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "probes" / "spec_decode.py"

# command path -> the schema kind(s) its --json prints
COVERED = {
    "snapshot": {"snapshot", "snapshot-list", "check", "check-list"},
    "diff": {"diff"},
    "runs": {"run-list"},
    "compare": {"comparison"},
    "explain": {"explanation"},
    "trust": {"trust"},
    "check-host": {"host-check-list"},
    "bisect": {"bisect-report"},
    "ingest-log": {"ingest"},
    "demo": {"demo"},
    "ab": {"comparison"},
    "clean": {"clean"},
    "probe spec-decode": {"probe-summary", "probe-hosts"},
    "probe collectives": {"probe-summary"},
    "probe server": {"server-summary"},
    "probe engine": {"engine-summary"},
    "baseline list": {"baseline-list"},
}


def validated(stdout: str, kind: str) -> dict[str, Any]:
    """The output, checked: one object, its schema id of `kind`, valid against docs/schemas/KIND."""
    doc = json.loads(stdout)
    assert isinstance(doc, dict), f"a --json output is one object, got {type(doc).__name__}"
    assert parse_schema(doc.get("schema"))[0] == kind, doc.get("schema")
    schema = json.loads(schemas.path_for(kind).read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    return doc


def test_schema_files_are_what_the_types_make() -> None:
    assert schemas.main(["--check"]) == 0
    for kind in schemas.OUTPUTS:
        jsonschema.Draft202012Validator.check_schema(schemas.schema_for(kind))


class _Inner(TypedDict):
    n: D[int, "a count"]


class _Outer(TypedDict, total=False):
    name: str
    inner: _Inner
    items: list[float | None]
    extra: dict[str, str]


def test_the_generator_makes_schemas_that_refuse_wrong_shapes() -> None:
    defs: dict[str, Any] = {}
    top = schemas.object_schema(_Outer, defs)
    doc = {**top, "$defs": defs}
    ok = {"name": "x", "inner": {"n": 1}, "items": [1.5, None], "extra": {"a": "b"}, "unknown": 1}
    jsonschema.validate(ok, doc)
    jsonschema.validate({}, doc)  # total=False: nothing required
    assert defs["_Inner"]["properties"]["n"] == {"type": "integer", "description": "a count"}
    for bad in ({"inner": {}}, {"inner": {"n": "1"}}, {"items": ["a"]}, {"extra": {"a": 1}}, {"name": 3}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, doc)


def _json_commands(cmd: Any, path: str = "") -> set[str]:
    out = set()
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        out |= _json_commands(sub, f"{path} {name}".strip())
    if any("--json" in getattr(p, "opts", []) for p in getattr(cmd, "params", [])):
        out.add(path)
    return out


def test_every_json_command_is_covered() -> None:
    import typer.main

    from regdiag.cli import app

    assert _json_commands(typer.main.get_command(app)) == set(COVERED)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two records of the test probe, A fast and B 3 ms slower in verify, made by `regdiag ab`."""
    from conftest import run_cli

    d = tmp_path_factory.mktemp("runs")
    probe = write_probe(d)
    r = run_cli(
        "ab", "--a", "", "--b", "PROBE_EXTRA=verify:3", "--command", command(probe), "-L", "2",
        "--no-snapshot", "-o", str(d / "ab"), "--json", env={"REGDIAG_HOME": str(d / "home")},
    )  # fmt: skip
    assert r.returncode == 1, r.stderr[-2000:]
    validated(r.stdout, "comparison")
    return {"A": d / "ab-a.json", "B": d / "ab-b.json", "probe": probe, "dir": d}


@pytest.mark.launch
def test_local_outputs_validate(cli, runs: dict[str, Path], tmp_path: Path) -> None:
    a, b = str(runs["A"]), str(runs["B"])
    snap = tmp_path / "s1.json"
    r = cli("snapshot", "--json", "-o", str(snap))
    assert r.returncode == 0, r.stderr
    validated(r.stdout, "snapshot")
    r = cli("snapshot", "--from", str(snap), "--check", "--json")
    validated(r.stdout, "check")
    snap2 = tmp_path / "s2.json"
    cli("snapshot", "-o", str(snap2), env={"NCCL_ALGO": "Ring"})
    assert validated(cli("diff", str(snap), str(snap2), "--json").stdout, "diff")["differences"]
    assert validated(cli("diff", str(snap), str(snap), "--json").stdout, "diff")["differences"] == []
    validated(cli("compare", a, b, "--json").stdout, "comparison")
    validated(cli("explain", b, "--json").stdout, "explanation")
    assert validated(cli("runs", "--json").stdout, "run-list")["runs"] == []
    assert cli("baseline", "save", "base", a).returncode == 0
    assert (
        validated(cli("baseline", "list", "--json").stdout, "baseline-list")["baselines"][0]["name"] == "base"
    )
    validated(cli("clean", "--json").stdout, "clean")
    log = ROOT / "tests" / "data" / "vllm_v1.log"
    validated(cli("ingest-log", str(log), "-o", str(tmp_path / "log.json"), "--json").stdout, "ingest")


@pytest.mark.launch
def test_bisect_output_validates_and_keeps_kind(cli, runs: dict[str, Path], tmp_path: Path) -> None:
    r = cli(
        "bisect", "--good", "PROBE_EXTRA=verify:0", "--bad", "PROBE_EXTRA=verify:3 PROBE_X=1",
        "--command", command(runs["probe"]), "--journal", str(tmp_path / "j.jsonl"), "--json",
    )  # fmt: skip
    assert r.returncode in (0, 3), r.stderr[-2000:]
    doc = validated(r.stdout, "bisect-report")
    assert doc["kind"] == doc["schema"]  # the old spelling, kept for one release


@pytest.mark.launch
@pytest.mark.skipif(not SPEC.exists(), reason="probe not available")
def test_probe_outputs_validate(cli, tmp_path: Path) -> None:
    r = cli("probe", "spec-decode", "--preset", "tiny", "-L", "1", "--cycles", "4", "--no-snapshot", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    validated(r.stdout, "probe-summary")
    r = cli("probe", "collectives", "--tp", "2", "--sizes", "1K,4K", "--reps", "2", "--iters", "2",
            "-L", "1", "--no-snapshot", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    validated(r.stdout, "probe-summary")


def test_server_output_validates(cli) -> None:
    emu = Emulator()
    try:
        r = cli("probe", "server", "--url", emu.url, "-L", "1", "-R", "3", "--max-tokens", "8",
                "--no-snapshot", "--json")  # fmt: skip
    finally:
        emu.stop()
    assert r.returncode == 0, r.stderr[-2000:]
    validated(r.stdout, "server-summary")


def test_engine_output_validates(cli) -> None:
    port = free_port()
    launch = f"PYTHONPATH=tests/engine_fake/site python3 tests/engine_fake/fake_engine.py --port {port} --workers 1"
    r = cli(
        "probe", "engine", "--launch-cmd", launch, "--url", f"http://127.0.0.1:{port}", "--no-snapshot",
        "--phase", "draft=fake_spec:SpecWorker.draft", "--phase", "verify=fake_spec:SpecWorker.verify",
        "--sync", "fake_spec:SpecWorker.commit", "-L", "1", "-R", "2", "--max-tokens", "20", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    validated(r.stdout, "engine-summary")


@pytest.mark.ssh
def test_outputs_over_ssh_validate(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    known = tmp_path / "known_hosts"
    second = (  # a second name for the same sshd: two hosts of one run
        f"Host regdiag-b\n  HostName localhost\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n"
        "  GlobalKnownHostsFile none\n"
    )
    cfg = str(sshd.write_config(tmp_path / "config", second, known_hosts=known))
    r = cli("trust", "regdiag-test", "--ssh-config", cfg, "--yes", "--json")
    assert r.returncode == 0, r.stderr
    assert validated(r.stdout, "trust")["status"] == "added"
    py = ["--python", sys.executable, "--ssh-config", cfg]
    r = cli("check-host", "regdiag-test", *py, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "round_trip_s" in validated(r.stdout, "host-check-list")["hosts"][0]
    assert cli("trust", "regdiag-b", "--ssh-config", cfg, "--yes").returncode == 0
    two = ["--host", "regdiag-test", "--host", "regdiag-b"]
    r = cli("snapshot", *two, *py, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(validated(r.stdout, "snapshot-list")["snapshots"]) == 2
    r = cli("snapshot", "--check", *two, *py, "--json")
    assert len(validated(r.stdout, "check-list")["checks"]) == 2
    if SPEC.exists():
        r = cli("probe", "spec-decode", "--preset", "tiny", "-L", "1", "--cycles", "3", "--no-snapshot",
                *two, *py, "--json")  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        assert [h["ok"] for h in validated(r.stdout, "probe-hosts")["hosts"]] == [True, True]
    r = cli("clean", "--host", "regdiag-test", *py, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    validated(r.stdout, "clean")


def test_run_records_validate_and_corruptions_do_not() -> None:
    """The run record has a schema: every stored H200 record validates, and records broken in the
    ways a hand edit or a bad writer breaks them are refused by it."""
    schema = json.loads(schemas.path_for("run").read_text(encoding="utf-8"))
    runs = []
    for p in sorted((ROOT / "baselines").rglob("*.json")):
        try:
            r = json.loads(p.read_text())
        except ValueError:  # a JSON Lines journal beside the records
            continue
        if isinstance(r, dict) and str(r.get("schema", "")).startswith("regdiag.run/"):
            runs.append(r)
    assert len(runs) >= 10
    for r in runs:
        jsonschema.validate(r, schema, cls=jsonschema.Draft202012Validator)
    good = runs[0]
    corrupt = [
        {**good, "status": "done"},
        {**good, "launches": [{**good["launches"][0], "status": "fine"}]},
        {**good, "launches": [{**good["launches"][0], "samples": {"cycle": ["1.0"]}}]},
        {**good, "units": {"cycle": 1}},
        {k: v for k, v in good.items() if k != "launches"},
        {**good, "primary": 3},
        {**good, "phases": "draft"},
    ]
    for bad in corrupt:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema, cls=jsonschema.Draft202012Validator)


# The demo's --json is validated by tests/test_bisect_demo.py, on the one demo run it makes (a demo is
# minutes of launches on two cores).


@pytest.mark.cli
def test_a_failing_command_under_json_prints_an_error_object(cli, tmp_path: Path) -> None:
    """Under --json an error is one object on stdout too, beside its one line on stderr."""
    (tmp_path / "junk.txt").write_text("hello\n")
    cases = [
        ("compare", str(tmp_path / "missing.json"), str(tmp_path / "missing.json"), "--json"),
        ("compare", str(tmp_path / "junk.txt"), str(tmp_path / "junk.txt"), "--format", "json"),
        ("explain", str(tmp_path / "junk.txt"), "--json"),
        ("bisect", "--good", "A=1", "--bad", "A=1", "--command", "true", "--json"),
    ]
    for args in cases:
        r = cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        doc = validated(r.stdout, "error")
        assert doc["exit_code"] == 2 and doc["error"] and r.stderr == f"regdiag: error: {doc['error']}\n"
    plain = cli("compare", str(tmp_path / "missing.json"), str(tmp_path / "missing.json"))
    assert plain.returncode == 2 and plain.stdout == ""  # without --json, stdout stays empty
