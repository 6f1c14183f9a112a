"""The two sides of a bisect and the factors that tell them apart.

A side is a `Spec`: pinned package versions, environment variables (a value, or None for "unset")
and an engine commit. It comes from a snapshot, from the `snapshot_before` of a run record, or
from a spec string such as ``'sgl-kernel==0.3.5 flashinfer-python==0.2.11 NCCL_PROTO=LL commit=bba2fc4'``.

Every difference between the two sides is one `Factor` (kind package, env or commit). What both
sides agree on is held fixed: such env vars are set in every launch; such packages are whatever
this machine's interpreter has (a note says where that differs from the sides), since a bisect
installs only what it varies. The endpoints, measured first, show whether the differences
reproduce the regression here. Differences that cannot be reproduced (a redacted value, a package
that one side lacks) are listed as notes instead of becoming factors.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regdiag.errors import BadInput
from regdiag.records import RUN, SNAPSHOT, RecordError, load_record
from regdiag.snapshot.redact import redact_value

PACKAGE = "package"
ENV = "env"
COMMIT = "commit"
KINDS = (COMMIT, PACKAGE, ENV)  # also the order factors are tried in

REDACTED = "<redacted>"
_PKG_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Fields of the snapshot's packages group that are not package versions.
_NOT_PACKAGES = frozenset({"sources", "count", "hash", "nccl", "nccl_libraries", "all", "regdiag"})


def normalize(name: str) -> str:
    """PEP 503 name: 'SGL_Kernel' -> 'sgl-kernel'."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Spec:
    """One side of a bisect. `packages` maps normalized names to versions (None: not installed)."""

    packages: dict[str, str | None] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)
    commit: str | None = None
    source: str = "spec"
    repo: str | None = None  # the engine checkout a snapshot names
    notes: list[str] = field(default_factory=list)
    redacted: set[str] = field(default_factory=set)
    dirty: bool = False  # the engine checkout had uncommitted changes

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "packages": self.packages, "env": self.env, "commit": self.commit}


@dataclass(frozen=True)
class Factor:
    kind: str
    name: str
    good: str | None
    bad: str | None

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"

    def show(self, value: str | None) -> str:
        if self.kind == COMMIT:
            return f"commit {short(value)}"
        if self.kind == PACKAGE:
            return f"{self.name}=={value}" if value is not None else f"{self.name} (not installed)"
        return f"{self.name}={_shown(self.name, value)}" if value is not None else f"{self.name} unset"

    def label(self) -> str:
        if self.kind == COMMIT:
            return f"commit {short(self.good)} -> {short(self.bad)}"
        if self.kind == PACKAGE:
            return f"{self.name} {self.good} -> {self.bad}"
        g = "unset" if self.good is None else repr(_shown(self.name, self.good))
        b = "unset" if self.bad is None else repr(_shown(self.name, self.bad))
        return f"{self.name} {g} -> {b}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "good": self.good,
            "bad": self.bad,
            "label": self.label(),
        }


def _shown(name: str, value: str) -> str:
    """An env value as labels show it: secrets out (the factor keeps the real value to set it)."""
    return redact_value(name, value)[0]


def short(commit: str | None) -> str:
    return (commit or "?")[:10]


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


def _field_value(group: dict[str, Any], name: str) -> Any:
    f = (group.get("fields") or {}).get(name)
    if isinstance(f, dict) and f.get("status") == "ok":
        return f.get("value")
    return None


