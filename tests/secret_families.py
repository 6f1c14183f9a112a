"""Secret shapes generated from families, and harmless values that must stay exact.

A family is a template with random parts: each call draws a fresh secret from a `random.Random`, so
no test sees a fixed list of literals (hypothesis drives the same generators through `st.randoms`).

FAMILIES: label -> generator(rng) -> Planted(kind, name, value, core)
  kind "value": `value` is what a variable holds (planted as NAME=value, or as text after `name=`)
  kind "argv":  `value` is a command line (tokens joined by spaces; `argv` splits it)
  kind "text":  `value` is free text as a program prints it (may span lines)
  core: the part that must never be shown, verbatim.
HARMLESS: label -> generator(rng) -> (name, value): kept exactly by every sink.
"""

from __future__ import annotations

import random
import shlex
import string
from collections.abc import Callable
from dataclasses import dataclass

ALNUM = string.ascii_letters + string.digits
LOWER = string.ascii_lowercase + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"


@dataclass(frozen=True)
class Planted:
    kind: str
    name: str
    value: str
    core: str

    def argv(self) -> list[str]:
        return shlex.split(self.value)


def _r(rng: random.Random, alphabet: str, n: int) -> str:
    # Random, and never a run of one character (the entropy test would rightly call that harmless).
    while True:
        s = "".join(rng.choice(alphabet) for _ in range(n))
        if len(set(s)) >= min(n, 6):
            return s


def _word(rng: random.Random) -> str:
    return rng.choice(["alpha", "bravo", "delta", "kilo", "oscar", "tango", "zulu", "echo", "lima"])


def _prefixed(prefix: str, alphabet: str, n: int) -> Callable[[random.Random], Planted]:
    def gen(rng: random.Random) -> Planted:
        body = _r(rng, alphabet, n)
        return Planted("value", "", prefix + body, body[-14:])

    return gen


def _webhook(template: str) -> Callable[[random.Random], Planted]:
    def gen(rng: random.Random) -> Planted:
        body = _r(rng, ALNUM, 32)
        return Planted("value", "", template.format(n=rng.randrange(10**9, 10**10), b=body), body[-14:])

    return gen


def _presigned(param: str) -> Callable[[random.Random], Planted]:
    def gen(rng: random.Random) -> Planted:
        sig = _r(rng, HEX, 64) if "Amz" in param or "Goog" in param else _r(rng, ALNUM, 30) + "%3D"
        url = f"https://bucket-{_word(rng)}.example.com/models/w.bin?X-Date=20260101&{param}={sig}&v=2"
        return Planted("value", "", url, sig[:14])

    return gen


def _block(kind: str) -> Callable[[random.Random], Planted]:
    def gen(rng: random.Random) -> Planted:
        lines = [_r(rng, B64, 64) for _ in range(rng.randrange(2, 5))] + [_r(rng, B64, 20) + "=="]
        head = "Version: GnuPG v2\n\n" if "PGP" in kind else ""
        tail = f"\n={_r(rng, B64, 4)}" if "PGP" in kind else ""
        text = f"-----BEGIN {kind}-----\n{head}" + "\n".join(lines) + f"{tail}\n-----END {kind}-----"
        return Planted("text", "", f"loading key\n{text}\ndone", lines[0][10:24])

    return gen


def _named(name: str, make: Callable[[random.Random], str]) -> Callable[[random.Random], Planted]:
    def gen(rng: random.Random) -> Planted:
        v = make(rng)
        return Planted("value", name, v, v)

    return gen


def _argv(template: str, make: Callable[[random.Random], str]) -> Callable[[random.Random], Planted]:
    def gen(rng: random.Random) -> Planted:
        v = make(rng)
        return Planted("argv", "", template.format(v=shlex.quote(v)), v)

    return gen


def _url_password(template: str) -> Callable[[random.Random], Planted]:
    def gen(rng: random.Random) -> Planted:
        pw = _r(rng, ALNUM, 6) + "/" + _r(rng, ALNUM, 7)
        return Planted("value", "", template.format(u=_word(rng), p=pw), pw)

    return gen


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


def _password(rng: random.Random) -> str:
    return _r(rng, ALNUM, rng.randrange(8, 14)) + rng.choice("!#%^*")


def _passphrase(rng: random.Random) -> str:
    return " ".join(_word(rng) + _word(rng) for _ in range(4))


def _digits(rng: random.Random) -> str:
    return str(rng.randrange(10**7, 10**10))


def _word_pw(rng: random.Random) -> str:
    """A password of a word and digits, which alone reads as a harmless word (Falcon4417)."""
    return _word(rng).title() + str(rng.randrange(10, 9999))


