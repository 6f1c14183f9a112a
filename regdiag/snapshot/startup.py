"""Where settings hide: the files a Python interpreter runs at start-up, and NCCL's config files.

    find(path, site_dirs, user_site, loaded=None) -> StartupFiles
    nccl_files(environ, home, root="") -> [{"path", "sha256", "settings"}]
    effective_env(initial, files, confs) -> (environment, {name: the file that set it})

An engine can get NCCL_PROTO=LL from a sitecustomize.py on its path and never from the shell that
started it (the seeds' situation). Python runs, before any user code: the `import` lines of every
`.pth` file in its site directories, then `sitecustomize`, then `usercustomize` (the first module of
that name on sys.path). NCCL reads KEY=VALUE lines from $NCCL_CONF_FILE (else ~/.nccl.conf) and from
/etc/nccl.conf, and never lets a file override a variable that is already set.

The files are read and parsed with `ast`, never run: the environment variables a file sets are the
assignments it makes with literal strings (`os.environ["X"] = "v"`, `os.environ.setdefault`,
`os.environ.update({...})`, `os.putenv`, `del os.environ["X"]`, `os.environ.pop`), in source order,
counted as if every branch ran. A value that is not a literal is listed under `unparsed`.
Standard library only.
"""

from __future__ import annotations

import ast
import hashlib
import os
from dataclasses import dataclass, field
from typing import Any

MAX_FILE = 1 << 20
SET, DEFAULT, UNSET = "set", "default", "unset"


@dataclass
class Setting:
    name: str
    op: str  # set, default (setdefault: only when not already set) or unset
    value: str | None  # None: unset, or a value that is not a literal (then `literal` is False)
    literal: bool = True


@dataclass
class StartupFile:
    kind: str  # sitecustomize, usercustomize, pth
    path: str
    sha256: str | None = None
    settings: list[Setting] = field(default_factory=list)
    error: str | None = None

    def to_value(self, hide: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "sha256": self.sha256}
        sets = {
            s.name: (None if s.value is None else hide(s.name, s.value)) for s in self.settings if s.literal
        }
        if sets:
            out["sets"] = sets
        unparsed = sorted({s.name for s in self.settings if not s.literal})
        if unparsed:
            out["unparsed"] = unparsed
        if self.error:
            out["error"] = self.error
        return out


def _read(path: str) -> tuple[bytes | None, str | None]:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_FILE), None
    except OSError as e:
        return None, f"{type(e).__name__}: {e.strerror or e}"


