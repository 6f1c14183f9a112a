"""The two sides of a bisect and the factors that tell them apart.

A side is a `Spec`: pinned package versions, environment variables (a value, or None for "unset")
and an engine commit. It comes from a snapshot, from the `snapshot_before` of a run record, or
from a spec string such as ``'sgl-kernel==0.3.5 flashinfer-python==0.2.11 NCCL_PROTO=LL commit=bba2fc4'``.

Every difference between the two sides is one `Factor` of a kind (regdiag.bisect.kinds: commit,
package, env, gpu-clock); the kinds say which factors exist and what each means. What both
sides agree on is held fixed: such env vars are set in every launch; such packages are whatever
this machine's interpreter has (a note says where that differs from the sides), since a bisect
installs only what it varies. The endpoints, measured first, show whether the differences
reproduce the regression here. Differences that cannot be reproduced (a redacted value, a package
that one side lacks) are listed as notes instead of becoming factors.

`Spec` and `Factor` are defined in regdiag.bisect.factor_base, below the kinds (which take them), and
imported from here as ever.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regdiag.bisect.code_vars import code_from_record, is_setting, loads_code, what_it_loads
from regdiag.bisect.factor_base import Factor, Spec
from regdiag.bisect.kinds import KINDS

# Names of the built-in kinds (KINDS has them all, in the order factors are tried in).
from regdiag.bisect.kinds.commit import COMMIT
from regdiag.bisect.kinds.env import ENV
from regdiag.bisect.kinds.package import PACKAGE
from regdiag.errors import BadInput
from regdiag.records import RUN, SNAPSHOT, RecordError, load_record, parse_schema
from regdiag.snapshot.fields import field_value
from regdiag.snapshot.packages import SELF, normalize, versions_of
from regdiag.snapshot.redact import is_hidden

__all__ = [
    "COMMIT",
    "ENV",
    "PACKAGE",
    "Diff",
    "Factor",
    "Spec",
    "checkout",
    "code_from_record",
    "diff",
    "is_setting",
    "load_side",
    "loads_code",
    "parse_spec",
    "spec_from_snapshot",
]

_PKG_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z, not $: "A\n" is no name


# ---------------------------------------------------------------------------------------- parsing


def parse_spec(text: str, what: str = "spec") -> Spec:
    """'pkg==1.2 NAME=VALUE -NAME commit=REV' -> Spec. Values may be quoted as in a shell."""
    try:
        tokens = shlex.split(text)
    except ValueError as e:
        raise BadInput(f"{what}: cannot split {text!r}: {e}") from None
    if not tokens:
        raise BadInput(f"{what}: empty spec (give NAME==VERSION, NAME=VALUE, -NAME or commit=REV items)")
    spec = Spec(source="spec")
    for tok in tokens:
        if any(k.parse(tok, spec) for k in KINDS.values()):
            continue
        if "==" in tok:
            name, _, version = tok.partition("==")
            if not _PKG_NAME.match(name) or not version or any(c in version for c in " <>=!~;,"):
                raise BadInput(f"{what}: {tok!r} is not NAME==VERSION")
            _put(spec.packages, normalize(name), version, what, tok)
        elif re.match(r"^[A-Za-z0-9._-]+(>=|<=|~=|!=|>|<)", tok):
            raise BadInput(f"{what}: cannot read {tok!r}: a side pins exact versions (NAME==VERSION)")
        elif tok.startswith("-"):
            name = tok[1:]
            if not _ENV_NAME.match(name):
                raise BadInput(
                    f"{what}: {tok!r}: -NAME unsets an environment variable; {name!r} is not a name"
                )
            _put(spec.env, name, None, what, tok)
        elif "=" in tok:
            name, _, value = tok.partition("=")
            if name == "commit":
                if not value:
                    raise BadInput(f"{what}: commit= needs a revision")
                if spec.commit is not None:
                    raise BadInput(f"{what}: commit given twice")
                spec.commit = value
            elif _ENV_NAME.match(name):
                _put(spec.env, name, value, what, tok)
            else:
                raise BadInput(f"{what}: {name!r} is not an environment variable name")
        else:
            raise BadInput(
                f"{what}: cannot read {tok!r} (expected NAME==VERSION, NAME=VALUE, -NAME or commit=REV)"
            )
    return spec


def _put(d: dict[str, str | None], key: str, value: str | None, what: str, tok: str) -> None:
    if key in d:
        raise BadInput(f"{what}: {key} is given twice ({tok!r})")
    d[key] = value


def spec_from_snapshot(snap: dict[str, Any], source: str) -> Spec:
    groups = snap.get("groups") or {}
    spec = Spec(source=source)
    spec.packages.update(versions_of(snap))
    envg = groups.get("env") or {}
    skip = set(envg.get("not_bisected") or [])  # SHLVL, PATH, HOME, ...: neither varied nor fixed
    for name, f in (envg.get("fields") or {}).items():
        if isinstance(f, dict) and f.get("status") == "ok" and name not in skip:
            spec.env[name] = None if f.get("value") is None else str(f.get("value"))
    spec.redacted = {str(n) for n in envg.get("redacted") or []}
    eng = groups.get("engine") or {}
    commit = field_value(eng, "commit")
    if isinstance(commit, str) and commit:
        spec.commit = commit
        path = field_value(eng, "path")
        spec.repo = path if isinstance(path, str) else None
        spec.dirty = bool(field_value(eng, "dirty"))
    for kind in KINDS.values():
        kind.read_snapshot(snap, spec)
    return spec


def load_side(arg: str, what: str, allow_code: bool = False) -> Spec:
    """A snapshot file, a run record file (its snapshot_before), or a spec string.

    A side read from a file that would set a variable loading code into every launch (loads_code) is
    refused in one line, naming the variables, unless `allow_code` (--allow-code-from-record)."""
    p = Path(arg)
    if not _looks_like_file(p):
        return parse_spec(arg, what)
    try:
        rec = load_record(p, (SNAPSHOT, RUN))
    except RecordError as e:
        raise BadInput(f"{what}: {e}") from None
    spec = _side_of_record(rec, p, what)
    _check_env(spec, f"{what} {p}")
    refuse_code(spec, f"{what} {p}", allow_code)
    return spec


def _looks_like_file(p: Path) -> bool:
    return p.suffix == ".json" or (p.exists() and p.is_file())


def check_recorded_side(arg: str, where: str, allow_code: bool = False) -> None:
    """A side that a record holds as text (a journal's --good / --bad): a spec read from a file is held
    to the rule of records (refuse_code); a file it names is checked when it is read (load_side)."""
    if not _looks_like_file(Path(arg)):
        refuse_code(parse_spec(arg, where), where, allow_code)


def refuse_code(spec: Spec, where: str, allow_code: bool) -> None:
    """BadInput in one line naming the variables a side read from a record would set in every launch
    that are not settings (code_from_record), unless `allow_code` (--allow-code-from-record)."""
    names = code_from_record(spec)
    if names and not allow_code:
        raise BadInput(
            f"{where}: the record sets {_shown(names)} for every launch, which are not known settings "
            "(a variable outside the NCCL_, CUDA_, TORCH_, VLLM_, ... families, or one naming a path, a "
            f"plugin or a command{_loads(names)}); a record does not choose code to run: pass "
            "--allow-code-from-record if you trust it"
        )


def checkout(given: str | None, factors: Sequence[Factor], *sides: Spec) -> str | None:
    """The engine checkout commits are built from: only the one the user names (--repo).

    A record names the checkout it was taken in (its engine.path), but a record is a file anyone may
    have written, and a worktree of that checkout is what every launch runs in (its files shadow the
    measurement's imports, its scripts are what a --command or --setup runs). So when the commit is a
    factor and only a record names the checkout, it is refused in one line naming the path to pass."""
    if given or not any(f.kind == COMMIT for f in factors):
        return given
    for s in sides:
        if s.repo:
            raise BadInput(
                f"the engine commit differs and {s.source} names the checkout {s.repo}; a record does not "
                f"choose the repository to build and run: give --repo {s.repo} if you trust it"
            )
    return None


def _shown(names: list[str]) -> str:
    return ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")


def _loads(names: list[str]) -> str:
    """What the refused variables that load code by their nature load (code_vars.LOADERS), whatever
    their values look like: '; OMP_TOOL_LIBRARIES names a library it loads into the process'."""
    return "".join(f"; {n} names {what}" for n in names[:12] if (what := what_it_loads(n)) is not None)


def _check_env(spec: Spec, where: str) -> None:
    """Every variable a record gives a side is a name, and its value has no NUL: a launch could not be
    given either (os.environ raises), and a record is a file anyone may have written."""
    for name, value in spec.env.items():
        if not _ENV_NAME.match(name):
            raise BadInput(f"{where}: the record sets a variable {name!r}, which is not a variable name")
        if value is not None and "\x00" in value:
            raise BadInput(f"{where}: the record's value of {name} holds a NUL byte, which no variable can")


def _side_of_record(rec: dict[str, Any], p: Path, what: str) -> Spec:
    if parse_schema(rec["schema"])[0] == RUN:
        snap = rec.get("snapshot_before")
        if not isinstance(snap, dict):
            raise BadInput(f"{what}: {p}: the run record has no snapshot_before to take the environment from")
        spec = spec_from_snapshot(snap, str(p))
        # Variables the run gave its launches (`env`, e.g. from a bisect or a demo) are what the
        # probe really had, whatever the snapshot's allowlist saw.
        for name, value in (rec.get("env") or {}).items():
            if value == "<set>" or is_hidden(value):
                spec.redacted.add(str(name))
            spec.env[str(name)] = None if value is None else str(value)
        return spec
    return spec_from_snapshot(rec, str(p))


# ---------------------------------------------------------------------------------------- diffing


@dataclass
class Diff:
    factors: list[Factor]
    notes: list[str]
    # What both sides agree on: env vars are set (or unset) in every launch; packages are only
    # checked against the base interpreter (a note when it has another version).
    same_env: dict[str, str | None] = field(default_factory=dict)
    same_packages: dict[str, str] = field(default_factory=dict)


def diff(good: Spec, bad: Spec) -> Diff:
    """The factors (ordered by kind: commit, packages, env vars, GPU clocks; names sorted) and what
    cannot be bisected."""
    notes = list(good.notes) + list(bad.notes)
    factors: list[Factor] = []
    for kind in KINDS.values():
        factors += [Factor(kind.name, name, g, b) for name, g, b in kind.differences(good, bad, notes)]
    same_env: dict[str, str | None] = {}
    for name in sorted(set(good.env) & set(bad.env)):
        g = good.env[name]
        if g == bad.env[name] and not is_hidden(g) and name not in good.redacted:
            same_env[name] = g
    same_packages = {
        n: v for n, v in good.packages.items() if v is not None and bad.packages.get(n) == v and n != SELF
    }
    return Diff(factors, notes, same_env, same_packages)


def select(d: Diff, ignore: Sequence[str] = (), only: Sequence[str] = ()) -> Diff:
    """The differences a bisect searches, after `--only PATTERN` (keep those that match) and
    `--ignore PATTERN` (drop those that match). A pattern is a shell glob (fnmatch, case-sensitive) on
    the factor's name (`SSH_*`, `TERM`, `nvidia-*`, `commit`) or on kind:name (`env:*`, `package:*`).
    A variable left out is set to --good's (ab: --a's) value, or unset as that side has it, in every
    launch, so both sides agree on it; a package, commit or clock left out stays as the machine has it."""
    if not ignore and not only:
        return d

    def hit(f: Factor, patterns: Sequence[str]) -> bool:
        return any(fnmatch.fnmatchcase(f.name, p) or fnmatch.fnmatchcase(f.key, p) for p in patterns)

    keep = [f for f in d.factors if (not only or hit(f, only)) and not hit(f, ignore)]
    left = [f for f in d.factors if f not in keep]
    if not keep:
        names = ", ".join(f.name for f in d.factors[:10]) + (", ..." if len(d.factors) > 10 else "")
        raise BadInput(f"--ignore / --only leave none of the {len(d.factors)} differences ({names})")
    notes = list(d.notes)
    unused = [p for p in ignore if not any(hit(f, [p]) for f in d.factors)]
    if unused:
        notes.append(f"--ignore {' '.join(unused)}: matched no difference")
    same_env = dict(d.same_env)
    for f in left:
        if f.kind == ENV:
            same_env[f.name] = f.good
    if left:
        shown = ", ".join(f.name for f in left[:12]) + (
            f" and {len(left) - 12} more" if len(left) > 12 else ""
        )
        notes.append(
            f"left out (--ignore / --only): {shown}; variables among them set as --good (ab: --a) has them"
        )
    return Diff(keep, notes, same_env, d.same_packages)