def _hex40(rng: random.Random) -> str:
    return _r(rng, HEX, 40)


FAMILIES: dict[str, Callable[[random.Random], Planted]] = {
    # provider prefixes
    "xai": _prefixed("xai-", ALNUM, 48),
    "nvapi": _prefixed("nvapi-", ALNUM + "-_", 64),
    "langsmith pt": _prefixed("lsv2_pt_", LOWER, 40),
    "langsmith sk": _prefixed("lsv2_sk_", LOWER, 40),
    "docker pat": _prefixed("dckr_pat_", ALNUM + "-_", 27),
    "vault service": _prefixed("hvs.", ALNUM + "_-", 90),
    "vault batch": _prefixed("hvb.", ALNUM + "_-", 90),
    "google oauth access": _prefixed("ya29.", ALNUM + "_-", 100),
    "google oauth client secret": _prefixed("GOCSPX-", ALNUM + "_-", 28),
    "openai project": _prefixed("sk-proj-", ALNUM + "_-", 64),
    "anthropic": _prefixed("sk-ant-api03-", ALNUM + "_-", 80),
    "github classic": _prefixed("ghp_", ALNUM, 36),
    "github server": _prefixed("ghs_", ALNUM, 36),
    "github fine-grained": _prefixed("github_pat_", ALNUM + "_", 82),
    "gitlab": _prefixed("glpat-", ALNUM + "-_", 20),
    "huggingface": _prefixed("hf_", ALNUM, 34),
    "aws key id": _prefixed("AKIA", string.ascii_uppercase + "234567", 16),
    "aws session id": _prefixed("ASIA", string.ascii_uppercase + "234567", 16),
    "slack bot": _prefixed("xoxb-1234567890-", ALNUM, 24),
    "slack user": _prefixed("xoxp-2345678901-", ALNUM, 32),
    "stripe": _prefixed("sk_live_", ALNUM, 24),
    "pypi": _prefixed("pypi-AgEIcHlwaS5vcmc", ALNUM + "_-", 60),
    "npm": _prefixed("npm_", ALNUM, 36),
    "replicate": _prefixed("r8_", ALNUM, 37),
    "databricks": _prefixed("dapi", HEX, 32),
    "groq": _prefixed("gsk_", ALNUM, 52),
    "google api key": _prefixed("AIza", ALNUM + "_-", 35),
    "jwt": lambda rng: Planted(
        "value",
        "",
        f"eyJ{_r(rng, ALNUM, 20)}.eyJ{_r(rng, ALNUM, 30)}.{(s := _r(rng, ALNUM + '_-', 43))}",
        s[:14],
    ),
    "generic base64": _prefixed("", B64, 40),
    "generic hex 32": _prefixed("", HEX, 32),
    # chat webhooks
    "slack webhook": _webhook("https://hooks.slack.com/services/T{n}/B{n}/{b}"),
    "discord webhook": _webhook("https://discord.com/api/webhooks/{n}/{b}"),
    "teams webhook": _webhook("https://acme.webhook.office.com/webhookb2/{b}@{n}/IncomingWebhook/{b}"),
    "telegram bot": _webhook("https://api.telegram.org/bot{n}:{b}AAE/sendMessage"),
    # presigned URL signatures
    "s3 presigned": _presigned("X-Amz-Signature"),
    "gcs signed": _presigned("X-Goog-Signature"),
    "azure sas": _presigned("sig"),
    # key blocks (multi-line)
    "rsa pem": _block("RSA PRIVATE KEY"),
    "ec pem": _block("EC PRIVATE KEY"),
    "openssh key": _block("OPENSSH PRIVATE KEY"),
    "pgp private key": _block("PGP PRIVATE KEY BLOCK"),
    "encrypted pem": _block("ENCRYPTED PRIVATE KEY"),
    # variable names that hold passwords
    "PGPASSWORD": _named("PGPASSWORD", _password),
    "MYSQL_PWD": _named("MYSQL_PWD", _password),
    "SSHPASS": _named("SSHPASS", _password),
    "CR_PAT": _named("CR_PAT", lambda rng: _r(rng, ALNUM, 20)),
    "LDAP_BINDPW": _named("LDAP_BINDPW", _password),
    "SLURM_JWT": _named("SLURM_JWT", _password),  # under SLURM_, a family whose tokens are kept
    "numeric password": _named("MYSQL_ROOT_PASSWORD", _digits),
    "passphrase with spaces": _named("BACKUP_PASSPHRASE", _passphrase),
    "gcp private_key_id": _named("GCP_PRIVATE_KEY_ID", lambda rng: _r(rng, HEX, 40)),
    "aws secret": _named("AWS_SECRET_ACCESS_KEY", lambda rng: _r(rng, B64, 40)),
    "short word under a token name": _named("WANDB_API_KEY", lambda rng: _word(rng) + _word(rng)),
    # argv forms
    "sshpass -p": _argv("sshpass -p {v} ssh gpu-node7 nvidia-smi", _password),
    "-p after mysql": _argv("mysql -u root -p {v} -h db", _password),
    "--pwd": _argv("tool --pwd {v} --verbose", _password),
    "--accessToken": _argv("client --accessToken {v} --region us", lambda rng: _r(rng, ALNUM, 24)),
    "--clientSecret": _argv("client --clientSecret {v}", _password),
    "--api_key": _argv("serve --api_key {v} --port 8000", _password),
    "-u user:pw": _argv("curl -u alice:{v} https://mirror.example.com/x", _password),
    "wandb login": _argv("wandb login {v}", _hex40),
    "--password=": _argv("tool --password={v} --x 1", _password),
    "numeric --pin": _argv("tool --pin {v}", _digits),
    # URL passwords
    "postgres url /": _url_password("postgres://{u}:{p}@db.internal:5432/app"),
    "mongodb srv /": _url_password("mongodb+srv://{u}:{p}@cluster0.example.net/db"),
    "redis url /": _url_password("redis://:{p}@cache.internal:6379/0"),
    "https url /": _url_password("https://{u}:{p}@mirror.example.com/simple"),
    "url password with @": lambda rng: Planted(
        "value", "", f"postgresql://app:{(p := _r(rng, ALNUM, 5) + '@' + _r(rng, ALNUM, 6))}@db/x", p
    ),
    "sentry dsn": lambda rng: Planted(
        "value", "", f"https://{(k := _r(rng, HEX, 32))}@o{rng.randrange(10**5)}.ingest.sentry.io/42", k
    ),
    "docker login -p": _argv("docker login -u me -p {v} registry.example.com", _password),
    "basic auth header": lambda rng: Planted(
        "text", "", f"Authorization: Basic {(b := _b64(_word(rng) + ':' + _password(rng)))}", b[:14]
    ),
    "netrc line": lambda rng: Planted(
        "text", "", f"machine h.example.com login me password {(p := _password(rng))}", p
    ),
    "yaml api_key": lambda rng: Planted("text", "", f"api_key: {(w := _word(rng) + _word(rng))}", w),
    "ssh host spec": lambda rng: Planted("value", "", f"admin:{(p := _password(rng))}@gpu-node3", p),
    # credential flags of a program that starts after another on the line (issue 51)
    "curl --proxy-user after timeout": _argv(
        "timeout 60 curl --proxy-user alice:{v} https://pypi.org/simple", _word_pw
    ),
    "curl -U after nice": _argv("nice -n 5 curl -U ops:{v} -x http://proxy:3128 https://pypi.org", _word_pw),
    "curl -U attached after sudo": _argv("sudo -E curl -Uops:{v} https://pypi.org", _word_pw),
    "openssl -k after srun": _argv("srun -N1 openssl enc -d -aes-256-cbc -k {v} -in w.enc", _word_pw),
    "htpasswd -b after sudo": _argv("sudo htpasswd -b -c /etc/nginx/.htpasswd alice {v}", _word_pw),
    "htpasswd -nb then more": _argv("htpasswd -nb alice {v} && systemctl reload nginx", _password),
    "mysql -pPASS after docker exec": _argv("docker exec db mysql -uroot -p{v} app", _word_pw),
    "mysql -pPASS after timeout": _argv("timeout 5 mysql -pWORD{v}", _word_pw),
    # logins as clients and files write them
    "sqlplus user/pw@//host": lambda rng: Planted(
        "argv", "", f"sqlplus -s scott/{(p := _word_pw(rng))}@//db-01.internal:1521/ORCL", p
    ),
    "sqlplus user/pw": lambda rng: Planted("argv", "", f"sqlplus scott/{(p := _word(rng) + _word(rng))}", p),
    "sql connect": lambda rng: Planted("text", "", f"SQL> connect app/{(p := _word_pw(rng))}@orcl", p),
    "netrc word password": lambda rng: Planted(
        "text", "", f"machine mirror.example.com login me password {(p := _word(rng) + _word(rng))}", p
    ),
    "netrc lines": lambda rng: Planted(
        "text", "", f"machine h.example.com\n  login me\n  password {(p := _word(rng) + _word(rng))}", p
    ),
    "pgpass line": lambda rng: Planted("text", "", f"db-01.internal:5432:app:u:{(p := _word_pw(rng))}", p),
    "pgpass in a value": lambda rng: Planted("value", "", f"*:*:*:pg:{(p := _word(rng) + _word(rng))}", p),
    # bare 40-character tokens (a GitHub classic token is 40 hex)
    "bare 40 hex": lambda rng: Planted("value", "", (h := _hex40(rng)), h),
    "bare 40 hex in text": lambda rng: Planted("text", "", f"using {(h := _hex40(rng))} for the mirror", h),
    "bare 40 base62": _prefixed("", ALNUM, 40),
    # one secret split over variables named for its parts
    "DB_PASS_1": _named("DB_PASS_1", lambda rng: _word(rng) + _word(rng)),
    "API_KEY_PART2": _named("API_KEY_PART2", lambda rng: _word(rng) + _word(rng)),
}