def _is_environ(node: ast.AST) -> bool:
    """os.environ, or a bare `environ` (from os import environ)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id == "environ"


def _lit(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float)):
        return str(node.value)
    return None


class _EnvVisitor(ast.NodeVisitor):
    """Collects environment settings in source order (NodeVisitor visits children in order)."""

    def __init__(self) -> None:
        self.out: list[Setting] = []

    def _add(self, name_node: ast.AST | None, op: str, value_node: ast.AST | None) -> None:
        name = _lit(name_node)
        if name is None:
            return
        if op == UNSET:
            self.out.append(Setting(name, op, None))
            return
        value = _lit(value_node)
        self.out.append(Setting(name, op, value, literal=value is not None))

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            if isinstance(t, ast.Subscript) and _is_environ(t.value):
                self._add(t.slice, SET, node.value)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            if isinstance(t, ast.Subscript) and _is_environ(t.value):
                self._add(t.slice, UNSET, None)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and _is_environ(f.value):
            args = node.args
            if f.attr == "setdefault" and args:
                self._add(args[0], DEFAULT, args[1] if len(args) > 1 else None)
            elif f.attr == "pop" and args:
                self._add(args[0], UNSET, None)
            elif f.attr == "update":
                if args and isinstance(args[0], ast.Dict):
                    values = args[0].values  # zip(strict=) is 3.10+; this runs on 3.9 hosts
                    for i, k in enumerate(args[0].keys):
                        self._add(k, SET, values[i])
                for kw in node.keywords:
                    if kw.arg:
                        self._add(ast.Constant(kw.arg), SET, kw.value)
        elif isinstance(f, ast.Attribute) and f.attr in ("putenv", "unsetenv"):
            if isinstance(f.value, ast.Name) and f.value.id == "os" and node.args:
                if f.attr == "putenv":
                    self._add(node.args[0], SET, node.args[1] if len(node.args) > 1 else None)
                else:
                    self._add(node.args[0], UNSET, None)
        self.generic_visit(node)


def parse_settings(source: str) -> list[Setting]:
    """The environment settings of Python source; SyntaxError propagates."""
    v = _EnvVisitor()
    v.visit(ast.parse(source))
    return v.out


def read_file(kind: str, path: str, root: str = "") -> StartupFile:
    """Read, hash and parse one start-up file. `root` prefixes the path (another mount namespace)."""
    sf = StartupFile(kind, path)
    data, err = _read(root + path)
    if data is None:
        sf.error = err
        return sf
    sf.sha256 = "sha256:" + hashlib.sha256(data).hexdigest()[:16]
    text = data.decode("utf-8", "replace")
    if kind == "pth":
        # Only lines starting with `import` are executed; the others are directories for sys.path.
        text = "\n".join(ln for ln in text.splitlines() if ln.startswith(("import ", "import\t")))
    try:
        sf.settings = parse_settings(text)
    except (SyntaxError, ValueError) as e:
        sf.error = f"cannot parse: {type(e).__name__}: {e}"
    return sf


def pth_paths(site_dir: str, root: str = "") -> tuple[list[str], list[str]]:
    """(the .pth files of a site directory, in the order site.py reads them; directories they add)."""
    try:
        names = sorted(n for n in os.listdir(root + site_dir) if n.endswith(".pth") and not n.startswith("."))
    except OSError:
        return [], []
    files, dirs = [], []
    for n in names:
        p = os.path.join(site_dir, n)
        files.append(p)
        data, _ = _read(root + p)
        for line in (data or b"").decode("utf-8", "replace").splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "import ", "import\t")):
                dirs.append(os.path.normpath(os.path.join(site_dir, line)))
    return files, dirs


def _first_module(name: str, dirs: list[str], root: str) -> str | None:
    for d in dirs:
        for candidate in (os.path.join(d, name + ".py"), os.path.join(d, name, "__init__.py")):
            if os.path.isfile(root + candidate):
                return candidate
    return None


def find(
    path: list[str],
    site_dirs: list[str],
    user_site: str | None,
    *,
    no_site: bool = False,
    loaded: dict[str, str | None] | None = None,
    root: str = "",
) -> list[StartupFile]:
    """The start-up files of an interpreter, in the order it runs them.

    path: sys.path before site.py ran (PYTHONPATH, the standard library); site_dirs and user_site
    as site.py adds them (user site first, None when disabled); no_site: the interpreter runs with
    -S. loaded: for this very interpreter, the files it really imported for sitecustomize /
    usercustomize (from sys.modules), which beats searching.
    """
    if no_site:
        return []
    out: list[StartupFile] = []
    search = [p for p in path if p]
    for d in ([user_site] if user_site else []) + list(site_dirs):
        files, added = pth_paths(d, root)
        search.append(d)
        search.extend(added)
        out.extend(read_file("pth", p, root) for p in files)
    for mod in ("sitecustomize", "usercustomize"):
        if mod == "usercustomize" and not user_site:
            continue
        if loaded is not None and mod in loaded:
            found = loaded[mod]
        else:
            found = _first_module(mod, search, root)
        if found:
            out.append(read_file(mod, found, root))
    return out


def nccl_files(environ: dict[str, str], home: str | None, root: str = "") -> list[dict[str, Any]]:
    """NCCL's config files that exist, in the order NCCL reads them: each {path, sha256, settings}."""
    paths = []
    conf = environ.get("NCCL_CONF_FILE")
    if conf:
        paths.append(conf)
    elif home:
        paths.append(os.path.join(home, ".nccl.conf"))
    paths.append("/etc/nccl.conf")
    out: list[dict[str, Any]] = []
    for p in paths:
        data, err = _read(root + p)
        if data is None:
            if conf and p == conf:  # the user named it: say it could not be read
                out.append({"path": p, "sha256": None, "settings": {}, "error": err})
            continue
        settings: dict[str, str] = {}
        for line in data.decode("utf-8", "replace").splitlines():
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            k, _, v = line.partition("=")
            settings.setdefault(k.strip(), v.strip())
        out.append(
            {"path": p, "sha256": "sha256:" + hashlib.sha256(data).hexdigest()[:16], "settings": settings}
        )
    return out


def effective_env(
    initial: dict[str, str], files: list[StartupFile], confs: list[dict[str, Any]]
) -> tuple[dict[str, str], dict[str, str]]:
    """The environment a process ends up with: its initial environment, changed by its start-up
    files in the order they run, then NCCL's config files for what is still unset. Returns the
    environment and, for each variable whose value came from a file, that file's path."""
    env = dict(initial)
    sources: dict[str, str] = {}
    for sf in files:
        for s in sf.settings:
            if s.op == UNSET:
                env.pop(s.name, None)
                sources.pop(s.name, None)
            elif not s.literal or s.value is None:
                continue
            elif s.op == SET or s.name not in env:
                env[s.name] = s.value
                sources[s.name] = sf.path
    for conf in confs:
        for k, v in conf.get("settings", {}).items():
            if k not in env:
                env[k] = v
                sources[k] = conf["path"]
    return env, sources


def attribute(initial: dict[str, str], current: dict[str, str], files: list[StartupFile]) -> dict[str, str]:
    """For a process whose start-up files already ran (this one): which variables they set.

    A variable counts as set by a file when the file assigns it and the value the process has now
    is not the one it started with (or it started without it).
    """
    sources: dict[str, str] = {}
    for sf in files:
        for s in sf.settings:
            if s.op != UNSET and s.name in current and initial.get(s.name) != current[s.name]:
                sources[s.name] = sf.path
    return sources


