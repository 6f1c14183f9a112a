"""Does the measurement see the factor? A package can only cost milliseconds in a process that loads it.

`probe spec-decode` is plain torch: a bisect of flashinfer or sgl-kernel measured by it can only say
"does not reproduce", after many launches. Every launch of a probe (and of the engine hook) says in
its footer which distributions the process loaded (probes/_loaded.py). The bisect checks each package
factor against that:

- before any launch, for a probe whose imports are known (the `LOADS` it declares beside `PHASES`,
  measure.probes.probe_loads): the probe's imports are loaded in the bad endpoint's built environment
  (`python _loaded.py torch ...`), which costs one interpreter start, not a measured launch;
- after the first launch of each endpoint, for every measurement: against what it reported.

A factor no measured process loads is cleared without a launch: the bisect holds it at its good value
(its bad value in the bad endpoint only) and the report says "six 1.16.0 -> 1.17.0: cleared, never
loaded by probe spec-decode". Only when no factor left can show (every difference is such a package) is
the bisect refused in one line (exit 2). --allow-unloaded measures them all as any other factor. A
measurement that does not say what it loaded (a --command of the user's) is noted, never refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from regdiag.bisect.factors import Factor
from regdiag.errors import BadInput
from regdiag.hosts.base import Host
from regdiag.measure.launch import command


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def package_factors(factors: Iterable[Factor]) -> list[Factor]:
    return [f for f in factors if f.kind == "package"]


def unloaded(factors: Iterable[Factor], loaded: Sequence[Mapping[str, Any]]) -> list[Factor]:
    """The package factors among `factors` whose distribution is not in `loaded`."""
    names = {norm(str(d.get("name", ""))) for d in loaded}
    return [f for f in package_factors(factors) if norm(f.name) not in names]


def refuse(missing: Sequence[Factor], measured_by: str) -> BadInput:
    names = ", ".join(f.name for f in missing)
    return BadInput(
        f"{measured_by} never loads {names}: a change there cannot show; measure with what loads it "
        "(--probe engine or --command) or give --allow-unloaded"
    )


def cleared_line(f: Factor, by: str) -> str:
    """How the report names a factor cleared without a launch."""
    return f"{f.label()}: cleared, never loaded by {by}"


def clear_or_refuse(factors: Sequence[Factor], missing: Sequence[Factor], by: str) -> list[Factor]:
    """The factors cleared (`missing`, in factor order); BadInput when no factor would be left to show."""
    keys = {f.key for f in missing}
    if factors and all(f.key in keys for f in factors):
        raise refuse(missing, by)
    return [f for f in factors if f.key in keys]


def preflight(
    host: Host,
    python: str,
    script: str,
    imports: Sequence[str],
    env: Mapping[str, str],
    timeout: float = 300.0,
) -> list[dict[str, str]] | None:
    """What a process of `python` that imports `imports` loads (None when that cannot be told)."""
    res = command(host, [python, script, *imports], env=dict(env), timeout=timeout)
    for line in reversed(res.stdout.decode("utf-8", "replace").splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "loaded" and isinstance(obj.get("dists"), list):
            return [d for d in obj["dists"] if isinstance(d, dict)]
    return None


def measured_by(probe: str | None) -> str:
    return f"probe {probe}" if probe else "the --command"


def check_before(
    factors: Sequence[Factor],
    probe: str | None,
    python: str,
    process_env: Mapping[str, str],
    host: Host,
    progress: Any = None,
) -> list[Factor]:
    """Before any launch: what a synthetic probe's processes load with `python` (the bad side's built
    interpreter). The package factors outside it are returned (cleared); BadInput when that is every
    factor. Nothing to do for a measurement whose imports are not known here (an engine, a --command):
    its launches are checked instead."""
    from regdiag.measure.probes import probe_loads, probe_script

    imports = probe_loads(probe)
    if imports is None or not package_factors(factors):
        return []

    if progress:
        progress({"event": "step", "what": f"what probe {probe} loads"})
    script = str(probe_script(str(probe)).parent / "_loaded.py")
    loaded = preflight(host, python, script, imports, process_env)
    if loaded is None:
        return []
    return clear_or_refuse(factors, unloaded(factors, loaded), measured_by(probe))


def check_launch(factors: Sequence[Factor], loaded: Any, probe: str | None) -> str | None:
    """After the bad side's first launch: refuse (BadInput) when no factor it loaded is left; else a
    note naming the package factors it did not load (they cannot show), or saying that the launch did
    not tell what it loaded."""
    names = ", ".join(f.name for f in package_factors(factors))
    if not names:
        return None
    if not isinstance(loaded, list):
        return f"{measured_by(probe)} does not say what it loaded: cannot tell whether it loads {names}"
    by = measured_by(probe)
    cleared = clear_or_refuse(factors, unloaded(factors, loaded), by)
    return "; ".join(cleared_line(f, by) for f in cleared) or None
