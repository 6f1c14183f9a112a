"""The held-out secret shapes and diagnosis values (tests/secret_heldout.py) through a tree's redaction.

    .venv/bin/python bench/redaction_heldout.py            # this tree
    PYTHONPATH=/tmp/main .venv/bin/python bench/redaction_heldout.py   # another (git archive main regdiag)

Prints the shapes that leak and the diagnosis values hidden, then one line of counts (docs/reliability.md).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))
os.environ["REGDIAG_HOME"] = tempfile.mkdtemp(prefix="regdiag-heldout-")

from secret_heldout import measure  # noqa: E402

from regdiag.snapshot import redact  # noqa: E402

sinks = {n: getattr(redact, n) for n in ("scrub_text", "redact_argv", "redact_value", "redact_tree")}
m = measure(sinks)
print("regdiag from", Path(redact.__file__).parent.parent.parent)
for label in m["leaks"]:  # type: ignore[union-attr]
    print("leak:", label)
for kind, name, value in m["hidden"]:  # type: ignore[union-attr, misc]
    print("hidden:", kind, name, value)
print(f"leaks {len(m['leaks'])} of {m['shapes']}; readable {m['readable']} of {m['diagnosis']}")  # type: ignore[arg-type]
