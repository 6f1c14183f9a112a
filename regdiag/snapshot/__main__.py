"""`python -m regdiag.snapshot`: the collector alone, JSON on stdout.

This is what runs on a remote host (shipped as a zip, started with the host's bare python3), and
the fastest way to take a snapshot locally: no typer, no rich. Exit 0 whenever a record was made,
however many of its fields failed; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys

from regdiag.records import RecordError, dumps_record, save_record
from regdiag.snapshot import DEFAULT_TIMEOUT_S, collect


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m regdiag.snapshot", description=__doc__.splitlines()[0])
    p.add_argument(
        "--repo", help="engine checkout (default: editable sglang/vllm, else the current directory)"
    )
    p.add_argument("--all-packages", action="store_true", help="list every installed distribution")
    p.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="deadline in seconds (default 10)"
    )
    p.add_argument("--via", default="local", help="origin.via to record (default local)")
    p.add_argument("-o", "--output", help="also write the record to this file (atomically)")
    p.add_argument("--pid", type=int, help="snapshot this running process (an engine server) instead")
    args = p.parse_args(argv)
    from regdiag.snapshot.process import ProcessError

    try:
        record = collect(
            repo=args.repo, all_packages=args.all_packages, timeout_s=args.timeout, via=args.via, pid=args.pid
        )
        if args.output:
            save_record(args.output, record)
    except (ProcessError, RecordError) as e:  # RecordError: a hash key refused, an -o that cannot be written
        sys.stderr.write(f"{p.prog}: error: {e}\n")
        return 2
    sys.stdout.write(dumps_record(record))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
