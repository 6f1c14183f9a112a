"""Does every target exist in the installed engine? Read from the source with `ast`, never imported
(importing SGLang or vLLM takes tens of seconds and may touch the GPUs). Runs on the target host.

A method that a class does not define itself but may inherit from a base is "unknown" here: the hook
resolves it at run time and reports it missing there. Everything else is decided here.
"""

from __future__ import annotations

import json
from typing import Any

from regdiag.errors import BadInput
from regdiag.hosts.base import Host

SCRIPT = r'''
import ast, json, os, sys
from importlib.machinery import PathFinder

def version(top):
    try:
        from importlib import metadata
        dists = metadata.packages_distributions().get(top) or [top]
        return "%s %s" % (dists[0], metadata.version(dists[0]))
    except Exception:
        return "%s (version unknown: not an installed distribution)" % top

def source(modname):
    path = None
    spec = None
    parts = modname.split(".")
    for i in range(len(parts)):
        spec = PathFinder.find_spec(".".join(parts[: i + 1]), path)
        if spec is None:
            return None
        path = spec.submodule_search_locations
    return spec.origin

def lookup(tree, qual):
    body, cls = tree.body, None
    parts = qual.split(".")
    for i, name in enumerate(parts):
        found = None
        for node in body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                found = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    found = node
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                    return "unknown"
        if found is None:
            return "unknown" if cls is not None and cls.bases else "missing"
        if i < len(parts) - 1:
            if not isinstance(found, ast.ClassDef):
                return "unknown"
            cls, body = found, found.body
    return "ok"

req = json.loads(sys.stdin.read())
# A script's own directory is sys.path[0] when the engine runs it: search there too.
sys.path[:0] = [os.path.dirname(os.path.abspath(p)) for p in req["scripts"] if os.path.isfile(p)]
out = []
for role, target in req["targets"]:
    mod, qual = target.split(":", 1)
    top = mod.split(".")[0]
    origin = source(mod)
    if origin is None or not origin.endswith(".py"):
        state = "no-module" if origin is None else "unknown"
    else:
        with open(origin, encoding="utf-8") as f:
            state = lookup(ast.parse(f.read(), origin), qual)
    out.append({"role": role, "target": target, "state": state, "version": version(top), "file": origin})
print(json.dumps(out))
'''


def check(
    host: Host, targets: list[tuple[str, str]], argv: list[str], env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """One entry per target; raises BadInput (exit 2) naming the first that does not exist."""
    req = {"targets": targets, "scripts": [a for a in argv if a.endswith(".py")]}
    res = host.run([host.python, "-c", SCRIPT], stdin=json.dumps(req).encode(), env=env or {}, timeout=120)
    if not res.ok:
        raise BadInput(f"cannot check the phase targets with {host.python}: {res.stderr_tail() or 'no output'}")
    found: list[dict[str, Any]] = json.loads(res.stdout.decode())
    for f in found:
        if f["state"] == "missing":
            raise BadInput(f"{f['role']}: {f['target']} does not exist in the installed {f['version']}")
        if f["state"] == "no-module":
            mod = f["target"].split(":")[0]
            raise BadInput(
                f"{f['role']}: module {mod} is not installed for {host.python} "
                f"({f['version']}); pass --python with the engine's interpreter"
            )
    return found
