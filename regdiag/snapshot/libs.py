"""The shared libraries a running process has mapped, and the distributions that own them.

    mapped(pid) -> [path, ...]           from /proc/PID/maps: every mapped file that is a shared object
    describe(paths, root="") -> {name: {...}}   one field per library: path, build id or hash, owner

What pip's metadata says is installed and what an engine loaded can differ (LD_LIBRARY_PATH, an
LD_PRELOAD, a second copy in another site-packages, a JIT-built flashinfer module). The maps file is
the loader's own answer. A library is identified by its ELF build id (read from the program headers'
PT_NOTE, a few hundred bytes: cheap even for a 300 MB libnccl); one without a build id is hashed
when it is at most HASH_LIMIT bytes, else identified by size and mtime. The owner is the
distribution whose RECORD lists the file (site-packages only; system libraries have none).
Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
from typing import Any

from regdiag.snapshot import packages

HASH_LIMIT = 32 << 20
_SO = re.compile(r"\.so(\.[0-9.]+)?$|\.so\b")
# Libraries whose identity decides kernel and communication speed, in the order `diff` lists them.
ROLES = (
    ("nccl", re.compile(r"(^|/)libnccl\.so")),
    ("sgl_kernel", re.compile(r"/sgl_kernel/|/sglang_kernel/")),
    ("flashinfer", re.compile(r"flashinfer")),
    ("flash_attn", re.compile(r"flash_attn|flash-attn|/vllm_flash_attn/")),
    ("cudart", re.compile(r"(^|/)libcudart\.so")),
    ("cublas", re.compile(r"(^|/)libcublas(Lt)?\.so")),
    ("cudnn", re.compile(r"(^|/)libcudnn[^/]*\.so")),
    ("nvshmem", re.compile(r"(^|/)libnvshmem[^/]*\.so")),
    ("torch", re.compile(r"/torch/lib/|/torch/_C")),
    ("triton", re.compile(r"/triton/")),
    ("deep_gemm", re.compile(r"deep_gemm")),
    ("deep_ep", re.compile(r"deep_ep")),
)
ROLE_ORDER = {name: i for i, (name, _) in enumerate(ROLES)}
_FILE_VERSION = re.compile(r"\.so\.(\d+(?:\.\d+)+)$")


def role_of(path: str) -> str | None:
    for name, pat in ROLES:
        if pat.search(path):
            return name
    return None


def mapped(pid: int | str) -> list[str]:
    """Paths of the shared objects in /proc/PID/maps, in first-mapped order, without duplicates."""
    out: list[str] = []
    seen: set[str] = set()
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6:
                continue
            path = parts[5].rstrip("\n")
            if not path.startswith("/") or path in seen:
                continue
            base = os.path.basename(path.removesuffix(" (deleted)"))
            if _SO.search(base):
                seen.add(path)
                out.append(path)
    return out


def build_id(path: str) -> str | None:
    """The GNU build id of an ELF file (hex), or None when it has none or is not ELF."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 52 or head[:4] != b"\x7fELF":
            return None
        is64, e = head[4] == 2, "<" if head[5] == 1 else ">"
        if is64:
            (phoff,) = struct.unpack_from(e + "Q", head, 32)
            phentsize, phnum = struct.unpack_from(e + "HH", head, 54)
        else:
            (phoff,) = struct.unpack_from(e + "I", head, 28)
            phentsize, phnum = struct.unpack_from(e + "HH", head, 42)
        if not phnum or phnum > 512 or phentsize < 32:
            return None
        f.seek(phoff)
        ph = f.read(phentsize * phnum)
        for i in range(min(phnum, len(ph) // phentsize)):
            off = i * phentsize
            (p_type,) = struct.unpack_from(e + "I", ph, off)
            if p_type != 4:  # PT_NOTE
                continue
            if is64:
                p_offset, p_filesz, p_align = (
                    struct.unpack_from(e + "Q", ph, off + o)[0] for o in (8, 32, 48)
                )
            else:
                p_offset, p_filesz, p_align = (
                    struct.unpack_from(e + "I", ph, off + o)[0] for o in (4, 16, 28)
                )
            align = 8 if p_align == 8 else 4
            f.seek(p_offset)
            notes = f.read(min(p_filesz, 1 << 16))
            j = 0
            while j + 12 <= len(notes):
                namesz, descsz, ntype = struct.unpack_from(e + "III", notes, j)
                j += 12
                name = notes[j : j + namesz]
                j += (namesz + align - 1) & ~(align - 1)
                desc = notes[j : j + descsz]
                j += (descsz + align - 1) & ~(align - 1)
                if ntype == 3 and name.rstrip(b"\0") == b"GNU" and desc:  # NT_GNU_BUILD_ID
                    return desc.hex()
    return None


def _site_root(path: str) -> tuple[str, str] | None:
    """(the site-packages directory a file lies in, the file's path relative to it)."""
    for marker in ("/site-packages/", "/dist-packages/"):
        i = path.rfind(marker)
        if i >= 0:
            cut = i + len(marker) - 1
            return path[:cut], path[cut + 1 :]
    return None


def owners(paths: list[str], root: str = "") -> dict[str, tuple[str, str]]:
    """path -> (distribution name, version), for the paths some installed RECORD lists."""
    by_root: dict[str, dict[str, str]] = {}
    for p in paths:
        sr = _site_root(p)
        if sr:
            by_root.setdefault(sr[0], {})[sr[1]] = p
    out: dict[str, tuple[str, str]] = {}
    for site, wanted in by_root.items():
        tops = {rel.split("/", 1)[0] + "/" for rel in wanted}
        for dist in packages.installed([root + site]).values():
            record = dist.read_text("RECORD")
            if not record or not any(t in record for t in tops):
                continue
            for line in record.splitlines():
                rel = line.rsplit(",", 2)[0].strip('"')
                hit = wanted.get(os.path.normpath(rel))
                if hit is not None and hit not in out:
                    out[hit] = (dist.name, dist.version)
    return out


def _identity(path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        st = os.stat(path)
    except OSError as e:
        return {"error": f"{type(e).__name__}: {e.strerror or e}"}
    out["size"] = st.st_size
    try:
        bid = build_id(path)
    except (OSError, struct.error):
        bid = None
    if bid:
        out["build_id"] = bid
    elif st.st_size <= HASH_LIMIT:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        out["sha256"] = "sha256:" + h.hexdigest()[:16]
    else:
        out["mtime"] = int(st.st_mtime)
    return out


def field_name(path: str, taken: set[str]) -> str:
    """A stable name for a library across snapshots: its file name, with its directory when two
    mapped libraries share one (two libnccl.so.2 from two places)."""
    base = os.path.basename(path.removesuffix(" (deleted)"))
    if base not in taken:
        return base
    return f"{os.path.basename(os.path.dirname(path))}/{base}"


def describe(paths: list[str], root: str = "") -> dict[str, dict[str, Any]]:
    """One entry per library: path, role, build id (or hash), owning distribution and version."""
    own = owners([p for p in paths if not p.endswith(" (deleted)")], root)
    out: dict[str, dict[str, Any]] = {}
    for p in paths:
        deleted = p.endswith(" (deleted)")
        real = p.removesuffix(" (deleted)")
        item: dict[str, Any] = {"path": real}
        role = role_of(real)
        if role:
            item["role"] = role
        if deleted:
            item["deleted"] = True  # replaced on disk after it was loaded: the loaded one is gone
        else:
            item.update(_identity(root + real))
        if p in own:
            item["distribution"], item["version"] = own[p]
        m = _FILE_VERSION.search(os.path.realpath(root + real)) if not deleted else None
        if m:
            item["file_version"] = m.group(1)
        out[field_name(real, set(out))] = item
    return out
