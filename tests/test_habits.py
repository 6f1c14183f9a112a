"""What users of other CLIs expect, through the real CLI: shell completion, click-style --help at 80
columns, REGDIAG_HOST / REGDIAG_PYTHON and config.toml defaults, `bisect --resume --journal J` alone,
--ignore / --only, and the pandas frame. The SSH config options (accept-new, ControlMaster) are tested
against the real sshd of tests/sshd_helpers.py."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from bisect_helpers import command, write_probe
from sshd_helpers import Sshd, sshd  # noqa: F401 - sshd is a fixture

from regdiag.config import parse_small_toml

COMMANDS = [
    "snapshot", "diff", "runs", "compare", "explain", "export", "trust", "check-host", "bisect",
    "ingest-log", "demo", "ab", "clean", "probe spec-decode", "probe collectives", "probe server",
    "probe engine", "baseline save", "baseline list", "baseline rm",
]  # fmt: skip


def test_completion_is_on(cli, tmp_path: Path) -> None:
    r = cli("--show-completion", "bash")
    assert r.returncode == 0 and "_REGDIAG_COMPLETE" in r.stdout, r.stderr
    r = cli(env={"_REGDIAG_COMPLETE": "complete_bash", "COMP_WORDS": "regdiag pro", "COMP_CWORD": "1"})
    assert r.returncode == 0 and r.stdout.split() == ["probe"], (r.stdout, r.stderr)
    r = cli("--install-completion", "bash", env={"HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "_REGDIAG_COMPLETE" in "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())


@pytest.mark.launch
def test_help_is_click_style_and_whole_at_80_columns(cli) -> None:
    for c in COMMANDS:
        r = cli(*c.split(), "--help", env={"COLUMNS": "80"})
        assert r.returncode == 0, (c, r.stderr)
        text = r.stdout
        for leak in ("<bool>", "<str>", "<int", "<float", "<list[", "<path>", "…", "\\["):
            assert leak not in text, (c, leak)
        usage = text.splitlines()[0]
        assert "{" not in usage, (c, usage)
        long_lines = [ln for ln in text.splitlines() if len(ln) > 80 and len(ln.split()) > 1]
        assert long_lines == [], (c, long_lines)
    spec = " ".join(cli("probe", "spec-decode", "--help", env={"COLUMNS": "80"}).stdout.split())
    assert "env var: REGDIAG_HOST" in spec and "env var: REGDIAG_PYTHON" in spec
    assert "--launches INTEGER" in spec and "--host TEXT" in spec
    assert "[OLD] [NEW]" in cli("compare", "--help").stdout.splitlines()[0]  # or --old/--new, repeated


def test_small_toml_reader_agrees_with_tomllib() -> None:
    tomllib = pytest.importorskip("tomllib")
    text = (
        "# defaults\n[defaults]\nhost = \"gpu-box\"  # a comment\npython = '/root/ml env/bin/python3'\n\n"
        '[hosts.gpu-box]\npython = "/opt/py\\"q/bin/python"\n[hosts."root@10.0.0.2:2222"]\npython = "python3"\n'
    )
    assert parse_small_toml(text) == tomllib.loads(text)
    with pytest.raises(ValueError, match="line 2"):
        parse_small_toml("[defaults]\nhost = [1, 2]\n")


@pytest.mark.cli
def test_config_and_environment_defaults(cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"REGDIAG_HOME": str(home)}
    (home / "config.toml").write_text('[defaults]\nhost = "nosuch-host.invalid"\n')
    r = cli("snapshot", "--check", env=env)
    assert r.returncode == 4 and "nosuch-host.invalid" in r.stderr, r.stderr
    # the fast path of `snapshot --json` too goes where the defaults say
    r = cli("snapshot", "--json", env={**env, "REGDIAG_HOST": "other-host.invalid"})
    assert r.returncode == 4 and "other-host.invalid" in r.stderr, r.stderr
    r = cli("snapshot", "--json", env={**env, "REGDIAG_HOST": ""})  # empty: this machine
    assert r.returncode == 0 and json.loads(r.stdout)["schema"].startswith("regdiag.snapshot/"), r.stderr
    (home / "config.toml").write_text('[defaults]\nhots = "x"\n')
    r = cli("snapshot", "--check", env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "hots" in r.stderr, r.stderr
    (home / "config.toml").write_text("[defaults\n")
    r = cli("snapshot", "--check", env=env)
    assert r.returncode == 2 and "not valid TOML" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.ssh
def test_per_host_python_and_ssh_config_options(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    home = tmp_path / "home"
    home.mkdir()
    known = tmp_path / "known_hosts"
    cfg = sshd.write_config(tmp_path / "config", "Host regdiag-test\n  StrictHostKeyChecking accept-new\n",
                            known_hosts=known)  # fmt: skip
    env = {"REGDIAG_HOME": str(home)}
    (home / "config.toml").write_text(f'[hosts.regdiag-test]\npython = "{sys.executable}"\n')
    args = ["check-host", "regdiag-test", "--ssh-config", str(cfg), "--json"]
    r = cli(*args, env=env)
    # accept-new: the unknown key is added, said in one line, and the host's python is the config's
    assert r.returncode == 0, r.stderr
    assert known.read_text() == sshd.known_hosts_line() + "\n"
    assert "StrictHostKeyChecking accept-new: added" in r.stderr and r.stderr.count("\n") == 1
    assert json.loads(r.stdout)["hosts"][0]["executable"] == sys.executable
    r = cli(*args, env={**env, "REGDIAG_PYTHON": "/usr/bin/python3"})  # the variable wins over the file
    assert r.returncode == 0 and json.loads(r.stdout)["hosts"][0]["executable"] == "/usr/bin/python3"
    assert "accept-new" not in r.stderr  # known now: nothing added
    r = cli(*args[:-1], "--format", "csv", env=env)  # one row per host, for a fleet's spreadsheet
    head, row = r.stdout.splitlines()
    assert r.returncode == 0 and head == "host,address,python_version,executable,round_trip_s,error"
    assert re.match(
        rf"regdiag-test,([^@,]+@)?127\.0\.0\.1:{sshd.port},3\.\d+\.\d+,{re.escape(sys.executable)},[\d.]+,$",
        row,
    ), row
    # a host that cannot be reached is its own entry and error line: the others are still checked
    two = ["check-host", "regdiag-test", "nosuchhost.invalid", "--ssh-config", str(cfg), "--json"]
    r = cli(*two, "--python", sys.executable, env=env)  # (config.toml names a python for the first only)
    both = json.loads(r.stdout)["hosts"]
    assert r.returncode == 4 and [h["name"] for h in both] == ["regdiag-test", "nosuchhost.invalid"]
    assert both[0]["executable"] == sys.executable and "cannot resolve" in both[1]["error"]
    assert r.stderr.splitlines() == ["regdiag: error: " + both[1]["error"]]
    # a changed key is refused under accept-new as always
    other = tmp_path / "other"
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    fake = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    known.write_text(f"[127.0.0.1]:{sshd.port} {fake}\n")
    r = cli(*args, env=env)
    assert r.returncode == 4 and "HOST KEY CHANGED" in r.stderr and known.read_text().count("\n") == 1
    # StrictHostKeyChecking no is refused in one line where it matters; ControlMaster is said unused
    cfg2 = sshd.write_config(tmp_path / "config2", "Host regdiag-test\n  StrictHostKeyChecking no\n"
                             "  ControlMaster auto\n  ControlPath /tmp/cm-%r@%h:%p\n",
                             known_hosts=tmp_path / "empty")  # fmt: skip
    r = cli("check-host", "regdiag-test", "--ssh-config", str(cfg2), env=env)
    assert r.returncode == 4 and "host key checking 'no' is not followed" in r.stderr, r.stderr
    assert "ControlMaster auto for regdiag-test is not used" in r.stderr
    cfg3 = sshd.write_config(tmp_path / "config3", "Host regdiag-test\n  ControlMaster auto\n")
    r = cli("check-host", "regdiag-test", "--ssh-config", str(cfg3), env=env)
    assert r.returncode == 0 and r.stderr.count("ControlMaster auto") == 1, r.stderr


@pytest.mark.launch
def test_bisect_resumes_from_the_journal_alone_and_ignores_noise(cli, tmp_path: Path) -> None:
    probe = write_probe(tmp_path)
    journal = tmp_path / "j.jsonl"
    r = cli(
        "bisect", "--good", "PROBE_EXTRA=verify:0 TERM=xterm LC_X=a", "--bad", "PROBE_EXTRA=verify:3 TERM=dumb LC_X=b",
        "--ignore", "TERM", "--ignore", "LC_*", "--command", command(probe), "-L", "2", "-m", "5%",
        "--journal", str(journal), "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    first = json.loads(r.stdout)
    assert [f["name"] for f in first["factors"]] == ["PROBE_EXTRA"]
    assert first["fixed_env"]["TERM"] == "xterm" and first["fixed_env"]["LC_X"] == "a"
    assert any("left out (--ignore / --only): LC_X, TERM" in n for n in first["notes"])
    again = cli("bisect", "--resume", "--journal", str(journal), "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    rep = json.loads(again.stdout)
    assert rep["resumed"] and rep["cost"]["launches_run"] == 0 and rep["replay_mismatches"] == []
    assert (
        rep["verdict"] == first["verdict"]
        and rep["culprits"][0]["factors"] == first["culprits"][0]["factors"]
    )
    changed = cli("bisect", "--resume", "--journal", str(journal), "-L", "3")
    assert changed.returncode == 2 and "launches" in changed.stderr and changed.stderr.count("\n") == 1
    r = cli("bisect", "--command", command(probe))
    assert r.returncode == 2 and "give --good and --bad" in r.stderr
    r = cli("bisect", "--good", "A=1", "--bad", "A=2", "--only", "B*", "--command", command(probe))
    assert r.returncode == 2 and "leave none of the 1 differences (A)" in r.stderr


def test_ab_ignores_a_difference(cli, tmp_path: Path) -> None:
    probe = write_probe(tmp_path)
    r = cli(
        "ab", "--a", "PROBE_EXTRA=verify:0 TERM=xterm", "--b", "PROBE_EXTRA=verify:0.5 TERM=dumb",
        "--only", "PROBE_*", "--command", command(probe), "-L", "2", "--no-snapshot", "-o", str(tmp_path / "ab"),
        "--json",
    )  # fmt: skip
    assert r.returncode in (0, 1, 3), r.stderr[-2000:]
    assert json.loads(r.stdout)["schema"].startswith("regdiag.comparison/")
    for side in ("a", "b"):
        design = json.loads((tmp_path / f"ab-{side}.json").read_text())["design"]
        assert [d["name"] for d in design["differences"]] == ["PROBE_EXTRA"]


def test_frame_is_tidy(cli, tmp_path: Path) -> None:
    import regdiag

    probe = write_probe(tmp_path)
    r = cli("ab", "--a", "", "--b", "PROBE_EXTRA=verify:3", "--command", command(probe), "-L", "2",
            "--no-snapshot", "-o", str(tmp_path / "ab"))  # fmt: skip
    assert r.returncode in (0, 1, 3), r.stderr[-2000:]
    a, b = tmp_path / "ab-a.json", tmp_path / "ab-b.json"
    df = regdiag.frame(a, str(b), labels=["fast", "slow"])
    records = [json.loads(p.read_text()) for p in (a, b)]
    assert len(df) == sum(len(v) for rec in records for la in rec["launches"] for v in la["samples"].values())
    assert (
        set(df["label"]) == {"fast", "slow"} and set(df["unit"]) == {"ms"} and set(df["better"]) == {"lower"}
    )
    assert set(df[df.metric == "cycle"]["role"]) == {"primary"} and set(
        df[df.metric == "verify"]["role"]
    ) == {"phase"}
    med = df[df.usable].groupby(["label", "metric"], observed=True)["value"].median()
    assert med[("slow", "verify")] - med[("fast", "verify")] > 2.0  # the 3 ms planted in verify
    first = records[0]["launches"][0]
    row = df[
        (df.label == "fast") & (df.launch == first["index"]) & (df.metric == "draft") & (df["sample"] == 1)
    ]
    assert row["value"].tolist() == [first["samples"]["draft"][1]]
    assert regdiag.frame(a)["label"].iloc[0] == str(a)  # default label: the run as given


def test_a_second_host_is_refused_where_one_is_measured(cli) -> None:
    for argv, what in (
        (["probe", "server", "--url", "http://127.0.0.1:9"], "probe server"),
        (["probe", "engine", "--launch-cmd", "true"], "probe engine"),
    ):
        r = cli(*argv, "--host", "nosuchhost-a", "--host", "gpu-box")
        assert r.returncode == 2, (what, r.stderr)
        assert (
            r.stderr
            == f"regdiag: error: {what} runs on one host: give one --host (got nosuchhost-a, gpu-box)\n"
        )
    # bisect and ab take several (each host a lane, or a node of the pairs): they connect to all, and
    # name each one they cannot reach
    for argv in (["bisect", "--good", "A=1", "--bad", "A=2"], ["ab", "--a", "A=1", "--b", "A=2"]):
        r = cli(*argv, "--command", "true", "--host", "nosuchhost-a", "--host", "nosuchhost-b")
        assert r.returncode == 4 and len(r.stderr.splitlines()) == 1, (argv, r.stderr)
        assert "nosuchhost-a: cannot resolve" in r.stderr and "nosuchhost-b: cannot resolve" in r.stderr


@pytest.mark.launch
@pytest.mark.engine
def test_the_old_short_option_of_cycles_works_with_a_note(cli) -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch not installed")
    base = ["probe", "spec-decode", "--preset", "tiny", "-L", "1", "--no-snapshot", "--json"]
    for short, note in (("-C", True), ("-n", False)):
        r = cli(*base, short, "3")
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads(r.stdout)["config"]["cycles"] == 3
        said = [ln for ln in r.stderr.splitlines() if "deprecated" in ln]
        assert said == (["regdiag: note: probe spec-decode -C is deprecated (-C is --concurrency in probe server; "
                         "--cycles is -n); use -n"] if note else [])  # fmt: skip


@pytest.mark.launch
@pytest.mark.engine
def test_explain_takes_the_shapes_as_preset_and_the_old_model_with_a_note(cli) -> None:
    """--model is the served model's name (probe server); the roofline's shapes are --preset, as in
    probe spec-decode. The old spelling, alone or as --model=NAME, still works for one release."""
    base = ["explain", "--tp", "2", "--json"]
    outs = []
    for given, note in ((["--preset", "kimi-k2.5"], False), (["--model", "kimi-k2.5"], True),
                        (["--model=kimi-k2.5"], True)):  # fmt: skip
        r = cli(*base, *given)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(json.loads(r.stdout))
        said = [ln for ln in r.stderr.splitlines() if "deprecated" in ln]
        assert said == (["regdiag: note: explain --model is deprecated (--model is the served model's name in "
                         "probe server; shapes are --preset); use --preset"] if note else [])  # fmt: skip
    assert outs[0] == outs[1] == outs[2] and outs[0]["schema"] == "regdiag.explanation/1"
    # a served model's name after `--` is an argument, never renamed
    r = cli("explain", "--", "--model")
    assert "deprecated" not in r.stderr and r.returncode == 2


def test_clean_speaks_every_format(cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "envs" / "abc").mkdir(parents=True)
    env = {"REGDIAG_HOME": str(home)}
    r = cli("clean", "--format", "csv", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "host,path,existed,kib,pruned,orphan_traces,traces_kept,error",
        f"local,{home / 'envs'},True,,,,,",
    ]
    assert not (home / "envs").exists()
    r = cli("clean", env=env)
    assert r.returncode == 0 and r.stdout == f"local: nothing to remove ({home / 'envs'} absent)\n"
    r = cli("clean", "--format", "html", env=env)
    assert (
        r.returncode == 2
        and r.stderr == "regdiag: error: --format 'html': clean can be shown as terminal, json, csv\n"
    )
