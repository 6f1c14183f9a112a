"""bisect's pieces on literal data and real files: sides and factors, theta and its CI, the orders of
commits and versions, the probe protocol, the journal. No launches here (see test_bisect_*.py)."""

from __future__ import annotations

import copy
import json
import math
import sys

import pytest
from bisect_helpers import make_repo, make_wheel

from regdiag.bisect import classify as C
from regdiag.bisect.envs import Builder
from regdiag.bisect.factors import COMMIT, ENV, PACKAGE, diff, load_side, parse_spec
from regdiag.bisect.journal import Journal
from regdiag.bisect.lab import builder_for
from regdiag.bisect.measure import USAGE, Launch, run_launch
from regdiag.bisect.ranges import commits_between, resolve_commit, versions_between
from regdiag.bisect.run import Request, make_plan, version_notes
from regdiag.bisect.search import order_from_middle
from regdiag.errors import BadInput
from regdiag.hosts.local import LocalHost
from regdiag.measure.launch import wrap_env
from regdiag.records import save_record

# --------------------------------------------------------------------------------------- sides


def test_spec_string_parses_packages_env_unset_and_commit() -> None:
    s = parse_spec(
        "sgl-kernel==0.3.5 Flashinfer_Python==0.2.11 NCCL_PROTO=LL 'X=a b' -NCCL_ALGO commit=bba2fc4"
    )
    assert s.packages == {"sgl-kernel": "0.3.5", "flashinfer-python": "0.2.11"}
    assert s.env == {"NCCL_PROTO": "LL", "X": "a b", "NCCL_ALGO": None}
    assert s.commit == "bba2fc4"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty spec"),
        ("torch>=2", "cannot read"),
        ("torch==", "is not NAME==VERSION"),
        ("1X=2", "not an environment variable name"),
        ("A=1 A=2", "given twice"),
        ("commit=", "needs a revision"),
        ("'unterminated", "cannot split"),
    ],
)
def test_bad_spec_is_one_line(text: str, needle: str) -> None:
    with pytest.raises(BadInput) as e:
        parse_spec(text, "--good")
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_diff_orders_commit_packages_env_and_holds_the_rest() -> None:
    g = parse_spec("commit=a1 b-pkg==1.0 a-pkg==2.0 NCCL_PROTO=LL OMP_NUM_THREADS=4 SAME=1")
    b = parse_spec("commit=b2 b-pkg==1.1 a-pkg==2.0 NCCL_PROTO=Simple SAME=1")
    d = diff(g, b)
    assert [(f.kind, f.name) for f in d.factors] == [
        (COMMIT, "commit"),
        (PACKAGE, "b-pkg"),
        (ENV, "NCCL_PROTO"),
        (ENV, "OMP_NUM_THREADS"),
    ]
    assert d.factors[-1].bad is None  # absent on the bad side: unset there
    assert d.same_env == {"SAME": "1"} and d.same_packages == {"a-pkg": "2.0"}


def test_package_pinned_on_one_side_only_is_refused() -> None:
    with pytest.raises(BadInput, match="pinned on one side only"):
        diff(parse_spec("x==1 A=1"), parse_spec("A=2"))


def _snapshot() -> dict:
    from regdiag.snapshot import collect

    return collect(timeout_s=5.0)


def test_sides_from_real_snapshot_and_run_records(tmp_path) -> None:
    snap = _snapshot()
    bad = copy.deepcopy(snap)
    pk = bad["groups"]["packages"]["fields"]
    name = next(n for n, f in pk.items() if isinstance(f.get("value"), str) and n != "regdiag")
    pk[name] = {"status": "ok", "value": "999.0"}
    env = bad["groups"]["env"]["fields"]
    env["NCCL_PROTO"] = {"status": "ok", "value": "Simple"}
    env["NCCL_SECRET_KEY"] = {"status": "ok", "value": "<redacted>"}
    bad["groups"]["env"]["redacted"] = ["NCCL_SECRET_KEY"]
    save_record(tmp_path / "good.json", snap)
    run = {"schema": "regdiag.run/1", "launches": [], "snapshot_before": bad}
    save_record(tmp_path / "bad-run.json", run)
    d = diff(
        load_side(str(tmp_path / "good.json"), "--good"), load_side(str(tmp_path / "bad-run.json"), "--bad")
    )
    kinds = {(f.kind, f.name): (f.good, f.bad) for f in d.factors}
    assert kinds[(PACKAGE, name)][1] == "999.0"
    assert kinds[(ENV, "NCCL_PROTO")][1] == "Simple"
    assert (ENV, "NCCL_SECRET_KEY") not in kinds
    assert any("NCCL_SECRET_KEY" in n and "redacted" in n for n in d.notes)


