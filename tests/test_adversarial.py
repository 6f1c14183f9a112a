"""The adversarial suite: the cases of an adversarial pass (issue 27) that the hostile-input table had
not seen, run as real processes through tests/cli_fork_runner.py like tests/test_hostile_input.py,
and counted.

Each outcome is one of: right (the documented exit code, and for a refusal one `regdiag: error:`
line naming what is wrong, no record or baseline written; for an accepted input the check of what
was written), traceback, hang (past the timeout), silently wrong (exit 0 or 1 where the input had to
be refused or the answer was another: a wrong answer with a success code), or wrong (any other
mismatch). The suite grows from every new case found: add it here.

    python3 -m pytest -q tests/test_adversarial.py                  # in CI (about a minute)
    python3 tests/test_adversarial.py [--root TREE] [--all]         # the counts (docs/reliability.md)

`--root` runs the cases against another checkout (an older commit, for the "before" figures);
`--all` adds the hostile-input table.
"""

from __future__ import annotations

import copy
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from test_hostile_input import RUN, SNAP, Case, problems, run_cases

BASE = json.loads(RUN.read_text())
SNAPSHOT = json.loads(SNAP.read_text())
PRIMARY = BASE["primary"]
FIRST = BASE["launches"][0]["samples"][PRIMARY][0]


def _text(mutate: Callable[[str], str]) -> Callable[[Path], None]:
    """A run file made by editing the JSON text: numbers no Python float or int conversion takes."""
    return lambda p: p.write_text(mutate(json.dumps(BASE)))


