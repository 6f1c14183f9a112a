"""Reports at 80, 60 and 40 columns (a CI log, a split pane), on a stdout that cannot write UTF-8, and
the demo in a log and in a terminal. Every call is the real CLI in a subprocess; the names, ids,
numbers and units each report must show come from the same command's --json (or the record), and
each must appear whole: a word never split across lines, a table cell never cut or elided, a number
beside its unit. One number per run: the probe's progress and summary, baseline list, compare and
the HTML report show the same run value (stats.run_value)."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, run_cli
from terminal_screen import Screen, python_cli, run_in_pty

WIDTHS = (80, 60, 40)
EAGLE_A = "baselines/h200-kimi-slice-eagle-vgraph-on-a.json"
EAGLE_OFF = "baselines/h200-kimi-slice-eagle-vgraph-off.json"
COLL_A = "baselines/h200x2-collectives/coll-default.json"
COLL_B = "baselines/h200x2-collectives/coll-p2p-off.json"
ELAPSED = re.compile(r"^\[ *\d+s\] ")


def tiny_probe(cycles: int) -> list[str]:
    """The tiny CPU spec-decode probe's command line, `cycles` measured cycles after one dropped."""
    return [
        "probe",
        "spec-decode",
        "--preset",
        "tiny",
        "--context",
        "64",
        "--cycles",
        str(cycles),
        "--warmup",
        "1",
    ]


def _env(cols: int, **more: str) -> dict[str, str]:
    return {"COLUMNS": str(cols), "TERM": "dumb", **more}


def _fits(out: str, width: int) -> None:
    """No line is cut or elided; a line runs past the width only by one word too long for any line
    (a path, a hash), which then stands whole."""
    assert "\u2026" not in out, "an elided cell"
    for ln in out.splitlines():
        if len(ln) > width:
            last_space = ln.rstrip().rfind(" ")
            assert last_space < width, f"a line of several words past {width} columns: {ln!r}"


def _lines_with(out: str, token: str) -> list[str]:
    return [ln for ln in out.splitlines() if token in ln]


def _whole(out: str, token: str) -> None:
    """`token` (which may hold spaces: "9.44 ms", "[+155.6, +537.0]") stands on one line."""
    assert _lines_with(out, token), f"{token!r} is not whole on any line"


def _fmt_estimate(m: dict[str, Any]) -> list[str]:
    from regdiag.report import text as T

    e = m["estimate"]
    unit = f" {m['unit']}" if m["unit"] else ""
    d = T.decimals(e["old_center"], e["new_center"])
    return [
        T.fixed(e["old_center"], d) + unit,
        T.fixed(e["new_center"], d) + unit,
        T.pct(e["ratio"]),
        T.ci(e["lo"], e["hi"]),
        T.pval(m["p_adjusted"]),
        m["verdict"],
    ]


@pytest.mark.cli
@pytest.mark.parametrize("width", WIDTHS)
def test_compare_keeps_every_name_number_and_unit_whole(width: int) -> None:
    d = json.loads(run_cli("compare", EAGLE_A, EAGLE_OFF, "--allow-mismatch", "--json").stdout)
    p = run_cli("compare", EAGLE_A, EAGLE_OFF, "--allow-mismatch", env=_env(width))
    assert p.returncode == 1, p.stderr  # REGRESSED, as under --json
    out = p.stdout
    _fits(out, width)
    for m in d["metrics"]:
        assert re.search(rf"^\s*{m['name']}\b", out, re.M), f"metric {m['name']} not on a line of its own"
        for token in _fmt_estimate(m):
            _whole(out, token)
    # the accept_len unit stays with its number: no line that is a unit alone (a phantom table row)
    units = {m["unit"] for m in d["metrics"] + d["context"] if m["unit"]}
    assert not [ln for ln in out.splitlines() if ln.strip() in units]
    for m in d["context"]:  # context metrics (experts_verify): named whole too
        assert re.search(rf"^\s*{m['name']}\b", out, re.M), m["name"]