def test_side_file_problems_are_bad_input(tmp_path) -> None:
    (tmp_path / "empty.json").write_text("")
    with pytest.raises(BadInput, match="empty"):
        load_side(str(tmp_path / "empty.json"), "--good")
    save_record(tmp_path / "run.json", {"schema": "regdiag.run/1", "launches": []})
    with pytest.raises(BadInput, match="no snapshot_before"):
        load_side(str(tmp_path / "run.json"), "--bad")
    with pytest.raises(BadInput, match="no such file"):
        load_side(str(tmp_path / "missing.json"), "--bad")


# --------------------------------------------------------------------------------------- plan


def test_plan_makes_factors_of_differences_and_holds_what_both_sides_share() -> None:
    req = Request(
        good="NCCL_PROTO=LL OMP_NUM_THREADS=1 -NCCL_ALGO",
        bad="NCCL_PROTO=Simple OMP_NUM_THREADS=1 NCCL_ALGO=Tree",
    )
    plan = make_plan(req)
    assert [(f.kind, f.name, f.good, f.bad) for f in plan.factors] == [
        (ENV, "NCCL_ALGO", None, "Tree"),
        (ENV, "NCCL_PROTO", "LL", "Simple"),
    ]
    assert plan.fixed_env == {"OMP_NUM_THREADS": "1"}
    assert plan.where.python == sys.executable and plan.where.host is None
    with pytest.raises(BadInput, match="do not differ"):
        make_plan(Request(good="NCCL_PROTO=LL", bad="NCCL_PROTO=LL"))
    with pytest.raises(BadInput, match="--launches must be at least 2"):
        make_plan(Request(good="A=1", bad="A=2", launches=1))


def test_version_notes_name_a_shared_package_that_differs_where_the_bisect_runs() -> None:
    same = {"torch": "2.4.0", "numpy": "2.0.1", "triton": "3.0.0"}
    here = {"torch": "2.4.0", "numpy": "1.26.4"}
    assert version_notes(same, here, remote=False) == [
        "numpy is 2.0.1 on both sides but 1.26.4 here; the bisect runs with this machine's",
        "triton is 3.0.0 on both sides but not installed here; the bisect runs with this machine's",
    ]
    assert version_notes(same, here, remote=True)[0].endswith("the bisect runs with that host's")
    assert version_notes({"torch": "2.4.0"}, here, remote=False) == []


def test_builder_for_this_machine_layers_on_the_requests_python(tmp_path) -> None:
    req = Request(good="A=1", bad="A=2", setup="make", find_links=str(tmp_path), installer="pip")
    b = builder_for(req, "/src/engine")
    assert isinstance(b, Builder)
    assert (b.base_python, b.repo, b.setup, b.find_links, b.installer) == (
        sys.executable, "/src/engine", "make", str(tmp_path), "pip",
    )  # fmt: skip
    req.python = "/opt/py/bin/python3"
    assert builder_for(req, None).base_python == "/opt/py/bin/python3"


# --------------------------------------------------------------------------------------- theta


def test_theta_on_literal_launches() -> None:
    good, bad = [10.0, 10.1, 9.9], [14.0, 14.1, 13.9]
    mid = [math.sqrt(10 * 14)] * 2 + [math.sqrt(10.1 * 14.1)]  # geometric middle: theta 1/2
    t = C.theta_point(("x", mid), ("g", good), ("b", bad))
    assert t.theta == pytest.approx(0.5, abs=0.01)
    assert t.lo < 0.5 < t.hi
    assert C.classify(t, final=False) == C.MORE
    assert C.classify(t, final=True) == C.PARTIAL  # truly between: excludes 0 and 1
    t_bad = C.theta_point(("x", [14.05, 13.95, 14.0]), ("g", good), ("b", bad))
    assert C.classify(t_bad, final=False) == C.BAD and t_bad.lo > 0.5
    t_good = C.theta_point(("x", [10.0, 10.05, 9.95]), ("g", good), ("b", bad))
    assert C.classify(t_good, final=False) == C.GOOD and t_good.hi < 0.5


