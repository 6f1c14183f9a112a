"""Keep secrets out of records, logs and the screen.

Two layers, both applied to every value regdiag keeps from the environment:

1. By name: a variable whose name has a sensitive segment (TOKEN, SECRET, PASS, KEY, ...) keeps its
   value only when that value is a plain number or a boolean (so that knobs such as
   VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD=256 stay useful); otherwise the value becomes
   "<redacted>" and the name is listed as redacted, so the record still says it was set.
2. By shape: every kept value (and any text passed to `scrub_text`) is scanned for credentials in
   URLs (scheme://user:pass@host) and for known token shapes (hf_, ghp_, github_pat_, sk-, AKIA...,
   dapi..., glpat-, npm_, JWTs, private-key blocks, Azure AccountKey=/SharedAccessSignature=,
   key=value secrets, `--token VALUE` flags); each match is replaced by "<redacted>".

Which function for which sink (docs/redaction.md lists the rules):
  redact_env(env)        a mapping of variables (snapshot env group, probe headers' env)
  redact_value(name, v)  one variable
  redact_argv(argv)      a command line kept as tokens (launch_cmd, bisect --command)
  redact_tree(obj)       any decoded JSON (server info, journal lines): by key name, then by shape
  scrub_text(text)       free text (stderr tails, commit subjects, git refs, error messages)

Standard library only.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"

# Name segments (split on "_", "-", ".") that mark a variable as secret-bearing.
SENSITIVE_SEGMENTS = frozenset(
    {
        "TOKEN",
        "SECRET",
        "PASS",
        "PASSWORD",
        "PASSWD",
        "PASSPHRASE",
        "KEY",
        "CRED",
        "CREDS",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "COOKIE",
        "PRIVATE",
        "APIKEY",
        "ACCESSKEY",
        "SECRETKEY",
        "AUTHTOKEN",
        "SESSION",
    }
)

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_BOOLEANS = frozenset({"true", "false", "yes", "no", "on", "off", "y", "n", "t", "f"})
# A long run of digits under a secret name is more likely a PIN or numeric key than a knob.
_MAX_NUMBER_CHARS = 10

# Shapes found anywhere in a value. Order matters only for readability; each is applied in turn.
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "private key block",
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S),
    ),
    # user:password@ or a bare token@ in any scheme://; the host part stays readable.
    ("url credentials", re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}")),
    ("huggingface token", re.compile(r"\bhf_[A-Za-z0-9]{16,}")),
    ("github token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")),
    ("gitlab token", re.compile(r"\bgl(?:pat|ptt|dt|rt|oas|cbt|imt|ft|agent)-[A-Za-z0-9_-]{16,}")),
    ("databricks token", re.compile(r"\bdapi[0-9a-f]{32}(?:-\d+)?")),
    ("digitalocean token", re.compile(r"\bdo[pro]_v1_[0-9a-f]{64}")),
    ("sendgrid key", re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}")),
    (
        "groq/perplexity/shopify key",
        re.compile(r"\b(?:gsk_[A-Za-z0-9]{20,}|pplx-[A-Za-z0-9]{20,}|shp(?:at|ss|ca|pa)_[0-9a-fA-F]{32})"),
    ),
    ("huggingface org key", re.compile(r"\bapi_org_[A-Za-z0-9]{20,}")),
    ("openai/anthropic key", re.compile(r"\bsk-[A-Za-z0-9_-]{16,}")),
    ("aws access key id", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b")),
    ("google api key", re.compile(r"\bAIza[0-9A-Za-z_-]{30,}")),
    ("slack token", re.compile(r"\b(?:xox[abposre]|xapp)-[A-Za-z0-9-]{10,}")),
    ("stripe key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("pypi token", re.compile(r"\bpypi-[A-Za-z0-9_-]{32,}")),
    ("npm token", re.compile(r"\bnpm_[A-Za-z0-9]{30,}")),
    ("wandb/replicate key", re.compile(r"\b(?:r8_[A-Za-z0-9]{30,}|wandb_v1_[A-Za-z0-9_]{20,})")),
    # Real tokens carry digits; requiring one keeps prose such as "basic configuration" intact.
    (
        "bearer token",
        re.compile(r"(?i)\b(bearer|basic|token)\s+(?=[A-Za-z0-9._~+/-]*\d)[A-Za-z0-9._~+/-]{12,}=*"),
    ),
    # Azure storage / service-bus connection strings and SAS URLs: the key part, up to the next ';' or '&'.
    (
        "azure key",
        re.compile(r"(?i)\b((?:AccountKey|SharedAccessKey|SharedAccessSignature|sig)=)([^\s;&\"']+)"),
    ),
    # `--hf-token VALUE` (a flag, a space, its value) in free text such as a server's echoed argv.
    (
        "secret flag",
        re.compile(
            r"(?i)(--?(?:[a-z0-9]+-)*(?:token|secret|password|passwd|pass|pwd|api-?key|apikey|key|auth|"
            r"credentials?|cookie)\s+)(?![+-]?\d+(?:\.\d+)?(?:\s|$))([^\s-][^\s]*)"
        ),
    ),
    # key=value or key: value pairs inside a value (command lines, query strings, JSON-ish text).
    (
        "secret assignment",
        re.compile(
            r"(?i)\b((?:[a-z0-9]+[_-])*(?:token|secret|password|passwd|pass|pwd|api[_-]?key|apikey|"
            r"access[_-]?key|secret[_-]?key|auth|authorization|credentials?|cookie|private[_-]?key|session)"
            r"[\"']?\s*[=:]\s*[\"']?)([^\s&\"',;}]+)"
        ),
    ),
]


def _segments(name: str) -> list[str]:
    return [s for s in re.split(r"[_\-.]+", name.upper()) if s]


def is_sensitive_name(name: str) -> bool:
    return any(seg in SENSITIVE_SEGMENTS for seg in _segments(name))


def is_harmless_scalar(value: str) -> bool:
    """A plain number or boolean: safe to keep even under a sensitive name."""
    v = value.strip()
    if v.lower() in _BOOLEANS:
        return True
    return len(v) <= _MAX_NUMBER_CHARS and _NUMBER.fullmatch(v) is not None


def scrub_text(text: str) -> str:
    """Replace every credential-shaped substring of text with "<redacted>"."""
    if not text:
        return text
    out = text
    for label, pat in _PATTERNS:
        if label == "url credentials":
            out = pat.sub(lambda m: m.group(1) + REDACTED + "@", out)
        elif label in ("secret assignment", "azure key", "secret flag"):
            out = pat.sub(lambda m: m.group(1) + REDACTED, out)
        elif label == "bearer token":
            out = pat.sub(lambda m: m.group(1) + " " + REDACTED, out)
        else:
            out = pat.sub(REDACTED, out)
    return out


def redact_value(name: str, value: str) -> tuple[str, bool]:
    """(value to keep, whether anything was redacted) for one variable."""
    if is_sensitive_name(name) and not is_harmless_scalar(value):
        return REDACTED, True
    scrubbed = scrub_text(value)
    return scrubbed, scrubbed != value


def redact_env(env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Redact a mapping of variables: (kept values, sorted names whose value was redacted)."""
    kept: dict[str, str] = {}
    redacted: list[str] = []
    for name in sorted(env):
        value, changed = redact_value(name, env[name])
        kept[name] = value
        if changed:
            redacted.append(name)
    return kept, redacted


