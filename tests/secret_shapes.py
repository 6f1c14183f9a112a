"""Secret shapes and the places text can carry them, shared by the redaction tests.

SHAPES: (label, a concrete secret, the part that must never be shown). BODIES: a hypothesis strategy
per shape that draws fresh secrets of that shape, so the property tests do not only see the examples.
PLACES: how a secret reaches regdiag (an env value, an argv token, a URL, a stderr line, ...).
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
HEX = "0123456789abcdef"


def _s(alphabet: str, n: int, m: int | None = None) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=n, max_size=m or n)


def _with_digit(s: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return s.map(lambda x: x[:-1] + "7")


# label -> (example, strategy of secrets of that shape)
_TABLE: dict[str, tuple[str, st.SearchStrategy[str]]] = {
    "huggingface": ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123", _s(ALNUM, 30).map(lambda b: "hf_" + b)),
    "huggingface org": ("api_org_AbCdEfGhIjKlMnOpQrStUvWx", _s(ALNUM, 28).map(lambda b: "api_org_" + b)),
    "github classic": ("ghp_0123456789abcdefghijABCDEFGHIJ0123", _s(ALNUM, 36).map(lambda b: "ghp_" + b)),
    "github oauth": ("gho_0123456789abcdefghijABCDEFGHIJ0123", _s(ALNUM, 36).map(lambda b: "gho_" + b)),
    "github fine-grained": (
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        _s(ALNUM + "_", 60).map(lambda b: "github_pat_" + b),
    ),
    "gitlab pat": ("glpat-abcdefghij1234567890", _s(ALNUM + "-_", 20).map(lambda b: "glpat-" + b)),
    "gitlab trigger": ("glptt-0123456789abcdef0123456789abcdef", _s(HEX, 40).map(lambda b: "glptt-" + b)),
    "gitlab runner": ("glrt-AbCdEf0123456789AbCd", _s(ALNUM, 20).map(lambda b: "glrt-" + b)),
    "openai": ("sk-AbCdEf0123456789AbCdEf0123456789", _s(ALNUM, 40).map(lambda b: "sk-" + b)),
    "openai project": (
        "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789AB",
        _s(ALNUM + "_-", 48).map(lambda b: "sk-proj-" + b),
    ),
    "anthropic": (
        "sk-ant-api03-QwErTy0123456789QwErTy0123456789",
        _s(ALNUM, 40).map(lambda b: "sk-ant-api03-" + b),
    ),
    "aws access key id": (
        "AKIAIOSFODNN7EXAMPLE",
        _s("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16).map(lambda b: "AKIA" + b),
    ),
    "aws session key id": (
        "ASIAY34FZKBOKMUTVV7A",
        _s("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16).map(lambda b: "ASIA" + b),
    ),
    "google api key": (
        "AIzaSyA1234567890abcdefghijklmnopqrstuv",
        _s(ALNUM + "_-", 35).map(lambda b: "AIza" + b),
    ),
    "slack bot": ("xoxb-1234567890-abcdefghijkl", _s(ALNUM, 24).map(lambda b: "xoxb-1234-" + b)),
    "slack app": ("xapp-1-A0123456789-abcdefghij", _s(ALNUM, 24).map(lambda b: "xapp-1-" + b)),
    "stripe live": ("sk_live_0123456789abcdefABCDEF", _s(ALNUM, 24).map(lambda b: "sk_live_" + b)),
    "stripe restricted": ("rk_test_0123456789abcdefABCDEF", _s(ALNUM, 24).map(lambda b: "rk_test_" + b)),
    "pypi": (
        "pypi-AgEIcHlwaS5vcmcCJDEyMzQ1Njc4LTEyMzQtMTIzNC0xMjM0LTEyMzQ1Njc4OTAxMg",
        _s(ALNUM, 60).map(lambda b: "pypi-" + b),
    ),
    "npm": ("npm_abcdefghijklmnopqrstuvwxyz0123456789", _s(ALNUM, 36).map(lambda b: "npm_" + b)),
    "replicate": ("r8_AbCdEf0123456789AbCdEf0123456789ab", _s(ALNUM, 37).map(lambda b: "r8_" + b)),
    "wandb v1": ("wandb_v1_AbCdEf0123456789AbCdEf0123", _s(ALNUM, 30).map(lambda b: "wandb_v1_" + b)),
    "databricks": ("dapi0123456789abcdef0123456789abcdef", _s(HEX, 32).map(lambda b: "dapi" + b)),
    "databricks suffixed": (
        "dapi0123456789abcdef0123456789abcdef-2",
        _s(HEX, 32).map(lambda b: "dapi" + b + "-3"),
    ),
    "digitalocean": ("dop_v1_" + "ab12" * 16, _s(HEX, 64).map(lambda b: "dop_v1_" + b)),
    "sendgrid": (
        "SG.abcdefghijklmnopqrstuv.ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefg",
        st.tuples(_s(ALNUM, 22), _s(ALNUM, 43)).map(lambda t: f"SG.{t[0]}.{t[1]}"),
    ),
    "groq": ("gsk_AbCdEf0123456789AbCdEf0123456789", _s(ALNUM, 40).map(lambda b: "gsk_" + b)),
    "perplexity": ("pplx-AbCdEf0123456789AbCdEf0123456789", _s(ALNUM, 40).map(lambda b: "pplx-" + b)),
    "shopify": ("shpat_0123456789abcdef0123456789abcdef", _s(HEX, 32).map(lambda b: "shpat_" + b)),
    "jwt": (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFU",
        st.tuples(_s(ALNUM, 10, 30), _s(ALNUM, 10, 30), _s(ALNUM, 10, 40)).map(
            lambda t: f"eyJ{t[0]}.eyJ{t[1]}.{t[2]}"
        ),
    ),
    "private key block": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpQIBAAKCAQEAsecretbody\n-----END RSA PRIVATE KEY-----",
        _s(ALNUM, 20, 60).map(lambda b: f"-----BEGIN PRIVATE KEY-----\nMII{b}\n-----END PRIVATE KEY-----"),
    ),
    "bearer": ("Bearer abc123def456ghi789jkl", _with_digit(_s(ALNUM, 20, 40)).map(lambda b: "Bearer " + b)),
    "basic auth": (
        "Basic dXNlcjpwYXNzd29yZDEyMw==",
        _with_digit(_s(ALNUM, 16, 40)).map(lambda b: "Basic " + b + "=="),
    ),
    "url password": (
        "https://alice:pa55word99@bucket.example.com/models",
        st.tuples(_s(ALNUM, 3, 10), _s(ALNUM, 8, 30)).map(lambda t: f"https://{t[0]}:{t[1]}@h.example.com/x"),
    ),
    "url token user": (
        "https://ghtok0123456789zz@github.com/x.git",
        _s(ALNUM, 12, 30).map(lambda b: f"git+https://{b}@gitlab.example.com/a/b.git"),
    ),
    "redis url": (
        "redis://:redispass123@cache.internal:6379/0",
        _s(ALNUM, 8, 20).map(lambda b: f"redis://:{b}@c:6379/0"),
    ),
    "azure storage": (
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFyYmF6cXV4+/Zm9vYmFy==;EndpointSuffix=core",
        _s(ALNUM + "+/", 40, 88).map(
            lambda b: f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={b}==;X=y"
        ),
    ),
    "azure service bus": (
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=c2VjcmV0a2V5MTIz=",
        _s(ALNUM + "+/", 40, 60).map(
            lambda b: f"Endpoint=sb://n/;SharedAccessKeyName=r;SharedAccessKey={b}="
        ),
    ),
    "azure sas": (
        "https://acct.blob.core.windows.net/c?sv=2022-11-02&sig=AbCdEf0123456789%2FxYz%3D",
        _s(ALNUM + "%", 20, 50).map(lambda b: f"https://a.blob.core.windows.net/c?sv=2022&sig={b}"),
    ),
    "key=value": ("api_key=k3yk3yk3yk3y", _s(ALNUM, 12, 30).map(lambda b: "api_key=" + b)),
    "password json": ('"password": "s3cr3t-value-x"', _s(ALNUM, 10, 30).map(lambda b: f'"password": "{b}"')),
    "token flag": ("--hf-token s3cr3tvalue0123", _s(ALNUM, 12, 30).map(lambda b: "--hf-token x" + b)),
    "odbc pwd": (
        "Server=db;Uid=sa;Pwd=Tr0ub4dor3xyz;",
        _s(ALNUM, 10, 30).map(lambda b: f"Server=db;Pwd={b};"),
    ),
}

SHAPES: list[tuple[str, str]] = [(label, ex) for label, (ex, _) in _TABLE.items()]
LABELS = list(_TABLE)


def body(label: str) -> st.SearchStrategy[str]:
    return _TABLE[label][1]


def core(secret: str) -> str:
    """The part of a planted secret that must not be shown (what follows the shape's fixed prefix)."""
    for sep in (
        "AccountKey=",
        "SharedAccessKey=",
        "sig=",
        "Pwd=",
        '"password": "',
        "api_key=",
        "--hf-token ",
    ):
        if sep in secret:
            return secret.split(sep, 1)[1].strip('";')[:12]
    if "://" in secret and "@" in secret:
        return secret.split("://", 1)[1].split("@", 1)[0].split(":")[-1][:12]
    if secret.startswith(("Bearer ", "Basic ")):
        return secret.split(" ", 1)[1][:12]
    if secret.startswith("-----BEGIN"):
        return secret.split("\n")[1][:12]
    return secret[-12:]


# How a secret reaches regdiag. Each takes the secret and returns the text as regdiag would see it.
PLACES: dict[str, Callable[[str], str]] = {
    "alone": lambda s: s,
    "in a sentence": lambda s: f"server said: {s} (retrying)",
    "after a flag": lambda s: f"--extra {s} --threads 4",
    "in quotes": lambda s: f"'{s}'",
    "in json": lambda s: '{"x": "' + s.replace("\n", "\\n") + '"}',
    "on a stderr line": lambda s: f"Traceback...\nValueError: bad {s}\n",
}