def test_theta_noisy_at_cap_is_inconclusive_never_a_guess() -> None:
    good, bad = [10.0, 11.0], [12.0, 13.0]
    t = C.theta_point(("x", [10.5, 12.8]), ("g", good), ("b", bad))
    assert C.classify(t, final=True) == C.INCONCLUSIVE


def test_theta_effect_counts_a_shared_environment_once() -> None:
    g, b, lo = [10.0, 10.1, 9.95], [14.0, 14.1, 13.95], [10.0, 10.1, 9.9]
    same = C.theta_effect(("alone", [14.0, 14.05, 13.9]), ("g", g), ("b", b), ("g", g))
    assert same.theta == pytest.approx(1.0, abs=0.02)
    assert set(same.launches) == {"alone", "g", "b"}
    none = C.theta_effect(("alone", [10.0, 10.05, 9.9]), ("g", g), ("b", b), ("lo", lo))
    assert C.classify(none, final=False) == C.GOOD


def test_theta_needs_two_launches_per_group() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        C.theta_point(("x", [1.0]), ("g", [1.0, 1.1]), ("b", [2.0, 2.1]))


def test_endpoint_regression_verdicts() -> None:
    assert C.regression([10, 10.1, 9.9], [14, 14.1, 13.9], 0.02, False).verdict == C.REPRODUCED
    assert C.regression([10, 10.01, 9.99], [10.0, 10.02, 9.98], 0.02, False).verdict == C.NOT_REPRODUCED
    assert C.regression([10, 12, 9], [11, 13, 9.5], 0.02, False).verdict == C.MORE
    assert C.regression([10, 12, 9], [11, 13, 9.5], 0.02, True).verdict == C.INCONCLUSIVE
    assert C.regression([14, 14.1, 13.9], [10, 10.1, 9.9], 0.02, False).verdict == C.NOT_REPRODUCED


def test_order_from_middle_visits_every_inner_point_once() -> None:
    assert order_from_middle(0, 8) == [4, 5, 3, 6, 2, 7, 1]
    assert order_from_middle(3, 5) == [4]
    assert sorted(order_from_middle(0, 15)) == list(range(1, 15))


# ------------------------------------------------------------------------------ commits, versions


def test_commits_between_on_a_real_history(tmp_path) -> None:
    repo, shas = make_repo(tmp_path, 6)
    assert commits_between(str(repo), shas[1], shas[5]) == shas[1:6]
    assert resolve_commit(str(repo), shas[3][:8]) == shas[3]
    assert commits_between(str(repo), shas[4], shas[2]) == [shas[4], shas[2]]  # not a descendant
    with pytest.raises(BadInput, match="is not in"):
        resolve_commit(str(repo), "deadbeef")


def test_versions_between_from_a_find_links_directory(tmp_path) -> None:
    for v in ("1.0", "1.1", "1.2rc1", "1.2", "1.10", "2.0", "3.0"):
        make_wheel(tmp_path, "slow_pkg", v, {})
    (tmp_path / "slow-pkg-1.5.tar.gz").write_bytes(b"")
    (tmp_path / "other-1.3-py3-none-any.whl").write_bytes(b"")
    got = versions_between("slow-pkg", "1.0", "2.0", find_links=str(tmp_path), index_url=None)
    assert got == ["1.0", "1.1", "1.2", "1.5", "1.10", "2.0"]
    down = versions_between("slow-pkg", "2.0", "1.1", find_links=str(tmp_path), index_url=None)
    assert down == ["2.0", "1.10", "1.5", "1.2", "1.1"]


# ------------------------------------------------------------------------------------- protocol


def _script(tmp_path, body: str) -> list[str]:
    p = tmp_path / "p.py"
    p.write_text("import json, sys\nout = lambda o: print(json.dumps(o), flush=True)\n" + body)
    return [sys.executable, str(p)]


