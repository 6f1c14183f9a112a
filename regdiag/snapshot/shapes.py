"""Which values are harmless by shape, and which names hold credentials (regdiag.snapshot.redact's rule).

Default-deny: a value is kept verbatim only when one of these says it is harmless; anything else is
hidden by the caller. Nothing here says a value *is* a secret: it says a value *cannot* be one.

  credential_name(name)     the name says it holds a credential: its last word (split on _ - . and
                            camelCase) is TOKEN, SECRET, KEY, PAT, PASSWORD/PASSWD/PASS/PWD/PW (also
                            as a suffix: PGPASSWORD, SSHPASS, LDAP_BINDPW), AUTH, COOKIE, ..., or that
                            word followed by a qualifier (PRIVATE_KEY_ID, TOKEN_VALUE); a knob about
                            tokens (..._TOKEN_THRESHOLD, HF_TOKEN_PATH, MAX_TOKENS) is not one, nor
                            a cache key (TRITON_CACHE_KEY); a part number or word at the end is not
                            the name's (DB_PASS_1, X_KEY_PART2: each part of a split secret)
  hash_name(name)           the name says commit or digest (VLLM_COMMIT, sha256, TRITON_CACHE_KEY)
  harmless_value(name, v)   a number, a bool, a short enum word, a version, a commit hash or
                            digest (7 to 64 hex) under a hash_name, a path or URL without
                            credentials, a device list, or a short low-entropy token under a known family (regdiag.snapshot.families: NCCL_*,
                            CUDA_*, TORCH_*, ..., Slurm's placement SLURM_JOB_NODELIST=gpu-[001-004])
  risky_piece(s)            one word that could be a generated secret (long, mixed letters and digits,
                            high entropy): what free text and paths are searched for

Standard library only (runs on remote hosts too).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from urllib.parse import parse_qsl, urlsplit

from regdiag.snapshot.families import ALL_PREFIXES

# A name's last word that marks it as holding a credential; the suffix forms catch PGPASSWORD,
# SSHPASS, MYSQL_PWD, LDAP_BINDPW, HTTPPASSWD.
CREDENTIAL_WORDS = frozenset(
    {
        "TOKEN",
        "SECRET",
        "KEY",
        "APIKEY",
        "PAT",
        "AUTH",
        "COOKIE",
        "CRED",
        "CREDS",
        "CREDENTIAL",
        "CREDENTIALS",
        "PRIVATE",
        "SESSION",
        "SIG",
        "SIGNATURE",
        "PASSPHRASE",
        "DSN",
        "WEBHOOK",
        "AUTHORIZATION",
        "PIN",
        "OTP",
        "JWT",  # SLURM_JWT: slurmrestd's token
        "HMAC",
    }
)
CREDENTIAL_SUFFIXES = ("PASSWORD", "PASSWD", "PASS", "PWD", "PW", "SECRET", "TOKEN", "APIKEY")
# A qualifier after a credential word that is still the credential (GCP private_key_id, TOKEN_VALUE).
QUALIFIERS = frozenset({"ID", "VALUE", "DATA", "B64", "BASE64", "STRING", "STR", "HEX", "JSON", "RAW"})
NOT_CREDENTIALS = frozenset({"PWD", "OLDPWD"})  # the shell's working directories
COMMIT_WORDS = frozenset({"COMMIT", "SHA", "REV", "REVISION", "HASH", "REF", "DIGEST", "CHECKSUM"})
# A secret split over variables (DB_PASS_1 + DB_PASS_2, API_KEY_PART1, TOKEN_A): the name is judged
# without the part it names, so each part is what the whole would be.
_PART_WORDS = frozenset({"PART", "PARTS", "PIECE", "HALF", "SEGMENT", "CHUNK", "SPLIT", "FRAGMENT", "PT"})

NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
BOOLEANS = frozenset({"true", "false", "yes", "no", "on", "off", "y", "n", "t", "f", "0", "1", "none", ""})
VERSION = re.compile(r"v?\d+(?:\.\d+){1,4}(?:[.+-]?[A-Za-z]+\d*)*(?:\+[A-Za-z0-9.]+)?")
# A commit or a digest: 7 to 64 hex, or a sha256 in base32 as Triton and Inductor name cache entries.
DIGEST = re.compile(r"[0-9a-f]{7,64}|[0-9A-F]{40}|[0-9A-F]{64}|[A-Z2-7]{52}|[a-z2-7]{52}")
DEVICE_LIST = re.compile(
    r"(?:\d+|(?:GPU|MIG)-[0-9a-fA-F-]{8,40}(?:/\d+/\d+)?)(?:,(?:\d+|(?:GPU|MIG)-[0-9a-fA-F/-]+))*"
)
_ENUM_PIECE = re.compile(r"[A-Za-z]{1,24}|\d{1,12}")
_MIXED_PIECE = re.compile(r"[A-Za-z]{1,8}\d{1,4}[A-Za-z]{0,4}|\d{1,4}[A-Za-z]{1,8}")
_SEP = re.compile(r"[_.:+-]")
_PERF_SEP = re.compile(r"[_.:+,;= /{}\[\]-]+")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
# Words of three or more letters, each capitalized (camelCase's first may be lower): random letters
# of 20 or more almost never fall into that pattern.
_IDENTIFIER = re.compile(
    r"(?:[a-z]{3,}|[A-Z][a-z]{2,}|[A-Z]{2,5}(?=[A-Z][a-z]))(?:[A-Z][a-z]{2,}|[A-Z]{2,5}(?=[A-Z]|$))+"
)
MAX_ENUM = 40
MAX_PERF = 200


def words(name: str) -> list[str]:
    """A name's words, upper case: split on _ - . and camelCase (clientSecret -> CLIENT, SECRET)."""
    out: list[str] = []
    for part in re.split(r"[^A-Za-z0-9]+", name):
        out.extend(w.upper() for w in _WORD.findall(part))
    return out


