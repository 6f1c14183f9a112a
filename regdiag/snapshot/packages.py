"""Installed Python packages, from their metadata on sys.path (no pip subprocess: pip costs 0.5 s).

Only the header of each METADATA file is read (up to the first blank line): going through
email.parser, as importlib.metadata does, is 6x slower and dominated the whole snapshot.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from typing import Any

from regdiag.snapshot import fields as F
from regdiag.snapshot import nccl
from regdiag.snapshot.redact import scrub_text

# The packages whose versions decide the speed of an SGLang / vLLM deployment, in diff order.
KEY_PACKAGES = (
    "torch",
    "triton",
    "sglang",
    "sgl-kernel",
    "sglang-kernel",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "flashinfer",
    "vllm",
    "nvidia-nccl-cu12",
    "nvidia-nccl-cu13",
    "cuda-python",
    "deep-gemm",
    "deep-ep",
    "xgrammar",
    "transformers",
    "nvidia-cublas-cu12",
    "nvidia-cublas",
    "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
    "nvidia-nvshmem-cu12",
    "nvidia-nvshmem-cu13",
)
# regdiag's own version is recorded with the metadata: the tool is not part of the environment under test.
SELF = "regdiag"
# What the group says of the installed set rather than of one package's version, in record order: the
# group's "metadata" mapping (regdiag.snapshot/2); "all" (--all-packages) is every distribution's version.
METADATA = (SELF, "sources", "count", "hash", "nccl", "nccl_libraries", "all")


def normalize(name: str) -> str:
    """PEP 503 name: 'SGL_Kernel' -> 'sgl-kernel'."""
    return re.sub(r"[-_.]+", "-", name).lower()


class Dist:
    """One installed distribution: its metadata directory (or file) and the directory it sits in."""

    __slots__ = ("name", "version", "requires", "path", "base")

    def __init__(self, name: str, version: str, requires: list[str], path: str, base: str):
        self.name = name
        self.version = version
        self.requires = requires
        self.path = path
        self.base = base

    def read_text(self, filename: str) -> str | None:
        if not os.path.isdir(self.path):
            return None
        try:
            with open(os.path.join(self.path, filename), encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return None

    def locate(self, relative: str) -> str:
        return os.path.join(self.base, relative)

    def files(self) -> list[str]:
        """Installed files (from RECORD), relative to `base`."""
        record = self.read_text("RECORD") or ""
        return [line.rsplit(",", 2)[0].strip('"') for line in record.splitlines() if line.strip()]


def _header(text: str) -> tuple[str | None, str | None, list[str]]:
    name = version = None
    requires: list[str] = []
    for line in text.splitlines():
        if not line:
            break  # the body (long description) starts after the first blank line
        if line.startswith("Name:"):
            name = line[5:].strip()
        elif line.startswith("Version:"):
            version = line[8:].strip()
        elif line.startswith("Requires-Dist:"):
            requires.append(line[14:].strip())
    return name, version, requires


def _read_metadata(path: str) -> str:
    if os.path.isdir(path):
        for fname in ("METADATA", "PKG-INFO"):
            try:
                with open(os.path.join(path, fname), encoding="utf-8", errors="replace") as f:
                    return f.read(64 << 10)
            except OSError:
                continue
        return ""
    with open(path, encoding="utf-8", errors="replace") as f:  # an egg-info that is a single file
        return f.read(64 << 10)


def installed(path: list[str] | None = None) -> dict[str, Dist]:
    """Normalized name -> the distribution an import would find (first on sys.path wins).

    Reads the same *.dist-info / *.egg-info metadata as importlib.metadata.distributions(), which
    a test checks name by name; importing importlib.metadata alone (email, csv, zipfile) costs
    ~50 ms, a sixth of the snapshot's budget.
    """
    out: dict[str, Dist] = {}
    for entry in sys.path if path is None else path:
        base = entry or "."
        try:
            names = sorted(os.listdir(base))
        except OSError:  # missing directories and zip archives on sys.path hold no dist-info here
            continue
        for n in names:
            if not (n.endswith(".dist-info") or n.endswith(".egg-info")):
                continue
            meta_path = os.path.join(base, n)
            try:
                name, version, requires = _header(_read_metadata(meta_path))
            except OSError:
                continue
            if not name:
                continue
            key = normalize(name)
            if key not in out:
                out[key] = Dist(name, version or "", requires, meta_path, base)
    return out


def list_hash(dists: dict[str, Dist]) -> str:
    lines = "\n".join(f"{k}=={dists[k].version}" for k in sorted(dists))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()[:16]


def source_of(d: Dist) -> dict[str, Any] | None:
    """Where a package was installed from, when pip recorded it (PEP 610 direct_url.json)."""
    raw = d.read_text("direct_url.json")
    if not raw:
        return None
    try:
        info = json.loads(raw)
    except ValueError:
        return None
    out: dict[str, Any] = {"url": scrub_text(str(info.get("url", "")))}
    dir_info = info.get("dir_info") or {}
    if dir_info.get("editable"):
        out["editable"] = True
    vcs = info.get("vcs_info")
    if isinstance(vcs, dict):
        out["vcs"] = vcs.get("vcs")
        out["commit"] = vcs.get("commit_id")
        if vcs.get("requested_revision"):
            out["requested_revision"] = vcs.get("requested_revision")
    return out


def editable_path(d: Dist) -> str | None:
    src = source_of(d)
    if not src or not src.get("editable"):
        return None
    url = str(src.get("url", ""))
    if not url.startswith("file://"):
        return None
    from urllib.parse import unquote, urlparse

    return unquote(urlparse(url).path) or None


def collect(
    all_packages: bool = False, timeout_s: float = 5.0, dists: dict[str, Dist] | None = None
) -> dict[str, Any]:
    """The packages group: key package versions in `fields`, everything else in `metadata`."""
    dists = installed() if dists is None else dists
    versions: dict[str, F.Field] = {}
    for name in KEY_PACKAGES:
        d = dists.get(name)
        versions[name] = F.ok(d.version if d else None)
    mine = dists.get(SELF)
    meta: dict[str, F.Field] = {SELF: F.ok(mine.version if mine else None)}
    sources = {}
    for name in (*KEY_PACKAGES, SELF):
        d = dists.get(name)
        if d is not None:
            src = source_of(d)
            if src:
                sources[name] = src
    meta["sources"] = F.ok(sources)
    meta["count"] = F.ok(len(dists))
    meta["hash"] = F.ok(list_hash(dists))
    libs = nccl.find_libraries(dists)
    meta["nccl"], meta["nccl_libraries"] = nccl.versions(libs, timeout_s=timeout_s)
    if all_packages:
        meta["all"] = F.ok({k: dists[k].version for k in sorted(dists)})
    group = F.group(versions, status=F.OK)
    group["metadata"] = meta
    return group


# ---------------------------------------------------------------------------------- reading a record
# regdiag.snapshot/1 kept the metadata among the versions in `fields`; these readers take either layout
# (a group with a "metadata" mapping is /2), so every consumer reads packages through them.


def split(group: Any) -> tuple[dict[str, F.Field], dict[str, F.Field]]:
    """(versions, metadata) of a packages group: name -> field, each in record order."""
    fields = group.get("fields") if isinstance(group, dict) else None
    fields = fields if isinstance(fields, dict) else {}
    meta = group.get("metadata") if isinstance(group, dict) else None
    if isinstance(meta, dict):
        return dict(fields), dict(meta)
    versions = {n: f for n, f in fields.items() if n not in METADATA}
    return versions, {n: f for n, f in fields.items() if n in METADATA}


def metadata_value(group: Any, name: str) -> Any:
    """The value of one metadata field (count, hash, nccl, ...) when it was read, else None."""
    return F.field_value({"fields": split(group)[1]}, name)


def versions_of(snapshot: Any) -> dict[str, str | None]:
    """Package name -> version (None: not installed) of a snapshot: every distribution when the full
    listing was recorded, and the key packages always; regdiag itself is left out."""
    groups = snapshot.get("groups") if isinstance(snapshot, dict) else None
    group = groups.get("packages") if isinstance(groups, dict) else None
    versions, _ = split(group)
    out: dict[str, str | None] = {}
    everything = metadata_value(group, "all")
    if isinstance(everything, dict):
        for name, version in everything.items():
            if normalize(name) != SELF:
                out[normalize(name)] = str(version) if version is not None else None
    for name, f in versions.items():
        if not isinstance(f, dict) or f.get("status") != F.OK:
            continue
        v = f.get("value")
        if v is None or isinstance(v, str):
            out.setdefault(normalize(name), v)
    return out
