"""Bad input found by a sweep of the CLI: each case is one real process of the CLI, and must end in one
`regdiag: error:` line with the documented exit code, no traceback, and nothing written or replaced
that should not be."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

LOG = ROOT / "tests" / "data" / "vllm_v1.log"
SERVER = ["probe", "server", "--url", "http://127.0.0.1:9/", "--no-snapshot", "-L", "1", "-R", "1"]


def one_error_line(r, code: int = 2) -> str:
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("regdiag: error: "), r.stderr[-2000:]
    assert r.returncode == code, (r.returncode, r.stderr)
    return lines[0]


@pytest.mark.parametrize("command", [["ingest-log", str(LOG)], ["snapshot"], ["snapshot", "--json"]])
def test_output_onto_a_named_pipe_is_refused_and_the_pipe_kept(command: list[str], tmp_path: Path) -> None:
    # The record was written to a temporary file renamed over the target: the pipe (or, as root,
    # /dev/null itself: `-o /dev/null`) was replaced by a regular file.
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    line = one_error_line(run_cli(*command, "-o", str(fifo), timeout=120))
    assert f"{fifo}: not a regular file" in line
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the named pipe was replaced by a file"
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"], "a temporary file was left"


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_output_onto_a_device_is_refused_and_the_device_kept(tmp_path: Path) -> None:
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a private /dev/null
    line = one_error_line(run_cli("ingest-log", str(LOG), "-o", str(null), timeout=120))
    assert f"{null}: not a regular file" in line
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_output_under_a_file_names_the_users_path_not_a_temporary_one(tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    target = blocker / "run.json"
    line = one_error_line(run_cli("ingest-log", str(LOG), "-o", str(target), timeout=120))
    # Refused at the option, before the log is read (records.check_output_path).
    assert line == f"regdiag: error: -o {target}: cannot write (Not a directory); nothing was written"


@pytest.mark.parametrize(
    "opts",
    [
        ["--connect-timeout", "nan"],
        ["--read-timeout", "nan"],
        ["--read-timeout", "inf"],
        ["--launch-cmd", "sleep 30", "--startup-timeout", "nan"],
        ["--launch-cmd", "sleep 30", "--startup-timeout", "-1"],
        ["--launch-cmd", "sleep 30", "--stop-grace", "nan"],
        ["--launch-cmd", "sleep 30", "--stop-grace", "-5"],
    ],
)
def test_server_timeouts_out_of_range_are_refused_before_any_launch(opts: list[str], tmp_path: Path) -> None:
    r = run_cli(*SERVER, *opts, "-o", str(tmp_path / "run.json"), timeout=60)
    line = one_error_line(r)
    assert "seconds" in line
    assert not (tmp_path / "run.json").exists()


def test_server_url_with_an_unclosed_bracket_is_one_line() -> None:
    line = one_error_line(run_cli("probe", "server", "--url", "http://[::1", "--no-snapshot", timeout=60))
    assert "not a valid URL" in line


def test_server_prompts_not_utf8_names_the_file(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes(b"\xff\xfe\x00 not text")
    line = one_error_line(run_cli(*SERVER, "--prompts", str(prompts), timeout=60))
    assert line == f"regdiag: error: {prompts}: not a text file (not UTF-8)"


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_collectives_target_ms_not_finite_is_bad_input(value: str, tmp_path: Path) -> None:
    # It used to start a launch whose probe then failed to write NaN into its record: exit 5, a record kept.
    out = tmp_path / "run.json"
    r = run_cli(
        "probe", "collectives", "--tp", "2", "--sizes", "1K:4K", "--no-snapshot", "-L", "1",
        "--target-ms", value, "-o", str(out), timeout=120,
    )  # fmt: skip
    assert "--target-ms" in one_error_line(r)
    assert not out.exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_engine_timeout_out_of_range_is_bad_input(value: str, tmp_path: Path) -> None:
    # NaN and infinity gave a traceback from a thread's join; -1 stopped the engine at once, exit 5.
    r = run_cli(
        "probe", "engine", "--preset", "transformers", "--no-snapshot", "--no-check", "-L", "1",
        "--launch-cmd", "true", "--timeout", value, timeout=60,
    )  # fmt: skip
    assert "--timeout" in one_error_line(r)


def test_ab_output_prefix_in_a_missing_place_names_the_record(tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    r = run_cli(
        "ab", "--a", "X=1", "--b", "X=2", "--command", "false", "--launches", "2", "--no-snapshot",
        "-o", str(blocker / "pre"), timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    # Refused at the option (cli.common.check_output_prefix), before any environment is built.
    assert last == f"regdiag: error: -o {blocker}/pre: cannot write (Not a directory); nothing was written"


RUN = ROOT / "baselines" / "h200-kimi-tp1-eagle.json"


@pytest.mark.parametrize(
    "opts",
    [["--accept-len", "nan"], ["--accept-len", "-2"], ["--cycle-ms", "nan"], ["--decode-ms", "inf"]],
)
def test_explain_numbers_given_with_a_run_are_checked_too(opts: list[str]) -> None:
    # Without a RUN they were refused; with one, NaN went through: "nan tokens per cycle -> nan tok/s", exit 0.
    line = one_error_line(run_cli("explain", str(RUN), *opts, timeout=60))
    assert "must be a positive number" in line


@pytest.mark.parametrize(
    "args",
    [
        ["--cycle-ms", "1e-308", "--accept-len", "2", "--decode-ms", "12"],
        [str(RUN), "--accept-len", "1e308"],
    ],
)
def test_explain_refuses_numbers_that_overflow(args: list[str]) -> None:
    # It printed `"tok_s": Infinity` (which jq and JSON.parse refuse), then null: a number no cycle can
    # give is bad input, one line and exit 2, before any JSON.
    line = one_error_line(run_cli("explain", *args, "--json", timeout=60))
    assert "within" in line or "1..3 tokens per cycle" in line


@pytest.mark.parametrize("value", ["inf", "1e12"])
def test_snapshot_timeout_too_large_is_a_usage_error(value: str) -> None:
    # It overflowed a thread's wait (OverflowError: timestamp out of range for platform time_t).
    line = one_error_line(run_cli("snapshot", "--json", "--timeout", value, timeout=60))
    assert "--timeout" in line and "86400" in line


@pytest.mark.parametrize("value", ["inf", "1e300"])
def test_demo_slow_ms_beyond_a_second_is_refused_before_any_work(value: str) -> None:
    # inf failed the bad side's probe after the good side's launches (exit 5); 1e300 never ended.
    line = one_error_line(run_cli("demo", "--slow-ms", value, timeout=60))
    assert "--slow-ms" in line and "1000" in line


SECRET = "hunter2-sweep-secret"


@pytest.mark.engine  # it starts `probe server` / `probe engine` with a --launch-cmd (one that fails)
@pytest.mark.parametrize("probe", ["server", "engine"])
def test_a_launch_cmd_that_cannot_start_keeps_its_secret(probe: str, tmp_path: Path) -> None:
    # The program of --launch-cmd is named in the error; a mistaken `--api-key=SECRET` first word reached
    # the screen and the record (server), or a traceback's tail stood for the message (engine).
    home = tmp_path / "home"
    args = (
        ["--url", "http://127.0.0.1:9/", "-R", "1"]
        if probe == "server"
        else ["--preset", "transformers", "--no-check"]
    )
    r = run_cli(
        "probe", probe, *args, "--no-snapshot", "-L", "1", "--launch-cmd", f"--api-key={SECRET} serve",
        env={"REGDIAG_HOME": str(home)}, timeout=120,
    )  # fmt: skip
    assert r.returncode == 5 and "Traceback" not in r.stderr and "<frozen" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("regdiag: error: launch 0: ") and "No such file or directory" in last
    assert SECRET not in r.stderr + r.stdout
    assert not [p for p in home.rglob("*") if p.is_file() and SECRET in p.read_text(errors="replace")]


@pytest.mark.parametrize(
    "name, shown",
    [("a\nb.json", "a\\nb.json"), ("\x1b[2Jx.json", "\\x1b[2Jx.json"), ("x\r.json", "x\\r.json")],
)
def test_a_file_name_with_control_characters_stays_one_line(name: str, shown: str, tmp_path: Path) -> None:
    # A line break in a name split the error in two; an escape sequence reached the terminal as is.
    line = one_error_line(
        run_cli("diff", str(tmp_path / name), str(ROOT / "baselines" / "h200-snapshot.json"))
    )
    assert line == f"regdiag: error: {tmp_path}/{shown}: no such file"


def test_the_fast_snapshot_path_keeps_its_error_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    line = one_error_line(run_cli("snapshot", "--json", "-o", f"{blocker}/a\nb.json", timeout=60))
    assert f"{blocker}/a\\nb.json" in line and "control character" in line
    line = one_error_line(run_cli("snapshot", "--json", "-o", f"{blocker}/ab.json", timeout=60))
    assert (
        line == f"regdiag: error: -o {blocker}/ab.json: cannot write (Not a directory); nothing was written"
    )


def test_compare_html_over_an_input_run_is_refused_and_the_run_kept(tmp_path: Path) -> None:
    # It wrote the HTML page over the measured record given as OLD.
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_bytes(RUN.read_bytes())
    new.write_bytes((ROOT / "baselines" / "h200-kimi-slice-eagle-vgraph-on-a.json").read_bytes())
    line = one_error_line(run_cli("compare", str(old), str(new), "--allow-mismatch", "--html", str(old)))
    assert "is an input of this command" in line
    assert old.read_bytes() == RUN.read_bytes()


def test_ingest_log_output_over_its_own_log_is_refused_and_the_log_kept(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_bytes(LOG.read_bytes())
    line = one_error_line(run_cli("ingest-log", str(log), "-o", str(log), timeout=120))
    assert line == f"regdiag: error: -o {log}: is an input of this command; writing it would replace it"
    assert log.read_bytes() == LOG.read_bytes()


def test_ingest_log_refuses_one_log_given_twice(tmp_path: Path) -> None:
    # Each file is one launch: the same log twice made two identical launches, double the evidence.
    link = tmp_path / "again.log"
    link.symlink_to(LOG)
    for second in (str(LOG), str(link)):
        line = one_error_line(run_cli("ingest-log", str(LOG), second, "-o", str(tmp_path / "run.json")))
        assert "twice" in line and ("given twice" in line or f"same file as {LOG}" in line)
        assert not (tmp_path / "run.json").exists()


def test_ingest_logs_refuses_the_very_same_path_object_twice() -> None:
    # A library caller may pass one string object twice; it is the same file all the same.
    from regdiag.errors import BadInput
    from regdiag.server.ingest import ingest_logs

    path = str(LOG)
    with pytest.raises(BadInput, match="given twice"):
        ingest_logs([path, path], idle_gap_s=5.0, rank=None)


CONTEXT_PROBE = r"""
import json, os
print(json.dumps({"type": "header", "protocol": 1, "probe": "ctx", "version": "1", "primary": "cycle",
                  "phases": ["cycle"], "units": {"cycle": "ms", "running_req": "requests"}}))
for i in range(5):
    print(json.dumps({"type": "cycle", "i": i, "t": {"cycle": 10.0 + i, "running_req": 4.0 + i}}))
print(json.dumps({"type": "footer", "cycles": 5, "warmup_dropped": 0}))
"""


def test_bisect_on_a_context_metric_is_a_usage_error(tmp_path: Path) -> None:
    # running_req is a setting of the measurement, not an outcome: it was a traceback after both
    # endpoints had been measured.
    probe = tmp_path / "ctx.py"
    probe.write_text(CONTEXT_PROBE, encoding="utf-8")
    r = run_cli(
        "bisect", "--good", "-X", "--bad", "X=1", "--command", f"{{python}} {probe}", "--metric", "running_req",
        "--journal", str(tmp_path / "j.jsonl"), timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("regdiag: error:")]
    assert len(errors) == 1 and r.stderr.rstrip().endswith(errors[0])  # after its progress lines
    assert "--metric running_req" in errors[0] and "no regression to bisect" in errors[0]
