"""Keep secrets out of records, logs and the screen: the one scrubber every sink calls.

Default-deny for values. A value (an environment variable, an argv token, a value in decoded JSON
under a credential name) is kept verbatim only when regdiag.snapshot.shapes shows it harmless by its
shape: a number, a bool, a short enum word, a version, a commit hash in a commit field, a path or URL
without credentials, a device list, or a short low-entropy token under a performance family. Any
other value becomes a keyed hash with its length, `hmac-sha256:<16 hex>:len=N` (regdiag.snapshot.
keyedhash), so `diff` and `bisect` still see "changed"; nothing of it stays readable. Without a usable
key (a sink outside `snapshot`, whose own key errors stop it) it is `<redacted len=N>`.

Free text (stderr and stdout tails, error lines, server info, commit subjects, journal strings) is
scrubbed by regdiag.snapshot.freetext: blocks, provider tokens (detect-secrets' plugins when it is
installed), URL and assignment credentials, and every word that could be a generated secret.

Which function for which sink (docs/redaction.md lists the rules):
  redact_env(env)        a mapping of variables (snapshot env group, probe headers' env)
  redact_value(name, v)  one variable
  redact_argv(argv)      a command line kept as tokens (launch_cmd, --pid cmdline, build logs)
  redact_tree(obj)       any decoded JSON (server info, journal lines): by key name, then as text
  scrub_record(rec)      a record or a launch of one, every string field (header config and labels,
                         footer, teardown, importer labels and commands, range names): numbers kept
  redact_spec(text)      a bisect/ab side's spec string: each NAME=VALUE as redact_value has it
  scrub_text(text)       free text
  scrub_lines(lines)     a tail of lines, scrubbed as one text (a PEM block spans lines)

Standard library only (detect-secrets is optional).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterable
from typing import Any

from regdiag.snapshot import keyedhash
from regdiag.snapshot.freetext import (
    ATTACHED_FLAGS,
    CREDENTIAL_FLAGS,
    ORACLE,
    ORACLE_LOGIN,
    marker,
    scrub_free_text,
)
from regdiag.snapshot.known import known_kind
from regdiag.snapshot.shapes import (
    BOOLEANS,
    DIGEST,
    NUMBER,
    credential_name,
    harmless_value,
    hash_name,
    split_part,
)

REDACTED = "<redacted>"
_NO_KEY = b""
_SPACE = re.compile(r"\s")
_MYSQL = frozenset({"mysql", "mysqladmin", "mysqldump", "mariadb"})
_PASSWORD_SHORT_FLAGS = frozenset({"p", "P"})
_USER_FLAGS = frozenset({"u", "user"})


def is_sensitive_name(name: str) -> bool:
    """The name says its value is a credential (regdiag.snapshot.shapes.credential_name)."""
    return credential_name(name)


def is_harmless_scalar(value: str) -> bool:
    """A bool or a plain number of at most 10 characters."""
    v = value.strip()
    return bool(v) and (v.lower() in BOOLEANS or (len(v) <= 10 and NUMBER.fullmatch(v) is not None))


def is_hidden(value: object) -> bool:
    """A value this module replaced: a keyed hash or a `<redacted...>` marker."""
    return isinstance(value, str) and (value.startswith("<redacted") or keyedhash.is_hashed(value))


def default_key() -> bytes | None:
    """The hash key for sinks outside `snapshot`; None when it cannot be used (they then redact)."""
    try:
        return keyedhash.load_key()
    except (OSError, keyedhash.KeyFileError):
        return None


def hidden(name: str, value: str, key: bytes | None = None) -> str:
    """The value as recorded when it is not shown harmless: its keyed hash and length."""
    k = default_key() if key is None else key
    if not k:
        return marker(value)
    return f"{keyedhash.keyed_hash(k, name, value)}:len={len(value)}"


def scrub_text(text: str) -> str:
    """Free text with every part that could be a credential replaced by `<redacted len=N>`."""
    return scrub_free_text(text)


def scrub_lines(lines: Iterable[str]) -> list[str]:
    """A tail of lines scrubbed as one text (a private key spans lines), split back into lines."""
    joined = "\n".join(line.rstrip("\n") for line in lines)
    return scrub_free_text(joined).split("\n") if joined else []


def redact_value(name: str, value: str, key: bytes | None = None) -> tuple[str, bool]:
    """(value to keep, whether it was hidden) for one variable: verbatim only when harmless."""
    if _harmless(name, value):
        return value, False
    return hidden(name, value, key), True


def _harmless(name: str, value: str, loose: bool = False) -> bool:
    """Harmless by shape or of a known harmless kind (regdiag.snapshot.known), with no token shape inside
    (xoxb-1234567890-abcdefghijkl reads as words) and, for a command line, no credential after a flag
    that takes one (`redis-cli -a PW` in a VLLM_* value). JSON is judged field by field."""
    if hash_name(name) and DIGEST.fullmatch(value.strip()):
        return True  # VLLM_COMMIT=<sha>, TRITON_CACHE_KEY=<sha256>: alone, a hex word would read as a token
    if not credential_name(name) and _json_harmless(value):
        return True
    shaped = harmless_value(name, value, loose) or (not credential_name(name) and known_kind(value))
    return shaped and scrub_free_text(value, detector=False) == value and _command_clean(value)


def _command_clean(value: str) -> bool:
    if not _SPACE.search(value.strip()):
        return True
    try:
        tokens = shlex.split(value)
    except ValueError:
        return False
    return redact_argv(tokens, _NO_KEY) == tokens


def _json_harmless(value: str) -> bool:
    """A JSON object or list (vLLM's --speculative-config) whose every field is harmless by its name and
    value; the text is kept as it is then."""
    v = value.strip()
    if not v.startswith(("{", "[")) or len(v) > 8192:
        return False
    try:
        obj = json.loads(v)
    except ValueError:
        return False

    def ok(o: Any, key: str) -> bool:
        if isinstance(o, dict):
            return all(isinstance(k, str) and not credential_name(k) and ok(x, k) for k, x in o.items())
        if isinstance(o, list):
            return all(ok(x, key) for x in o)
        if isinstance(o, str):
            return o == "" or _harmless(key or "value", o, loose=True)
        return True  # numbers, booleans, null

    return ok(obj, "")


def split_secrets(env: dict[str, str]) -> set[str]:
    """Names of the parts of a value split over variables (X_PART1 + X_PART2, DB_PASS_1 + DB_PASS_2)
    whose joined value, judged under the parts' common name, is not harmless: each part is hidden,
    though each alone may look like a word."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for name in env:
        part = split_part(name)
        if part is not None:
            groups.setdefault(part[0], []).append((part[1], name))
    out: set[str] = set()
    for base, parts in groups.items():
        if len(parts) >= 2:
            names = [n for _, n in sorted(parts)]
            if not _harmless(base, "".join(env[n] for n in names)):
                out.update(names)
    return out


def redact_env(env: dict[str, str], key: bytes | None = None) -> tuple[dict[str, str], list[str]]:
    """Redact a mapping of variables: (kept values, sorted names whose value was hidden)."""
    k = default_key() if key is None else key
    split = split_secrets(env)
    kept: dict[str, str] = {}
    redacted: list[str] = []
    for name in sorted(env):
        if name in split:
            value, changed = hidden(name, env[name], k or _NO_KEY), True
        else:
            value, changed = redact_value(name, env[name], k or _NO_KEY)
        kept[name] = value
        if changed:
            redacted.append(name)
    return kept, redacted


_TREE_ARGV_KEYS = frozenset({"argv", "cmdline", "launch_cmd", "args", "command_line"})
_VALUE_KEYS = frozenset({"value", "good", "bad"})
# regdiag's own identifiers in its records and journals: an environment's key, a point's, a run's, a
# commit, a build id. Kept as they are when they are hex (an id that the scrubber would hide as a token
# is one that `--resume` and the user's `ls $REGDIAG_HOME/envs` must still find), as is hex under a
# name that says commit or digest (engine.commit, commit_id, sha256, TRITON_CACHE_KEY). Elsewhere a
# bare 40- or 64-hex value is a token (a GitHub classic token is 40 hex).
_ID_KEYS = frozenset(
    {"env", "point", "id", "run_id", "commit", "sha", "head", "good", "bad", "base", "build_id"}
)
_HEX_ID = re.compile(r"[0-9a-f]{6,64}|[0-9A-F]{40}|[0-9A-F]{64}")


def _id_value(key: str, value: str) -> bool:
    return (key in _ID_KEYS or hash_name(key)) and _HEX_ID.fullmatch(value) is not None


def _child(parent: str, key: Any) -> str:
    """The name a dict's entry is judged under: its key, or for a field's `value` (a snapshot field
    `{"status": "ok", "value": ...}`) the field's own name (engine.commit's value is a commit)."""
    return parent if key == "value" and parent else str(key)


def redact_tree(obj: Any, key: str = "", hkey: bytes | None = None) -> Any:
    """A copy of decoded JSON with secrets out: a value under a credential name is hidden (a
    `{"name": VAR, "value"/"good"/"bad": ...}` pair by VAR), an argv list token by token, every other
    string scrubbed as free text."""
    if isinstance(obj, dict):
        named = obj.get("name")
        if isinstance(named, str) and (credential_name(named) or hash_name(named)):
            return {k: redact_tree(v, named if k in _VALUE_KEYS else str(k), hkey) for k, v in obj.items()}
        return {k: redact_tree(v, _child(key, k), hkey) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if key in _TREE_ARGV_KEYS and all(isinstance(v, str) for v in obj):
            return redact_argv(list(obj), hkey)
        return [redact_tree(v, key, hkey) for v in obj]
    if key and credential_name(key) and not isinstance(obj, bool) and obj is not None:
        text = str(obj)
        return obj if text.lower() in BOOLEANS else hidden(key, text, hkey or default_key() or _NO_KEY)
    if isinstance(obj, str):
        if _id_value(key, obj):
            return obj
        return scrub_free_text(obj)
    return obj  # numbers, booleans, null


def _token(name: str, tok: str, key: bytes) -> str:
    """One argv value judged under its option or variable name (default-deny, text as text)."""
    if _harmless(name, tok) or (not credential_name(name) and _harmless(name, tok, loose=True)):
        return tok
    if not credential_name(name) and _SPACE.search(tok):
        return scrub_free_text(tok)  # a shell snippet or a sentence (`-c "import sys; ..."`): text
    return hidden(name or "argv", tok, key)


def _flag_value(prog: str, flag: str, tok: str, key: bytes) -> str:
    name = flag.lstrip("-")
    if flag in CREDENTIAL_FLAGS.get(prog, ()) and prog not in ("docker", "podman"):  # (-p: a port too)
        return hidden(name, tok, key)  # redis-cli -a, curl -U, openssl -k, ldapsearch -w, ipmitool -P
    if credential_name(name) or (name in _PASSWORD_SHORT_FLAGS and prog in _MYSQL | {"sshpass"}):
        return tok if tok.lower() in BOOLEANS else hidden(name, tok, key)
    if name in _PASSWORD_SHORT_FLAGS and not re.fullmatch(r"\d{1,5}", tok):
        return hidden(name, tok, key)  # -p is a port for most programs, a password for some
    if name in _USER_FLAGS and ":" in tok:
        return hidden(name, tok, key)  # curl -u user:password
    return _token(name, tok, key)


# A program a command line runs after another (`timeout 60 curl -U u:pw`, `sudo -E mysql -pX`, `srun
# openssl ... -k PW`, `a && htpasswd -b f u PW`): its flags are read as that program's.
_PROGRAMS = frozenset(CREDENTIAL_FLAGS) | _MYSQL | ORACLE | {"sshpass", "htpasswd"}
_SEPARATORS = frozenset({";", "&&", "||", "|", "&"})
_HTPASSWD_VALUE_FLAGS = frozenset({"-C", "-r"})  # bcrypt cost, rounds: the only htpasswd flags with a value


def _htpasswd_passwords(argv: list[str]) -> set[int]:
    """Where `htpasswd -b [-c] FILE USER PASSWORD` (`-nb USER PASSWORD`) has its password, each run of it."""
    out: set[int] = set()
    for i, tok in enumerate(argv):
        if os.path.basename(tok) != "htpasswd":
            continue
        letters, positionals, skip = "", 0, False
        for j in range(i + 1, len(argv)):
            t = argv[j]
            if skip or t in _SEPARATORS:
                if t in _SEPARATORS:
                    break
                skip = False
            elif t.startswith("-") and len(t) > 1 and not positionals:
                letters += t[1:]
                skip = t in _HTPASSWD_VALUE_FLAGS
            else:
                positionals += 1
                if "b" in letters and positionals == (2 if "n" in letters else 3):
                    out.add(j)
                    break
    return out


def _oracle_login(tok: str, key: bytes) -> str | None:
    """`scott/tiger@//db:1521/ORCL` as sqlplus takes it: the user and the connect string kept."""
    m = ORACLE_LOGIN.fullmatch(tok)
    if m is None:
        return None
    return f"{m.group(1)}/{hidden('password', m.group(2), key)}{m.group(3) or ''}"


def redact_argv(argv: list[str], key: bytes | None = None) -> list[str]:
    """A command line fit for a record, token by token: flag values judged under the flag's name (the
    flags of the program that takes them, wherever it starts on the line), NAME=value under NAME,
    positionals by shape; `sshpass -p X`, `mysql -pX`, `curl -Uu:pw`, `sqlplus u/pw@db`, `htpasswd -b F U
    PW` and `login TOKEN` hidden."""
    k = (default_key() if key is None else key) or _NO_KEY
    out: list[str] = []
    pending: str | None = None
    prog = ""
    passwords = _htpasswd_passwords(argv)
    for i, tok in enumerate(argv):
        base = os.path.basename(tok)
        if i == 0 or argv[i - 1] in _SEPARATORS or (
            prog in ("env", "sudo") and pending is None and not tok.startswith("-") and "=" not in tok
        ):
            prog = base  # `sudo mysql -pX`, `env A=1 sshpass -p X`, `a && b`: the program after it
        elif base in _PROGRAMS and not tok.startswith("-"):
            prog, pending = base, None  # `timeout 60 curl ...`, `sudo -E mysql ...`: a program, no value
        if pending is not None and not (tok.startswith("-") and len(tok) > 1 and not NUMBER.fullmatch(tok)):
            out.append(_flag_value(prog, pending, tok, k))
            pending = None
            continue
        pending = None
        opt, eq, value = tok.partition("=")
        attached = prog in ATTACHED_FLAGS and len(tok) > 2 and tok[:2] in CREDENTIAL_FLAGS[prog]
        if attached or (prog in _MYSQL and tok.startswith("-p") and len(tok) > 2):
            out.append(tok[:2] + hidden(tok[1], tok[2:], k))  # curl -Uu:pw, mysql -pPW
        elif re.fullmatch(r"--?[A-Za-z0-9][\w.-]*", opt) and not NUMBER.fullmatch(tok):
            if eq:
                out.append(f"{opt}={_flag_value(prog, opt, value, k)}")
            else:
                out.append(tok)
                pending = opt
        elif tok in _SEPARATORS:
            out.append(tok)
        elif i in passwords:
            out.append(hidden("htpasswd", tok, k))  # htpasswd -b FILE USER PASSWORD
        elif prog in ORACLE and (login := _oracle_login(value if opt.lower() == "userid" else tok, k)):
            out.append(f"{opt}={login}" if opt.lower() == "userid" and eq else login)
        elif eq and opt.isidentifier():
            out.append(f"{opt}={redact_value(opt, value, k)[0]}")
        elif i > 0 and argv[i - 1] == "login":
            out.append(hidden("login", tok, k))
        else:
            out.append(_token("", tok, k) if i > 0 else scrub_free_text(tok))
    return out


_NUMBERS = (int, float)


def scrub_record(obj: Any, key: str = "", hkey: bytes | None = None) -> Any:
    """A copy of a record (or a launch, a header) with every string through the one scrubber: a value
    under a credential name hidden, an argv list token by token, every other string as free text.
    Numbers stay numbers (a sample's list is passed as it is), and a value already hidden is kept."""
    if hkey is None:
        hkey = default_key() or _NO_KEY
    if isinstance(obj, dict):  # keys too: a metric named after an nsys range, a label's name
        return {_key(k): scrub_record(v, _child(key, k), hkey) for k, v in obj.items()}
    if isinstance(obj, list):
        if all(isinstance(v, _NUMBERS) for v in obj):
            return obj
        if key in _TREE_ARGV_KEYS and all(isinstance(v, str) for v in obj):
            return redact_argv(list(obj), hkey)
        return [scrub_record(v, key, hkey) for v in obj]
    if isinstance(obj, str):
        if is_hidden(obj) or _id_value(key, obj):
            return obj
        if key and credential_name(key):
            return obj if obj.lower() in BOOLEANS else hidden(key, obj, hkey)
        return scrub_free_text(obj)
    return obj


def _key(k: Any) -> Any:
    return scrub_free_text(k) if isinstance(k, str) and len(k) >= 14 else k


def redact_spec(text: str, key: bytes | None = None) -> str:
    """A side's spec ('pkg==1.2 NAME=VALUE -NAME commit=REV') with each variable's value as redact_value
    keeps it (default-deny, as the screen shows it); a spec that is not one (a file name) as free text."""
    try:
        tokens = shlex.split(text)
    except ValueError:
        return scrub_free_text(text)
    k = (default_key() if key is None else key) or _NO_KEY
    out = []
    for tok in tokens:
        name, eq, value = tok.partition("=")
        if eq and not value.startswith("=") and name != "commit" and name.isidentifier():
            tok = f"{name}={redact_value(name, value, k)[0]}"
        else:
            tok = scrub_free_text(tok)
        out.append(tok)
    return shlex.join(out) if out != tokens else text
