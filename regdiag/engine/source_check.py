"""Do phase targets exist in the installed engine? Runs on the target host (standard library only;
regdiag sends this file's text to `python -c`). Reads JSON {"targets": [[role, "module:Qual.name"],
...], "scripts": [paths], "readers": [...]} on stdin and prints one JSON list: per target, what the
module's source says (read with ast, never imported) and the installed distribution's version.

Readers ({"target", "ret"} or {"target", "arg"}): does the function return that field (a keyword of
a call it returns, or one its module builds or sets: `X(accept_lens=...)`, `out.accept_lens = ...`),
or take that argument? The same states, one entry each with "field".

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


def _function(tree, qual):
    body, node = tree.body, None
    for name in qual.split("."):
        node = next((n for n in body if _defines(n, name)), None)
        if node is None:
            return None
        body = getattr(node, "body", [])
    return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _keywords(node):
    return {k.arg for n in ast.walk(node) if isinstance(n, ast.Call) for k in n.keywords if k.arg}


def _set_attrs(node):
    out = set()
    for n in ast.walk(node):
        targets = (
            n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
        )
        out |= {t.attr for t in targets if isinstance(t, ast.Attribute)}
    return out


def _read_attrs(node):
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)}


def _helpers(tree, top):
    """The parsed modules this one imports names from, within its own top-level package (one level)."""
    out = []
    for mod in sorted({n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}):
        origin = source(mod) if mod.split(".")[0] == top else None
        if origin and origin.endswith(".py"):
            with open(origin, encoding="utf-8") as f:
                out.append(ast.parse(f.read(), origin))
    return out


def field_state(tree, qual, reader, top=""):
    fn = _function(tree, qual)
    if fn is None:
        return "unknown"
    if reader.get("arg"):
        a = fn.args
        names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        return "ok" if reader["arg"] in names else "missing"
    name = reader["ret"]
    returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
    if any(isinstance(r, ast.Call) and name in {k.arg for k in r.keywords} for r in returns):
        return "ok"
    if name in _keywords(tree) | _set_attrs(tree) | _read_attrs(tree):
        return "ok"  # built, set or read on a result elsewhere in the module (a helper builds it)
    if any(name in _keywords(t) for t in _helpers(tree, top)):
        return "ok"  # built by a helper the module imports from its own package
    # every return builds its result here and none carries the field: the reader would read nothing
    return "missing" if returns and all(isinstance(r, ast.Call) for r in returns) else "unknown"


def check_reader(role, reader):
    mod, qual = reader["target"].split(":", 1)
    origin = source(mod)
    field = reader.get("ret") or reader.get("arg")
    out = {"role": role, "target": reader["target"], "field": field, "version": version(mod.split(".")[0])}
    if origin is None or not origin.endswith(".py"):
        return {**out, "state": "no-module" if origin is None else "unknown", "file": origin}
    with open(origin, encoding="utf-8") as f:
        tree = ast.parse(f.read(), origin)
    return {**out, "state": field_state(tree, qual, reader, mod.split(".")[0]), "file": origin}


def main():
    req = json.loads(sys.stdin.read())
    # A script's own directory is sys.path[0] when the engine runs it: search there too.
    sys.path[:0] = [os.path.dirname(os.path.abspath(p)) for p in req.get("scripts", []) if os.path.isfile(p)]
    out = [check(role, target) for role, target in req["targets"]]
    out += [check_reader(role, r) for role, r in req.get("readers", [])]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
