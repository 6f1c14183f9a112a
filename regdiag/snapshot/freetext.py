"""Secrets out of free text: stderr and stdout tails, error lines, server info, commit subjects.

Free text cannot be denied by default (it would say nothing), so what is cut out is what could be a
credential, each as `<redacted len=N>`:

1. PEM and PGP blocks, whole (`-----BEGIN ...-----` to its END line, or to the end of the text when
   the tail was cut, or from the start when only the END line is left);
2. detect-secrets' provider plugins (AWS, GitHub, GitLab, Slack, Stripe, Twilio, JWT, Basic auth,
   keyword assignments, ...), when the library is installed and the text has a candidate at all: it
   is imported on first need, so a snapshot whose free text holds nothing suspicious never loads it;
3. URL userinfo (a password may hold '/'), `user:password@host` without a scheme, credential-like
   query parameters (X-Amz-Signature, sig, token, key, ...), chat webhook paths;
4. values after a credential name: `NAME=...`, `"name": "..."`, `name: ...`, `--flag ...`,
   `-u user:pw`, `sshpass -p ...`, `mysql -p...`, `login TOKEN`, `Bearer/Basic/token ...`;
   a passphrase after a password-like name is cut to the end of its clause, spaces and all;
5. every word that could be a generated secret (regdiag.snapshot.shapes.risky_piece), outside
   file paths; provider-prefixed tokens (xai-, nvapi-, lsv2_, dckr_pat_, hvs., ya29., GOCSPX-, sk-...)
   are such words.

Standard library only; detect-secrets is optional (remote hosts run without it).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from regdiag.snapshot.known import known_kind
from regdiag.snapshot.shapes import (
    BOOLEANS,
    DIGEST,
    NUMBER,
    credential_name,
    harmless_value,
    hash_name,
    risky_piece,
)


def marker(secret: str) -> str:
    return f"<redacted len={len(secret)}>"


_BLOCK = re.compile(
    r"-----BEGIN ([A-Z0-9 ]{1,60})-----.*?(?:-----END \1-----|\Z)|\A.*?-----END [A-Z0-9 ]{1,60}-----", re.S
)
_URL_USER = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,30}://)([^\s'\"]+)@")  # to the last '@': p@ss
_BARE_USER = re.compile(
    r"(?<![\w/:.@-])([A-Za-z0-9_.-]{1,64}):([^\s@'\"/:][^\s@'\":]{0,199})@(?=[A-Za-z0-9[])"
)
_PARAM = re.compile(
    r"(?i)([?&;](?:x-amz-(?:signature|credential|security-token)|x-goog-(?:signature|credential)|sig|"
    r"signature|policy|key-pair-id|skoid|sktid|[\w-]*token|[\w-]*secret|[\w-]*key|[\w-]*password|passwd|"
    r"pwd|auth|code|credential|session|apikey|hmac|mac)=)([^&\s#\"'<>]+)"
)
_WEBHOOK = re.compile(
    r"(?i)(hooks\.slack\.com/(?:services|workflows|triggers)/|discord(?:app)?\.com/api/webhooks/|"
    r"\.webhook\.office\.com/webhookb2/|api\.telegram\.org/bot|/hooks/)([^\s\"'<>?#]+)"
)
# Provider token formats whose body may be short or regular enough to pass the entropy test.
_PROVIDERS = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{16,}|api_org_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|"
    r"gl(?:pat|ptt|dt|rt|oas|cbt|imt|ft|agent)-[\w-]{16,}|dapi[0-9a-f]{32}(?:-\d+)?|do[pro]_v1_[0-9a-f]{64}|"
    r"SG\.[\w-]{16,}\.[\w-]{16,}|gsk_[A-Za-z0-9]{20,}|pplx-[A-Za-z0-9]{20,}|shp(?:at|ss|ca|pa)_[0-9a-fA-F]{32}|"
    r"sk-[\w-]{16,}|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}|AIza[\w-]{30,}|"
    r"(?:xox[abposre]|xapp)-[A-Za-z0-9-]{10,}|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|pypi-[\w-]{32,}|"
    r"npm_[A-Za-z0-9]{30,}|r8_[A-Za-z0-9]{30,}|wandb_v1_\w{20,}|xai-[\w-]{20,}|nvapi-[\w-]{20,}|"
    r"lsv2_(?:pt|sk)_\w{20,}|dckr_pat_[\w-]{20,}|hv[sbr]\.[\w-]{20,}|ya29\.[\w.-]{20,}|GOCSPX-[\w-]{20,}|"
    r"eyJ[\w-]{5,}\.[\w-]{5,}\.[\w-]{5,})"
)
_AZURE = re.compile(r"(?i)\b(?:AccountKey|SharedAccessKey|SharedAccessSignature|sig)=([^\s;&\"']+)")
_TELEGRAM = re.compile(r"\b\d{6,12}:[A-Za-z0-9_-]{30,}")
_PASSWORDISH = re.compile(r"(?i)(pass|pwd|pw$|passphrase|secret)")
_NAME = r"[A-Za-z_][A-Za-z0-9_.-]{0,80}"
_QUOTED = re.compile(r"(?<![\w.-])([\"']?)(" + _NAME + r")\1(\s*[=:]\s*)([\"'])(.{0,4096}?)\4")
_ASSIGN = re.compile(r"(?<![\w.-])(--?)?(" + _NAME + r")(=|:[ \t]*)(?=[^\s\"'])")
_FLAG = re.compile(r"(?<![\w-])(--?" + _NAME + r")[ \t]+(?!-)(?:([\"'])(.*?)\2|([^\s\"']+))")
_SPECIAL = [
    re.compile(r"\bsshpass\s+-p\s*(\S+)"),
    re.compile(r"\b(?:mysql|mysqladmin|mysqldump|mariadb)\b[^\n]*?\s-p\s*(\S+)"),
    re.compile(r"(?<![\w-])(?:-u|--user)\s+[^\s:]+:(\S+)"),
    re.compile(r"\blogin\s+(?:--?[\w-]+\s+)*([A-Za-z0-9_.-]{16,})"),
    re.compile(r"\blogin\b[^\n]*?\s-p[ \t]+(\S+)"),
    re.compile(r"(?i)\b(?:bearer|token)\s+((?=[A-Za-z0-9._~+/-]*\d)[A-Za-z0-9._~+/-]{12,}=*)"),
    # `Basic dXNlcjpwYXNz`: base64 with a digit or a case change inside (not `basic configuration`).
    re.compile(
        r"\b(?:Basic|BASIC|basic)\s+((?=[A-Za-z0-9+/]*(?:\d|[a-z][A-Z]|[A-Z][a-z]*[A-Z]))[A-Za-z0-9+/]{8,}=*)"
    ),
    # `machine h login u password hunter2` (.netrc), `password s3cret!`: a word with a digit or a sign.
    re.compile(r"(?i)\b(?:password|passwd|passphrase)\s+((?=\S*[\d!#$%^&*@~])[^\s\"']{4,})"),
]
# `Authorization: <scheme> <credentials>` whatever the scheme (Splunk, GenieKey, SSWS, Api-Key, ...),
# and a credential after a scheme word that only a header uses, wherever it stands.
_AUTH_HEADER = re.compile(
    r"(?i)\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:([A-Za-z][\w.-]{0,30})\s+)?([^\s\"',;]+)"
)
_SCHEME = re.compile(
    r"\b(?:Splunk|GenieKey|SSWS|Api-?Key|ApiKey|DeepL-Auth-Key|Negotiate|OAuth|Key|Token)\s+"
    r"((?=[\w.~+/-]*\d)[\w.~+/=-]{16,})"
)
# Programs whose flag takes a credential (by the flag's arity: the next word is its value): redis-cli
# -a, curl -u/-U/--proxy-user, openssl -k/-pass/-passin/-passout, smbclient -U user%pw, ldap* -w,
# ipmitool -P, zip/unzip/7z -P, mongo* -p, sqlcmd/bcp -P, docker/podman login -p.
CREDENTIAL_FLAGS: dict[str, frozenset[str]] = {
    "redis-cli": frozenset({"-a", "--pass", "--askpass"}),
    "valkey-cli": frozenset({"-a", "--pass"}),
    "curl": frozenset({"-u", "--user", "-U", "--proxy-user", "--oauth2-bearer", "--proxy-pass", "--pass"}),
    "openssl": frozenset({"-k", "-pass", "-passin", "-passout", "-password"}),
    "smbclient": frozenset({"-U", "--user"}),
    "ldapsearch": frozenset({"-w"}),
    "ldapmodify": frozenset({"-w"}),
    "ldapadd": frozenset({"-w"}),
    "ldapdelete": frozenset({"-w"}),
    "ldapwhoami": frozenset({"-w"}),
    "ipmitool": frozenset({"-P"}),
    "zip": frozenset({"-P"}),
    "unzip": frozenset({"-P"}),
    "mongo": frozenset({"-p"}),
    "mongosh": frozenset({"-p"}),
    "mongodump": frozenset({"-p"}),
    "mongorestore": frozenset({"-p"}),
    "sqlcmd": frozenset({"-P"}),
    "bcp": frozenset({"-P"}),
    "docker": frozenset({"-p"}),
    "podman": frozenset({"-p"}),
    "influx": frozenset({"-p"}),
}
# Programs whose short credential flag may hold its value attached (`curl -Ualice:pw`, getopt's way);
# openssl's `-kfile` is another option, docker's `-p8000:8000` a port.
ATTACHED_FLAGS = frozenset(
    {"curl", "smbclient", "ldapsearch", "ldapmodify", "ldapadd", "ldapdelete", "ldapwhoami", "ipmitool"}
    | {"zip", "unzip"}
)
# Oracle's clients take `user/password[@connect]` as a word (`sqlplus scott/tiger@//db:1521/ORCL`,
# `expdp userid=scott/tiger`, `rman target sys/pw@db`), as does SQL's `CONNECT user/password`.
ORACLE = frozenset({"sqlplus", "sqlldr", "expdp", "impdp", "exp", "imp", "rman", "dgmgrl", "sql"})
ORACLE_LOGIN = re.compile(r"([A-Za-z_][\w$#]{0,127})/([^@\s/'\"][^@\s'\"]*)(@\S*)?")
_ORACLE_TEXT = re.compile(
    r"(?i)(?<![\w/-])(?:(?:\S*/)?(?:" + "|".join(sorted(ORACLE)) + r")"
    r"(?:\s+-\w+)*(?:\s+(?:target|auxiliary))?\s|"
    r"\bconn(?:ect)?\s|\buserid\s*=)\s*[\"']?[A-Za-z_][\w$#]{0,127}/([^@\s/'\"][^@\s'\"]*)"
)
# `.netrc`: `machine HOST login USER password PW` (or `default ...`, `account ...`) on one line or
# several: the word after `password` is one whatever its shape.
_NETRC = re.compile(
    r"\b(?:machine\s+\S+|default)(?:\s+(?:login|account|port)\s+\S+)*\s+password\s+(\S+)"
    r"|\blogin\s+\S+\s+password\s+(\S+)"
)
# `.pgpass`: `host:port:database:user:password` (a host with a letter or a dot, or `*`; the port a
# number or `*`): the password runs to the end of the line.
_PGPASS = re.compile(
    r"(?<![\w.:/@-])(?:\*|[A-Za-z0-9.-]*[A-Za-z.][A-Za-z0-9.-]*|\[[0-9a-fA-F:]+\]):(?:\d{1,5}|\*):"
    r"[^\s:]+:[^\s:]+:(\S+)"
)
_PROGRAM_FLAG = re.compile(
    r"(?<![\w/-])(?:\S*/)?(" + "|".join(re.escape(p) for p in CREDENTIAL_FLAGS) + r")\b([^\n|;&]*)"
)
_HTPASSWD = re.compile(r"\bhtpasswd\s+((?:-(?:[Cr]\s+\d+|[A-Za-z]*)\s+)*)(\S+)\s+(\S+)(?:\s+(\S+))?")
_HEX_KEY = re.compile(
    r"(?<![0-9a-fA-F])(?:[0-9a-f]{40}|[0-9a-f]{64}|[0-9A-F]{40}|[0-9A-F]{64})(?![0-9a-fA-F])"
)
# A hex word is a commit or a digest when the nearest of these words before it on its line says so
# (`commit`, `sha256:`, `cache key`, `repo@`), and a key when it is one of the others or there is
# none: a bare 40-hex word may be a GitHub classic token.
_HEX_CONTEXT = re.compile(
    r"(?i)(?P<hash>\b(?:commit\w*|sha\d*|rev|revision|reverts?|head|git|tree|merge[ds]?|checkout|snapshots?|"
    r"digests?|hash(?:es)?|checksums?|md5|cache[ _-]?key|cache[ _-]?dir|cache|build[ _-]?id|fingerprint|"
    r"blob|oid|parent)\b|@$)|"
    r"(?P<key>key|token|secret|netrc|passw|auth|login|hmac|signature|credential|api|bearer)"
)
# Hex, or base32 of a sha256 as Triton and Inductor name their cache entries (52 of A-Z2-7).
_HEX_WORD = re.compile(r"[0-9a-f]{16,64}|[0-9A-F]{16,64}|[A-Z2-7]{52}|[a-z2-7]{52}")
_PATH_WORD = re.compile(r"[.~]?[a-z]{3,}(?:[-_][a-z]+)*")
_CLAUSE_END = re.compile(r"[;&\n]|\s--?[A-Za-z]|\s[A-Z_][A-Z0-9_]*=")
_FINGERPRINT = re.compile(r"[A-Za-z0-9+/]{43}=?")
_RUN = re.compile(r"[A-Za-z0-9+/=_~%.-]{14,}")
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]{0,30}://[^\s\"'<>]+")
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?,?")
_PLAIN_WORD = re.compile(r"[a-z]{1,15}|[A-Za-z][a-z]{1,15}")


def _sub_group(pat: re.Pattern[str], text: str, group: int) -> str:
    def repl(m: re.Match[str]) -> str:
        s, e = m.span(group)
        if s < 0 or not m.group(group) or m.group(group).startswith("<redacted"):
            return m.group(0)
        return m.group(0)[: s - m.start()] + marker(m.group(group)) + m.group(0)[e - m.start() :]

    return pat.sub(repl, text)


def _url_user(m: re.Match[str]) -> str:
    info = m.group(2)
    user = info.split(":", 1)[0]
    if (":" in info and "/" not in user) or "/" not in info:
        return m.group(1) + marker(info) + "@"
    return m.group(0)


def _value_end(name: str, value: str) -> int:
    """Where a value after a credential name ends: one word, or the clause for a passphrase."""
    if _PASSWORDISH.search(name):
        m = _CLAUSE_END.search(value)
        return len(value.rstrip()) if m is None else m.start()
    m = re.match(r"(?:<redacted len=\d+>|<(?!redacted)|[^\s,;&)}\]<])*", value)
    return m.end() if m else 0


def _assign(text: str) -> str:
    """`NAME=value`, `name: value`, `--name=value` under a credential name: the value cut out."""
    out: list[str] = []
    pos = 0
    for m in _ASSIGN.finditer(text):
        name, sep = m.group(2), m.group(3)
        pwd = name.upper() == "PWD"  # the shell's working directory, or ODBC's password (PWD=...;)
        if m.start() < pos or not (credential_name(name) or pwd):
            continue
        if name.lower() == "key" and re.search(r"(?i)\bcache[ \t]$", text[max(0, m.start() - 6) : m.start()]):
            continue  # `Triton cache key: <sha256>`: a cache entry's name
        nl = text.find("\n", m.end(), m.end() + 4096)
        line = text[m.end() : nl if nl >= 0 else m.end() + 4096]
        end = _value_end(name, line)
        v = line[:end]
        if not v or v.lower() in BOOLEANS or v.startswith("<redacted") or (pwd and v.startswith(("/", "~"))):
            continue
        # `api-key: accept env` in a commit subject, `#token: 1234` in SGLang's decode line: after a
        # colon and a space, a plain word or a number is prose (not after a password-like name).
        # A plain word is prose only when more words follow (`api_key: mysecret` alone is YAML).
        more = re.match(r"[ \t]+[A-Za-z]", line[end:]) is not None
        prose = (_PLAIN_WORD.fullmatch(v) and more) or _NUMBER.fullmatch(v)
        if sep.startswith(":") and sep != ":" and prose and not _PASSWORDISH.search(name):
            continue
        out += [text[pos : m.end()], marker(v)]
        pos = m.end() + end
    return "".join(out) + text[pos:]


def _quoted(m: re.Match[str]) -> str:
    if not credential_name(m.group(2)) or not m.group(5) or m.group(5).lower() in BOOLEANS:
        return m.group(0)
    q = m.group(4)
    return m.group(0)[: m.start(5) - m.start()] + marker(m.group(5)) + q


def _flag(m: re.Match[str]) -> str:
    q = m.group(2) or ""
    v = m.group(3) if q else m.group(4)
    if (
        not v
        or not credential_name(m.group(1).lstrip("-"))
        or v.lower() in BOOLEANS
        or v.startswith("<redacted")
    ):
        return m.group(0)
    return m.group(1) + " " + q + marker(v) + q


# An identifier of letters (a digit or underscore between them at most) that opens template arguments or
# follows `::`: a C++ name in a kernel's signature, never a generated secret's shape (which mixes digits).
_CPP_NAME = re.compile(r"[A-Za-z]+(?:_[A-Za-z]+)*")
_OPTION_NAME = re.compile(r"-{0,2}[A-Za-z_][A-Za-z0-9_.-]*")


def _name_number(run: str) -> bool:
    """`NAME=NUMBER` or `--name=NUMBER` (a sentence's full stop after it too): a setting, as a snapshot
    keeps it (NCCL_BUFFSIZE=8388608, NCCL_P2P_NET_CHUNKSIZE=131072), though the name's last word and the
    digits read together as one mixed word. A credential name's value was cut out before (_assign)."""
    name, eq, value = run.partition("=")
    value = value[:-1] if value.endswith(".") else value
    if not eq or not _OPTION_NAME.fullmatch(name) or not NUMBER.fullmatch(value):
        return False
    bare = name.lstrip("-")
    return (
        not credential_name(bare)
        and harmless_value(bare, value)
        and not any(risky_piece(p) for p in re.split(r"[-_.]", bare))
    )


def _run(m: re.Match[str]) -> str:
    run = m.group(0)
    if run.startswith("<") or known_kind(run):
        return run  # a marker, or a version, model id, kernel name, dtype, GPU name, size (regdiag.snapshot.known)
    if _FINGERPRINT.fullmatch(run) and m.string[max(0, m.start() - 7) : m.start()] == "SHA256:":
        return run  # a public key's fingerprint (ssh's `SHA256:<base64>`, which may start with
        # a slash), which the user must check
    if run.startswith(("/", "~", ".")):
        return _path_run(run)
    if _CPP_NAME.fullmatch(run) and (
        m.string[m.end() : m.end() + 1] == "<" or m.string[max(0, m.start() - 2) : m.start()] == "::"
    ):
        return run  # a C++ name in a kernel's signature (at::native::bitonicSortKVInPlace<2, ...>)
    if _name_number(run):
        return run
    name, eq, value = run.partition("=")
    if eq and _OPTION_NAME.fullmatch(name) and not credential_name(name.lstrip("-")):
        # A setting: TRITON_CACHE_DIR=/root/.triton/cache/<hash> is a path, VLLM_COMMIT=<sha> a commit.
        if value.startswith(("/", "~")):
            return name + eq + _path_run(value)
        if hash_name(name.lstrip("-")) and DIGEST.fullmatch(value):
            return run
    line = m.string[max(0, m.start() - 48) : m.start()].rsplit("\n", 1)[-1]
    if _HEX_WORD.fullmatch(run) and _hex_context(line) == "hash":
        return run  # a digest beside its word: `triton cache key <sha256>`, `md5 <32 hex>`
    if any(risky_piece(p) for p in re.split(r"[-_.:]", run)):
        return marker(run)
    h = _HEX_KEY.search(run)
    if h is not None and _hex_context(line + run[: h.start()]) != "hash":
        # 40 or 64 hex: a commit or a digest beside commit words; a key behind a prefix (sbp_, bkua_),
        # beside key words (`api-key`, `netrc`, `hmac`) or alone (a GitHub classic token is 40 hex).
        return marker(run)
    return run


def _hex_context(before: str) -> str | None:
    """`hash` or `key`: what the nearest context word before a hex word says it is (None: no word)."""
    last = None
    for c in _HEX_CONTEXT.finditer(before):
        last = c
    return last.lastgroup if last is not None else None


def _path_run(run: str) -> str:
    """A file path (a random piece in one is a task id, a temporary name, a cache key), unless it ends as
    base64 does or has random pieces and no directory named by a word: `/x+Ab...9Q` is a key,
    `/root/.cache/x` not."""
    random_piece = any(risky_piece(p) for p in re.split(r"[/+._-]", run))
    words = any(_PATH_WORD.fullmatch(seg) for seg in run.split("/"))
    return marker(run) if run.endswith("=") or (random_piece and not words) else run


def _auth_header(m: re.Match[str]) -> str:
    value = m.group(2)
    if value.startswith("<redacted") or (m.group(1) is None and re.fullmatch(r"[A-Za-z]{1,20}", value)):
        return m.group(0)  # `authorization: required`: prose
    return m.group(0)[: m.start(2) - m.start()] + marker(value) + m.group(0)[m.end(2) - m.start() :]


def _program_flags(m: re.Match[str]) -> str:
    """`redis-cli -h h -a PW`, `curl --proxy-user u:pw`: the word after a credential flag of the program."""
    prog, rest = m.group(1), m.group(2)
    flags = CREDENTIAL_FLAGS[prog]
    if prog in ("docker", "podman") and " login" not in rest:
        return m.group(0)  # `docker run -p 8000:8000` maps a port
    out, pending = [], False
    attached = [f for f in flags if len(f) == 2] if prog in ATTACHED_FLAGS else []
    for sp, tok in re.findall(r"(\s*)(\S+)", rest):
        flag, eq, value = tok.partition("=")
        if pending and not tok.startswith("<redacted"):
            tok = marker(tok)
        elif eq and flag in flags and value and not value.startswith("<redacted"):
            tok = f"{flag}={marker(value)}"
        elif len(tok) > 2 and tok[:2] in attached and not tok[2:].startswith("<redacted"):
            tok = tok[:2] + marker(tok[2:])  # curl -Ualice:pw
        pending = tok in flags
        out.append(sp + tok)
    return m.group(0)[: m.start(2) - m.start()] + "".join(out)


def _htpasswd(m: re.Match[str]) -> str:
    """`htpasswd -b FILE USER PW`, `htpasswd -nb USER PW`: the password (without -b it is asked for)."""
    g = 3 if "n" in m.group(1) else 4
    pw = m.group(g)
    if "b" not in m.group(1) or not pw or pw.startswith("<redacted"):
        return m.group(0)
    return m.group(0)[: m.start(g) - m.start()] + marker(pw) + m.group(0)[m.end(g) - m.start() :]


def _netrc(text: str) -> str:
    return _sub_group(_NETRC, _sub_group(_NETRC, text, 1), 2)


def _url_path(m: re.Match[str]) -> str:
    url = m.group(0)
    head, _, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    pieces = re.split(r"([/?#&=._~@-])", path)
    out = "".join(marker(p) if risky_piece(p) else p for p in pieces)
    return f"{head}://{host}{slash}{out}"


# --- detect-secrets, loaded on first need ------------------------------------------------------------

_SKIP_PLUGINS = frozenset({"Public IP (ipv4)", "Base64 High Entropy String", "Hex High Entropy String"})
_detector_lock = threading.Lock()
_detector: list[Any] = []  # [None] when unavailable, else [(settings context factory, plugins)]
# Worth asking detect-secrets about: an assignment to a credential-like word, an auth header, or a
# word long and mixed enough to be a token. Plain text (a kernel command line, a commit subject with
# "token" in it) never loads the library: importing it costs ~0.2 s, more than a snapshot's budget.
_CANDIDATE_WORD = re.compile(
    r"(?i)(?:pass|secret|token|key|auth|cred|pwd|bearer|basic)\w{0,40}[\"']?[ \t]{0,4}[=:][ \t]{0,4}\S|bearer\s|basic\s"
)
_CANDIDATE_RUN = re.compile(r"[A-Za-z0-9+/_=.-]{16,}")


def _candidate(text: str) -> bool:
    if _CANDIDATE_WORD.search(text):
        return True
    for m in _CANDIDATE_RUN.finditer(text):
        for piece in re.split(r"[/._=-]", m.group(0)):
            if len(piece) >= 16 and any(c.isdigit() for c in piece) and any(c.isalpha() for c in piece):
                return True
    return False


def _load_detector() -> Any:
    with _detector_lock:
        if not _detector:
            try:
                from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
                from detect_secrets.settings import default_settings

                mapping: dict[str, Any] = get_mapping_from_secret_type_to_class()
                plugins = [c() for t, c in mapping.items() if t not in _SKIP_PLUGINS]
                _detector.append((default_settings, plugins))
            except Exception:  # not installed, or a version with another API: the own rules still apply
                _detector.append(None)
        return _detector[0]


def detector_available() -> bool:
    return _load_detector() is not None


# detect-secrets takes about 1 ms a line, more on long ones: lines longer than this are left to the
# own rules (a tail, an error line and a commit subject are far shorter).
MAX_DETECT_LINE = 4096


def _detect(text: str) -> str:
    if not _candidate(text):
        return text
    loaded = _load_detector()
    if loaded is None:
        return text
    settings, plugins = loaded
    found: set[str] = set()
    lines = [ln for ln in text.splitlines() if len(ln) <= MAX_DETECT_LINE and _candidate(ln)]
    with settings():
        for line in lines:
            for p in plugins:
                try:
                    found.update(
                        s.secret_value for s in p.analyze_line(filename="text", line=line) if s.secret_value
                    )
                except Exception:
                    continue
    for secret in sorted(found, key=len, reverse=True):
        if len(secret) < 4 or secret.startswith("<redacted"):
            continue
        # A plugin may report only a token's prefix (GitLab's `glpat`): the token runs on to its end.
        pat = re.compile(re.escape(secret) + r"[\w.+/=~-]*")
        text = pat.sub(lambda m: marker(m.group(0)), text)
    return text


_STEPS: list[Callable[[str], str]] = [
    lambda t: _BLOCK.sub(lambda m: marker(m.group(0)), t),
    lambda t: _URL_USER.sub(_url_user, t),
    lambda t: _sub_group(_BARE_USER, t, 2),
    lambda t: _PROVIDERS.sub(lambda m: marker(m.group(0)), t),
    lambda t: _sub_group(_AZURE, t, 1),
    _detect,
    lambda t: _sub_group(_PARAM, t, 2),
    lambda t: _sub_group(_WEBHOOK, t, 2),
    lambda t: _TELEGRAM.sub(lambda m: marker(m.group(0)), t),
    lambda t: _QUOTED.sub(_quoted, t),
    lambda t: _AUTH_HEADER.sub(_auth_header, t),
    lambda t: _sub_group(_SCHEME, t, 1),
    _assign,
    lambda t: _FLAG.sub(_flag, t),
    lambda t: _PROGRAM_FLAG.sub(_program_flags, t),
    lambda t: _HTPASSWD.sub(_htpasswd, t),
    lambda t: _sub_group(_ORACLE_TEXT, t, 1),
    _netrc,
    lambda t: _sub_group(_PGPASS, t, 1),
    *[(lambda t, p=p: _sub_group(p, t, 1)) for p in _SPECIAL],
    lambda t: _URL.sub(_url_path, t),
    lambda t: _RUN.sub(_run, t),
]


def scrub_free_text(text: str, detector: bool = True) -> str:
    """Text with every part that could be a credential replaced by `<redacted len=N>` (detector:
    whether detect-secrets may be asked; a value already shown harmless by shape is checked without)."""
    if not text:
        return text
    for step in _STEPS:
        if detector or step is not _detect:
            text = step(text)
    return text