_VALUE_KEYS = frozenset({"value", "good", "bad"})


def redact_tree(obj: Any, key: str = "") -> Any:
    """A copy of decoded JSON with secrets out: by key name, then by shape inside every string."""
    if isinstance(obj, dict):
        # A {"name": VAR, "value"/"good"/"bad": ...} pair (bisect factors, journal env lines): by VAR.
        named = obj.get("name")
        if isinstance(named, str) and is_sensitive_name(named):
            return {k: redact_tree(v, named if k in _VALUE_KEYS else str(k)) for k, v in obj.items()}
        return {k: redact_tree(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_tree(v, key) for v in obj]
    if isinstance(obj, str):
        return redact_value(key, obj)[0] if key else scrub_text(obj)
    return obj  # numbers, booleans, null: nothing secret in them


def redact_argv(argv: list[str]) -> list[str]:
    """A command line fit for a record: the value after --api-key-like flags, NAME=secret, and shapes."""
    out: list[str] = []
    hide_next = False
    for tok in argv:
        if hide_next:
            hide_next = False
            if not is_harmless_scalar(tok):
                out.append(REDACTED)
                continue
        if tok.startswith("-") and "=" not in tok and is_sensitive_name(tok.lstrip("-")):
            hide_next = True
            out.append(tok)
            continue
        name, eq, value = tok.partition("=")
        if eq and name and (name.isidentifier() or (name.startswith("-") and " " not in name)):
            out.append(name + "=" + redact_value(name.lstrip("-"), value)[0])
        else:
            out.append(scrub_text(tok))
    return out
