"""regdiag.engine.precheck: `inspect` says what the installed engine's source holds, `check` takes the
same arguments (one signature, defined once) and refuses a target that does not exist."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from regdiag.engine import precheck
from regdiag.engine.precheck import check, inspect
from regdiag.errors import BadInput
from regdiag.hosts.local import LocalHost

WORKER = """
class A:
    def forward(self, batch):
        return {"accept_lens": 1}


class B:
    pass
"""


def test_check_and_inspect_share_one_signature() -> None:
    tree = ast.parse(Path(precheck.__file__).read_text(encoding="utf-8"))
    with_targets = [
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and "targets" in [a.arg for a in n.args.args]
    ]
    assert with_targets == ["inspect"]


def test_check_refuses_only_what_is_absent_with_inspects_arguments(tmp_path: Path) -> None:
    pkg = tmp_path / "fakeengine"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "worker.py").write_text(WORKER)
    env = {"PYTHONPATH": str(tmp_path)}
    targets = [
        ("verify", "fakeengine.worker:A.forward"),
        ("verify", "fakeengine.worker:B.forward"),  # one of a role's targets is enough
        ("graph", "fakeengine.worker:A.graph"),  # a graph-flag source is optional
    ]
    readers = [("accept", {"target": "fakeengine.worker:A.forward", "arg": "nope"})]
    seen = inspect(LocalHost(), targets, [], env, readers)
    assert [(f["target"].split(":")[1], f["state"]) for f in seen] == [
        ("A.forward", "ok"),
        ("B.forward", "missing"),
        ("A.graph", "missing"),
        ("A.forward", "missing"),  # the reader's argument: recorded, not refused
    ]
    found = check(LocalHost(), targets=targets, argv=[], env=env, readers=readers)
    assert [f.get("optional", False) for f in found] == [False, True, True, False]
    assert [{k: v for k, v in f.items() if k != "optional"} for f in found] == seen
    with pytest.raises(BadInput, match=r"^draft: fakeengine.worker:A.draft does not exist in the installed"):
        check(LocalHost(), [("draft", "fakeengine.worker:A.draft")], [], env)
    with pytest.raises(BadInput, match="module nomod.x is not installed for .*pass --python"):
        check(LocalHost(), [("draft", "nomod.x:A.draft")], [], env=env)