def test_a_launch_is_reduced_to_medians_of_kept_cycles(tmp_path) -> None:
    argv = _script(
        tmp_path,
        """
out({"type": "header", "protocol": 1, "probe": "t"})
out({"type": "cycle", "i": 0, "warmup": True, "t": {"cycle": 99.0, "a": 99.0}})
for i, (c, a) in enumerate([(3.0, 1.0), (3.2, 1.2), (9.0, 1.1)]):
    out({"type": "cycle", "i": i + 1, "t": {"cycle": c, "a": a}})
out({"type": "cycle", "i": 9, "bare": True, "t": {"cycle": 50.0}})
out({"type": "footer", "cycles": 3})
""",
    )
    la = run_launch(LocalHost(), argv, "cycle")
    assert la.status == "ok" and la.cycles == 3
    assert la.medians == {"cycle": 3.2, "a": 1.1}
    assert run_launch(LocalHost(), argv, "verify").error == "no metric 'verify' in the output (has cycle, a)"


def test_launch_failures_skip_and_usage(tmp_path) -> None:
    host = LocalHost()
    skip = run_launch(host, _script(tmp_path, "sys.exit(125)"), "cycle")
    assert skip.status == "skip" and "125" in skip.error
    nofooter = run_launch(host, _script(tmp_path, 'out({"type": "cycle", "t": {"cycle": 1.0}})'), "cycle")
    assert nofooter.status == "error" and "footer" in nofooter.error
    usage = _script(
        tmp_path, 'out({"type": "error", "kind": "usage", "message": "bad --preset"})\nsys.exit(2)'
    )
    assert run_launch(host, usage, "cycle").error == USAGE + "bad --preset"
    crash = run_launch(host, _script(tmp_path, "sys.stderr.write('boom\\n'); sys.exit(3)"), "cycle")
    assert crash.status == "error" and "status 3" in crash.error and "boom" in crash.error


def test_unsetting_variables_goes_through_env_u() -> None:
    assert wrap_env(["python", "x.py"], ["B", "A"]) == ["env", "-u", "A", "-u", "B", "--", "python", "x.py"]
    assert wrap_env(["python"], []) == ["python"]


# -------------------------------------------------------------------------------------- journal


def _launch(v: float) -> Launch:
    return Launch("ok", {"cycle": v}, 10, 0.1, 0)


def test_journal_refuses_overwrite_and_mismatched_resume(tmp_path) -> None:
    path = tmp_path / "j.jsonl"
    j = Journal(path, {"metric": "cycle"}, resume=False)
    j.launch("p1", 0, _launch(1.0), "good")
    with pytest.raises(BadInput, match="being written by another regdiag"):
        Journal(path, {"metric": "cycle"}, resume=True)
    j.close()  # what the end of the first bisect's process does
    with pytest.raises(BadInput, match="already exists"):
        Journal(path, {"metric": "cycle"}, resume=False)
    with pytest.raises(BadInput, match="different inputs.*metric"):
        Journal(path, {"metric": "verify"}, resume=True)
    with pytest.raises(BadInput, match="no journal"):
        Journal(tmp_path / "none.jsonl", {"metric": "cycle"}, resume=True)
    again = Journal(path, {"metric": "cycle"}, resume=True)
    assert [la.medians["cycle"] for la in again.launches["p1"]] == [1.0]


def test_journal_survives_a_torn_last_line(tmp_path) -> None:
    path = tmp_path / "j.jsonl"
    j = Journal(path, {"m": 1}, resume=False)
    j.launch("p", 0, _launch(1.0), "good")
    j.close()
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"type": "launch", "point": "p", "ind')  # kill -9 in the middle of a write
    j2 = Journal(path, {"m": 1}, resume=True)
    assert len(j2.launches["p"]) == 1
    j2.launch("p", 1, _launch(2.0), "good")
    j2.close()
    j3 = Journal(path, {"m": 1}, resume=True)
    assert [la.medians["cycle"] for la in j3.launches["p"]] == [1.0, 2.0]


def test_journal_replay_checks_decisions_instead_of_rewriting(tmp_path) -> None:
    path = tmp_path / "j.jsonl"
    j = Journal(path, {"m": 1}, resume=False)
    j.decision({"what": "endpoints", "verdict": "REPRODUCED"})
    j.close()
    j2 = Journal(path, {"m": 1}, resume=True)
    j2.decision({"what": "endpoints", "verdict": "NOT-REPRODUCED"})
    j2.decision({"what": "factors", "verdict": "BAD"})
    assert j2.mismatches and "endpoints" in j2.mismatches[0]
    kinds = [json.loads(x)["type"] for x in path.read_text().splitlines()]
    assert kinds == ["start", "decision", "decision"]
