"""The layering of docs/architecture.md, checked on the source: who may import what, and that the
bisect search, lab and runner never name a factor kind (kinds/ does)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "regdiag"


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def _files(*parts: str) -> list[Path]:
    return sorted(ROOT.joinpath(*parts).rglob("*.py"))


def test_only_cli_and_report_know_rich_and_typer():
    offenders = [
        str(p.relative_to(ROOT))
        for p in _files("regdiag")
        if p.parent.name not in ("cli", "report")
        and any(m.split(".")[0] in ("rich", "typer") for m in _imports(p))
    ]
    assert offenders == []


def test_probes_import_nothing_of_regdiag():
    assert [
        p.name
        for p in _files("probes")
        if any(m == "regdiag" or m.startswith("regdiag.") for m in _imports(p))
    ] == []


@pytest.mark.parametrize(
    "path",
    [PKG / "records.py", PKG / "json_bounds.py", PKG / "files.py", *_files("regdiag", "snapshot")],
    ids=lambda p: p.name,
)
def test_records_and_snapshot_need_only_the_standard_library_and_each_other(path):
    regdiag_imports = {m for m in _imports(path) if m.startswith("regdiag")}
    # probe_modules loads the probe kit's stdlib-only tables (NVML reasons, model shapes): travels in the bundle,
    # as does regdiag.version (the version string, nothing else).
    allowed = {
        "regdiag",
        "regdiag.records",
        "regdiag.json_bounds",
        "regdiag.files",
        "regdiag.probe_modules",
        "regdiag.version",
    } | {m for m in regdiag_imports if m.startswith("regdiag.snapshot")}
    assert regdiag_imports <= allowed
    assert not {m.split(".")[0] for m in _imports(path)} & {"torch", "numpy", "rich", "typer", "scipy"}


@pytest.mark.parametrize(
    "name", ["bisect/search.py", "bisect/lab.py", "bisect/run.py", "bisect/envs.py", "ab.py"]
)
def test_the_bisect_machinery_never_names_a_factor_kind(name):
    tree = ast.parse((PKG / name).read_text(encoding="utf-8"))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    kinds = {"COMMIT", "PACKAGE", "ENV", "CommitKind", "PackageKind", "EnvKind", "GpuClockKind"}
    assert not names & kinds, "imports or names a kind"

    # ... and never branches on a named kind (`f.kind == COMMIT`, `m.kind not in (COMMIT, PACKAGE)`,
    # `f["kind"] == "commit"`); dispatching through the registry (`kind_of(f)`) is the way.
    def is_kind(x: ast.expr) -> bool:
        return (isinstance(x, ast.Attribute) and x.attr == "kind") or (
            isinstance(x, ast.Subscript) and isinstance(x.slice, ast.Constant) and x.slice.value == "kind"
        )

    def is_named_kind(x: ast.expr) -> bool:
        if isinstance(x, (ast.Tuple, ast.List, ast.Set)):
            return any(is_named_kind(e) for e in x.elts)
        return (isinstance(x, ast.Name) and x.id in kinds) or (
            isinstance(x, ast.Constant) and x.value in ("commit", "package", "env", "gpu-clock")
        )

    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    operands = [(c, [c.left, *c.comparators]) for c in compares]
    assert [
        ast.unparse(c) for c, xs in operands if any(map(is_kind, xs)) and any(map(is_named_kind, xs))
    ] == []


# A function whose body runs past this many lines is doing several jobs: split it where the jobs meet.
# Declarations are not bodies: a typer command's option list is its signature, and an argparse
# parser's add_argument calls are one declaration each.
MAX_BODY_LINES = 60


def _body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    lines: set[int] = set()
    for stmt in body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "add_argument":
            continue
        lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return len(lines)


def test_no_function_body_runs_past_sixty_lines():
    long = []
    for path in _files("regdiag") + _files("probes"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = _body_lines(node)
                if n > MAX_BODY_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []


# A module past this many lines holds several jobs (STYLE.md: hyperfine keeps every file under 600): split
# it along them (probes/_spec_runner.py: its set-up and its report are modules of their own).
MAX_MODULE_LINES = 600
# A module being split along its jobs, named here until that lands (regdiag/compare.py was, issue 25:
# now regdiag/compare/); the test fails once a named one is short, so the entry cannot outlive the split.
LONG_MODULES_BEING_SPLIT: set[str] = set()


def test_no_module_runs_past_six_hundred_lines():
    lines = {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
        for p in _files("regdiag") + _files("probes")
    }
    long = {name: n for name, n in lines.items() if n > MAX_MODULE_LINES}
    assert {name: n for name, n in long.items() if name not in LONG_MODULES_BEING_SPLIT} == {}
    assert LONG_MODULES_BEING_SPLIT <= set(long), "split: drop it from LONG_MODULES_BEING_SPLIT"


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _regdiag_imports(path: Path, modules: set[str], root: Path = ROOT) -> set[str]:
    """The regdiag modules a file imports: at the top, inside a function (a deferred import still closes
    a circle) and under `if TYPE_CHECKING:` (a module whose types name another's cannot be read without it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            # `from pkg import mod` imports the module; `from mod import name`, the module it names
            out |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
    return (out & modules) - {name}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _loop(graph: dict[str, set[str]], circle: list[str]) -> str:
    """One way round a circle, `a -> b -> a`, for the failure to name."""
    members, path = set(circle), [circle[0]]
    seen = {circle[0]: [circle[0]]}
    while path:  # breadth first from the first member, until an import leads back to it
        nxt = []
        for m in path:
            for w in sorted(graph[m] & members):
                if w == circle[0]:
                    return " -> ".join([*seen[m], w])
                if w not in seen:
                    seen[w] = [*seen[m], w]
                    nxt.append(w)
        path = nxt
    return " -> ".join(circle)


# Circles known and not broken yet, each as its sorted modules, with why it stands and who breaks it;
# the test fails once a named one is gone, so an entry cannot outlive its circle. Keep it empty.
CIRCLES_BEING_BROKEN: list[list[str]] = []


def test_no_import_circles_among_regdiag_modules():
    # A circle means neither side can be read or tested without the other, and which one loads first
    # decides whether a name exists yet. Break one by moving what both need below both
    # (bisect/factor_base.py under factors.py and kinds/; hosts/bundle.py's BundleHost over base.py).
    paths = {_module_name(p): p for p in _files("regdiag")}
    graph = {m: _regdiag_imports(p, set(paths)) for m, p in paths.items()}
    circles = _circles(graph)
    assert [_loop(graph, c) for c in circles if c not in CIRCLES_BEING_BROKEN] == []
    assert [c for c in CIRCLES_BEING_BROKEN if c not in circles] == [], "broken: drop it from the list"


def test_the_circle_finder_sees_deferred_and_type_only_imports(tmp_path):
    pkg = tmp_path / "regdiag"
    pkg.mkdir()
    (pkg / "a.py").write_text("from regdiag.b import x\n", encoding="utf-8")
    (pkg / "b.py").write_text("def f():\n    from regdiag import a\n", encoding="utf-8")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from regdiag.d import D\n", encoding="utf-8"
    )
    (pkg / "d.py").write_text("from . import c\n", encoding="utf-8")
    (pkg / "e.py").write_text("import regdiag.a\n", encoding="utf-8")
    names = {"regdiag", *(f"regdiag.{n}" for n in "abcde")}
    graph = {f"regdiag.{n}": _regdiag_imports(pkg / f"{n}.py", names, tmp_path) for n in "abcde"}
    circles = _circles(graph)
    assert circles == [["regdiag.a", "regdiag.b"], ["regdiag.c", "regdiag.d"]]
    assert [_loop(graph, c) for c in circles] == [
        "regdiag.a -> regdiag.b -> regdiag.a",
        "regdiag.c -> regdiag.d -> regdiag.c",
    ]


