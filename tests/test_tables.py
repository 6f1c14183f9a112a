"""One table per concept, and its users tied to it: the engines, the key packages and their diff order,
the engine presets in --preset's help, what each probe loads, the protocol version, where probes/ is,
the fleet reading that every comparison carries, and the families of environment variables that a
snapshot ranks and a bisect may take from a record."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
import typer
from compare_helpers import launch, run_record, write

ROOT = Path(__file__).resolve().parent.parent


def test_the_engines_are_key_packages_and_the_diff_ranks_only_key_packages() -> None:
    from regdiag.snapshot import diff
    from regdiag.snapshot.engine import ENGINES
    from regdiag.snapshot.packages import KEY_PACKAGES, METADATA

    assert set(ENGINES) <= set(KEY_PACKAGES)
    # every library the diff ranks is a key package (whose version a snapshot reads) or NCCL's own field
    assert set(diff.LIBRARY_ORDER) <= set(KEY_PACKAGES) | set(METADATA)
    assert not hasattr(diff, "ENGINE_PACKAGES")


def test_the_preset_help_names_every_engine_preset_with_its_release() -> None:
    from regdiag.cli import app
    from regdiag.engine.presets import PRESETS, VERSIONS

    engine = typer.main.get_command(app).commands["probe"].commands["engine"]  # type: ignore[attr-defined]
    text = next(p.help for p in engine.params if "--preset" in p.opts)
    assert set(VERSIONS) == set(PRESETS)
    for name in PRESETS:
        assert f"{name} ({VERSIONS[name][1]})" in text


def _import_tops(path: Path) -> set[str]:
    tops = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            tops |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            tops.add(node.module.split(".")[0])
    return tops


def test_each_probe_declares_what_it_loads_and_the_probe_kit_imports_nothing_more() -> None:
    from regdiag.measure.probes import probe_loads, probe_table

    kit = ROOT / "probes"
    siblings = {p.stem for p in kit.glob("*.py")}
    imported = set().union(*(_import_tops(p) for p in kit.glob("*.py")))
    beyond = imported - set(sys.stdlib_module_names) - siblings - {"__future__"}
    for name in probe_table():
        loads = probe_loads(name)
        assert loads, f"{name} declares no LOADS"
        # imported where present only (try/except ImportError): pynvml for clock samples, triton for
        # the INT4 expert kernel
        assert beyond - {"pynvml", "triton"} <= {m.split(".")[0] for m in loads}, (name, beyond)
    assert probe_loads("engine") is None and probe_loads(None) is None


def test_one_protocol_version() -> None:
    from regdiag.measure import stream
    from regdiag.probe_modules import load

    assert stream.PROTOCOL == load("_protocol").PROTOCOL
    hook = ROOT / "probes" / "_engine_hook" / "regdiag_phase_timer.py"
    declared = [
        n.value.value
        for n in ast.parse(hook.read_text(encoding="utf-8")).body
        if isinstance(n, ast.Assign) and [getattr(t, "id", "") for t in n.targets] == ["PROTOCOL"]
    ]
    assert declared == [stream.PROTOCOL]  # the hook runs in the engine, without probes/_protocol.py
    literal = [  # nowhere else a protocol number written out: `"protocol": 1`
        f"{p.relative_to(ROOT)}:{n.lineno}"
        for p in [*ROOT.joinpath("regdiag").rglob("*.py"), *ROOT.joinpath("probes").rglob("*.py")]
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(n, ast.Dict)
        for k, v in zip(n.keys, n.values, strict=True)
        if isinstance(k, ast.Constant) and k.value == "protocol" and isinstance(v, ast.Constant)
    ]
    assert literal == []


def test_probes_is_found_in_one_place() -> None:
    """Only probe_modules.probes_dir() names the probes/ directory; everyone else asks it."""
    from regdiag.probe_modules import probes_dir

    assert probes_dir() == ROOT / "probes"
    named = [
        f"{p.relative_to(ROOT)}:{n.lineno}"
        for p in ROOT.joinpath("regdiag").rglob("*.py")
        if p.name != "probe_modules.py"
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(n, ast.BinOp)
        and isinstance(n.op, ast.Div)
        and isinstance(n.right, ast.Constant)
        and n.right.value == "probes"
    ]
    assert named == []


def test_one_table_of_env_families_for_the_snapshot_and_the_bisect() -> None:
    from regdiag.bisect.factors import is_setting
    from regdiag.snapshot.env import family
    from regdiag.snapshot.families import FAMILIES
    from regdiag.snapshot.shapes import harmless_value

    token = "mlx5_0:1,mlx5_1:1"  # readable only under a known family (the token rule)
    assert not harmless_value("OTHER_KNOB", token) and not is_setting("OTHER_KNOB", "1")
    for f in FAMILIES:
        name = f.prefix + "KNOB"
        assert is_setting(name, "1") is not f.loads_code, f
        assert (family(name) in ("nccl", "perf")) is f.ranked, f
        assert harmless_value(name, token), f
    for name in ("PYTHONPATH", "LD_PRELOAD", "GLIBC_TUNABLES"):  # a code-loading family is refused
        assert not is_setting(name, "1")
    # Nowhere else a list of the families written out: three of its prefixes in one literal.
    prefixes = {f.prefix for f in FAMILIES}
    listed = [
        f"{p.relative_to(ROOT)}:{n.lineno}"
        for p in ROOT.joinpath("regdiag").rglob("*.py")
        if p.name != "families.py"
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(n, (ast.Tuple, ast.List, ast.Set))
        and sum(isinstance(e, ast.Constant) and e.value in prefixes for e in n.elts) >= 3
    ]
    assert listed == []


def _node_run(slow: float, run_id: str) -> dict:
    """An A/B side run over two nodes, three pairs each; `slow` multiplies every cycle."""
    launches = []
    for pair in range(6):
        la = launch({"cycle": [10.0 * slow * (1 + 0.001 * k + 0.0005 * pair) for k in range(8)]}, index=pair)
        la.update(pair=pair, node=f"n{pair % 2 + 1}", order=pair % 2)
        launches.append(la)
    return run_record(launches, phases=[], run_id=run_id)


def test_compare_json_carries_the_fleet_reading_as_ab_does(tmp_path: Path, capsys) -> None:
    from regdiag.cli import app
    from regdiag.compare import compare_runs

    a, b = _node_run(1.0, "a"), _node_run(1.2, "b")
    c = compare_runs(a, b)
    assert c.fleet is not None and [n.node for n in c.fleet.nodes] == ["n1", "n2"]
    assert compare_runs(a, b, host_reading=False).fleet is not None
    cmd = typer.main.get_command(app).commands["compare"]  # type: ignore[attr-defined]
    args = ["--json", str(write(tmp_path / "a.json", a)), str(write(tmp_path / "b.json", b))]
    assert cmd.main(args=args, standalone_mode=False) == 1  # REGRESSED (typer.Exit's code, returned)
    out = json.loads(capsys.readouterr().out)
    assert [n["node"] for n in out["fleet"]["nodes"]] == ["n1", "n2"]
    assert out["fleet"]["pooled"]["ratio"] == pytest.approx(1.2, rel=1e-3)
    single = compare_runs(
        run_record([launch({"cycle": [1.0, 1.1]}, index=i) for i in range(3)]),
        run_record([launch({"cycle": [1.0, 1.1]}, index=i) for i in range(3)]),
    )
    assert single.fleet is None and "fleet" not in single.to_dict()
