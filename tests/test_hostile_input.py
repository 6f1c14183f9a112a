"""Hostile input at the CLI boundary, table-driven: every case is one real process of the CLI.

Each case says which command line to run over which bad input, and the exit code docs/cli.md
documents for it. For every case: the exit code is that one, stderr is one line starting
`regdiag: error:` (no traceback, no click usage block), the process ends within the timeout (no
hang), and a bad record is never accepted (no file written where one was asked for). The cases run
through tests/cli_fork_runner.py: one interpreter start, a forked process per case.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

RUN = ROOT / "baselines" / "h200-kimi-tp1-baseline.json"
SNAP = ROOT / "baselines" / "h200-snapshot.json"
COLLECTIVES = ROOT / "baselines" / "h200-collectives-tp1.json"
TIMEOUT = 20.0


@dataclass
class Case:
    id: str
    argv: list[str]  # "{X}" is the bad input's path, "{OUT}" a path that must stay unwritten
    code: int = 2
    make: Callable[[Path], None] | None = None  # writes the bad input at the given path
    expect_in_line: str = ""  # a word the error line must contain (what is wrong)
    env: dict[str, str] = field(default_factory=dict)


def _run() -> dict[str, Any]:
    return json.loads(RUN.read_text())


def _w(content: str | bytes) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)

    return make


def _run_with(mutate: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        r = copy.deepcopy(_RUN)
        mutate(r)
        # allow_nan: the point is to write what a careless tool (or Python's json) would write.
        p.write_text(json.dumps(r, allow_nan=True))

    return make


_RUN = _run()
PRIMARY = _RUN["primary"]


def _set_samples(value: Any) -> Callable[[dict[str, Any]], None]:
    def m(r: dict[str, Any]) -> None:
        for la in r["launches"]:
            la["samples"][PRIMARY] = value if not callable(value) else value(la["samples"][PRIMARY])

    return m


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _dir(p: Path) -> None:
    p.mkdir()


# Bad record files: (id, maker, a word the error line names).
BAD_RECORDS: list[tuple[str, Callable[[Path], None], str]] = [
    ("empty", _w(""), "empty"),
    ("whitespace", _w("  \n\t\n"), "empty"),
    ("truncated", lambda p: p.write_text(RUN.read_text()[:5000]), "truncated"),
    ("binary", _w(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe"), "not a text file"),
    ("utf16", _w('{"schema": "regdiag.run/1"}'.encode("utf-16")), "not a text file"),
    ("top-level list", _w("[1, 2, 3]"), "not a regdiag record"),
    ("top-level number", _w("42"), "not a regdiag record"),
    ("top-level null", _w("null"), "not a regdiag record"),
    ("top-level string", _w('"regdiag.run/1"'), "not a regdiag record"),
    ("no schema", _w('{"launches": []}'), "schema"),
    ("schema not a string", _w('{"schema": 1, "launches": []}'), "schema"),
    ("foreign schema", _w('{"schema": "pyperf/1.0"}'), "schema"),
    ("future major", _run_with(lambda r: r.update(schema="regdiag.run/9")), "newer regdiag"),
    ("major zero", _run_with(lambda r: r.update(schema="regdiag.run/0")), "schema"),
    ("unknown kind", _w('{"schema": "regdiag.bogus/1"}'), "unknown record kind"),
    ("no launches", _run_with(lambda r: r.pop("launches")), "launches"),
    ("launches an object", _run_with(lambda r: r.update(launches={"a": 1})), "launches"),
    ("launch a string", _run_with(lambda r: r.update(launches=["x"])), "launch 0"),
    ("samples a list", _run_with(lambda r: r["launches"][0].update(samples=[1, 2])), "launch 0"),
    ("samples strings", _run_with(_set_samples(["fast", "slow"])), "number"),
    ("samples nested", _run_with(_set_samples([[1.0], [2.0]])), "number"),
    ("samples NaN", _run_with(_set_samples(lambda s: [float("nan")] * len(s))), "finite"),
    ("samples Infinity", _run_with(_set_samples(lambda s: [float("inf"), *s[1:]])), "finite"),
    ("samples negative", _run_with(_set_samples(lambda s: [-x for x in s])), "positive"),
    ("samples zero", _run_with(_set_samples(lambda s: [0.0] * len(s))), "positive"),
    ("samples empty", _run_with(_set_samples([])), "sample"),
    ("samples a number", _run_with(_set_samples(3.5)), "list"),
    ("samples huge", _run_with(_set_samples(lambda s: [1e300] * len(s))), "out of range"),
    ("primary a list", _run_with(lambda r: r.update(primary=["cycle"])), "primary"),
    ("primary unknown", _run_with(lambda r: r.update(primary="nope")), "primary"),
    ("units a list", _run_with(lambda r: r.update(units=["ms"])), "units"),
    ("probe a string", _run_with(lambda r: r.update(probe="spec-decode")), "probe"),
    ("no launch at all", _run_with(lambda r: r.update(launches=[])), "launch"),
    ("deep nesting", _w("[" * 200_000 + "]" * 200_000), "nested"),
    (
        "deep nesting in a field",
        _w('{"schema": "regdiag.run/1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        "nested",
    ),
    ("fifo", _fifo, "not a regular file"),
    ("directory", _dir, "directory"),
    ("missing", lambda p: None, "no such file"),
]

BAD_SNAPSHOTS: list[tuple[str, Callable[[Path], None], str]] = [
    ("groups a list", _w('{"schema": "regdiag.snapshot/1", "groups": []}'), "groups"),
    ("snapshot future major", _w('{"schema": "regdiag.snapshot/7", "groups": {}}'), "newer regdiag"),
    ("snapshot fifo", _fifo, "not a regular file"),
    ("snapshot binary", _w(b"\x00\x01\x02\xff"), "not a text file"),
]


def _record_cases() -> list[Case]:
    cases: list[Case] = []
    for rid, make, word in BAD_RECORDS:
        cases += [
            Case(f"compare old={rid}", ["compare", "{X}", str(RUN)], make=make, expect_in_line=word),
            Case(
                f"compare new={rid}", ["compare", str(RUN), "{X}", "--json"], make=make, expect_in_line=word
            ),
            Case(f"explain {rid}", ["explain", "{X}", "--json"], make=make, expect_in_line=word),
            Case(f"baseline save {rid}", ["baseline", "save", "b1", "{X}"], make=make, expect_in_line=word),
        ]
    for rid, make, word in BAD_SNAPSHOTS + BAD_RECORDS[:12]:
        cases.append(Case(f"diff {rid}", ["diff", "{X}", str(SNAP)], make=make, expect_in_line=word))
    for rid, make, _ in [*BAD_RECORDS[:9], BAD_RECORDS[-3], BAD_RECORDS[-2]]:
        cases.append(Case(f"ingest-log {rid}", ["ingest-log", "{X}", "-o", "{OUT}"], make=make))
    return cases


NAN_LOG = (
    "INFO 05-01 12:00:00 metrics.py:1] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
    "nan tokens/s, Running: 1 reqs\nINFO 05-01 12:00:00 spec_decode: Mean acceptance length: nan\n"
)


def _journal(lines: list[Any]) -> Callable[[Path], None]:
    return _w("".join(json.dumps(x, allow_nan=True) + "\n" for x in lines))


BISECT = ["bisect", "--good", "OMP_NUM_THREADS=2", "--bad", "OMP_NUM_THREADS=1", "--command", "false"]


def _option_cases() -> list[Case]:
    r = str(RUN)
    return [
        Case("compare margin word", ["compare", r, r, "--margin", "abc"], expect_in_line="--margin"),
        Case("compare margin negative", ["compare", r, r, "--margin", "-1%"], expect_in_line="--margin"),
        Case("compare margin nan", ["compare", r, r, "--margin", "nan"], expect_in_line="--margin"),
        Case("compare margin inf", ["compare", r, r, "--margin", "inf"], expect_in_line="--margin"),
        Case("compare margin 100%", ["compare", r, r, "--margin", "100%"], expect_in_line="--margin"),
        Case("compare unknown method", ["compare", r, r, "--method", "magic"], expect_in_line="--method"),
        Case("compare html into a directory", ["compare", r, r, "--html", "{X}"], make=_dir),
        Case("compare html unwritable", ["compare", r, r, "--html", "/proc/regdiag-no/x.html"]),
        Case("explain collectives as baseline", ["explain", r, "--baseline", str(COLLECTIVES)], expect_in_line="baseline"),
        Case("explain snapshot", ["explain", str(SNAP)], expect_in_line="snapshot"),
        Case("explain cycle nan", ["explain", "--cycle-ms", "nan", "--decode-ms", "12", "--accept-len", "2"]),
        Case("explain cycle inf", ["explain", "--cycle-ms", "inf", "--decode-ms", "12", "--accept-len", "2"]),
        Case("explain cycle zero", ["explain", "--cycle-ms", "0", "--decode-ms", "12", "--accept-len", "2"]),
        Case("explain cycle negative", ["explain", "--cycle-ms", "-30", "--decode-ms", "12", "--accept-len", "2"]),
        Case("explain accept zero", ["explain", "--cycle-ms", "30", "--decode-ms", "12", "--accept-len", "0"]),
        Case("explain decode nan", ["explain", "--cycle-ms", "30", "--decode-ms", "nan", "--accept-len", "2"]),
        Case("explain unknown model", ["explain", r, "--preset", "gpt-9"], expect_in_line="model"),
        Case("probe unknown preset", ["probe", "spec-decode", "--preset", "gpt-9"], expect_in_line="--preset"),
        Case("probe -o into a directory", ["probe", "spec-decode", "--preset", "tiny", "-o", "{X}"], make=_dir),
        Case("baseline bad name", ["baseline", "save", "../x", r], expect_in_line="name"),
        Case("baseline rm missing", ["baseline", "rm", "nothere"], expect_in_line="nothere"),
        Case("compare unknown baseline", ["compare", "nothere", r], expect_in_line="nothere"),
        Case("ingest-log nan values", ["ingest-log", "{X}", "-o", "{OUT}"], make=_w(NAN_LOG)),
        Case("ingest-log missing", ["ingest-log", "/nonexistent/x.log", "-o", "{OUT}"], expect_in_line="no such"),
        Case("ingest-log -o a directory", ["ingest-log", str(ROOT / "tests/data/vllm_v1.log"), "-o", "{X}"], make=_dir),
        Case("snapshot -o a directory", ["snapshot", "--json", "-o", "{X}"], make=_dir),
        Case("snapshot -o under a file", ["snapshot", "--json", "-o", str(RUN) + "/x.json"]),
        Case("diff same fifo", ["diff", "{X}", "{X}"], make=_fifo, expect_in_line="not a regular file"),
        Case("bisect resume non-object", [*BISECT, "--resume", "--journal", "{X}"], make=_w("[1,2,3]\n")),
        Case("bisect resume no start", [*BISECT, "--resume", "--journal", "{X}"], make=_journal([{"type": "launch"}])),
        Case("bisect resume fifo", [*BISECT, "--resume", "--journal", "{X}"], make=_fifo),
        Case("bisect resume directory", [*BISECT, "--resume", "--journal", "{X}"], make=_dir),
        Case("bisect good file is junk", ["bisect", "--good", "{X}", "--bad", str(RUN), "--command", "false"], make=_w("[")),
        Case("bisect good fifo", ["bisect", "--good", "{X}", "--bad", str(RUN), "--command", "false"], make=_fifo),
    ]  # fmt: skip


_START: list[str] = []


def _start_line() -> str:
    """The start line a real `regdiag bisect BISECT` writes: damage after it is what resume must find."""
    if not _START:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            j = Path(d) / "j.jsonl"
            subprocess.run(
                [sys.executable, "-m", "regdiag", *BISECT, "--journal", str(j)],
                capture_output=True,
                cwd=str(ROOT),
                env={**os.environ, "REGDIAG_HOME": d},
                timeout=120,
            )
            _START.append(j.read_text().splitlines()[0])
    return _START[0]


def _journal_cases() -> list[Case]:
    """A bisect journal damaged after its start line: every shape of bad line."""
    launch = {"type": "launch", "point": "p", "index": 0, "status": "ok", "cycles": 5, "duration_s": 1.0}
    bad_lines: list[tuple[str, Any]] = [
        ("a list", [1, 2]),
        ("a string", "decision"),
        ("no type", {"point": "x"}),
        ("launch without point", {**launch, "point": None, "medians": {"cycle": 1.0}}),
        ("launch without index", {k: v for k, v in launch.items() if k != "index"} | {"medians": {"cycle": 1.0}}),
        ("launch index a word", {**launch, "index": "zero", "medians": {"cycle": 1.0}}),
        ("launch index negative", {**launch, "index": -1, "medians": {"cycle": 1.0}}),
        ("launch medians a list", {**launch, "medians": [1.0]}),
        ("launch median a word", {**launch, "medians": {"cycle": "x"}}),
        ("launch median NaN", {**launch, "medians": {"cycle": float("nan")}}),
        ("launch median Infinity", {**launch, "medians": {"cycle": float("inf")}}),
        ("launch median zero", {**launch, "medians": {"cycle": 0.0}}),
        ("launch median negative", {**launch, "medians": {"cycle": -3.0}}),
        ("launch duration a word", {**launch, "medians": {"cycle": 1.0}, "duration_s": "long"}),
        ("launch cycles a word", {**launch, "medians": {"cycle": 1.0}, "cycles": "many"}),
        ("env build_s a word", {"type": "env", "point": "p", "status": "ok", "build_s": "slow"}),
        ("env without point", {"type": "env", "status": "skip", "reason": "x"}),
        ("decision not an object", {"type": "decision", "seq": "x", "what": 3, "verdict": None}),
    ]  # fmt: skip
    cases = []
    for lid, line in bad_lines:

        def make(p: Path, line: Any = line) -> None:
            p.write_text(_start_line() + "\n" + json.dumps(line, allow_nan=True) + "\n{}\n")

        cases.append(
            Case(
                f"bisect resume {lid}",
                [*BISECT, "--resume", "--journal", "{X}"],
                make=make,
                expect_in_line="line 2",
            )
        )
    return cases


CASES = _record_cases() + _option_cases() + _journal_cases()


def run_cases(cases: list[Case], tmp: Path) -> list[dict[str, Any]]:
    reqs = []
    for i, c in enumerate(cases):
        d = tmp / f"c{i}"
        d.mkdir()
        x, out = d / "input.json", d / "out.json"
        if c.make is not None:
            c.make(x)
        subst = {"{X}": str(x), "{OUT}": str(out)}
        argv = [subst.get(a, a) for a in c.argv]
        env = {"REGDIAG_HOME": str(d / "home"), "COLUMNS": "200", **c.env}
        reqs.append({"argv": argv, "env": env, "cwd": str(d)})
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "cli_fork_runner.py")],
        input=json.dumps({"cases": reqs, "timeout": TIMEOUT}),
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        # REGDIAG_TEST_ROOT: the cases against another checkout's regdiag (tests/test_adversarial.py --root)
        env={**os.environ, "PYTHONPATH": os.environ.get("REGDIAG_TEST_ROOT", str(ROOT))},
        timeout=TIMEOUT * len(cases) + 60,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def problems(case: Case, res: dict[str, Any], d: Path) -> list[str]:
    out: list[str] = []
    if res["hung"]:
        return [f"hung (> {TIMEOUT:.0f} s)"]
    if "Traceback" in res["stderr"]:
        out.append("traceback: " + res["stderr"].strip().splitlines()[-1][:200])
    lines = [ln for ln in res["stderr"].splitlines() if ln.strip()]
    if res["rc"] != case.code:
        out.append(f"exit {res['rc']}, documented {case.code}")
    if case.code != 0:
        if len(lines) != 1 or not lines[0].startswith("regdiag: error: "):
            out.append(f"stderr is not one error line: {res['stderr'][:300]!r}")
        elif case.expect_in_line and case.expect_in_line.lower() not in lines[0].lower():
            out.append(f"line does not say {case.expect_in_line!r}: {lines[0][:200]}")
        if (d / "out.json").exists():
            out.append("an output record was written from bad input")
        if (d / "home" / "baselines").exists() and any((d / "home" / "baselines").glob("*.json")):
            out.append("a bad record was accepted as a baseline")
    return out


@pytest.mark.slow
def test_hostile_inputs(tmp_path: Path) -> None:
    results = run_cases(CASES, tmp_path)
    failed = {}
    for i, (c, res) in enumerate(zip(CASES, results, strict=True)):
        p = problems(c, res, tmp_path / f"c{i}")
        if p:
            failed[c.id] = p
    report = "\n".join(f"{k}: {'; '.join(v)}" for k, v in failed.items())
    assert not failed, f"{len(failed)} of {len(CASES)} cases wrong:\n{report}"


def test_there_are_many_cases() -> None:
    assert len(CASES) >= 200
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.cli
def test_the_runner_sees_a_traceback_and_a_hang(tmp_path: Path) -> None:
    # The harness can fail a case: a crash's traceback reaches stderr, a hang is killed and reported.
    reqs = [
        {"argv": ["compare", "--help"], "cwd": str(tmp_path)},
        {"exec": "raise ValueError('boom')", "cwd": str(tmp_path)},
        {"exec": "import time; time.sleep(60)", "cwd": str(tmp_path)},
    ]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "cli_fork_runner.py")],
        input=json.dumps({"cases": reqs, "timeout": 2}),
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    ok, crash, hang = json.loads(proc.stdout)
    assert ok["rc"] == 0 and "Usage" in ok["stdout"] and not ok["hung"]
    assert crash["rc"] == 1 and "Traceback" in crash["stderr"] and "ValueError: boom" in crash["stderr"]
    assert hang["hung"] and hang["rc"] is None and 2 <= hang["seconds"] < 10
    case = Case("x", [])
    assert problems(case, crash, tmp_path) and problems(case, hang, tmp_path) == ["hung (> 20 s)"]