def spec_from_snapshot(snap: dict[str, Any], source: str) -> Spec:
    groups = snap.get("groups") or {}
    spec = Spec(source=source)
    pk = groups.get("packages") or {}
    everything = _field_value(pk, "all")
    if isinstance(everything, dict):
        for name, version in everything.items():
            if normalize(name) not in _NOT_PACKAGES:
                spec.packages[normalize(name)] = str(version) if version is not None else None
    for name, f in (pk.get("fields") or {}).items():
        if name in _NOT_PACKAGES or not isinstance(f, dict) or f.get("status") != "ok":
            continue
        v = f.get("value")
        if v is None or isinstance(v, str):
            spec.packages.setdefault(normalize(name), v)
    envg = groups.get("env") or {}
    for name, f in (envg.get("fields") or {}).items():
        if isinstance(f, dict) and f.get("status") == "ok":
            spec.env[name] = None if f.get("value") is None else str(f.get("value"))
    spec.redacted = {str(n) for n in envg.get("redacted") or []}
    eng = groups.get("engine") or {}
    commit = _field_value(eng, "commit")
    if isinstance(commit, str) and commit:
        spec.commit = commit
        path = _field_value(eng, "path")
        spec.repo = path if isinstance(path, str) else None
        spec.dirty = bool(_field_value(eng, "dirty"))
    return spec


def load_side(arg: str, what: str) -> Spec:
    """A snapshot file, a run record file (its snapshot_before), or a spec string."""
    p = Path(arg)
    looks_like_file = p.suffix == ".json" or (p.exists() and p.is_file())
    if not looks_like_file:
        return parse_spec(arg, what)
    try:
        rec = load_record(p, (SNAPSHOT, RUN))
    except RecordError as e:
        raise BadInput(f"{what}: {e}") from None
    if rec["schema"].startswith(f"regdiag.{RUN}/"):
        snap = rec.get("snapshot_before")
        if not isinstance(snap, dict):
            raise BadInput(f"{what}: {p}: the run record has no snapshot_before to take the environment from")
        spec = spec_from_snapshot(snap, str(p))
        # Variables the run gave its launches (`env`, e.g. from a bisect or a demo) are what the
        # probe really had, whatever the snapshot's allowlist saw.
        for name, value in (rec.get("env") or {}).items():
            if value in (REDACTED, "<set>"):
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
    """The factors (ordered: commit, packages, env vars; names sorted) and what cannot be bisected."""
    notes = list(good.notes) + list(bad.notes)
    factors: list[Factor] = []
    if good.commit != bad.commit:
        if good.commit is None or bad.commit is None:
            missing = "--good" if good.commit is None else "--bad"
            notes.append(f"the engine commit is known on one side only (missing on {missing}); not bisected")
        else:
            factors.append(Factor(COMMIT, "commit", good.commit, bad.commit))
            for spec in (good, bad):
                if spec.dirty:
                    notes.append(
                        f"{spec.source}: the engine checkout had uncommitted changes; a worktree of "
                        f"{short(spec.commit)} does not include them"
                    )
    both_from_specs = good.source == "spec" and bad.source == "spec"
    for name in sorted(set(good.packages) | set(bad.packages)):
        g, b = good.packages.get(name), bad.packages.get(name)
        if g == b:
            continue
        if name not in good.packages or name not in bad.packages:
            if both_from_specs:
                side = "--good" if name not in good.packages else "--bad"
                raise BadInput(f"{name} is pinned on one side only (missing on {side}); pin it on both sides")
        if g is None or b is None:
            where = "--good" if g is None else "--bad"
            notes.append(
                f"{name} is not installed on {where} ({g or b} on the other side); a bisect installs "
                "pinned versions but does not uninstall, so this difference is not bisected"
            )
            continue
        factors.append(Factor(PACKAGE, name, g, b))
    same_env: dict[str, str | None] = {}
    for name in sorted(set(good.env) | set(bad.env)):
        g, b = good.env.get(name), bad.env.get(name)
        if g == b:
            if name in good.env and name in bad.env and g != REDACTED and name not in good.redacted:
                same_env[name] = g
            continue
        if REDACTED in (g, b) or name in good.redacted or name in bad.redacted:
            notes.append(f"{name} differs but its value was redacted in a snapshot; not bisected")
            continue
        factors.append(Factor(ENV, name, g, b))
    same_packages = {
        n: v
        for n, v in good.packages.items()
        if v is not None and bad.packages.get(n) == v and n != "regdiag"
    }
    return Diff(factors, notes, same_env, same_packages)