@pytest.mark.launch
@pytest.mark.parametrize("width", WIDTHS)
def test_a_collectives_compare_keeps_sizes_and_units_whole(width: int) -> None:
    p = run_cli("compare", COLL_A, COLL_B, "--allow-mismatch", env=_env(width))
    d = json.loads(run_cli("compare", COLL_A, COLL_B, "--allow-mismatch", "--json").stdout)
    out = p.stdout
    _fits(out, width)
    from regdiag.report import text as T

    for r in d["sizes"]:
        size = T.human_bytes(r["bytes"])
        assert _lines_with(out, size), size
        lat = r["latency"]
        if lat and lat.get("old") is not None:
            dd = T.decimals(lat["old"], lat["new"])
            old = T.fixed(lat["old"], dd)
            assert _lines_with(out, old), old  # the latency whole, its unit with it or in its header


@pytest.mark.cli
@pytest.mark.parametrize("width", WIDTHS)
def test_explain_keeps_the_roofline_whole(width: int) -> None:
    d = json.loads(run_cli("explain", EAGLE_OFF, "--json").stdout)
    out = run_cli("explain", EAGLE_OFF, env=_env(width)).stdout
    _fits(out, width)
    phases = [p["phase"] for p in d["phases"]]
    assert phases
    for ph in phases:
        assert re.search(rf"^\s*{ph}\b", out, re.M), (width, ph)
    assert _lines_with(out, "roofline at")


@pytest.mark.launch
def test_the_accept_len_unit_is_no_table_row_at_80_columns(tmp_path: Path) -> None:
    """A run whose accept_len has a unit (tokens/step, as the probe writes it now): at 80 columns the
    unit stayed behind on a line of its own under the table, read as one more row."""
    runs = []
    for side in ("a", "b"):
        out = tmp_path / f"{side}.json"
        r = run_cli(
            *tiny_probe(6),
            *("--launches", "2", "--no-snapshot", "-o", str(out)),
            env=_env(80),
        )
        assert r.returncode == 0, r.stderr
        runs.append(str(out))
    for width in WIDTHS:
        p = run_cli("compare", *runs, env=_env(width))
        _fits(p.stdout, width)
        assert "tokens/step" in p.stdout
        assert not [
            ln for ln in p.stdout.splitlines() if ln.strip() in ("tokens/step", "tokens/step tokens/step")
        ]
        assert _lines_with(p.stdout, "accept_len")


def _snapshot(path: Path, env: dict[str, str]) -> None:
    r = run_cli("snapshot", "--json", "-o", str(path), env=env)
    assert r.returncode == 0, r.stderr


