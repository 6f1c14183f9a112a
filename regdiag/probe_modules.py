"""Modules of the probe kit that regdiag reads too: the one table of model shapes (_presets) and the one
NVML table of clock-event reasons and GPU processes (_nvml).

probes/ import nothing of regdiag (they run on bare remote hosts), so these tables live there and regdiag
loads them: from the installed `regdiag.probes` package (also inside the SSH bundle), else from the
source tree's probes/ beside this package.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load(name: str) -> ModuleType:
    """load("_presets") or load("_nvml"): a probe module that imports no other probe module. The source
    tree's copy wins where there is one, so a checkout never reads another checkout's installed probes."""
    key = f"_regdiag_probe{name}"
    if key in sys.modules:
        return sys.modules[key]
    path = Path(__file__).resolve().parent.parent / "probes" / f"{name}.py"
    if not path.is_file():
        return importlib.import_module(f"regdiag.probes.{name}")
    spec = importlib.util.spec_from_file_location(key, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"probe module {name} not found at {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[key] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod
