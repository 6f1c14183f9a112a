"""Held-out style secret shapes and the diagnosis values that must stay readable (issue 42, item 4).

SHAPES: label -> generator(rng) -> Planted (secret_families.Planted): the kinds a held-out pass found
passing the free-text rules (40- and 64-hex keys behind vendor prefixes or in query parameters, UUIDs
after an `Authorization:` scheme, passwords after flags whose arity says they take one, base64 that
starts with `/`, `user:pw/x@host` without a scheme, `PWD=` in a connection string), each drawn fresh
from its template; none is a literal from a list.

DIAGNOSIS: 68 values a speculative-decoding diagnosis needs readable (model ids, dtypes, quantisation
names, versions with local parts, GPU names, kernel names, sizes, Triton's cache key, commits, a
wheel's sha256), each with the sink it reaches:
("env", NAME, value), ("argv", FLAG, value), ("text", "", line) or ("json", KEY, value).

measure(sinks) runs both through the redaction functions of whatever regdiag is importable: the
test holds today's code to the goals and bench/redaction_heldout.py prints the table for any tree.
"""

from __future__ import annotations

import json
import random
import shlex
from collections.abc import Callable

from secret_families import ALNUM, B64, FAMILIES, HEX, Planted, _r


def _uuid(rng: random.Random) -> str:
    h = _r(rng, HEX, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


def _pw(rng: random.Random) -> str:
    word = rng.choice(["river", "Falcon", "copper", "Delta", "maple", "Orbit"])
    return word + str(rng.randrange(10, 9999)) + rng.choice("!#%^*-_") + _r(rng, ALNUM, 3)


def _host(rng: random.Random) -> str:
    return rng.choice(["db", "cache", "gpu-node", "mq", "vault"]) + f"-{rng.randrange(1, 40):02d}.internal"


def _prefixed_hex(prefix: str, n: int, template: str) -> Callable[[random.Random], Planted]:
    def gen(rng: random.Random) -> Planted:
        key = prefix + _r(rng, HEX, n)
        return Planted("text", "", template.format(k=key), key[-16:])

    return gen


def _header(scheme: str, make: Callable[[random.Random], str]) -> Callable[[random.Random], Planted]:
    def gen(rng: random.Random) -> Planted:
        v = make(rng)
        return Planted("text", "", f"curl -sS -H 'Authorization: {scheme} {v}' https://{_host(rng)}/x", v)

    return gen


def _argv(template: str, make: Callable[[random.Random], str] = _pw) -> Callable[[random.Random], Planted]:
    def gen(rng: random.Random) -> Planted:
        v = make(rng)
        return Planted("argv", "", template.format(v=shlex.quote(v), h=_host(rng)), v)

    return gen


def _user_pw(rng: random.Random) -> str:
    return rng.choice(["svc", "alice", "deploy", "ops"]) + ":" + _pw(rng)


def _slash_b64(rng: random.Random) -> str:
    return "/" + _r(rng, B64, rng.randrange(39, 60)) + rng.choice(["", "=", "=="])


def _svc_url(rng: random.Random) -> Planted:
    pw = _pw(rng) + "/" + _r(rng, ALNUM, 4)
    return Planted("value", "", f"svc:{pw}@{_host(rng)}", pw)


SHAPES: dict[str, Callable[[random.Random], Planted]] = {
    # 40- and 64-hex keys behind vendor prefixes, or bare where a key goes
    "supabase sbp_": _prefixed_hex("sbp_", 40, "supabase link --project-ref abc {k}"),
    "supabase in env": lambda rng: Planted("value", "SB_ACCESS", (k := "sbp_" + _r(rng, HEX, 40)), k[-16:]),
    "buildkite bkua_": _prefixed_hex("bkua_", 40, "buildkite-agent start --token-file x # {k}"),
    "buildkite in env": lambda rng: Planted("value", "BK_AGENT", (k := "bkua_" + _r(rng, HEX, 40)), k[-16:]),
    "vast.ai 64 hex": _prefixed_hex("", 64, "vastai set api-key {k}"),
    "vast.ai in text": _prefixed_hex("", 64, "using vast.ai key {k} for instance 4411"),
    "w&b 40 hex": _prefixed_hex("", 40, "wandb: Appending key for api.wandb.ai to your netrc file: {k}"),
    "w&b in env": lambda rng: Planted("value", "WB_LOGIN", (k := _r(rng, HEX, 40)), k),
    "hmac query 64": _prefixed_hex("", 64, "GET https://cdn.example.com/w.bin?exp=1767225600&hmac={k}"),
    "hmac query 40": _prefixed_hex("", 40, "fetching https://dl.example.org/x.tar?e=1767225600&hmac={k} ..."),
    "hmac json": lambda rng: Planted(
        "text", "", json.dumps({"url": "x", "hmac": (k := _r(rng, HEX, 64))}), k
    ),
    # Authorization headers by scheme
    "splunk uuid": _header("Splunk", _uuid),
    "genie uuid": _header("GenieKey", _uuid),
    "okta ssws": _header("SSWS", lambda rng: "00" + _r(rng, ALNUM + "-_", 40)),
    "token scheme": _header("Token", lambda rng: _r(rng, HEX, 40)),
    "api-key scheme": _header("Api-Key", _uuid),
    "authorization in env": lambda rng: Planted("value", "HDR", f"Splunk {(u := _uuid(rng))}", u),
    # passwords after flags that take one
    "redis-cli -a": _argv("redis-cli -h {h} -p 6379 -a {v} ping"),
    "curl --proxy-user": _argv("curl --proxy-user {v} https://pypi.org/simple", _user_pw),
    "curl -U": _argv("curl -U {v} -x http://proxy:3128 https://pypi.org", _user_pw),
    "openssl -k": _argv("openssl enc -d -aes-256-cbc -k {v} -in w.enc -out w.bin"),
    "openssl -passin": _argv("openssl rsa -in key.pem -passin pass:{v} -noout", _pw),
    "htpasswd -b": _argv("htpasswd -b -c /etc/nginx/.htpasswd alice {v}"),
    "smbclient -U": _argv("smbclient //nas/models -U alice%{v}"),
    "ldapsearch -w": _argv("ldapsearch -x -H ldap://{h} -D cn=admin -w {v}"),
    "ipmitool -P": _argv("ipmitool -I lanplus -H {h} -U admin -P {v} power status"),
    "unzip -P": _argv("unzip -P {v} weights.zip"),
    "redis-cli in a log": lambda rng: Planted("text", "", f"+ redis-cli -a {(p := _pw(rng))} info", p),
    "proxy-user in a log": lambda rng: Planted(
        "text", "", f"+ curl -sS --proxy-user {(u := _user_pw(rng))} https://x", u.split(":")[1]
    ),
    # base64 that starts with '/', read as a path before
    "slash base64 in text": lambda rng: Planted("text", "", f"signing key: {(k := _slash_b64(rng))}", k),
    "slash base64 in env": lambda rng: Planted("value", "SIGNER", (k := _slash_b64(rng)), k),
    "slash base64 argv": _argv("tool --signing {v} --out x", _slash_b64),
    # user:pw/x@host without a scheme, DSNs by their parts
    "svc:pw/x@host": _svc_url,
    "svc:pw/x@host in text": lambda rng: Planted(
        "text", "", f"cannot connect to {(p := _svc_url(rng)).value}: timed out", p.core
    ),
    "odbc PWD=": lambda rng: Planted(
        "text", "", f"DRIVER={{ODBC Driver 18}};SERVER={_host(rng)};UID=sa;PWD={(p := _pw(rng))};", p
    ),
    "dsn PWD in env": lambda rng: Planted(
        "value", "DSN_X", f"Server={_host(rng)};Uid=sa;Pwd={(p := _pw(rng))}", p
    ),
    "jdbc password param": lambda rng: Planted(
        "text", "", f"jdbc:mysql://{_host(rng)}:3306/app?user=app&password={(p := _pw(rng))}", p
    ),
    "amqp url": lambda rng: Planted("value", "", f"amqp://guest:{(p := _pw(rng))}@{_host(rng)}:5672/", p),
    "ssh host with pw": lambda rng: Planted("value", "", f"root:{(p := _pw(rng))}@{_host(rng)}", p),
    "command in VLLM_ value": lambda rng: Planted(
        "value", "VLLM_PRE_CMD", f"redis-cli -a {(p := _pw(rng))} flushall", p
    ),
    "command in NCCL_ value": lambda rng: Planted(
        "value", "NCCL_HOOK_CMD", f"curl -U {(u := _user_pw(rng))} http://x/y", u.split(":")[1]
    ),
    "mc alias secret": _argv(
        "mc alias set s3 https://s3.example.com AKIDEXAMPLE {v}", lambda r: _r(r, B64, 40)
    ),
    # issue 51's shapes (secret_families.py draws them; each sink of test_default_deny sees them too)
    **{
        label: FAMILIES[label]
        for label in (
            "curl --proxy-user after timeout",
            "curl -U after nice",
            "openssl -k after srun",
            "htpasswd -nb then more",
            "mysql -pPASS after timeout",
            "sqlplus user/pw@//host",
            "netrc word password",
            "pgpass line",
            "bare 40 hex in text",
            "DB_PASS_1",
        )
    },
}

_EAGLE = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
_SPEC_JSON = json.dumps({"method": "eagle3", "model": _EAGLE, "num_speculative_tokens": 3})
_CUBLAS = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"  # noqa: E501
_CUTLASS = "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, cutlass::bfloat16_t>>"  # noqa: E501
_FLASH = "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t>, true>"  # noqa: E501
_GPU_UUID = "GPU-5f2b1c3e-7a9d-4e1f-b2c3-0d4e5f6a7b8c"
_SHA = "1e9b9a1d021452b6af1b0ba233963daed0270524"
_SHA256 = "c3ab8ff13720e8ad9047dd39466b3c8974e592c2fa383d4a3960714caef0c4f2"

DIAGNOSIS: list[tuple[str, str, str]] = [
    ("env", "SPEC_DRAFT_MODEL", _EAGLE),
    ("env", "DRAFT_MODEL", "lmsys/sglang-EAGLE3-Llama-3.1-Instruct-8B"),
    ("env", "MODEL", "meta-llama/Llama-3.1-8B-Instruct"),
    ("env", "SERVED_MODEL", "deepseek-ai/DeepSeek-V3-0324"),
    ("env", "MODEL_ID", "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"),
    ("env", "MODEL", "moonshotai/Kimi-K2-Instruct"),
    ("env", "GPU_TYPE", "H200"),
    ("env", "DTYPE", "bf16"),
    ("env", "QUANT", "fp8"),
    ("env", "KV_CACHE_DTYPE", "fp8_e4m3"),
    ("env", "PYTORCH_BUILD_VERSION", "2.8.0a0+5228986c39.nv25.06"),
    ("env", "NV_LIBNCCL_PACKAGE_VERSION", "2.27.3-1+cuda12.9"),
    ("env", "NV_CUDA_CUDART_VERSION", "12.9.79-1"),
    ("env", "NV_LIBCUBLAS_VERSION", "12.9.1.4-1"),
    ("env", "NV_CUDNN_VERSION", "9.10.2.21"),
    ("env", "NVIDIA_PYTORCH_VERSION", "25.06"),
    ("env", "CUDA_VERSION", "12.9.1.010"),
    ("env", "TENSORRT_VERSION", "10.11.0.33"),
    ("env", "QUANTIZATION", "awq_marlin"),
    ("env", "GPU_NAME", "NVIDIA H100 80GB HBM3"),
    ("env", "SPECULATIVE_CONFIG", _SPEC_JSON),
    ("env", "HOSTNAME", "gpu-node-017"),
    ("env", "MEM_LIMIT", "80GiB"),
    ("env", "CUDA_VISIBLE_DEVICES", _GPU_UUID),
    ("env", "NV_LIBCUBLAS_PACKAGE", "libcublas-12-9=12.9.1.4-1"),
    ("env", "TORCH_VERSION", "2.7.1+cu128"),
    ("argv", "--speculative-draft-model-path", _EAGLE),
    ("argv", "--kv-cache-dtype", "fp8_e4m3"),
    ("argv", "--speculative-config", _SPEC_JSON),
    ("argv", "--model", "deepseek-ai/DeepSeek-R1"),
    ("argv", "--quantization", "modelopt_fp4"),
    ("argv", "--dtype", "bfloat16"),
    ("argv", "--speculative-algorithm", "EAGLE3"),
    ("argv", "--max-model-len", "131072"),
    ("argv", "--gpu-memory-utilization", "0.92"),
    ("argv", "--served-model-name", "kimi-k2"),
    ("argv", "--tokenizer", "moonshotai/Kimi-K2-Instruct"),
    ("argv", "--speculative-draft-model-revision", "5228986c39"),
    ("argv", "--attention-backend", "flashinfer"),
    ("argv", "--speculative-num-draft-tokens", "4"),
    ("text", "", f"  {_CUBLAS}  41.2 us"),
    ("text", "", _CUTLASS),
    ("text", "", "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_tn"),
    ("text", "", _FLASH),
    ("text", "", "nvjet_tst_192x192_64x4_2x1_v_bz_coopA_NTN"),
    ("text", "", "torch 2.8.0a0+5228986c39.nv25.06"),
    ("text", "", f"GPU 0: NVIDIA H200 (UUID: {_GPU_UUID})"),
    ("text", "", "vllm 0.10.1.dev8+g1a2b3c4d5.d20250701"),
    ("text", "", "flashinfer 0.2.11.post3+cu128torch2.8"),
    ("text", "", f"Loading drafter {_EAGLE} with --kv-cache-dtype fp8_e4m3"),
    ("text", "", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (139.81 GiB total)"),
    ("text", "", "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0"),
    ("text", "", "deep_gemm::fp8_gemm_kernel<128, 128, 64, 8, 3, 1>"),
    ("text", "", "NCCL version 2.27.3+cuda12.9"),
    ("json", "speculative_draft_model_path", _EAGLE),
    ("json", "kv_cache_dtype", "fp8_e4m3"),
    # hashes a diagnosis needs: Triton's cache key, commits, a wheel's sha256 (issue 51)
    ("env", "TRITON_CACHE_KEY", _SHA256),
    ("env", "TRITON_CACHE_DIR", f"/root/.triton/cache/{_SHA256}"),
    ("env", "SGLANG_COMMIT", _SHA),
    ("text", "", f"Triton cache key: {_SHA256}"),
    ("text", "", f"TRITON_CACHE_DIR=/root/.triton/cache/{_SHA256}"),
    ("text", "", f"HEAD is now at {_SHA} spec: faster verify"),
    ("text", "", f"flashinfer-0.2.11-py3-none-any.whl --hash=sha256:{_SHA256}"),
    ("text", "", f"/root/.cache/huggingface/hub/models--org--m/snapshots/{_SHA}/config.json"),
    ("argv", "--revision", _SHA),
    ("json", "commit", _SHA),
    ("json", "sha256", _SHA256),
    ("json", "triton_cache_key", _SHA256),
]


def planted(label: str, seed: int) -> Planted:
    return SHAPES[label](random.Random(f"{label}/{seed}"))


def secret_outputs(p: Planted, sinks: dict[str, Callable[..., object]]) -> dict[str, str]:
    """What each sink makes of one planted secret."""
    scrub, argv, value, tree = (
        sinks["scrub_text"],
        sinks["redact_argv"],
        sinks["redact_value"],
        sinks["redact_tree"],
    )
    text = f"{p.name}={p.value}" if p.kind == "value" and p.name else p.value
    out = {
        "text": str(scrub(f"worker 3: {text} (retrying)")),
        "json": json.dumps(tree({"info": text, "argv": shlex.split(text) if p.kind == "argv" else [text]})),
        "value": str(value(p.name or "VLLM_HINT", p.value)[0]),  # type: ignore[index]
    }
    if p.kind == "argv":
        out["argv"] = " ".join(argv(shlex.split(p.value)))  # type: ignore[arg-type]
    return out


def diagnosis_output(kind: str, name: str, value: str, sinks: dict[str, Callable[..., object]]) -> str:
    if kind == "env":
        return str(sinks["redact_value"](name, value)[0])  # type: ignore[index]
    if kind == "argv":
        return " ".join(sinks["redact_argv"](["vllm", "serve", "x/y", name, value]))  # type: ignore[arg-type]
    if kind == "json":
        return json.dumps(sinks["redact_tree"]({"server_info": {name: value}}))
    return str(sinks["scrub_text"](value))


def measure(sinks: dict[str, Callable[..., object]], seeds: int = 3) -> dict[str, object]:
    """Leaks (a shape counts once when any seed's secret shows in any sink) and readable values."""
    leaks = []
    for label in SHAPES:
        plants = [planted(label, s) for s in range(seeds)]
        if any(p.core in o for p in plants for o in secret_outputs(p, sinks).values()):
            leaks.append(label)
    hidden = [(k, n, v) for k, n, v in DIAGNOSIS if v not in diagnosis_output(k, n, v, sinks)]
    return {
        "shapes": len(SHAPES),
        "leaks": leaks,
        "diagnosis": len(DIAGNOSIS),
        "readable": len(DIAGNOSIS) - len(hidden),
        "hidden": hidden,
    }
