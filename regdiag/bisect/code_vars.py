"""Which variables a record may set in every launch of a bisect or ab: settings only.

A side read from a snapshot or run record may set only variables whose effect is a setting: an
allow-list, since a list of the variables that load code never ends (OPENSSL_CONF names a provider
.so, SHELLOPTS with PS4 runs a command in every bash, NCCL_CONF_FILE sets a plugin behind any check
of NCCL_NET_PLUGIN, CC chooses the compiler Triton runs). A setting is a variable of a known family of
tuning knobs (a family of regdiag.snapshot.families that does not load code), or one of SETTING_VARS,
that is not in LOADERS (the variables of those families that load code, by what they load), whose
name does not say it holds a location or chooses code (CODE_NAME_WORDS: ..._PATH, ..._FILE,
..._PLUGIN, ..._LIBRARIES, ..._PACKAGE, ...) and whose value is not a location or a shell expansion
(_CODE_VALUE).

The value's form is the last and weakest test: `OMP_TOOL_LIBRARIES=bundle/libtool` names a library by
a path relative to the launch's directory (a worktree of the engine), `SGLANG_EXTERNAL_MODEL_PACKAGE=pkg`
a package found on the import path, and neither looks like a path. Such variables are refused by what
they load, whatever their value.

A record is a file anyone may have written, and bisect and ab set such a value in every launch they
make (as root, if run as root).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from regdiag.snapshot.families import SETTING_PREFIXES
from regdiag.snapshot.redact import is_hidden

if TYPE_CHECKING:
    from regdiag.bisect.factor_base import Spec

_LIBRARY = "a library it loads into the process"
_PLUGIN = "a plugin it loads (a bare name is looked up on the loader's path)"
_PACKAGE = "a Python package or class it imports"
_COMPILED = "a directory of compiled kernels it loads"
_COMPILER = "the compiler, or compiler flags, of the kernels it builds and loads"
# Variables of the setting families that load code, and what each loads. The name rules below catch
# most of them too; this table holds them whatever their name or value looks like.
LOADERS: Mapping[str, str] = {
    "OMP_TOOL_LIBRARIES": _LIBRARY,  # OpenMP tools (OMPT), loaded by the runtime at start
    "CUDA_INJECTION64_PATH": _LIBRARY,
    "NVTX_INJECTION64_PATH": _LIBRARY,
    "TRITON_LIBCUDA_PATH": _LIBRARY,
    "NCCL_NET_PLUGIN": _PLUGIN,
    "NCCL_TUNER_PLUGIN": _PLUGIN,
    "NCCL_PROFILER_PLUGIN": _PLUGIN,
    "NCCL_CONF_FILE": _PLUGIN,  # a file of NCCL settings, NCCL_NET_PLUGIN among them
    "NVSHMEM_BOOTSTRAP_PLUGIN": _PLUGIN,
    "VLLM_PLUGINS": _PLUGIN,  # the Python entry points vLLM loads, by name
    "SGLANG_EXTERNAL_MODEL_PACKAGE": _PACKAGE,  # model classes SGLang imports from it
    "TRITON_CACHE_MANAGER": _PACKAGE,  # module:Class
    "TRITON_REMOTE_CACHE_BACKEND": _PACKAGE,  # module:Class
    "FLASHINFER_WORKSPACE_BASE": _COMPILED,  # FlashInfer builds and loads its JIT modules under it
    "FLASHINFER_CUBIN_DIR": _COMPILED,
    "TORCHINDUCTOR_CACHE_DIR": _COMPILED,
    "TORCH_EXTENSIONS_DIR": _COMPILED,
    "TRITON_CACHE_DIR": _COMPILED,
    "TRITON_HOME": _COMPILED,
    "TRITON_OVERRIDE_DIR": _COMPILED,
    "DG_JIT_CACHE_DIR": _COMPILED,
    "FLASHINFER_EXTRA_CFLAGS": _COMPILER,
    "FLASHINFER_EXTRA_CUDAFLAGS": _COMPILER,
    "FLASHINFER_EXTRA_LDFLAGS": _COMPILER,
    "TORCH_NVCC_FLAGS": _COMPILER,
    "TRITON_PTXAS_PATH": _COMPILER,
    "DG_JIT_NVCC_COMPILER": _COMPILER,
}


def what_it_loads(name: str) -> str | None:
    """What a variable of LOADERS loads, as a refusal names it; None for any other."""
    return LOADERS.get(name)


SETTING_VARS = frozenset(
    {
        "PYTHONHASHSEED",
        "PYTHONUNBUFFERED",
        "PYTHONMALLOC",
        "PYTHONTRACEMALLOC",
        "PYTHONINTMAXSTRDIGITS",
        "PYTHONNODEBUGRANGES",
        "PYTHONFAULTHANDLER",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONOPTIMIZE",
        "PYTHONUTF8",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "TZ",
        "LANG",
        "LC_ALL",
    }
)
# Words of a name that hold a location or choose code, within a family too: NCCL_CONF_FILE,
# CUDA_INJECTION64_PATH, TRITON_HOME, TORCH_EXTENSIONS_DIR, VLLM_PLUGINS, VLLM_LOGGING_CONFIG_PATH,
# OMP_TOOL_LIBRARIES, SGLANG_EXTERNAL_MODEL_PACKAGE, FLASHINFER_EXTRA_LDFLAGS.
CODE_NAME_WORDS = frozenset(
    {
        "PATH",
        "PATHS",
        "FILE",
        "FILES",
        "DIR",
        "DIRS",
        "HOME",
        "ROOT",
        "LIB",
        "LIBS",
        "LIBRARY",
        "PLUGIN",
        "PLUGINS",
        "INJECTION",
        "INJECTION64",
        "PRELOAD",
        "CACHE",
        "MODULE",
        "MODULES",
        "SO",
        "EXECUTABLE",
        "BIN",
        "CMD",
        "COMMAND",
        "SCRIPT",
        "HOOK",
        "HOOKS",
        "LOADER",
        "CC",
        "CXX",
        "NVCC",
        "COMPILER",
        "LINKER",
        "LIBRARIES",
        "PACKAGE",
        "PACKAGES",
        "FLAGS",
        "CFLAGS",
        "CXXFLAGS",
        "LDFLAGS",
        "CUDAFLAGS",
    }
)
# A value that is a location or a shell expansion: an absolute, home or relative path, a URL, a
# command substitution or a variable reference.
_CODE_VALUE = re.compile(
    r"^\s*[/~.]|[:=,;\s][/~]|\.\./|\./|://|\$[({A-Za-z_]|`|\.(so|py|pth|dylib|conf|cfg|sh)\b"
)
_NAME_WORD = re.compile(r"[A-Z]+\d*")


def is_setting(name: str, value: str) -> bool:
    """Whether a record may set this variable to this value: a setting (the module docstring)."""
    if name in LOADERS:
        return False
    if name not in SETTING_VARS and not name.startswith(SETTING_PREFIXES):
        return False
    if any(w in CODE_NAME_WORDS for w in _NAME_WORD.findall(name.upper())):
        return False
    return not _CODE_VALUE.search(value)


def loads_code(name: str, value: str = "1") -> bool:
    """Whether setting a variable to a value may load code: anything not a setting (is_setting)."""
    return not is_setting(name, value)


def code_from_record(spec: Spec, environ: Mapping[str, str] | None = None) -> list[str]:
    """The variables a side would set in every launch that are not settings (is_setting), with a value
    that this process does not already run with (the same value as the user's own asks for nothing new). A placeholder (a
    redacted or hashed value) is never set, so it does not count; a record's own list of redacted names
    is not trusted for this."""
    have = os.environ if environ is None else environ
    return sorted(
        n
        for n, v in spec.env.items()
        if v is not None and loads_code(n, v) and have.get(n) != v and not _placeholder(v)
    )


def _placeholder(value: str) -> bool:
    return value == "<set>" or is_hidden(value)