# --- harmless: kept exactly -----------------------------------------------------------------------


def _pick(*options: str) -> Callable[[random.Random], str]:
    return lambda rng: rng.choice(options)


HARMLESS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "nccl enum": lambda rng: (
        rng.choice(["NCCL_PROTO", "NCCL_ALGO"]),
        rng.choice(["LL", "LL128", "Simple", "Ring,Tree"]),
    ),
    "nccl hca": lambda rng: ("NCCL_IB_HCA", ",".join(f"mlx5_{i}:1" for i in range(rng.randrange(1, 5)))),
    "nccl number": lambda rng: ("NCCL_BUFFSIZE", str(rng.randrange(1, 1 << 26))),
    "nccl debug": lambda rng: ("NCCL_DEBUG_SUBSYS", rng.choice(["INIT,ENV", "ALL", "INIT,COLL,P2P"])),
    "slurm nodelist": lambda rng: (
        rng.choice(["SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_NODELIST"]),
        rng.choice(["gpu-[{0:03d}-{1:03d}]", "node[{0},{1}],login2", "h200-{0:02d}"]).format(
            rng.randrange(1, 50), rng.randrange(50, 999)
        ),
    ),
    "cuda devices": lambda rng: (
        "CUDA_VISIBLE_DEVICES",
        ",".join(str(i) for i in sorted(rng.sample(range(8), rng.randrange(1, 9)))),
    ),
    "cublas workspace": lambda rng: ("CUBLAS_WORKSPACE_CONFIG", rng.choice([":4096:8", ":16:8"])),
    "alloc conf": lambda rng: (
        "PYTORCH_CUDA_ALLOC_CONF",
        f"expandable_segments:True,max_split_size_mb:{rng.randrange(64, 1024)}",
    ),
    "arch list": lambda rng: ("TORCH_CUDA_ARCH_LIST", rng.choice(["8.0 9.0", "9.0+PTX", "8.0;8.6;9.0"])),
    "omp threads": lambda rng: ("OMP_NUM_THREADS", str(rng.randrange(1, 129))),
    "token threshold": lambda rng: (
        "VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD",
        str(rng.randrange(1, 4096)),
    ),
    "token budget": lambda rng: ("SGLANG_TOKEN_BUDGET", str(rng.randrange(1, 65536))),
    "hf token path": lambda rng: ("HF_TOKEN_PATH", f"/home/{_word(rng)}/.cache/huggingface/token"),
    "model path": lambda rng: (
        "VLLM_MODEL",
        f"/models/{_word(rng).title()}-{rng.randrange(1, 70)}B-Instruct",
    ),
    "model id": lambda rng: ("SGLANG_MODEL", f"Qwen/Qwen2.5-{rng.choice(['0.5', '7', '72'])}B-Instruct"),
    "revision": lambda rng: ("VLLM_COMMIT", _r(rng, HEX, 40)),
    "version": lambda rng: ("FLASHINFER_VERSION", f"0.{rng.randrange(1, 9)}.{rng.randrange(0, 20)}.post1"),
    "backend": lambda rng: (
        "VLLM_ATTENTION_BACKEND",
        rng.choice(["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"]),
    ),
    "bool": lambda rng: ("SGLANG_ENABLE_TORCH_COMPILE", rng.choice(["true", "false", "1", "0"])),
    "cache dir": lambda rng: ("TRITON_CACHE_DIR", f"/root/.triton/cache/{_word(rng)}"),
    "url": lambda rng: ("VLLM_MIRROR", f"https://mirror.example.com/{_word(rng)}/simple"),
    "socket ifname": lambda rng: ("NCCL_SOCKET_IFNAME", rng.choice(["^docker0,lo", "=eth0", "ib0,ib1"])),
    "ld path list": lambda rng: ("LD_LIBRARY_PATH", f"/usr/local/cuda/lib64:/opt/{_word(rng)}/lib"),
    "triton cache key": lambda rng: ("TRITON_CACHE_KEY", _r(rng, HEX, 64)),
    "triton cache path": lambda rng: ("TRITON_CACHE_DIR", f"/root/.triton/cache/{_r(rng, HEX, 64)}"),
    "commit sha": lambda rng: (rng.choice(["SGLANG_COMMIT", "GIT_SHA", "ENGINE_REV"]), _hex40(rng)),
    "wheel sha256": lambda rng: ("FLASHINFER_WHEEL_SHA256", _r(rng, HEX, 64)),
}

