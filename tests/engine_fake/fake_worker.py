"""One "rank" of the fake engine: a fresh interpreter that runs cycles on command."""

import sys

if not getattr(sys, "_fake_engine_site_ran", False):
    sys.stderr.write("fake worker: the engine's own sitecustomize did not run\n")
    sys.exit(3)

from fake_spec import SpecWorker  # noqa: E402  (imported after the check, as an engine would load it)

worker = SpecWorker()
for line in sys.stdin:
    tokens = 0
    for _ in range(int(line.split()[1])):
        tokens += worker.step()
    sys.stdout.write(f"DONE {tokens}\n")
    sys.stdout.flush()