# ------------------------------------------------------------------------------------ the groups


def _self_initial_env() -> dict[str, str]:
    """This process's environment as it was at exec, before its start-up files ran."""
    try:
        with open("/proc/self/environ", "rb") as f:
            items = f.read().split(b"\0")
    except OSError:
        return dict(os.environ)
    env: dict[str, str] = {}
    for raw in items:
        k, sep, v = raw.decode("utf-8", "surrogateescape").partition("=")
        if sep and k:
            env.setdefault(k, v)
    return env


@dataclass
class _Subject:
    """The interpreter a snapshot looks at: this one, or a running process's."""

    interpreter: dict[str, Any]  # the startup group's `interpreter` field
    files: list[StartupFile]
    initial: dict[str, str]  # the environment before its start-up files ran
    current: dict[str, str] | None  # this interpreter's environment now; None for another process
    home: str | None
    root: str = ""  # another process's view of the filesystem (/proc/PID/root)


def _this_interpreter(environ: dict[str, str] | None) -> _Subject:
    import site
    import sys

    from regdiag.snapshot import fields as F

    no_site = bool(sys.flags.no_site)
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    site_dirs = [] if no_site else site.getsitepackages()
    loaded = {m: getattr(sys.modules.get(m), "__file__", None) for m in ("sitecustomize", "usercustomize")}
    files = find(sys.path, site_dirs, user_site, no_site=no_site, loaded=loaded)
    interpreter = F.ok({"executable": sys.executable, "no_site": no_site, "user_site": user_site})
    current = dict(os.environ) if environ is None else dict(environ)
    initial = _self_initial_env() if environ is None else current
    return _Subject(interpreter, files, initial, current, current.get("HOME"))


def _process_interpreter(proc: Any) -> _Subject:
    from regdiag.snapshot import fields as F

    files: list[StartupFile] = []
    try:
        info = proc.interpreter()
        files = find(info["path"], info["site"], info["user_site"], no_site=info["no_site"], root=proc.root)
        interpreter = F.ok(
            {"executable": proc.exe, "no_site": info["no_site"], "user_site": info["user_site"]}
        )
    except (RuntimeError, ValueError, KeyError) as e:
        interpreter = F.unsupported(str(e))
    return _Subject(interpreter, files, proc.environ, None, proc.environ.get("HOME"), proc.root)


def _startup_fields(subject: _Subject, confs: list[dict[str, Any]], hide: Any) -> dict[str, Any]:
    """The startup group's fields: the interpreter, the files it runs at start-up, NCCL's config files."""
    from regdiag.snapshot import fields as F

    fields: dict[str, Any] = {"interpreter": subject.interpreter}
    by_kind: dict[str, Any] = {"sitecustomize": None, "usercustomize": None}
    pth: dict[str, Any] = {}
    for sf in subject.files:
        if sf.kind == "pth":
            pth[os.path.basename(sf.path)] = sf.to_value(hide)
        else:
            by_kind[sf.kind] = sf.to_value(hide)
    if subject.interpreter["status"] == F.OK:
        fields["sitecustomize"] = F.ok(by_kind["sitecustomize"])
        fields["usercustomize"] = F.ok(by_kind["usercustomize"])
        fields["pth"] = F.ok(pth)
    fields["nccl_conf"] = F.ok(
        [{**c, "settings": {k: hide(k, v) for k, v in c["settings"].items()}} for c in confs]
    )
    return fields


def _environment(subject: _Subject, confs: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    """(the effective environment, {name: the file that set it})."""
    if subject.current is None:
        return effective_env(subject.initial, subject.files, confs)
    # This process: its start-up files already ran; NCCL reads its config files only for what is unset.
    env, sources = dict(subject.current), attribute(subject.initial, subject.current, subject.files)
    for conf in confs:
        for k, v in conf["settings"].items():
            if k not in env:
                env[k], sources[k] = v, conf["path"]
    return env, sources


def collect(
    hasher: Any, proc: Any = None, environ: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the startup group, the env group): of this interpreter, or of a running process `proc`.

    The env group holds the effective environment: for this process, os.environ (its start-up
    files already ran) plus NCCL config values not set otherwise; for another process, its initial
    environment changed as its start-up files and NCCL's config files would change it.
    """
    from regdiag.snapshot import env as env_mod
    from regdiag.snapshot import fields as F

    def hide(name: str, value: str) -> str:
        return hasher.value(name, value)[0]

    subject = _this_interpreter(environ) if proc is None else _process_interpreter(proc)
    seen = subject.initial if subject.current is None else subject.current
    confs = nccl_files(seen, subject.home, subject.root)
    startup_group = F.group(_startup_fields(subject, confs, hide), status=F.OK)
    env, sources = _environment(subject, confs)
    env_group = env_mod.collect(env, sources=sources, hasher=hasher)
    if proc is not None:
        env_group["pid"] = proc.pid
    return startup_group, env_group
