"""The GPUs a Slurm allocation asks for and the start check of its nodes (docs/fleet.md, "GPUs").

    salloc_gpus(["--partition=gpu"], need)   -> ["--gpus-per-node=8"]  (the probe's TP size)
    salloc_gpus(["--gres=gpu:h200:8"], need) -> []                     (--slurm-args asked already)
    step_gpus(need, cpus=64, gpus=8)          -> ["--exact", "--gpus=8", "--cpus-per-task=64"]
    problems = start_check(nodes, python, need)  -> ["n2: a launch there sees no GPU ...", ...]

A step asks for its own GPUs (`--gpus=TP`) and its share of the node's CPUs with `--exact`, so that
steps of several lanes could share a node, each on GPUs of its own. The start check runs one step per
node, with a launch's step options, before any launch: regdiag's interpreter must start there (the
nodes share this machine's files) and, where the probe needs GPUs, see them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# What a step sees: the GPUs NVML finds, as CUDA_VISIBLE_DEVICES narrows them (Slurm sets it per step).
CHECK = r"""
import json, os, sys
cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
cache = sys.argv[2] or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "regdiag")
out = {"cvd": cvd, "gpus": 0, "nvml": None, "cache": cache, "marker": os.path.exists(os.path.join(cache, sys.argv[1]))}
try:
    import pynvml
    pynvml.nvmlInit()
    n = pynvml.nvmlDeviceGetCount()
    pynvml.nvmlShutdown()
    listed = [d for d in (cvd or "").split(",") if d.strip() and d != "NoDevFiles"]
    out["gpus"] = n if cvd is None else min(n, len(listed))
except Exception as e:
    out["nvml"] = " ".join(str(e).split()) or type(e).__name__
print("REGDIAG-CHECK " + json.dumps(out))
"""
GPU_OPTION = re.compile(r"^(-G|--gpus|--gpus-per-\w+|--tres-per-\w+)(=|$)")
SALLOC_GPU_VARS = ("SALLOC_GPUS", "SALLOC_GPUS_PER_NODE", "SALLOC_GPUS_PER_TASK", "SALLOC_GRES")


def names_gpus(args: Sequence[str]) -> bool:
    """Whether salloc's options (or its SALLOC_* variables) already ask for GPUs."""
    for i, a in enumerate(args):
        if GPU_OPTION.match(a):
            return True
        gres = a.split("=", 1)[1] if a.startswith("--gres=") else None
        if a == "--gres" and i + 1 < len(args):
            gres = args[i + 1]
        if gres is not None and "gpu" in gres:
            return True
    return any(os.environ.get(v) for v in SALLOC_GPU_VARS)


def salloc_gpus(args: Sequence[str], need: Any) -> list[str]:
    """What regdiag adds to salloc for the probe's GPUs: one launch's worth per node, unless
    --slurm-args already asks for GPUs."""
    count = getattr(need, "count", 0)
    return [f"--gpus-per-node={count}"] if count and not names_gpus(args) else []


def per_node(job: dict[str, Any]) -> tuple[int, int]:
    """The CPUs and GPUs the allocation holds on each node (squeue --json's job: `cpus` over its nodes,
    `gres_detail` such as ["gpu:h200:8(IDX:0-7)", ...]); alike on every node, as salloc -N gives."""
    details = [str(g) for g in job.get("gres_detail") or []]
    nodes = max(1, len(details) or int(job.get("node_count") or 1))
    gpus = [int(m.group(1)) for g in details if (m := re.match(r"gpu(?::[^:(]+)?:(\d+)", g))]
    return max(1, int(job.get("cpus") or nodes) // nodes), (min(gpus) if gpus else 0)


def step_gpus(need: Any, cpus: int, gpus: int) -> list[str]:
    """A step's own share of a node that holds `cpus` and `gpus` for the job: the probe's GPUs and the
    CPUs divided among the lanes that fit; nothing extra when the probe needs no GPU or the node holds
    too few (a step then takes the whole node, and the start check says what it sees)."""
    count = getattr(need, "count", 0)
    if not count or gpus < count:
        return []
    lanes = max(1, gpus // count)
    return ["--exact", f"--gpus={count}", f"--cpus-per-task={max(1, cpus // lanes)}"]


def local_cache(env_dir: str | None) -> str:
    """regdiag's cache directory as this machine sees it: --env-dir, else as the nodes' builder finds
    it (bisect/remote_envs.py: ${XDG_CACHE_HOME:-$HOME/.cache}/regdiag)."""
    return env_dir or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "regdiag"
    )


def _one(
    node: Any, python: str, need: Any, marker: str, env_dir: str | None
) -> tuple[str | None, str | None]:
    """What is wrong with `node` for these launches, in one line (None: nothing), and what is wrong
    with its cache directory (None: the one this machine sees)."""
    res = node.run([python, "-c", CHECK, marker, env_dir or ""], timeout=120)
    text = res.stdout.decode("utf-8", "replace")
    found = next((ln for ln in text.splitlines() if ln.startswith("REGDIAG-CHECK ")), None)
    if found is None:
        said = res.stderr_tail() or f"exit status {res.returncode}"
        return (
            f"{node.name}: cannot start {python} there ({said}): the nodes do not share this "
            f"machine's files (docs/fleet.md)"
        ), None
    seen = json.loads(found.split(" ", 1)[1])
    cache = None
    if not seen["marker"]:
        where = local_cache(env_dir)
        also = "" if seen["cache"] == where else f" (it looks in {seen['cache']})"
        cache = f"{node.name} does not see {where} as this machine does{also}"
    count = getattr(need, "count", 0)
    if count and seen["gpus"] < count:
        what = "no GPU" if not seen["gpus"] else f"{seen['gpus']} GPU(s)"
        detail = ", ".join(
            x
            for x in (
                f"CUDA_VISIBLE_DEVICES={seen['cvd']}"
                if seen["cvd"] is not None
                else "no CUDA_VISIBLE_DEVICES",
                f"NVML: {seen['nvml']}" if seen["nvml"] else "",
            )
            if x
        )
        return (
            f"{node.name}: a launch there sees {what} ({detail}), but the probe needs {count} ({need.why}): "
            f"ask for them in --slurm-args, or give the probe --device cpu"
        ), cache
    return None, cache


def start_check(
    nodes: Sequence[Any], python: str, need: Any, env_dir: str | None = None
) -> tuple[list[str], list[str]]:
    """One step per node, all at once: what is wrong with each node for these launches, and which
    nodes do not share this machine's cache directory (--env-dir, else ~/.cache/regdiag): each sees a
    file written there from here, or not. Both empty: nothing."""
    where = Path(local_cache(env_dir))
    where.mkdir(parents=True, exist_ok=True)
    marker = f".regdiag-shared-{os.getpid()}-{secrets.token_hex(4)}"
    (where / marker).write_text("written by regdiag's start check of a Slurm allocation\n")
    try:
        with ThreadPoolExecutor(max_workers=min(16, len(nodes)) or 1) as pool:
            found = list(pool.map(lambda n: _one(n, python, need, marker, env_dir), nodes))
    finally:
        (where / marker).unlink(missing_ok=True)
    return [f for f, _ in found if f], [c for _, c in found if c]