def _is_credential_word(w: str) -> bool:
    return w in CREDENTIAL_WORDS or w.endswith(CREDENTIAL_SUFFIXES)


@functools.lru_cache(maxsize=4096)
def credential_name(name: str) -> bool:
    """The name says its value is a credential (see the module docstring)."""
    if name in NOT_CREDENTIALS:  # the variables; `--pwd` is a password
        return False
    ws = _unsplit(words(name))
    if not ws:
        return False
    if len(ws) >= 2 and ws[-2:] == ["CACHE", "KEY"]:
        return False  # TRITON_CACHE_KEY, cache_key: a hash naming a cache entry, not a credential
    if _is_credential_word(ws[-1]):
        return True
    if len(ws) >= 2 and ws[-1] == "ID" and ws[-2] in ("TOKEN", "SESSION"):
        return False  # eos_token_id, XDG_SESSION_ID: identifiers, not credentials
    return len(ws) >= 2 and ws[-1] in QUALIFIERS and _is_credential_word(ws[-2])


def _unsplit(ws: list[str]) -> list[str]:
    """A name's words without a trailing part number or part word (DB_PASS_1, X_KEY_PART2, TOKEN_B)."""
    out = list(ws)
    if len(out) >= 2 and (re.fullmatch(r"\d{1,2}", out[-1]) or (len(out[-1]) == 1 and out[-1] in "ABCD")):
        out.pop()
    if len(out) >= 2 and out[-1] in _PART_WORDS:
        out.pop()
    return out


_PART_NAME = re.compile(
    r"(?i)(?P<base>[A-Za-z][\w.-]*?)[_.-]?(?:(?:PART|PIECE|HALF|SEGMENT|CHUNK|FRAGMENT|PT)[_.-]?)?"
    r"(?P<index>\d{1,2}|(?<=[_.-])[A-D])"
)


def split_part(name: str) -> tuple[str, str] | None:
    """(base, part) of a variable that names one part of a split value (DB_PASS_1, X_PART2, KEY_B)."""
    m = _PART_NAME.fullmatch(name)
    return (m.group("base"), m.group("index").upper()) if m else None


def hash_name(name: str) -> bool:
    """The name says its value is a commit or a digest (VLLM_COMMIT, commit_id, sha256, build_id,
    TRITON_CACHE_KEY): a hex value under it is kept (not under a credential name)."""
    ws = words(name)
    return not credential_name(name) and (
        bool(set(ws) & (COMMIT_WORDS | {"HEAD"})) or ws[-2:] == ["CACHE", "KEY"]
    )


def mentions_credential(name: str) -> bool:
    """Any word of the name is a credential word (a knob about tokens included): for key names in text."""
    return any(_is_credential_word(w) for w in words(name))


def entropy(s: str) -> float:
    """Shannon entropy in bits per character."""
    if not s:
        return 0.0
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


def risky_piece(s: str) -> bool:
    """One word (no separators) that could be a generated secret: long enough, letters and digits
    mixed (or long hex), and close to random. A commit hash (7-12 or 40 or 64 hex) is not."""
    s = s.strip("=")
    if len(s) < 14 or re.fullmatch(r"0x[0-9a-fA-F]+", s):
        return False  # short, or a hex literal (a pointer, NCCL's commId)
    if re.fullmatch(r"[0-9a-f]+", s) or re.fullmatch(r"[0-9A-F]+", s):
        return len(s) not in (40, 64) and len(s) >= 16 and entropy(s) >= 3.0
    has_digit = any(c.isdigit() for c in s)
    upper = sum(c.isupper() for c in s)
    lower = sum(c.islower() for c in s)
    if not has_digit and not (upper >= 2 and lower >= 2 and len(s) >= 20):
        return False  # one word of letters only
    if not has_digit and _IDENTIFIER.fullmatch(s):
        return False  # a CamelCase identifier of whole words (StrictHostKeyChecking, ModuleNotFoundError)
    if s.isdigit():
        return False
    # Random text of length n has entropy near log2(min(n, alphabet)); prose and identifiers far less.
    return entropy(s) >= 0.72 * math.log2(min(len(s), 62))


