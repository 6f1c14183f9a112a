"""Every secret shape, in every place text can carry it, is redacted by the functions each sink calls."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from secret_shapes import LABELS, PLACES, SHAPES, body, core

from regdiag.snapshot.redact import is_hidden, redact_argv, redact_env, redact_tree, scrub_text


def test_at_least_forty_shapes() -> None:
    assert len(SHAPES) >= 40
    assert len({ex for _, ex in SHAPES}) == len(SHAPES)


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize(("label", "secret"), SHAPES, ids=[label for label, _ in SHAPES])
def test_each_example_shape_in_each_place_is_scrubbed(label: str, secret: str, place: str) -> None:
    out = scrub_text(PLACES[place](secret))
    assert core(secret) not in out, (label, place, out)
    assert "<redacted" in out


@settings(max_examples=300, deadline=None, derandomize=True)
@given(label=st.sampled_from(LABELS), place=st.sampled_from(list(PLACES)), data=st.data())
def test_any_secret_of_a_known_shape_is_scrubbed_anywhere(
    label: str, place: str, data: st.DataObject
) -> None:
    secret = data.draw(body(label))
    text = PLACES[place](secret)
    assert core(secret) not in scrub_text(text)
    # The same secret as an env value under a harmless name, in argv, and in a decoded JSON tree.
    kept, redacted = redact_env({"NCCL_EXTRA": text, "NCCL_PROTO": "LL"})
    assert core(secret) not in kept["NCCL_EXTRA"] and redacted == ["NCCL_EXTRA"]
    assert kept["NCCL_PROTO"] == "LL"
    assert core(secret) not in " ".join(redact_argv(["python", "-m", "x", text]))
    assert core(secret) not in json.dumps(redact_tree({"stderr_tail": [text], "n": 3}))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    name=st.sampled_from(["HF_TOKEN", "SGLANG_API_KEY", "NCCL_IB_SECRET_KEY", "DB_PASSWORD", "X_AUTH"]),
    value=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_/+", min_size=4, max_size=40),
)
def test_a_sensitive_name_hides_any_value_that_is_not_a_plain_number(name: str, value: str) -> None:
    kept, redacted = redact_env({name: value})
    if value.lower() in ("true", "false", "yes", "no", "on", "off", "y", "n", "t", "f", "0", "1", "none"):
        return  # a switch keeps its value; a number under a credential name is a PIN (hidden)
    assert is_hidden(kept[name]) and redacted == [name] and value not in kept[name]


REDACTED = "<redacted>"


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["serve", "--hf-token", "abcdefsecret"], ["serve", "--hf-token", REDACTED]),
        (["serve", "--api-key=abcdefsecret"], ["serve", "--api-key=" + REDACTED]),
        (["SGLANG_API_KEY=abcdefsecret", "python"], ["SGLANG_API_KEY=" + REDACTED, "python"]),
        (["x", "--token-budget", "4096", "--max-tokens", "256"], ["x", "--token-budget", "4096", "--max-tokens", "256"]),
        (["NCCL_PROTO=LL", "--tp", "8"], ["NCCL_PROTO=LL", "--tp", "8"]),
        (["pip", "install", "--index-url", "https://u:npm_abcdefghijklmnopqrstuvwxyz0123456789@h/simple", "x"],
         ["pip", "install", "--index-url", REDACTED, "x"]),
        (["python", "-c", "import sys; sys.exit(1)", "--token", "glpat-abcdefghij1234567890"],
         ["python", "-c", "import sys; sys.exit(1)", "--token", REDACTED]),
    ],
)  # fmt: skip
def test_redact_argv(argv: list[str], want: list[str]) -> None:
    # A hidden value is a keyed hash with its length (or a marker in free text): shown here as REDACTED.
    got = [
        REDACTED if is_hidden(t) else re.sub(r"<redacted len=\d+>", "<redacted>", t)
        for t in redact_argv(argv)
    ]
    got = [re.sub(r"=hmac-sha256:[0-9a-f]{16}:len=\d+$", "=" + REDACTED, t) for t in got]
    assert got == want


def test_redact_tree_by_key_and_by_shape() -> None:
    tree = {
        "api_key": "plainvalue",
        "env": {"NCCL_PROTO": "LL", "HF_TOKEN": "zzzzzz", "SGLANG_TOKEN_THRESHOLD": "256"},
        "argv": ["--x", "dapi0123456789abcdef0123456789abcdef"],
        "n": 1.5,
        "ok": True,
    }
    out = redact_tree(tree)
    assert is_hidden(out["api_key"]) and is_hidden(out["env"]["HF_TOKEN"])
    assert out["env"]["NCCL_PROTO"] == "LL" and out["env"]["SGLANG_TOKEN_THRESHOLD"] == "256"
    assert out["argv"][0] == "--x" and is_hidden(out["argv"][1]) and out["n"] == 1.5 and out["ok"] is True


@pytest.mark.parametrize(
    "text",
    [
        "commit 1e9b9a1d021452b6af1b0ba233963daed0270524",  # a commit beside its word (alone: a token)
        "basic configuration of the scheduler",
        "max_tokens=256",
        "--max-tokens 256 --num-speculative-tokens 4",
        "--token-budget 4096",
        "NCCL_IB_HCA=mlx5_0:1,mlx5_1:1",
        "https://github.com/sgl-project/sglang.git",
        "sglang 0.5.4.post1 flashinfer-python 0.4.1 torch 2.11.0+cu130",
        "verify 29.1 ms; decode 12.0 ms; accept length 2.0",
        "expandable_segments:True",
        "git describe: v0.5.4-12-g1e9b9a1",
        "design signature and key points",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert scrub_text(text) == text


# --- the bisect journal and screen (a real bisect of a real command) -------------------------------------

JOURNAL_SECRETS = [
    "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789AB",
    "sk-proj-ZYXWVUTSRQPONMLKJIHGFEDCBA9876543210zz",
    "plainheldfixed0123",
    "glpat-abcdefghij1234567890",
    "npm_abcdefghijklmnopqrstuvwxyz0123456789",
    "dapi0123456789abcdef0123456789abcdef",
    "stderrsecret4567",
]


def _bisect(journal: Path, *extra: str):
    from conftest import run_cli

    # A command that follows the probe protocol: the cycle median depends on OMP_NUM_THREADS, and
    # it echoes a secret on stderr the way servers echo their argv.
    script = (
        "import os, sys, json; t = 10.0 if os.environ['OMP_NUM_THREADS'] == '1' else 5.0; "
        "print('--hf-token stderrsecret4567 dapi0123456789abcdef0123456789abcdef', file=sys.stderr); "
        "[print(json.dumps({'type': 'cycle', 'i': i, 't': {'cycle': t}})) for i in range(5)]; "
        "print(json.dumps({'type': 'footer', 'cycles': 5, 'warmup_dropped': 0}))"
    )
    return run_cli(
        "bisect",
        "--good", "OMP_NUM_THREADS=2 SGLANG_API_KEY=" + JOURNAL_SECRETS[0] + " HF_TOKEN=plainheldfixed0123",
        "--bad", "OMP_NUM_THREADS=1 SGLANG_API_KEY=" + JOURNAL_SECRETS[1] + " HF_TOKEN=plainheldfixed0123",
        "--command", f"{sys.executable} -c {shlex.quote(script)} --token glpat-abcdefghij1234567890",
        "--setup", "pip install --index-url https://u:npm_abcdefghijklmnopqrstuvwxyz0123456789@h/simple x",
        "--launches", "2", "--journal", str(journal), *extra,
        env={"COLUMNS": "400"},
    )  # fmt: skip


def test_bisect_journal_and_screen_carry_no_secret_and_the_journal_is_private(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    old = os.umask(0)
    try:
        r = _bisect(journal, "--json")
    finally:
        os.umask(old)
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.returncode in (0, 3), r.stderr[-2000:]
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    text = journal.read_text()
    for out in (text, r.stdout, r.stderr):
        assert [s for s in JOURNAL_SECRETS if s in out] == []
    assert "OMP_NUM_THREADS" in r.stdout and ("<redacted len=" in text or "hmac-sha256:" in text)
    report = json.loads(r.stdout)
    assert report["verdict"] == "CULPRIT"
    assert "OMP_NUM_THREADS" in json.dumps(report["culprits"])
    # Resuming the same bisect (same secrets) reuses the redacted journal and still leaks nothing.
    again = _bisect(journal, "--resume", "--json")
    assert again.returncode == r.returncode, again.stderr[-2000:]
    assert json.loads(again.stdout)["verdict"] == "CULPRIT"
    assert [s for s in JOURNAL_SECRETS if s in journal.read_text() + again.stdout + again.stderr] == []


@pytest.mark.parametrize("backend", ["cli", "gitpython"])
def test_git_branch_tag_and_subject_are_scrubbed(tmp_path: Path, backend: str) -> None:
    from snapshot_helpers import git, make_repo

    from regdiag.snapshot import engine

    repo = make_repo(tmp_path / "r")
    git(repo, "checkout", "-q", "-b", "fix-glpat-abcdefghij1234567890")
    git(repo, "tag", "dapi0123456789abcdef0123456789abcdef")
    git(repo, "commit", "-q", "--allow-empty", "-m", "use token=s3cr3tsubject99 for the mirror")
    git(repo, "tag", "dapi0123456789abcdef0123456789abcdef-1")
    g = engine.collect(repo=str(repo), backend=backend)
    text = json.dumps(g)
    for secret in ("abcdefghij1234567890", "0123456789abcdef0123456789abcdef", "s3cr3tsubject99"):
        assert secret not in text, (backend, secret)
    values = {k: f.get("value") for k, f in g["fields"].items()}
    assert values["branch"] == "fix-<redacted len=26>" and values["describe"].startswith("<redacted len=")
    assert values["subject"] == "use token=<redacted len=15> for the mirror"


def test_a_refused_server_url_is_quoted_without_its_credentials() -> None:
    from conftest import run_cli

    r = run_cli("probe", "server", "--url", "http://admin:dapi0123456789abcdef0123456789abcdef@127.0.0.1:9/")
    assert r.returncode == 2 and r.stderr.startswith("regdiag: error: http://<redacted len=42>@127.0.0.1:9/")
    assert "dapi0123" not in r.stderr + r.stdout and "admin" not in r.stderr


# Kernel names as CUPTI reported them on an H200 (docs/bench/h200-round44): a mangled CUTLASS grouped GEMM
# and two templated signatures whose names mix case like a token does; a profile must show them.
H200_KERNELS = [
    "_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xINS_4gemm6kernel13GemmUniversalINS5_"
    "17GroupProblemShapeIN4cute5tupleIJiiiEEEEENS5_10collective13CollectiveMmaINS5_39MainloopSm90ArrayTma"
    "GmmaWarpSpecializedILi4ENSA_IJNS9_1CILi2EEENSG_ILi1EEESI_EEENS5_40KernelPtrArrayTmaWarpSpecialized"
    "PingpongEEEvNT_6ParamsE",
    "void gemmSN_NN_kernel<float, 128, 2, 4, 8, 3, 4, false, cublasGemvTensorStridedBatched<__nv_bfloat16 const>"
    ">(cublasGemmSmallNParams<cublasGemvTensorStridedBatched<__nv_bfloat16 const>, float>)",
    "void at::native::bitonicSortKVInPlace<2, -1, 16, 16, float, long, at::native::GTOp<float, true>, unsigned "
    "int>(at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int)",
]


@pytest.mark.parametrize("name", H200_KERNELS, ids=["mangled", "cublas-small-n", "bitonic-sort"])
def test_kernel_names_of_a_real_gpu_profile_stay_readable(name: str) -> None:
    assert scrub_text(name) == name


def test_a_secret_that_starts_like_a_mangled_name_is_still_hidden() -> None:
    secret = "_ZN7" + "aZ3kQ9xP2mV8wL5rT1yB6nC4" * 2
    assert "aZ3kQ9xP2mV8" not in scrub_text(f"token {secret}")


def test_a_host_key_fingerprint_that_starts_with_a_slash_stays_readable() -> None:
    # one fingerprint in 64 starts with '/': it is what the user must check, not a path with a key in it
    line = "host key not known (offers ssh-ed25519 SHA256:/oESyeL2bkevspqIt4cEh4t8KhrhS4hTENLgjPZA6wQ)"
    assert scrub_text(line) == line


def test_nccl_size_settings_in_free_text_stay_readable_and_secrets_beside_them_do_not() -> None:
    # The name's last word and the digits read together (BUFFSIZE=8388608) as one mixed, random word.
    for line in (
        "NCCL_BUFFSIZE=8388608",
        "NCCL INFO NCCL_P2P_NET_CHUNKSIZE set by environment to 131072; NCCL_P2P_NET_CHUNKSIZE=131072.",
        "--nccl-buffsize=8388608 --max-tokens=4096",
    ):
        assert scrub_text(line) == line
    out = scrub_text("NCCL_BUFFSIZE=8388608 HF_TOKEN=12345678 X=aB3dE5fG7hJ9kL1mNpQ2 MY_PIN=123456789012345")
    assert out.startswith("NCCL_BUFFSIZE=8388608 HF_TOKEN=<redacted len=8> ")
    assert "aB3dE5fG7hJ9kL1mNpQ2" not in out and "123456789012345" not in out


def test_a_bisect_factor_of_an_nccl_size_is_readable_in_the_report() -> None:
    from regdiag.bisect.factors import ENV, Factor

    factors = [Factor(ENV, "NCCL_ALGO", None, "Tree"), Factor(ENV, "NCCL_BUFFSIZE", None, "8388608")]
    label = ", ".join(f.show(f.bad) for f in factors)
    report = redact_tree(
        {"unresolved": [{"between": [label, "bad"]}], "culprits": [f.to_dict() for f in factors]}
    )
    assert report["unresolved"][0]["between"][0] == "NCCL_ALGO=Tree, NCCL_BUFFSIZE=8388608"
    assert report["culprits"][1]["label"] == "NCCL_BUFFSIZE unset -> '8388608'"
