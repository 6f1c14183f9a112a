"""The console entry point, kept import-light.

`regdiag snapshot --json` is what scripts and CI gates call before every benchmark, so it must cost
less than the benchmark's noise: loading typer, rich and every command module costs ~0.5 s on a small
VM, five times the snapshot itself. That one form (with only --all-packages and -o besides) goes
straight to the collector; everything else goes through the full CLI. Both print the same record.
"""

from __future__ import annotations

import sys
from typing import NoReturn


def _defaults_set() -> bool:
    """REGDIAG_HOST / REGDIAG_PYTHON or a config file may send the snapshot elsewhere: the full CLI."""
    import os

    if os.environ.get("REGDIAG_HOST") or os.environ.get("REGDIAG_PYTHON"):
        return True
    home = os.environ.get("REGDIAG_HOME") or os.path.join(os.path.expanduser("~"), ".regdiag")
    return os.path.exists(os.path.join(home, "config.toml"))


def _fast_snapshot_args(argv: list[str]) -> dict[str, object] | None:
    if not argv or argv[0] != "snapshot" or "--json" not in argv or _defaults_set():
        return None
    opts: dict[str, object] = {"all_packages": False, "output": None}
    rest = argv[1:]
    i = 0
    while i < len(rest):
        tok = rest[i]
        if tok == "--json":
            pass
        elif tok == "--all-packages":
            opts["all_packages"] = True
        elif tok in ("-o", "--output") and i + 1 < len(rest) and not rest[i + 1].startswith("-"):
            opts["output"] = rest[i + 1]
            i += 1
        else:
            return None  # anything else: let the full CLI parse (and validate) it
        i += 1
    return opts


def main() -> None:
    from regdiag.report.charset import install

    install()  # a stdout that cannot write UTF-8 gets "->" for the arrows, not a traceback
    opts = _fast_snapshot_args(sys.argv[1:])
    if opts is None:
        from regdiag.cli import main as full_main

        full_main()
        return
    import json

    from regdiag.errors import error_line
    from regdiag.files import check_home, check_output_path
    from regdiag.records import RecordError, save_record
    from regdiag.snapshot import collect

    def fail(why: str) -> NoReturn:
        sys.stderr.write(error_line(why))
        sys.exit(2)

    output = str(opts["output"]) if opts["output"] else None
    try:
        check_home()  # REGDIAG_HOME regdiag's own, as the full CLI checks it (files.check_home)
    except RecordError as e:
        fail(str(e))
    try:
        if output:
            check_output_path(output)  # before the snapshot: a bad -o costs nothing
    except RecordError as e:
        fail(f"-o {e}")
    try:
        record = collect(all_packages=bool(opts["all_packages"]))
    except RecordError as e:  # a hash key refused or not made (regdiag.snapshot.keyedhash)
        fail(str(e))
    if output:
        try:
            save_record(output, record)
        except OSError as e:
            fail(f"-o {output}: cannot write ({e.strerror or e})")
        except RecordError as e:
            fail(f"-o {e}")
    sys.stdout.write(json.dumps(record, indent=1, default=str) + "\n")
    sys.stdout.flush()
    sys.exit(0)