def _run(mutate: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        r = copy.deepcopy(BASE)
        mutate(r)
        p.write_text(json.dumps(r))

    return make


def _launches(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda r: [la.update({key: value}) for la in r["launches"]]


def _first_sample(text: str) -> Callable[[str], str]:
    return lambda t: t.replace(json.dumps(FIRST), text, 1)


# (id, maker, a word the error line names): records that must be refused wherever they are read.
RECORDS: list[tuple[str, Callable[[Path], None], str]] = [
    ("launch status banana", _run(_launches("status", "banana")), "status"),
    ("launch status failed", _run(_launches("status", "failed")), "status"),
    ("launch status a number", _run(_launches("status", 1)), "status"),
    ("run status bogus", _run(lambda r: r.update(status="done!")), "status"),
    ("launch index negative", _run(_launches("index", -5)), "index"),
    ("launch index a word", _run(_launches("index", "a")), "index"),
    ("launch index a float", _run(_launches("index", 0.5)), "index"),
    ("phase name empty", _run(lambda r: r.update(phases=[""])), "phase"),
    ("phase name with a newline", _run(lambda r: r.update(phases=["decode\n"])), "phase"),
    ("phase named twice", _run(lambda r: r.update(phases=["decode", "decode"])), "phase"),
    ("phase in another unit", _run(lambda r: r["units"].update(decode="tok/s")), "unit"),
    ("unit empty", _run(lambda r: r["units"].update(cycle="")), "unit"),
    ("unit with a NUL", _run(lambda r: r["units"].update(cycle="m\x00s")), "unit"),
    ("better sideways", _run(lambda r: r.update(better={PRIMARY: "sideways"})), "better"),
    ("better a list", _run(lambda r: r.update(better=["lower"])), "better"),
    ("sample subnormal", _run(lambda r: r["launches"][0]["samples"].update({PRIMARY: [5e-324] * 8})), "range"),
    ("sample 1e-300", _run(lambda r: r["launches"][0]["samples"].update({PRIMARY: [1e-300] * 8})), "range"),
    ("value subnormal", _run(lambda r: r["launches"][0].update(values={"accept_len": [5e-324]})), "finite"),
    ("sample 10**400", _text(_first_sample("1" + "0" * 400)), "float64"),
    ("sample of 5000 digits", _text(_first_sample("7" * 5000)), "float64"),
    ("sample -10**400", _text(_first_sample("-1" + "0" * 400)), "float64"),
    ("sample 1e400 literal", _text(_first_sample("1e400")), "float64"),
    ("duration 10**400", _text(lambda t: t.replace('"duration_s": ', '"duration_s": 1' + "0" * 400 + ", \"x\": ", 1)), "float64"),
    ("warmup of 5000 digits", _text(lambda t: t.replace('"warmup_dropped": ', '"warmup_dropped": ' + "9" * 5000 + ", \"y\": ", 1)), "float64"),
    ("probe name a lone surrogate", _run(lambda r: r["probe"].update(name="\ud800")), "surrogate"),
    ("a key a lone surrogate", _run(lambda r: r.update({"\udfff": 1})), "surrogate"),
    ("host name a lone surrogate", _run(lambda r: r["host"].update(name="x\udc80")), "surrogate"),
]  # fmt: skip


def _record_cases() -> list[Case]:
    cases = []
    for rid, make, word in RECORDS:
        cases += [
            Case(f"compare new={rid}", ["compare", str(RUN), "{X}"], make=make, expect_in_line=word),
            Case(
                f"compare old={rid}", ["compare", "{X}", str(RUN), "--json"], make=make, expect_in_line=word
            ),
            Case(f"explain {rid}", ["explain", "{X}", "--json"], make=make, expect_in_line=word),
            Case(f"baseline save {rid}", ["baseline", "save", "b1", "{X}"], make=make, expect_in_line=word),
        ]
    return cases


def _snapshot_env(name: str, value: Any) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        s = copy.deepcopy(SNAPSHOT)
        s["groups"]["env"]["fields"][name] = {"status": "ok", "value": value}
        p.write_text(json.dumps(s))

    return make


def _journal_with(line_text: str) -> Callable[[Path], None]:
    from test_hostile_input import _start_line

    return lambda p: p.write_text(_start_line() + "\n" + line_text + "\n{}\n")


LAUNCH_LINE = '{"type": "launch", "point": "p", "index": 0, "status": "ok", "cycles": 5, "duration_s": 1.0, '
BISECT = ["bisect", "--good", "OMP_NUM_THREADS=2", "--bad", "OMP_NUM_THREADS=1", "--command", "false"]
SPEC = ["probe", "spec-decode", "--preset", "tiny", "--no-snapshot", "-o", "{OUT}"]
COLL = ["probe", "collectives", "--tp", "1", "--device", "cpu", "--no-snapshot", "-o", "{OUT}"]
SERVER = ["probe", "server", "--no-snapshot", "-o", "{OUT}"]
ENGINE = [
    "probe",
    "engine",
    "--launch-cmd",
    "true",
    "--preset",
    "transformers",
    "--no-snapshot",
    "-o",
    "{OUT}",
]
AB = ["ab", "--a", "OMP_NUM_THREADS=1", "--b", "OMP_NUM_THREADS=2", "--command", "true", "-o", "{OUT}"]
TERA = "1000000000000"


def _option_cases() -> list[Case]:
    r = str(RUN)
    numbers = [
        ("--launches", TERA), ("--cycles", TERA), ("--warmup", TERA), ("--timeout", "inf"), ("--timeout", "nan"),
        ("--hang-timeout", "1e400"), ("--seed", "99999999999999999999"), ("--batch", TERA), ("--context", TERA),
        ("--num-steps", "1000"), ("--layers", "100000"), ("--block", TERA), ("--crash-at-launch", "-1"),
        ("--slow-phase", "draft:nan"), ("--slow-phase", "draft:1e308"),
    ]  # fmt: skip
    cases = [
        Case(f"spec-decode {f} {v}", [*SPEC, f, v], expect_in_line=f.lstrip("-").split("-")[0])
        for f, v in numbers
    ]
    for f, v in [("--sizes", "1e400"), ("--sizes", "999999999999999999999999999"), ("--sizes", "1K,nan"),
                 ("--target-ms", "1e308"), ("--reps", TERA), ("--iters", TERA), ("--launches", TERA)]:  # fmt: skip
        cases.append(
            Case(
                f"collectives {f} {v}", [*COLL, f, v], expect_in_line=f.lstrip("-").split("-")[0].rstrip("s")
            )
        )
    url = "http://127.0.0.1:9"
    for f, v in [("--launches", TERA), ("--requests", TERA), ("--concurrency", TERA), ("--read-timeout", "inf"),
                 ("--connect-timeout", "-1"), ("--startup-timeout", "nan"), ("--max-tokens", "0")]:  # fmt: skip
        cases.append(Case(f"server {f} {v}", [*SERVER, "--url", url, f, v], expect_in_line=f))
    cases += [
        Case("server url port 0", [*SERVER, "--url", "http://127.0.0.1:0"], expect_in_line="port 0"),
        Case("server url with a space", [*SERVER, "--url", "http://a b"], expect_in_line="space"),
        Case("engine url port 0", [*ENGINE, "--url", "http://127.0.0.1:0"], expect_in_line="port 0"),
        Case("engine --launches 10**12", [*ENGINE, "--launches", TERA], expect_in_line="--launches"),
        Case("engine --timeout nan", [*ENGINE, "--timeout", "nan"], expect_in_line="--timeout"),
        Case("engine --requests 10**12", [*ENGINE, "--requests", TERA, "--url", url], expect_in_line="--requests"),
        Case("ab --launches 10**12", [*AB, "--launches", TERA], expect_in_line="--launches"),
        Case("ab --launch-timeout inf", [*AB, "--launch-timeout", "inf"], expect_in_line="--launch-timeout"),
        Case("bisect --launches 10**12", [*BISECT, "--launches", TERA], expect_in_line="--launches"),
        Case("bisect --max-launches 10**12", [*BISECT, "--max-launches", TERA], expect_in_line="--max-launches"),
        Case("demo --launches 10**12", ["demo", "--launches", TERA], expect_in_line="--launches"),
        Case("ingest-log --idle-gap inf", ["ingest-log", str(ROOT / "tests/data/vllm_v1.log"), "--idle-gap", "inf", "-o", "{OUT}"], expect_in_line="--idle-gap"),
        Case("baseline name with a newline", ["baseline", "save", "b1\n", r], expect_in_line="name"),
        Case("baseline name a lone surrogate", ["baseline", "save", "b\udc801", r], expect_in_line="name"),
        # compare's own answers: 2 vs 2 launches is below the bootstrap's minimum (it said REGRESSED)
        Case("bootstrap on 2 launches", ["compare", r, "{X}", "--method", "bootstrap"], code=3, make=_run(_slower(1.05))),
        Case("welch on 2 launches", ["compare", r, "{X}"], code=1, make=_run(_slower(1.05))),
    ]  # fmt: skip
    for rid, name, value in [("NUL in a value", "OMP_NUM_THREADS", "1\x00x"), ("name A=B", "A=B", "1"),
                             ("NUL in a name", "A\x00B", "1"), ("empty name", "", "1"), ("name with a space", "MY VAR", "1"),
                             ("name with a newline", "A\n", "1")]:  # fmt: skip
        make = _snapshot_env(name, value)
        why = "NUL" if "value" in rid else "not a variable name"
        cases += [
            Case(f"bisect snapshot env {rid}", ["bisect", "--good", "OMP_NUM_THREADS=2", "--bad", "{X}", "--command", "false"], make=make, expect_in_line=why),
            Case(f"ab snapshot env {rid}", ["ab", "--a", "OMP_NUM_THREADS=2", "--b", "{X}", "--command", "true"], make=make, expect_in_line=why),
        ]  # fmt: skip
    for rid, text in [("median 10**400", LAUNCH_LINE + '"medians": {"cycle": 1' + "0" * 400 + "}}"),
                      ("index of 5000 digits", LAUNCH_LINE.replace('"index": 0', '"index": ' + "9" * 5000) + '"medians": {"cycle": 1.0}}'),
                      ("cycles 1e400", LAUNCH_LINE.replace('"cycles": 5', '"cycles": 1e400') + '"medians": {"cycle": 1.0}}'),
                      ("point a lone surrogate", LAUNCH_LINE.replace('"point": "p"', '"point": "\\ud800"') + '"medians": {"cycle": 1.0}}')]:  # fmt: skip
        cases.append(
            Case(
                f"bisect resume {rid}",
                [*BISECT, "--resume", "--journal", "{X}"],
                make=_journal_with(text),
                expect_in_line="line 2",
            )
        )
    return cases


def _slower(factor: float) -> Callable[[dict[str, Any]], None]:
    def m(r: dict[str, Any]) -> None:
        for la in r["launches"]:
            for k, v in la["samples"].items():
                la["samples"][k] = [x * factor for x in v]

    return m


def _ingest_infinity(p: Path) -> None:
    text = (ROOT / "tests/data/sglang_decode_comma.log").read_text()
    p.write_text(text.replace("gen throughput (token/s): 160.00", "gen throughput (token/s): Infinity", 1))


def _accepted_cases() -> list[Case]:
    """Inputs that are fine, or partly fine: the command succeeds and what it wrote must be right."""
    return [
        Case(
            "ingest-log with an Infinity line",
            ["ingest-log", "{X}", "-o", "{OUT}"],
            code=0,
            make=_ingest_infinity,
        )
    ]


def _check_accepted(case: Case, d: Path) -> list[str]:
    out = d / "out.json"
    if not out.exists():
        return ["no record written"]
    run = json.loads(out.read_text())
    low = [x for la in run["launches"] for v in la["samples"].values() for x in v if not x > 0]
    return [f"samples that are not positive: {low[:3]}"] if low else []


CASES = _record_cases() + _option_cases() + _accepted_cases()


def outcome(case: Case, res: dict[str, Any], d: Path) -> str:
    """right, traceback, hang, silently wrong or wrong (the module's docstring)."""
    if res["hung"]:
        return "hang"
    if "Traceback" in res["stderr"]:
        return "traceback"
    if case.code in (1, 3):  # a verdict (REGRESSED, INCONCLUSIVE): its exit code is the answer
        return "right" if res["rc"] == case.code else "silently wrong" if res["rc"] in (0, 1) else "wrong"
    wrong = problems(case, res, d) + (_check_accepted(case, d) if case.code == 0 and res["rc"] == 0 else [])
    if not wrong:
        return "right"
    return "silently wrong" if res["rc"] in (0, 1) and res["rc"] != case.code or case.code == 0 else "wrong"


def count(cases: list[Case], tmp: Path) -> tuple[Counter[str], dict[str, str]]:
    results = run_cases(cases, tmp)
    tally: Counter[str] = Counter()
    bad: dict[str, str] = {}
    for i, (c, res) in enumerate(zip(cases, results, strict=True)):
        o = outcome(c, res, tmp / f"c{i}")
        tally[o] += 1
        if o != "right":
            bad[c.id] = f"{o}: {'; '.join(problems(c, res, tmp / f'c{i}'))[:200]}"
    return tally, bad


@pytest.mark.slow
def test_the_adversarial_cases(tmp_path: Path) -> None:
    tally, bad = count(CASES, tmp_path)
    report = "\n".join(f"{k}: {v}" for k, v in bad.items())
    print(
        f"\n{len(CASES)} cases: "
        + ", ".join(f"{tally[k]} {k}" for k in ("right", "traceback", "hang", "silently wrong", "wrong"))
    )
    assert not bad, f"{len(bad)} of {len(CASES)} cases not right:\n{report}"


def test_the_suite_is_large_and_names_each_case_once() -> None:
    assert len(CASES) >= 150
    assert len({c.id for c in CASES}) == len(CASES)


def test_outcomes_are_told_apart(tmp_path: Path) -> None:
    """The counting can fail a case: a traceback, a hang, a success code for bad input, a wrong code."""
    c = Case("x", [])
    (tmp_path / "d").mkdir()
    d = tmp_path / "d"
    assert outcome(c, {"hung": True, "stderr": "", "rc": None}, d) == "hang"
    assert (
        outcome(c, {"hung": False, "stderr": "Traceback (most recent call last):\n", "rc": 1}, d)
        == "traceback"
    )
    assert outcome(c, {"hung": False, "stderr": "", "rc": 0}, d) == "silently wrong"
    assert outcome(c, {"hung": False, "stderr": "regdiag: error: x\n", "rc": 5}, d) == "wrong"
    assert outcome(c, {"hung": False, "stderr": "regdiag: error: x\n", "rc": 2}, d) == "right"
    ok = Case("y", [], code=0)
    assert outcome(ok, {"hung": False, "stderr": "", "rc": 0}, d) == "silently wrong"  # no record written


def main(argv: list[str]) -> None:
    import os
    import tempfile

    if "--root" in argv:  # the same cases against another checkout (its regdiag on the runner's path)
        os.environ["REGDIAG_TEST_ROOT"] = argv[argv.index("--root") + 1]
    cases = list(CASES)
    if "--all" in argv:
        from test_hostile_input import CASES as HOSTILE

        cases += HOSTILE
    with tempfile.TemporaryDirectory() as d:
        tally, bad = count(cases, Path(d))
    print(
        f"{len(cases)} cases: "
        + ", ".join(f"{tally[k]} {k}" for k in ("right", "traceback", "hang", "silently wrong", "wrong"))
    )
    for k, v in bad.items():
        print(f"  {k!r}: {v}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main(sys.argv[1:])


def test_the_baseline_store_survives_one_bad_entry(tmp_path: Path) -> None:
    """A stored file that is no longer readable (a lone surrogate an older regdiag stored, a status no
    launch has) is skipped with a warning; the other baselines are listed (it crashed the whole list)."""
    import os
    import subprocess

    home = tmp_path / "home"
    env = {**os.environ, "REGDIAG_HOME": str(home), "COLUMNS": "200"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "regdiag", *args], cwd=str(ROOT), env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    assert cli("baseline", "save", "good", str(RUN)).returncode == 0
    bad = copy.deepcopy(BASE)
    bad["probe"]["name"] = "\ud800"
    (home / "baselines" / "old.json").write_text(json.dumps(bad))
    r = cli("baseline", "list")
    assert r.returncode == 0, r.stderr
    assert "good" in r.stdout and "old" not in r.stdout
    assert r.stderr.startswith("warning: skipped baseline old:") and "surrogate" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
