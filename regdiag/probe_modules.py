"""The probe kit as regdiag finds and reads it: `probes_dir()`, the one place that says where probes/ is;
the modules whose tables regdiag reads too (`load`: the model shapes of _presets, the NVML reasons of
_nvml); and the probe scripts themselves (`load_script`), whose argparse parser is the one declaration
of a probe's options.

probes/ import nothing of regdiag (they run on bare remote hosts), so these tables live there and regdiag
loads them: from the source tree's probes/ beside this package, else from the installed `regdiag.probes`
package (also inside the SSH bundle).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def probes_dir() -> Path | None:
    """The probes that belong with this regdiag: the source tree's probes/ beside this package, so a
    checkout never reads another checkout's installed probes; else the installed package's directory;
    None where that is no directory (inside a zip)."""
    tree = Path(__file__).resolve().parent.parent / "probes"
    if (tree / "_protocol.py").is_file():
        return tree
    spec = importlib.util.find_spec("regdiag.probes")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(next(iter(spec.submodule_search_locations)))
    return d if d.is_dir() else None


def load(name: str) -> ModuleType:
    """load("_presets") or load("_nvml"): a probe module that imports no other probe module."""
    key = f"_regdiag_probe{name}"
    if key in sys.modules:
        return sys.modules[key]
    d = probes_dir()
    if d is None or not (d / f"{name}.py").is_file():
        return importlib.import_module(f"regdiag.probes.{name}")
    return _exec(key, d / f"{name}.py")


def load_script(path: Path) -> ModuleType:
    """A probe script as a module, for what it declares without torch (its `build_parser`, `validate`):
    a probe imports torch inside its run only. The script's imports of its sibling modules (`import
    _protocol`) are served from its directory while it loads, each loaded once and kept under a private
    name (as `load` keeps its tables); neither sys.path nor the names in sys.modules are changed."""
    key = f"_regdiag_probe_{path.stem}"
    if key in sys.modules:
        return sys.modules[key]
    d = path.parent
    siblings = [p.stem for p in d.glob("_*.py")]
    path_before, modules_before = list(sys.path), set(sys.modules)
    sys.path.insert(0, str(d))
    for name in siblings:  # those loaded already, by `load` or by another script
        if f"_regdiag_probe{name}" in sys.modules and name not in sys.modules:
            sys.modules[name] = sys.modules[f"_regdiag_probe{name}"]
    try:
        return _exec(key, path)
    finally:
        sys.path[:] = path_before
        for name in siblings:
            if name not in modules_before and name in sys.modules:
                sys.modules.setdefault(f"_regdiag_probe{name}", sys.modules[name])
                del sys.modules[name]


def _exec(key: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(key, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"probe module not found at {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[key] = mod  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[key]
        raise
    return mod
