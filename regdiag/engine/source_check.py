"""Do phase targets exist in the installed engine? Runs on the target host (standard library only;
regdiag sends this file's text to `python -c`). Reads JSON {"targets": [[role, "module:Qual.name"],
...], "scripts": [paths]} on stdin and prints one JSON list: per target, what the module's source
says (read with ast, never imported) and the installed distribution's version.

States: "ok"; "missing" (the module's source does not define it); "unknown" (a method the class
may inherit from a base, a name imported from elsewhere, a module that is not a .py file: the hook
decides at run time); "no-module" (not found on sys.path).
"""

import ast
import json
import os
import sys
from importlib.machinery import PathFinder


def version(top):
    try:
        from importlib import metadata

        dists = metadata.packages_distributions().get(top) or [top]
        return f"{dists[0]} {metadata.version(dists[0])}"
    except Exception:
        return f"{top} (version unknown: not an installed distribution)"


def source(modname):
    """The module's file, found the way the import system would, without importing any package
    (PathFinder for the top level; then a walk of the package directories, namespace packages too)."""
    parts = modname.split(".")
    spec = PathFinder.find_spec(parts[0])
    if spec is None:
        return None
    if len(parts) == 1:
        return spec.origin or "namespace"
    dirs = list(spec.submodule_search_locations or [])
    for i, part in enumerate(parts[1:], 1):
        last = i == len(parts) - 1
        deeper = []
        for d in dirs:
            p = os.path.join(d, part)
            if last and os.path.isfile(p + ".py"):
                return p + ".py"
            if os.path.isdir(p):
                init = os.path.join(p, "__init__.py")
                if last:
                    return init if os.path.isfile(init) else "namespace"
                deeper.append(p)
            elif last:
                compiled = [
                    n for n in os.listdir(d) if n.startswith(part + ".") and n.endswith((".so", ".pyd"))
                ]
                if compiled:
                    return os.path.join(d, compiled[0])
        if not deeper:
            return None
        dirs = deeper
    return None


def _defines(node, name):
    if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name == name
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id == name
    return False


def lookup(tree, qual):
    body, cls = tree.body, None
    parts = qual.split(".")
    for i, name in enumerate(parts):
        found = None
        for node in body:
            if _defines(node, name):
                found = node
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and cls is None:
                if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                    return "unknown"
        if found is None:
            return "unknown" if cls is not None and cls.bases else "missing"
        if i < len(parts) - 1:
            if not isinstance(found, ast.ClassDef):
                return "unknown"
            cls, body = found, found.body
    return "ok"


def check(role, target):
    mod, qual = target.split(":", 1)
    origin = source(mod)
    if origin is None:
        state = "no-module"
    elif not origin.endswith(".py"):
        state = "unknown"
    else:
        with open(origin, encoding="utf-8") as f:
            state = lookup(ast.parse(f.read(), origin), qual)
    return {
        "role": role,
        "target": target,
        "state": state,
        "version": version(mod.split(".")[0]),
        "file": origin,
    }


def main():
    req = json.loads(sys.stdin.read())
    # A script's own directory is sys.path[0] when the engine runs it: search there too.
    sys.path[:0] = [os.path.dirname(os.path.abspath(p)) for p in req.get("scripts", []) if os.path.isfile(p)]
    print(json.dumps([check(role, target) for role, target in req["targets"]]))


if __name__ == "__main__":
    main()