@pytest.mark.cli
def test_diff_never_splits_a_name_or_a_hash(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _snapshot(a, {"PYTHONDONTWRITEBYTECODE": "1"})
    _snapshot(
        b, {"PYTHONDONTWRITEBYTECODE": "x", "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "NCCL_PROTO": "Simple"}
    )
    items = json.loads(run_cli("diff", str(a), str(b), "--json").stdout)
    items = items.get("differences", items) if isinstance(items, dict) else items
    names = {it["field"] if it["group"] == "env" else f"{it['group']}.{it['field']}" for it in items}
    assert {"PYTHONDONTWRITEBYTECODE", "CUBLAS_WORKSPACE_CONFIG"} <= names
    for extra in (["baselines/h200-snapshot.json", "baselines/h200x2-snapshot.json"], [str(a), str(b)]):
        d = json.loads(run_cli("diff", *extra, "--json").stdout)
        d = d.get("differences", d) if isinstance(d, dict) else d
        for width in WIDTHS:
            out = run_cli("diff", *extra, env=_env(width)).stdout
            _fits(out, width)
            words = set(out.split())
            for it in d:
                name = it["field"] if it["group"] == "env" else f"{it['group']}.{it['field']}"
                assert name in words, (width, name)
                for side in ("old", "new"):
                    v = it[side]
                    if isinstance(v, str):  # every word of a value whole: sha256:..., a commit, a path
                        missing = [w for w in v.split() if w not in words]
                        assert not missing, (width, name, missing)


@pytest.mark.cli
def test_runs_keep_ids_and_created_whole_at_every_width(tmp_path: Path) -> None:
    home = {"REGDIAG_HOME": str(tmp_path)}
    for log in ("sglang_decode_dot", "vllm_older"):
        assert run_cli("ingest-log", f"tests/data/{log}.log", env={**_env(80), **home}).returncode == 0
    items = json.loads(run_cli("runs", "--json", env=home).stdout)
    items = items.get("runs", items) if isinstance(items, dict) else items
    for width in WIDTHS:
        out = run_cli("runs", env={**_env(width), **home}).stdout
        _fits(out, width)
        for r in items:
            created = str(r["created"])[:16].replace("T", " ")
            assert r["id"] in out.split(), (width, r["id"])
            assert _lines_with(out, f"created {created}") or _lines_with(out, created), (width, created)


def _run_value_line(stdout: str, metric: str) -> str:
    line = next(ln for ln in stdout.splitlines() if re.match(rf"^\s*{metric}\b", ln))
    if line.strip() == metric:  # a block: the numbers on the next line
        line = stdout.splitlines()[stdout.splitlines().index(line) + 1]
    return line


@pytest.mark.launch
def test_one_number_per_run_in_progress_summary_baseline_compare_and_html(tmp_path: Path) -> None:
    home = {"REGDIAG_HOME": str(tmp_path / "home")}
    rec = tmp_path / "r.json"
    p = run_cli(
        *tiny_probe(6),
        *("--launches", "3", "--no-snapshot", "-o", str(rec)),
        env={**_env(40), **home},
    )
    assert p.returncode == 0, p.stderr
    _fits(p.stdout, 40)
    cmp = json.loads(run_cli("compare", str(rec), str(rec), "--json", env=home).stdout)
    cycle = next(m for m in cmp["metrics"] if m["name"] == "cycle")
    value = cycle["estimate"]["old_center"]
    shown = f"{value:.4g}"
    # the probe's summary (blocks at 40 columns) and its last progress line
    assert f"run {shown} ms" in _run_value_line(p.stdout, "cycle") or f"{shown} ms" in p.stdout
    progress = [ln for ln in p.stderr.splitlines() if ELAPSED.match(ln) and ": ok, " in ln]
    assert progress[-1].endswith(f", run {shown}"), progress[-1]
    words = " ".join(p.stdout.split())  # wrapped between words at 40 columns
    assert words.count("geometric mean of the launch medians") == 1  # the estimator, named once
    # baseline list and the HTML report
    assert run_cli("baseline", "save", "tiny", str(rec), env=home).returncode == 0
    bl = run_cli("baseline", "list", env={**_env(80), **home}).stdout
    assert f"cycle {shown} ms" in " ".join(bl.split())
    html = tmp_path / "c.html"
    assert run_cli("compare", str(rec), str(rec), "--html", str(html), env=home).returncode in (0, 3)
    from regdiag.report import text as T

    d = T.decimals(value, value)
    page = html.read_text(encoding="utf-8")
    assert f"{T.fixed(value, d)} \u2192 {T.fixed(value, d)} ms" in page
    # the strip charts' axes carry their units
    assert re.findall(r'class="unit">([^<]*)<', page).count("ms") >= 4


REPORTS = [
    (["compare", EAGLE_A, EAGLE_OFF, "--allow-mismatch"], 1),
    (["compare", EAGLE_A, EAGLE_OFF, "--allow-mismatch", "--markdown"], 1),
    (["compare", COLL_A, COLL_B, "--allow-mismatch"], None),
    (["diff", "baselines/h200-snapshot.json", "baselines/h200x2-snapshot.json"], 0),
    (["explain", EAGLE_OFF], None),
    (["ingest-log", "tests/data/vllm_v1.log"], 0),
    (["runs"], 0),
    (["baseline", "list"], 0),
    (["--help"], 0),
    (["compare", "--help"], 0),
]


@pytest.mark.cli
@pytest.mark.parametrize(
    "args,code", REPORTS, ids=lambda x: " ".join(x[:2]) if isinstance(x, list) else str(x)
)
def test_an_ascii_stdout_gets_ascii_arrows_and_the_real_exit_code(args: list[str], code: int | None) -> None:
    utf = run_cli(*args, env=_env(80, PYTHONIOENCODING="utf-8"))
    r = subprocess.run(
        [sys.executable, "-m", "regdiag", *args],
        capture_output=True,
        env={**os.environ, **_env(80), "PYTHONIOENCODING": "ascii"},
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == utf.returncode == (utf.returncode if code is None else code), r.stderr[-2000:]
    assert b"Traceback" not in r.stderr
    r.stdout.decode("ascii")  # nothing above ASCII reached the stream
    if "\u2192" in utf.stdout:
        assert b"->" in r.stdout


@pytest.mark.cli
def test_a_probe_summary_on_an_ascii_stdout(tmp_path: Path) -> None:
    r = subprocess.run(
        python_cli(
            *tiny_probe(4),
            *("--launches", "1", "--no-snapshot", "-o", str(tmp_path / "r.json")),
        ),
        capture_output=True,
        env={**os.environ, **_env(60), "PYTHONIOENCODING": "ascii"},
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-2000:]
    out = r.stdout.decode("ascii")
    assert "run: the geometric mean of the launch medians" in out and " | " in out  # "\u00b7" as "|"


HEADINGS = [
    "probe spec-decode --preset tiny: the good environment",
    "probe spec-decode --preset tiny: the bad environment",
    "compare good bad: is it real, and where?",
    "explain bad: regression or physics?",
]


@pytest.mark.slow
def test_the_demo_reads_cleanly_in_a_log(tmp_path: Path) -> None:
    """stdout and stderr into one file, as CI and nohup keep them."""
    log = tmp_path / "demo.log"
    with log.open("w") as f:
        p = subprocess.run(
            python_cli("demo", "--launches", "2"),
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, **_env(80), "REGDIAG_HOME": str(tmp_path / "home")},
            cwd=ROOT,
            timeout=900,
        )
    text = log.read_text(encoding="utf-8")
    assert p.returncode in (0, 3), text[-3000:]
    assert "\x1b" not in text
    lines = text.splitlines()
    for h in HEADINGS:
        assert h in lines, h  # each step's heading whole, on a line of its own
    assert any(ln.startswith("bisect --metric ") for ln in lines)
    by_hand = lines.index("each step by hand:")
    # the commands after it are one line each, to copy; so is a progress line (one event a line, for
    # grep: a bisect point's label, several variables long, is not wrapped into two events)
    _fits("\n".join(ln for ln in lines[:by_hand] if not ELAPSED.match(ln)), 80)
    after = lines[by_hand + 1 :]
    if after and after[-1].startswith("the machine was busy: "):  # a busy box is said in the last line
        after = after[:-1]
    assert all(ln.startswith("  regdiag ") for ln in after), after
    # progress lines sit between the steps, never inside a step's output
    start = lines.index("compare good bad: is it real, and where?")
    end = next(i for i, ln in enumerate(lines) if ln.startswith("bisect --metric "))
    assert not [ln for ln in lines[start:end] if ELAPSED.match(ln)]
    # a demo whose bisect stayed inconclusive on a loaded machine (exit 3) has no "found:" line
    found = next((i for i, ln in enumerate(lines) if ln.startswith("found:")), None)
    assert found is not None or p.returncode == 3, text[-3000:]
    if found is not None:
        assert not [ln for ln in lines[found:] if ELAPSED.match(ln)]
    assert all(ELAPSED.match(ln) for ln in lines if "] demo: " in ln)


@pytest.mark.slow
def test_the_demo_in_a_terminal_leaves_no_status_text_behind(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "80", "LINES": "24", "TERM": "xterm", "REGDIAG_HOME": str(tmp_path)}
    code, raw = run_in_pty(python_cli("demo", "--launches", "2"), env, cols=80)
    screen = Screen(80)
    screen.feed(raw)
    lines = screen.text()
    assert code in (0, 3), "\n".join(lines[-40:])
    for h in HEADINGS:
        assert h in lines, (h, lines)
    # the status line's texts were erased wherever they stood; nothing printed stuck to them
    status = re.compile(
        r"probing the (good|bad) environment|probe launch \d+ of \d+|bisect: .* launch \d+|bisecting"
    )
    assert not [ln for ln in lines if status.search(ln)], [ln for ln in lines if status.search(ln)]
    decisions = [
        ln for ln in lines if re.search(r": (REPRODUCED|NOT-REPRODUCED|INCONCLUSIVE|GOOD|BAD)\b", ln)
    ]
    assert decisions and all(ln.startswith("  ") and not ln.startswith("   ") for ln in decisions), decisions


@pytest.mark.launch
def test_format_reaches_runs_and_the_probe_csv(tmp_path: Path) -> None:
    home = {"REGDIAG_HOME": str(tmp_path)}
    assert run_cli("ingest-log", "tests/data/vllm_older.log", env=home).returncode == 0
    rows = list(csv.reader(io.StringIO(run_cli("runs", "--format", "csv", env=home).stdout)))
    assert rows[0] == ["id", "created", "probe", "config", "status", "launches", "host", "traces"]
    assert len(rows) == 2 and rows[1][2] == "ingest-log" and rows[1][5] == "1/1"
    bad = run_cli("runs", "--format", "xml", env=home)
    assert bad.returncode == 2 and bad.stderr.startswith("regdiag: error: --format 'xml'")
    # the probe CSV, registered since the renderer registry and reachable now
    p = run_cli(
        *tiny_probe(4),
        *("--launches", "2", "--no-snapshot", "-o", str(tmp_path / "r.json"), "--format", "csv"),
    )
    assert p.returncode == 0, p.stderr
    table = list(csv.DictReader(io.StringIO(p.stdout)))
    assert [r["metric"] for r in table][:4] == ["cycle", "draft", "verify", "extend"]
    cmp = json.loads(run_cli("compare", str(tmp_path / "r.json"), str(tmp_path / "r.json"), "--json").stdout)
    cycle = next(m for m in cmp["metrics"] if m["name"] == "cycle")["estimate"]["old_center"]
    assert float(table[0]["run"]) == pytest.approx(cycle, rel=1e-9)  # the same run value as compare's
    assert len(table[0]["launch_medians"].split()) == 2


OLD_DEMO_VIEW = """
import time
from rich.console import Console
out, err = Console(highlight=False), Console(stderr=True)
status = err.status("bisect: good launch 4")
status.start()
time.sleep(0.3)
out.print("[dim]  endpoints: REPRODUCED[/]")
time.sleep(0.3)
status.stop()
"""


def test_the_screen_shows_status_text_stuck_to_a_line_printed_behind_it() -> None:
    """What the demo did before: stdout printed while a live status ran on stderr. The screen the pty
    test reads shows the spinner's text left in front of the decision line."""
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "80"}
    code, raw = run_in_pty([sys.executable, "-c", OLD_DEMO_VIEW], env, cols=80)
    screen = Screen(80)
    screen.feed(raw)
    assert code == 0
    assert any("bisect: good launch 4" in ln and "endpoints: REPRODUCED" in ln for ln in screen.text())


@pytest.mark.parametrize("width", WIDTHS)
def test_a_snapshot_on_screen_keeps_hashes_and_versions_whole(width: int, tmp_path: Path) -> None:
    repo = tmp_path / "engine"  # a checkout of its own, dirty, that nothing else changes meanwhile
    repo.mkdir()
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "engine: a subject long enough to wrap"]):
        (repo / "kernel.py").write_text(f"# {cmd[0]}\n")
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *cmd]
        subprocess.run(git, cwd=repo, check=True, capture_output=True)
    (repo / "kernel.py").write_text("# changed\n")
    rec = json.loads(run_cli("snapshot", "--json", cwd=str(repo)).stdout)
    engine = rec["groups"]["engine"]["fields"]
    values = [engine[k]["value"] for k in ("commit", "diff_hash") if engine.get(k, {}).get("value")]
    assert len(values) == 2  # a commit and a diff hash
    out = run_cli("snapshot", env=_env(width), cwd=str(repo)).stdout
    _fits(out, width)
    words = set(out.split())
    for v in values:
        assert str(v) in words, (width, v)
    assert re.search(r"^\s*torch\b", out, re.M) and any(w.startswith("2.") for w in words)
