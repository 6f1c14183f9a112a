"""Values of a known harmless kind, kept readable wherever they appear (issue 42's structure rules).

A diagnosis of speculative decoding must see the draft model, the KV-cache dtype, the build of torch
and the kernels; a rule that hides every long mixed word hides all of them. These kinds are
recognised by their structure, and each structure leaves no room for a generated secret:

  version       2.8.0a0+5228986c39.nv25.06, 12.9.79-1, 2.27.3-1+cuda12.9, 0.10.1.dev8+g1a2b3c4d5
                (a local part's pieces are short: a hex piece of at most 12, others not random)
  model id      org/name as on the Hugging Face hub: one slash, every piece short or a word
  kernel name   sm90_xmma_gemm_bf16bf16_..._cublas: five or more underscore pieces, most of them
                words or numbers, none long; or a mangled C++ name as CUPTI reports a templated
                kernel (_ZN7cutlass13device_kernelI...: its first names length-prefixed words)
  dtype, quant  bf16, fp8_e4m3, nvfp4, awq_marlin, w8a8, modelopt_fp4, compressed-tensors
  GPU name      H200, GB200, MI300X, NVIDIA H100 80GB HBM3, A100-SXM4-40GB
  size          80GiB, 141 GB, 2.00 GiB
  package pin   libcublas-12-9=12.9.1.4-1

Standard library only (runs on remote hosts too).
"""

from __future__ import annotations

import re

from regdiag.snapshot.shapes import risky_piece

_VERSION = re.compile(
    r"v?\d+(?:\.\d+){1,4}(?:[.-]?(?:a|b|rc|dev|post|alpha|beta|pre)\d*)*(?:-\d{1,4})?"
    r"(?:\+(?P<local>[A-Za-z0-9]+(?:[._][A-Za-z0-9]+){0,5}))?"
)
_MODEL_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,48}/[A-Za-z0-9][\w.-]{0,120}")
_WORD_PIECE = re.compile(
    r"[a-z]{2,}[A-Z]?|[A-Z]{2,}|[A-Z][a-z]+|[A-Za-z]|\d+(?:x\d+)*|[a-z]{1,3}\d{1,4}[a-z]{0,4}\d{0,4}"
)
_DTYPE = re.compile(
    r"(?i)(?:b?float|bf|fp|int|uint|mxfp|nvfp|mxint|w\d{1,2}a)\d{0,3}(?:_?e\dm\d(?:fnuz|fn)?)?"
    r"(?:[_-](?:dynamic|static|marlin|block|tensor|channel|token|e\dm\d|[a-z]?\d{1,3}))*"
    r"|(?i:awq|gptq|marlin|modelopt|fbgemm|bitsandbytes|gguf|compressed-tensors|torchao|quark|"
    r"deepspeedfp|experts_int8|half|auto|e\dm\d)(?:[_-](?:marlin|fp\d|fp8|int\d|nvfp4|awq|gptq))*"
)
_GPU = re.compile(
    r"(?:(?:NVIDIA|Tesla|AMD Instinct|Quadro)[ -])?(?:GB|GH|MI|RTX ?|[ABHLTVP])\d{2,4}[A-Z]?"
    r"(?:[ -](?:SXM\d?|PCIe|NVL|HBM\de?|\d{2,3}GB|[A-Z]{1,4}))*"
)
_SIZE = re.compile(r"\d+(?:\.\d+)? ?(?:[KMGTP]i?B|[kmgt]b|[KMGT])")
_PIN = re.compile(r"[a-z0-9][a-z0-9.+-]{1,60}=(?P<v>\S{1,40})")


def _not_random(piece: str) -> bool:
    return not risky_piece(piece)


def version(value: str) -> bool:
    m = _VERSION.fullmatch(value)
    if m is None:
        return False
    local = m.group("local") or ""
    for p in re.split(r"[._]", local) if local else []:
        if len(p) > 16 or (re.fullmatch(r"[0-9a-f]+", p) and len(p) > 12) or risky_piece(p):
            return False
    return True


def model_id(value: str) -> bool:
    """org/name: one slash, and no piece random (a base64 secret with one slash has long random halves)."""
    if _MODEL_ID.fullmatch(value) is None or value.count("/") != 1:
        return False
    return all(len(p) <= 24 and _not_random(p) for p in re.split(r"[/._-]", value) if p)


def kernel_name(value: str) -> bool:
    pieces = [p for p in value.split("_") if p]
    if len(pieces) < 5 or len(value) > 240 or not re.fullmatch(r"\w+", value):
        return False
    if any(len(p) > 24 for p in pieces):
        return False
    words = sum(bool(_WORD_PIECE.fullmatch(p)) for p in pieces)
    return words * 3 >= len(pieces) * 2


_MANGLED_NAME = re.compile(r"(\d{1,2})([A-Za-z_][A-Za-z0-9_]*)")


def mangled_name(value: str) -> bool:
    """An Itanium-mangled C++ symbol (`_ZN7cutlass13device_kernelI...E`): `_Z`, then at least two nested
    names, each its length then that many identifier characters, each a word (not random). A generated
    secret that starts so is not one of these: its pieces would not come out as counted words."""
    if not re.fullmatch(r"_Z\w{8,8000}", value):
        return False
    i, names = 3 if value.startswith("_ZN") else 2, 0
    while names < 2:
        m = _MANGLED_NAME.match(value, i)
        if m is None:
            return False
        n = int(m.group(1))
        word = m.group(2)[:n]
        if n < 2 or len(word) < n or risky_piece(word):
            return False
        i, names = m.start(2) + n, names + 1
    return True


def known_kind(value: str) -> bool:
    """A value of one of the known harmless kinds (see the module docstring)."""
    v = value.strip()
    if mangled_name(v):
        return True
    if not v or len(v) > 240:
        return False
    if version(v) or model_id(v) or kernel_name(v):
        return True
    if _DTYPE.fullmatch(v) or _GPU.fullmatch(v) or _SIZE.fullmatch(v):
        return True
    m = _PIN.fullmatch(v)
    return m is not None and version(m.group("v"))
