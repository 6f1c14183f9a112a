"""Remote hosts over SSH on loopback: `regdiag snapshot --host`, per-command cost, 10 MB of output.

Starts a real OpenSSH sshd on 127.0.0.1 (the test suite's helper), then measures side by side in one
run:
- `regdiag snapshot --json` end to end (a new process each time, as a user runs it): locally with
  --python P, and over SSH with --host and the same P, for a login with a bare shell and, when running
  as root, for root's own login shell with its start-up files (pyenv / conda init are typical on GPU
  boxes and are paid by every SSH command);
- one command's round trip (`true`) through the SSH layer, against a local subprocess;
- 10 MB on stdout plus 10 MB on stderr, interleaved, from one remote process: the time, and that it
  finishes (reading one stream to the end before the other would deadlock).

Writes docs/bench/ssh.md. Usage: python bench/bench_ssh.py [--n 11]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import sshd_helpers  # noqa: E402

from regdiag.hosts.local import LocalHost  # noqa: E402
from regdiag.hosts.resolve import open_host  # noqa: E402

BULK_MB = 10
TARGET_S = 1.0  # median of `regdiag snapshot --host` over loopback
BULK_PROG = (
    "import sys\n"
    "line = 'y' * 1023 + '\\n'\n"
    f"for i in range({BULK_MB} * 1024):\n"
    "    sys.stdout.write(line); sys.stderr.write(line)\n"
)


def _median_runs(argv: list[str], n: int, env: dict[str, str]) -> tuple[float, float, float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise SystemExit(f"failed: {' '.join(argv)}\n{r.stderr}")
    return statistics.median(times), min(times), max(times)


def _median_calls(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=11, help="repetitions per measurement (default 11)")
    a = ap.parse_args()
    n = max(10, a.n)
    srv = sshd_helpers.start_sshd()
    env = dict(os.environ)
    env["REGDIAG_HOME"] = str(srv.dir / "regdiag-home")
    rows: list[str] = []
    cmds: list[str] = []
    verdicts: list[str] = []
    try:
        logins = []
        if "bash" in srv.shell_users:
            py = "/usr/bin/python3"
            cfg = srv.write_config(srv.dir / "cfg-bash", user=srv.shell_users["bash"])
            logins.append(("bash, no start-up files", cfg, py))
        cfg_root = srv.ssh_config
        logins.append((f"{srv.user}'s own login shell", cfg_root, sys.executable))

        for label, cfg, py in logins:
            local = [sys.executable, "-m", "regdiag", "snapshot", "--python", py, "--json"]
            remote = [sys.executable, "-m", "regdiag", "snapshot", "--host", "regdiag-test"]
            remote += ["--ssh-config", str(cfg), "--python", py, "--json"]
            lm, lmin, lmax = _median_runs(local, n, env)
            rm, rmin, rmax = _median_runs(remote, n, env)
            verdicts.append(
                f"{label}: {rm:.2f} s over SSH, {rm - lm:+.2f} s against the same snapshot taken locally "
                f"({'meets' if rm <= TARGET_S else 'misses'} the {TARGET_S:g} s target)"
            )
            rows.append(
                f"| `regdiag snapshot --json`, {label} | {lm:.2f} s ({lmin:.2f}-{lmax:.2f}) | "
                f"{rm:.2f} s ({rmin:.2f}-{rmax:.2f}) | {rm / lm:.2f} |"
            )
            shown = "PYTHON" if py == sys.executable else py  # this interpreter, wherever it is installed
            cmds.append(f"regdiag snapshot --host regdiag-test --ssh-config CFG --python {shown} --json")

            with open_host("regdiag-test", py, str(cfg)) as h:
                local_host = LocalHost(py)
                lt = _median_calls(lambda lh=local_host: lh.run(["true"]), n)
                rt = _median_calls(lambda hh=h: hh.run(["true"]), n)
                rows.append(
                    f"| one command (`true`), {label} | {lt * 1000:.1f} ms | {rt * 1000:.1f} ms | {rt / lt:.1f} |"
                )

        with open_host("regdiag-test", logins[0][2], str(logins[0][1])) as h:
            lines = [0]

            def count(_line: str) -> None:
                lines[0] += 1

            def bulk(host):  # type: ignore[no-untyped-def]
                lines[0] = 0
                r = host.run(
                    [host.python, "-c", BULK_PROG], keep_output=False, on_stderr_line=count, timeout=300
                )
                assert r.returncode == 0 and not r.timed_out, r.stderr_tail()
                assert lines[0] == BULK_MB * 1024, lines[0]

            lb = _median_calls(lambda: bulk(LocalHost(logins[0][2])), n)
            rb = _median_calls(lambda: bulk(h), n)
            mb = 2 * BULK_MB
            rows.append(
                f"| {BULK_MB} MB stdout + {BULK_MB} MB stderr, interleaved, lines to a callback | "
                f"{lb:.2f} s ({mb / lb:.0f} MB/s) | {rb:.2f} s ({mb / rb:.0f} MB/s) | {rb / lb:.1f} |"
            )
    finally:
        sshd_helpers.stop_sshd(srv)

    load = os.getloadavg()
    text = [
        "## SSH hosts (loopback)",
        "",
        f"`python bench/bench_ssh.py --n {n}` on a {os.cpu_count()}-core machine "
        f"({platform.python_implementation()} {platform.python_version()}, load average "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} while it ran), a real OpenSSH sshd on 127.0.0.1. "
        f"Medians of {n} runs (min-max); each `regdiag snapshot` row is a fresh process, as a user runs it: "
        "connect, key exchange, authentication, upload of the bundle, the collector with the host's python, "
        "and removal of the temporary directory.",
        "",
        "| measurement | local | over SSH | ratio |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
        "Commands: " + "; ".join(f"`{c}`" for c in cmds) + ".",
        "",
        "Snapshot over SSH, " + "; ".join(verdicts) + ". The difference is paramiko's import, the "
        "connection (key exchange and authentication, mostly sshd's own work), one upload and the "
        "remote interpreter's start; the rest is the collector itself, the same work as locally.",
        "",
        "Every SSH command starts the user's login shell first (that is how sshd runs a command), so its "
        "start-up files are paid per command: the rows for the login with start-up files show that cost, "
        "which regdiag cannot remove, only keep to few commands (one upload that also creates the "
        "temporary directory, one run, and a removal that is not waited for).",
        "",
    ]
    out = ROOT / "docs" / "bench" / "ssh.md"
    out.write_text("\n".join(text), encoding="utf-8")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
