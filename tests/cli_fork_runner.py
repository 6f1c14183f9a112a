"""Run many regdiag command lines, each in its own process, at the cost of one interpreter start.

The hostile-input tests have hundreds of cases; starting Python and importing the CLI for each costs
~1.5 s on a 2-core machine. This runner imports the CLI once, then forks a child per case: the child
is a real process with its own exit status, stdout and stderr (files), stdin from /dev/null, cwd
and env of the case; the parent kills it when it runs past the timeout (a hang) and reports that.

stdin: JSON {"cases": [{"argv": [...], "env": {...}, "cwd": "..."}], "timeout": seconds}
       (a case with "exec": CODE instead of "argv" runs that Python code: the runner's own tests)
stdout: JSON list of {"rc": int | null, "stdout": str, "stderr": str, "hung": bool, "seconds": float}
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import traceback


def _child(case: dict, out_path: str, err_path: str) -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(err, 2)
    code = 1
    try:
        os.chdir(case.get("cwd") or os.getcwd())
        os.environ.update(case.get("env") or {})
        if "exec" in case:  # the harness's own test: a case that crashes or hangs on purpose
            exec(case["exec"], {})
        else:
            sys.argv = ["regdiag", *case["argv"]]
            from regdiag._entry import main

            main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()  # what the interpreter would print for an uncaught exception
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def run(case: dict, timeout: float, tmp: str) -> dict:
    out_path, err_path = os.path.join(tmp, "out"), os.path.join(tmp, "err")
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(case, out_path, err_path)
    hung = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - t0 > timeout:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            hung = True
            status = -1
            break
        time.sleep(0.005)
    seconds = time.monotonic() - t0
    rc = None if hung else (os.waitstatus_to_exitcode(status))
    with open(out_path, encoding="utf-8", errors="replace") as f:
        stdout = f.read()
    with open(err_path, encoding="utf-8", errors="replace") as f:
        stderr = f.read()
    return {"rc": rc, "stdout": stdout, "stderr": stderr, "hung": hung, "seconds": round(seconds, 3)}


def main() -> None:
    req = json.load(sys.stdin)
    import importlib

    # Imported once here, inherited by every child (the commands import these lazily).
    for name in (
        "regdiag.cli",
        "regdiag.compare",
        "regdiag.explain",
        "regdiag.baselines",
        "regdiag.bisect.run",
    ):
        importlib.import_module(name)

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in req["cases"]:
            results.append(run(case, float(req.get("timeout", 10)), tmp))
    sys.stdout.write(json.dumps(results))


if __name__ == "__main__":
    main()
