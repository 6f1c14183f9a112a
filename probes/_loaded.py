"""Which installed distributions this process has really loaded: its imported modules and the shared
libraries mapped into it (standard library only; the probes and the engine hook both call it).

A bisect over a package can only see a change in a package the measured process loads: a bisect of
flashinfer measured by a plain-torch probe can only say "does not reproduce". Each launch therefore
reports, in its footer, `"loaded": [{"name", "version", "path"}, ...]` (names normalized as in PEP 503)
and regdiag checks every package factor against it.

A file belongs to the distribution whose RECORD lists the top of its path below a site directory
(`torch/...`, `nvidia/nccl/...`, `six.py`), so that a library loaded by path (libnccl.so.2 dlopen'ed
by torch from the nvidia-nccl wheel) counts as well as a module, and two copies of one distribution
(an overlay's pinned version in front of the user's) are told apart by where the loaded file lies.

`python _loaded.py MODULE ...` imports the modules and prints one `{"type": "loaded", ...}` line: what
a process that imports them would load, measured without running a probe.
"""

from __future__ import annotations

import json
import os
import re
import sys


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _loaded_files() -> set[str]:
    files: set[str] = set()
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if isinstance(f, str):
            files.add(os.path.realpath(f))
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(None, 5)
                path = fields[5].strip() if len(fields) == 6 else ""
                if path.startswith("/") and ".so" in path:
                    files.add(path)
    except OSError:
        pass  # not Linux: modules only
    return files


def _site_dirs() -> list[str]:
    dirs = []
    for p in sys.path:
        if p and os.path.isdir(p) and os.path.basename(p) in ("site-packages", "dist-packages"):
            rp = os.path.realpath(p)
            if rp not in dirs:
                dirs.append(rp)
    return dirs


def _tops(record: str) -> set[str]:
    """The path tops a distribution's RECORD owns: `pkg` for a package, `ns/pkg` inside a namespace
    directory (nvidia/nccl), `mod.py` for a module."""
    out: set[str] = set()
    for line in record.splitlines():
        path = line.rsplit(",", 2)[0] if line.count(",") >= 2 else line
        first, sep, rest = path.partition("/")
        if not first or first in ("..", "__pycache__") or first.endswith((".dist-info", ".egg-info", ".pth")):
            continue
        out.add(first)
        second = rest.partition("/")
        if sep and second[1]:
            out.add(first + "/" + second[0])
    return out


# The installed distributions per tuple of site directories: what an environment has installed, read
# once per process (a tenth of a second and more: every RECORD). A warm parent reads it before it forks
# its launches (prime), which therefore share it: one parent serves one environment, built before.
_TABLES: dict[tuple[str, ...], dict[str, list[tuple[set[str], str, str]]]] = {}


def prime() -> None:
    """Read this environment's installed distributions now (a warm parent, before its launches)."""
    _installed(_site_dirs())


def _installed(sites: list[str]) -> dict[str, list[tuple[set[str], str, str]]]:
    key = tuple(sites)
    if key not in _TABLES:
        _TABLES[key] = _read_installed(sites)
    return _TABLES[key]


def _read_installed(sites: list[str]) -> dict[str, list[tuple[set[str], str, str]]]:
    from importlib import metadata

    by_site: dict[str, list[tuple[set[str], str, str]]] = {s: [] for s in sites}
    for dist in metadata.distributions():
        try:
            name = dist.metadata["Name"]
            where = os.path.realpath(str(dist.locate_file("")))
        except Exception:  # a broken dist-info: not ours to judge
            continue
        if not name or where not in by_site:
            continue
        tops = _tops(dist.read_text("RECORD") or "")
        if not tops:  # no RECORD (some system packages): its top_level.txt, else its own name
            text = dist.read_text("top_level.txt") or ""
            tops = {t.strip() for t in text.splitlines() if t.strip()} or {name.replace("-", "_")}
        by_site[where].append((tops, _norm(name), dist.version))
    return by_site


def loaded_distributions() -> list[dict[str, str]]:
    """The distributions (name, version, site directory) whose files this process has loaded."""
    sites = _site_dirs()
    by_site = _installed(sites)
    found: dict[tuple[str, str], dict[str, str]] = {}
    for f in _loaded_files():
        for site in sites:
            if not f.startswith(site + os.sep):
                continue
            parts = os.path.relpath(f, site).split(os.sep)
            keys = {parts[0], "/".join(parts[:2])}
            for tops, name, version in by_site[site]:
                if tops & keys:
                    found.setdefault((name, site), {"name": name, "version": version, "path": site})
            break
    return sorted(found.values(), key=lambda d: (d["name"], d["path"]))


def main(argv: list[str]) -> int:
    import importlib

    failed = {}
    for name in argv:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - reported, the others still count
            failed[name] = f"{type(e).__name__}: {e}"
    line = {"type": "loaded", "dists": loaded_distributions(), "failed": failed}
    sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
