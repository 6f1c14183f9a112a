"""Output on a stream that cannot carry UTF-8 (PYTHONIOENCODING=ascii, LANG=C on an old box, a latin-1
log): the arrows, signs and dashes of the reports become their ASCII spelling instead of a traceback.

`install` gives stdout and stderr an encoding error handler that writes "->" for "\u2192", "+/-" for
"\u00b1" and so on, and "?" for anything else the encoding lacks; a UTF-8 stream is left alone. rich
sees the stream's encoding and draws its boxes in ASCII by itself. Standard library only: the entry
point calls it before anything is imported.
"""

from __future__ import annotations

import codecs
import sys
from typing import Any

HANDLER = "regdiag-ascii"
ASCII = {
    "\u2192": "->",
    "\u2190": "<-",
    "\u2191": "^",
    "\u2193": "v",
    "\u00d7": "x",
    "\u00b1": "+/-",
    "\u0394": "delta ",
    "\u00b7": "|",
    "\u2013": "-",
    "\u2014": "--",
    "\u2212": "-",
    "\u2026": "...",
    "\u2265": ">=",
    "\u2264": "<=",
    "\u2248": "~",
    "\u2260": "!=",
    "\u00b5": "u",
    "\u03bc": "u",
    "\u00b0": " deg",
    "\u2713": "ok",
    "\u2717": "x",
    "\u2022": "*",
    "\u25a0": "#",
    "\u00a0": " ",
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
}


def asciify(s: str) -> str:
    """`s` with every character above ASCII spelt as the reports' ASCII fallback ("?" if none)."""
    return "".join(ASCII.get(ch, "?") if ord(ch) > 127 else ch for ch in s)


def _handler(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    return asciify(err.object[err.start : err.end]), err.end


def _registered() -> None:
    try:
        codecs.lookup_error(HANDLER)
    except LookupError:
        codecs.register_error(HANDLER, _handler)


def needs_fallback(stream: Any) -> bool:
    enc = getattr(stream, "encoding", None) or "ascii"
    try:
        "\u2192\u00b1\u00d7".encode(enc)
    except (UnicodeEncodeError, LookupError):
        return True
    return False


def install() -> None:
    """Give stdout and stderr the ASCII fallback where their encoding cannot write the reports' signs."""
    _registered()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and needs_fallback(stream) and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors=HANDLER)
            except (ValueError, OSError):  # a closed or detached stream: nothing to write to anyway
                pass
