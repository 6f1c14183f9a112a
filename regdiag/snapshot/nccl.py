"""Which NCCL library a process on this host would load, and its version.

What a running engine actually loaded is only knowable inside that process. What we can know from
outside, cheaply and without touching CUDA: every libnccl a process could pick up, and the version
each one reports. Each candidate is dlopen'ed in ONE short child process (python -I -S, ctypes,
ncclGetVersion; no CUDA context is created by that call), so the snapshot process never maps a
300 MB library and a broken library cannot crash it. The child has a timeout.

Candidates, in the order a torch process resolves them (the first one found is the `nccl` field):
  1. LD_PRELOAD entries naming libnccl (the dynamic loader takes these before anything else)
  2. torch/lib/libnccl* (older torch wheels bundled their own)
  3. the nvidia-nccl-cuXX package torch requires (RUNPATH of libtorch_cuda points there)
  4. any other installed nvidia-nccl-cuXX package
  5. the system's libnccl (/usr/lib/x86_64-linux-gnu, /usr/local/cuda*/lib64)
Engines' own NCCL wrappers (vLLM, SGLang pynccl) honour VLLM_NCCL_SO_PATH / SGLANG_NCCL_SO_PATH;
those are listed too, marked with their variable, but do not change the `nccl` field.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from typing import Any

from regdiag.snapshot import fields as F

ENGINE_OVERRIDES = ("VLLM_NCCL_SO_PATH", "SGLANG_NCCL_SO_PATH")
SYSTEM_GLOBS = (
    "/usr/lib/x86_64-linux-gnu/libnccl.so*",
    "/usr/lib/aarch64-linux-gnu/libnccl.so*",
    "/usr/lib64/libnccl.so*",
    "/usr/local/cuda*/lib64/libnccl.so*",
)

_CHILD = r"""
import ctypes, json, os, sys
out = {}
for p in sys.argv[1:]:
    try:
        # Lazy binding: only ncclGetVersion gets resolved, not the library's thousands of symbols.
        lib = ctypes.CDLL(p, mode=os.RTLD_LAZY | os.RTLD_LOCAL)
        v = ctypes.c_int(0)
        rc = lib.ncclGetVersion(ctypes.byref(v))
        out[p] = v.value if rc == 0 else "ncclGetVersion returned %d" % rc
    except Exception as e:
        out[p] = "%s: %s" % (type(e).__name__, e)
sys.stdout.write(json.dumps(out))
"""


def decode_version(code: int) -> str:
    """NCCL_VERSION_CODE -> 'major.minor.patch' (the encoding changed in 2.9: 2.28.9 is 22809)."""
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def _version_from_name(path: str) -> str | None:
    m = re.search(r"libnccl\.so\.(\d+\.\d+\.\d+)", os.path.realpath(path))
    return m.group(1) if m else None


def _package_libs(dist: Any) -> list[str]:
    out = []
    for rel in dist.files():
        if "libnccl.so" in os.path.basename(rel):
            p = os.path.normpath(dist.locate(rel))
            if os.path.exists(p):
                out.append(p)
    return sorted(out, key=len)[:1]


def _torch_nccl_package(torch_dist: Any) -> str | None:
    for req in getattr(torch_dist, "requires", []):
        m = re.match(r"(nvidia-nccl-cu\d+)", req.replace("_", "-").lower())
        if m and "extra ==" not in req:
            return m.group(1)
    return None


def find_libraries(dists: dict[str, Any], environ: dict[str, str] | None = None) -> list[dict[str, str]]:
    """Candidate libraries as [{"path", "source"}], in load precedence order, without duplicates."""
    env = os.environ if environ is None else environ
    out: list[dict[str, str]] = []
    seen: set[str] = set()

    def add(path: str, source: str) -> None:
        real = os.path.realpath(path)
        if real not in seen and os.path.isfile(real):
            seen.add(real)
            out.append({"path": path, "source": source})

    for entry in re.split(r"[:\s]+", env.get("LD_PRELOAD", "")):
        if "libnccl" in os.path.basename(entry):
            add(entry, "LD_PRELOAD")
    torch = dists.get("torch")
    if torch is not None:
        lib_dir = torch.locate("torch/lib")
        for p in sorted(glob.glob(os.path.join(lib_dir, "libnccl*.so*"))):
            add(p, "torch (bundled)")
    wanted = _torch_nccl_package(torch) if torch is not None else None
    pkgs = sorted((k for k in dists if k.startswith("nvidia-nccl-cu")), key=lambda k: k != wanted)
    for key in pkgs:
        for p in _package_libs(dists[key]):
            add(p, key + (" (required by torch)" if key == wanted else ""))
    for pattern in SYSTEM_GLOBS:
        for p in sorted(glob.glob(pattern), key=len)[:1]:
            add(p, "system")
    for var in ENGINE_OVERRIDES:
        if env.get(var):
            add(env[var], var)
    return out


def versions(libs: list[dict[str, str]], timeout_s: float = 5.0) -> tuple[F.Field, F.Field]:
    """(the `nccl` field: the library torch would load, the `nccl_libraries` field: all candidates)."""
    if not libs:
        none = F.unsupported(
            "no libnccl found (no nvidia-nccl package, none in torch/lib, LD_PRELOAD or system)"
        )
        return none, F.ok([])
    res = F.run_cmd([sys.executable, "-I", "-S", "-c", _CHILD] + [lib["path"] for lib in libs], timeout_s)
    answers: dict[str, Any] = {}
    child_error = None
    if res.ok:
        try:
            answers = json.loads(res.stdout)
        except ValueError:
            child_error = "version probe printed no JSON"
    else:
        child_error = res.why("ncclGetVersion probe")
    items = []
    for lib in libs:
        item: dict[str, Any] = dict(lib)
        ans = answers.get(lib["path"])
        if isinstance(ans, int):
            item["version"] = decode_version(ans)
        else:
            item["version"] = _version_from_name(lib["path"])
            item["error"] = F.one_line(ans if ans is not None else child_error or "no answer")
            if item["version"]:
                item["version_from"] = "file name"
        items.append(item)
    loadable = [i for i in items if i["source"] not in ENGINE_OVERRIDES]
    if not loadable:
        chosen: F.Field = F.unsupported("only engine-specific NCCL overrides found")
    elif loadable[0].get("version"):
        first = loadable[0]
        chosen = F.ok({"version": first["version"], "path": first["path"], "source": first["source"]})
    else:
        chosen = F.error(f"{loadable[0]['path']}: {loadable[0].get('error', 'version unknown')}")
    return chosen, F.ok(items)