def _pieces_ok(value: str, sep: re.Pattern[str], mixed_ok: bool) -> bool:
    pieces = [p for p in sep.split(value) if p]
    if not pieces:
        return True
    for p in pieces:
        if _ENUM_PIECE.fullmatch(p):
            continue
        if mixed_ok and _MIXED_PIECE.fullmatch(p):
            continue
        return False
    return True


def enum_word(value: str, loose: bool = False) -> bool:
    """A short word such as FLASH_ATTN, expandable_segments:True, en_US.UTF-8, xterm-256color
    (loose: also one word of letters and digits alone, as `bfloat16` after `--dtype`)."""
    if not value or len(value) > MAX_ENUM or not re.fullmatch(r"[A-Za-z0-9_.:+-]+", value):
        return False
    if not value[0].isalpha() and value[0] not in ":_":
        return False
    # A mixed piece (letters and digits, as in 'hunter2') only beside another piece: 'xterm-256color'.
    return _pieces_ok(value, _SEP, mixed_ok=loose or len([p for p in _SEP.split(value) if p]) >= 2)


def perf_token(value: str) -> bool:
    """A short list of low-entropy words (mlx5_0:1,mlx5_1:1; :4096:8; 8.0 9.0+PTX; arena_max=2)."""
    if len(value) > MAX_PERF or not re.fullmatch(r"\^?[A-Za-z0-9_.:+,;= /{}\[\]-]*", value):
        return False
    return _pieces_ok(value.removeprefix("^"), _PERF_SEP, mixed_ok=True)  # ^docker0,lo: all but these


def path_like(value: str) -> bool:
    """A file path or a list of them (PATH, PYTHONPATH), or an org/name model id; no secret inside."""
    items = value.split(":") if ":" in value and "://" not in value else [value]
    for item in items:
        if not item:
            continue
        if any(c.isspace() for c in item) or len(item) > 4096:
            return False
        if not (item.startswith(("/", "~", "./", "../")) or re.fullmatch(r"[\w.-]+(?:/[\w.-]+)+/?", item)):
            return False
        if not item.startswith(("/", "~", ".")) and any(risky_piece(p) for p in re.split(r"[/._-]", item)):
            return False
    return True


# Query parameters that carry a credential (presigned S3 / GCS / Azure URLs, OAuth, API keys).
CREDENTIAL_PARAMS = re.compile(
    r"(?i)^(?:x-amz-(?:signature|credential|security-token)|x-goog-(?:signature|credential)|sig|signature|"
    r"skoid|sktid|skt|ske|sks|skv|policy|key-pair-id|.*token|.*secret|.*key|.*password|passwd|pwd|"
    r"pass|auth|code|credential|session|apikey)$"
)
_PLAIN_PARAM_VALUES = re.compile(r"[A-Za-z0-9_.,-]{0,40}")


def url_credentials(u: str) -> bool:
    """The URL carries a credential: userinfo, a credential-like query parameter, or a risky path."""
    try:
        parts = urlsplit(u)
    except ValueError:
        return True
    if not parts.scheme or not parts.netloc:
        return True
    if "@" in parts.netloc:
        return True
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        if v and CREDENTIAL_PARAMS.match(k):
            return True
        if v and (not _PLAIN_PARAM_VALUES.fullmatch(v) or risky_piece(v)):
            return True
    return any(risky_piece(p) for p in re.split(r"[/._~-]", parts.path + "/" + parts.fragment))


def url_like(value: str) -> bool:
    return re.fullmatch(r"[a-zA-Z][a-zA-Z0-9+.-]*://\S+", value) is not None and not url_credentials(value)


def harmless_value(name: str, value: str, loose: bool = False) -> bool:
    """Kept verbatim: shown harmless by its shape (and, for a credential name, only a bool)."""
    v = value.strip()
    if credential_name(name):
        return v.lower() in BOOLEANS
    if v.lower() in BOOLEANS:
        return True
    if NUMBER.fullmatch(v):  # a long number under a name that mentions a credential is a PIN, not a knob
        return len(v) <= (10 if mentions_credential(name) else 20)
    if VERSION.fullmatch(v) or DEVICE_LIST.fullmatch(v):
        return True
    if hash_name(name) and DIGEST.fullmatch(v):
        return True
    if enum_word(v, loose) or path_like(v) or url_like(v):
        return True
    return name.startswith(ALL_PREFIXES) and perf_token(v)
