"""Fitting the places users run regdiag: a fresh machine, a CI log (stderr not a terminal), a pipe that
closes early, 80 columns. Every CLI call is a real subprocess with COLUMNS=80 and pipes for stdout and
stderr, as in CI."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, run_cli
from server_helpers import Emulator

CI_ENV = {"COLUMNS": "80", "TERM": "dumb"}
EAGLE_A = "baselines/h200-kimi-slice-eagle-vgraph-on-a.json"
EAGLE_OFF = "baselines/h200-kimi-slice-eagle-vgraph-off.json"
ELAPSED = re.compile(r"^\[ *\d+s\] ")


def _progress_lines(stderr: str) -> list[str]:
    """The plain progress lines, with the elapsed-time prefix checked and taken off."""
    assert "\x1b" not in stderr, "ANSI escape in a non-terminal stderr"
    out = []
    for line in stderr.splitlines():
        m = ELAPSED.match(line)
        if m:
            out.append(line[m.end() :])
    return out


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Run the tests", 1)[1]
    command = section.split("```bash\n", 1)[1].split("\n```", 1)[0]
    assert "\n" not in command and "pytest" in command and "[test]" in command
    ci_lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in ci_lines  # the fast tier, which .ci/run runs beside two CPU hogs before the full tier
    install = readme.split("## Install and run it here", 1)[1].split("```bash\n", 1)[1].split("\n```", 1)[0]
    assert install.endswith("&& regdiag demo")


def test_plain_progress_throttles_ticks_not_steps(monkeypatch: pytest.MonkeyPatch) -> None:

    from regdiag.cli.common import PlainProgress

    monkeypatch.setenv("REGDIAG_PROGRESS_EVERY", "0.3")
    buf = io.StringIO()
    p = PlainProgress("probe x", stream=buf, enabled=True)
    p.tick("too soon")  # within the interval since start: dropped
    p.step("launch 1/2 started")
    p.step("launch 1/2: ok")  # steps are never dropped
    p.tick("dropped")
    time.sleep(0.35)
    p.tick("measure 5/9")
    assert _progress_lines(buf.getvalue()) == [
        "probe x: launch 1/2 started",
        "probe x: launch 1/2: ok",
        "probe x: measure 5/9",
    ]
    assert PlainProgress("y", stream=buf, enabled=False).enabled is False


@pytest.mark.slow
def test_probe_spec_decode_prints_plain_lines_outside_a_terminal(tmp_path: Path) -> None:
    p = run_cli(
        *("probe", "spec-decode", "--preset", "tiny", "--context", "64", "--cycles", "6", "--warmup", "2"),
        *("--block", "3", "--launches", "2", "--no-snapshot", "-o", str(tmp_path / "r.json")),
        env={**CI_ENV, "REGDIAG_PROGRESS_EVERY": "0"},  # every tick too, to check their form
    )
    assert p.returncode == 0, p.stderr
    lines = _progress_lines(p.stderr)
    steps = [ln for ln in lines if ln.endswith(" started") or ": ok, " in ln]
    assert steps[0] == "probe spec-decode: launch 1/2 started"
    assert re.fullmatch(r"probe spec-decode: launch 1/2: ok, primary median [\d.]+, run [\d.]+", steps[1])
    assert steps[2] == "probe spec-decode: launch 2/2 started"
    assert re.fullmatch(r"probe spec-decode: launch 2/2: ok, primary median [\d.]+, run [\d.]+", steps[3])
    assert len(steps) == 4
    warm = [ln for ln in lines if "warm interpreter" in ln]
    assert warm == ["probe spec-decode: starting the warm interpreter (torch imported once for every launch)"]
    ticks = [ln for ln in lines if ln not in steps and ln not in warm]
    assert ticks and all(
        re.fullmatch(r"probe spec-decode: launch [12]/2 [a-z_]+( \d+/\d+)?", t) for t in ticks
    )
    assert "probe spec-decode: launch 1/2 measure 14/14" in ticks


def test_probe_server_prints_plain_lines_outside_a_terminal() -> None:
    emu = Emulator()
    try:
        p = run_cli(
            *("probe", "server", "--url", emu.url, "-L", "2", "-R", "3", "--max-tokens", "8"),
            *("--no-snapshot", "--warmup", "0"),
            env={**CI_ENV, "REGDIAG_PROGRESS_EVERY": "1000"},
        )
    finally:
        emu.stop()
    assert p.returncode == 0, p.stderr
    lines = _progress_lines(p.stderr)
    assert lines[0] == "probe server: launch 1/2 started"
    assert re.fullmatch(r"probe server: launch 1/2 ok 3/3 requests itl [\d.]+ ms .*", lines[1]), lines[1]
    assert lines[2] == "probe server: launch 2/2 started"
    assert re.fullmatch(r"probe server: launch 2/2 ok 3/3 requests itl [\d.]+ ms .*", lines[3]), lines[3]
    assert len(lines) == 4


def _to_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI with stdout a pipe whose reader is already gone, as `| head -1` is once it has read."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(
            [sys.executable, "-m", "regdiag", *args],
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, **CI_ENV},
            timeout=120,
        )
    finally:
        os.close(w)


@pytest.mark.parametrize("fmt", [[], ["--json"], ["--markdown"]])
def test_a_closed_pipe_is_not_a_verdict(fmt: list[str]) -> None:
    # The same comparison to a reader that stays is a REGRESSED (exit 1).
    full = run_cli("compare", EAGLE_A, EAGLE_OFF, "--allow-mismatch", *fmt, env=CI_ENV)
    assert full.returncode == 1, full.stderr
    p = _to_closed_pipe("compare", EAGLE_A, EAGLE_OFF, "--allow-mismatch", *fmt)
    assert (p.returncode, p.stderr) == (141, "")


@pytest.fixture
def short_home() -> Iterator[Path]:
    """A REGDIAG_HOME short enough that "runs in HOME/runs" fits 80 columns (a pytest-xdist worker's
    tmp_path alone is over 70 characters)."""
    d = Path(tempfile.mkdtemp(prefix="rd-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.cli
def test_runs_and_baseline_list_keep_whole_ids_at_80_columns(short_home: Path) -> None:
    tmp_path = short_home
    home = {"REGDIAG_HOME": str(tmp_path)}
    ids: list[str] = []
    for log in ("sglang_decode_dot", "vllm_older"):
        assert run_cli("ingest-log", f"tests/data/{log}.log", env={**CI_ENV, **home}).returncode == 0
        ids += [f.stem for f in (tmp_path / "runs").glob("*.json") if f.stem not in ids]
    ids.reverse()  # newest first: the second ingest's run leads (two ids of one second differ only by chance)
    p = run_cli("runs", env={**CI_ENV, **home})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == f"runs in {tmp_path / 'runs'}"
    # Too wide for 80 columns as a table: one block per run, the id alone on its first line, every
    # column kept (created too) as "name value" items under it, none cut.
    assert [ln for ln in lines[1:] if not ln.startswith(" ")] == ids
    for rid in ids:
        at = lines.index(rid)
        block = " ".join(lines[at + 1 : at + 3])
        assert re.search(r"created \d{4}-\d\d-\d\d \d\d:\d\d", block), block
        assert "probe ingest-log" in block and "status complete" in block and "launches 1/1" in block
    assert all(len(ln) <= 80 for ln in lines)
    wide = run_cli("runs", env={**CI_ENV, **home, "COLUMNS": "160"}).stdout.splitlines()
    assert wide[1].split() == ["id", "created", "probe", "config", "status", "launches", "host"]

    name = "kimi-k2-eagle-graph-on-h200-slice"
    assert run_cli("baseline", "save", name, EAGLE_A, env={**CI_ENV, **home}).returncode == 0
    p = run_cli("baseline", "list", env={**CI_ENV, **home})
    lines = p.stdout.splitlines()
    assert lines[0] == name  # a block: the name whole on its line, every column under it
    block = " ".join(" ".join(lines[1:]).split())
    assert "probe spec-decode" in block and "config preset=kimi-k2 mode=eagle" in block
    # the run's one number (stats.run_value: the geometric mean of the launch medians), as compare's old
    assert "primary cycle 9.445 ms" in block and "launches 3" in block and "saved 20" in block
    assert all(len(ln) <= 80 for ln in lines)
    old = run_cli("compare", name, EAGLE_OFF, "--allow-mismatch", env={**CI_ENV, **home}).stdout
    assert "9.445 \u2192" in old or "9.44 \u2192" in old


def test_compare_table_fits_80_columns_with_whole_verdicts() -> None:
    p = run_cli("compare", EAGLE_A, EAGLE_OFF, "--allow-mismatch", env=CI_ENV)
    lines = p.stdout.splitlines()
    assert all(len(ln) <= 80 for ln in lines)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("metric "))
    table = lines[start : start + 7]
    assert table[0].split() == ["metric", "old", "new", "change", "95", "%", "CI", "p", "(Holm)", "verdict"]
    assert table[1].split() == [
        "cycle",
        "9.44",
        "ms",
        "38.11",
        "ms",
        "+303.5",
        "%",
        "[+155.6,",
        "+537.0]",
    ] + [
        "0.006",
        "REGRESSED",
    ]
    # experts_verify (the experts a forward touched) is context: shown apart, no verdict, no Holm slot
    assert table[2].split()[-1] == "INCONCLUSIVE" and table[2].split()[-4:-1] == ["[-21.2,", "+1.2]", "0.121"]
    ctx = next(i for i, ln in enumerate(lines) if ln.startswith("context "))
    assert lines[ctx + 1].split() == ["experts_verify", "23.50", "23.52", "+0.1", "%"]
    assert not any(ln.startswith("experts_verify") for ln in table)
    assert [ln.split()[-1] for ln in table[1:6]] == [
        "REGRESSED",
        "INCONCLUSIVE",
        "REGRESSED",
        "REGRESSED",
        "INCONCLUSIVE",
    ]


def test_fitted_table_keeps_every_column_whole_in_blocks_when_narrow() -> None:
    from rich.console import Console

    from regdiag.cli.common import fitted_table

    rid = "20261130-160428-spec-decode-kimi-k2-tp8-5a34"
    row = [
        rid,
        "2026-11-30 16:04",
        "spec-decode",
        "kimi-k2 eagle 8 layers=24 context=4096",
        "complete",
        "3/3",
    ]
    cols = ["id", "created", "probe", "config", "status", "launches"]
    for width in (80, 60, 40):
        con = Console(width=width, record=True, file=io.StringIO())
        con.print(fitted_table(cols, [row], keep="id", width=width), crop=False)
        lines = con.export_text().splitlines()
        assert lines[0] == rid  # the id on a line of its own, whole
        text = " ".join(" ".join(lines[1:]).split())  # a long value wraps between its words
        for name, value in zip(cols[1:], row[1:], strict=True):
            assert f"{name} {value}" in text  # each column named, its value whole
        assert all(len(ln) <= width for ln in lines[1:])
    con = Console(width=160, record=True, file=io.StringIO())
    con.print(fitted_table(cols, [row], keep="id", width=160))
    assert con.export_text().splitlines()[1].split()[:3] == [rid, "2026-11-30", "16:04"]


def test_help_is_reflowed_to_80_columns() -> None:
    from regdiag.cli.common import reflow

    src = "First line of a\nparagraph ends here.\n\nItems:\n- one\n- two\n  indented stays\n--flag text joins"
    assert (
        reflow(src)
        == "First line of a paragraph ends here.\n\nItems:\n- one\n- two\n  indented stays --flag text joins"
    )
    for cmd in (["probe", "spec-decode"], ["bisect"], ["compare"], ["ingest-log"]):
        p = run_cli(*cmd, "--help", env=CI_ENV)
        assert p.returncode == 0 and max(len(ln) for ln in p.stdout.splitlines()) <= 80
    # hard-wrapped at the source, "over a KV cache of" ended a line and the line was cut short
    out = run_cli("probe", "spec-decode", "--help", env=CI_ENV).stdout
    assert "over a KV cache of --context tokens" in out
