"""regdiag bisect: which commit, package version, env var or GPU clock costs the milliseconds.

factors.py   the two sides (snapshot, run record or spec string) and their differences
kinds/       one file per factor kind (commit, package, env, gpu_clock) behind one interface
failures.py  why a point cannot be measured, as exceptions (SKIP, usage errors)
envs.py      environments made for real (git worktrees, layered venvs), cached by content hash
ranges.py    the commits / versions between a factor's good and bad value
measure.py   one launch of the probe or --command, parsed from the probe protocol
lab.py       points, their environments and launches, through the journal; builder_for (here or a host)
journal.py   append-only JSON lines; --resume replays it
classify.py  theta with a CI: BAD / GOOD / more launches / PARTIAL / INCONCLUSIVE
search.py    endpoints, chain bisection + ddmin over factors, range search, several culprits
report.py    culprits with ms per phase and share, as a dict (rendered by regdiag.report.bisect)
run.py       all of it, end to end: make_plan, then run_bisect(Request) -> report dict
"""

from regdiag.bisect.run import Request, run_bisect

__all__ = ["Request", "run_bisect"]