def test_no_caller_asks_a_host_what_it_is():
    """A host kind says how it runs regdiag's code, builds environments and places launches (hosts/base.py);
    outside hosts/ nothing tests `host.via` or the class of a host."""

    def asks(node: ast.AST) -> bool:
        if isinstance(node, ast.Compare):
            return any(
                isinstance(x, ast.Attribute) and x.attr == "via" for x in [node.left, *node.comparators]
            )
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance" and node.args:
            arg, cls = node.args[0], ast.unparse(node.args[1]) if len(node.args) > 1 else ""
            return isinstance(arg, ast.Name) and arg.id in ("host", "target", "node") and "Host" in cls
        return False

    found = [
        f"{p.relative_to(ROOT)}:{n.lineno}"
        for p in _files("regdiag")
        if "hosts" not in p.relative_to(PKG).parts
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if asks(n)
    ]
    assert found == []


def test_one_launch_function_streams_every_launch():
    """A process on a host runs through measure/launch.py alone: a launch (its output read as it
    arrives) through `launch`, a helper command (git, ls, pip index, reading a hook's files) through
    `command`. Outside hosts/ and measure/launch.py no `.run(` is called on a host."""

    def on_a_host(call: ast.Call) -> bool:
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr == "run"):
            return False
        recv = func.value
        named = (
            recv.id if isinstance(recv, ast.Name) else recv.attr if isinstance(recv, ast.Attribute) else ""
        )
        streams = any(k.arg in ("on_stdout_line", "on_stderr_line") for k in call.keywords)
        return streams or named in ("host", "node", "target")

    found = [
        f"{p.relative_to(ROOT)}:{n.lineno}"
        for p in _files("regdiag")
        if "hosts" not in p.relative_to(PKG).parts and p.relative_to(PKG).as_posix() != "measure/launch.py"
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(n, ast.Call) and on_a_host(n)
    ]
    assert found == []


def test_one_table_of_throttle_reasons_named_as_the_nvml_bits() -> None:
    """compare's PHANTOM warnings and `snapshot --check` judge the same reasons, each one a bit that
    probes/_nvml.py decodes (the probes and the snapshot read NVML through that one file)."""
    from regdiag import phantom
    from regdiag.probe_modules import load
    from regdiag.snapshot import check

    bits = {name for _bit, name in load("_nvml").REASON_BITS}
    assert phantom.THROTTLE_REASONS == frozenset(check.THROTTLE_REASONS)
    assert set(check.THROTTLE_REASONS) <= bits and set(check.NOTE_REASONS) <= bits
    assert not set(check.THROTTLE_REASONS) & set(check.NOTE_REASONS)


def test_a_name_used_by_another_module_is_public():
    """A module imports only the public names of regdiag's others: what another module uses is part of
    its interface, and says so by its name (compare/runs.py took 18 underscore names from its siblings)."""
    found = [
        f"{p.relative_to(ROOT)}:{n.lineno} {a.name}"
        for p in _files("regdiag")
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("regdiag")
        for a in n.names
        if a.name.startswith("_") and not a.name.startswith("__")
    ]
    assert found == []


def test_no_formatting_is_skipped_in_regdiag():
    """Width goes into structure (a table, a dataclass, named parts), not past the formatter: no
    `# fmt: skip` in regdiag/ (85 when issue 36 was filed, 0 after it)."""
    skipped = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in _files("regdiag")
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if line.rstrip().endswith("# fmt: skip")
    ]
    assert skipped == []