HARMLESS_ARGV: dict[str, Callable[[random.Random], list[str]]] = {
    "speculative token map": lambda rng: ["--speculative-token-map", f"/models/{_word(rng)}/token_map.pt"],
    "max total tokens": lambda rng: ["--max-total-tokens", str(rng.randrange(1, 1 << 20))],
    "revision flag": lambda rng: ["--revision", _r(rng, HEX, 40)],
    "model path flag": lambda rng: ["--model", f"/models/{_word(rng).title()}-8B"],
    "port": lambda rng: ["--port", str(rng.randrange(1024, 65536))],
    "dtype": lambda rng: ["--dtype", rng.choice(["bfloat16", "float16", "fp8"])],
    "tp": lambda rng: ["--tp", str(rng.choice([1, 2, 4, 8]))],
    "api-key-env": lambda rng: ["--api-key-env", rng.choice(["OPENAI_API_KEY", "SGLANG_API_KEY"])],
}

HARMLESS_TEXT: dict[str, Callable[[random.Random], str]] = {
    "stop-token subject": lambda rng: f"scheduler: fix stop-token handling for {_word(rng)} requests",
    "api-key subject": lambda rng: f"api-key: accept the {_word(rng)} header from env",
    "token subject": lambda rng: (
        f"speculative: raise max tokens to {rng.randrange(1, 9999)} (#{rng.randrange(100, 99999)})"
    ),
    "revert subject": lambda rng: f'Revert "spec: faster verify" (reverts {_r(rng, HEX, 40)})',
    "timing line": lambda rng: f"verify {rng.uniform(1, 50):.1f} ms; decode {rng.uniform(1, 50):.1f} ms",
    "versions": lambda rng: f"sglang 0.5.{rng.randrange(1, 9)}.post1 torch 2.{rng.randrange(1, 12)}.0+cu130",
    "sglang decode line": lambda rng: (
        f"Decode batch. #running-req: {rng.randrange(1, 64)}, #token: {rng.randrange(1, 10**6)}, "
        f"token usage: 0.{rng.randrange(10, 99)}, cuda graph: True, gen throughput (token/s): 100.00"
    ),
    "token ids": lambda rng: f"eos_token_id={rng.randrange(10**6)} pad_token_id={rng.randrange(10**6)}",
    "nccl init": lambda rng: (
        f"NCCL INFO comm 0x{_r(rng, HEX, 12)} rank 0 nranks 8 commId 0x{_r(rng, HEX, 16)} - Init COMPLETE"
    ),
    "path": lambda rng: f"loading /models/{_word(rng)}/model-0000{rng.randrange(1, 9)}-of-00008.safetensors",
    "triton cache key": lambda rng: f"Triton cache key: {_r(rng, HEX, 64)}",
    "triton cache dir": lambda rng: f"TRITON_CACHE_DIR=/root/.triton/cache/{_r(rng, HEX, 64)} (hit)",
    "commit line": lambda rng: f"HEAD is now at {_hex40(rng)} spec: faster verify",
    "pip commit": lambda rng: f"Resolved https://github.com/sgl-project/sglang to commit {_hex40(rng)}",
    "wheel hash": lambda rng: f"flashinfer-0.2.11-py3-none-any.whl --hash=sha256:{_r(rng, HEX, 64)}",
}


def planted(label: str, seed: int) -> Planted:
    return FAMILIES[label](random.Random(f"{label}/{seed}"))


def env_name(p: Planted, i: int, prefix: str = "VLLM_HINT_") -> str:
    """The variable a planted value is put in: its own name, or a harmless-looking one."""
    return p.name or f"{prefix}{i}"


def as_text(p: Planted) -> str:
    """How a program would print it: argv and text as they are, a value after its name."""
    if p.kind == "value" and p.name:
        return f"{p.name}={p.value}"
    return p.value
