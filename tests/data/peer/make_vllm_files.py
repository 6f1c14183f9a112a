"""Remakes the vllm-bench-*.json(l) files beside this script: the real `vllm bench serve` (vLLM 0.32.0,
CPU build, the venv of tests/vllm_helpers.py) against a stand-in OpenAI completions server started here,
which streams 6 tokens per request and answers HTTP 500 to the requests it is told to fail. Not run by
the tests (about 20 s a file); run by hand with regdiag's python:

    python tests/data/peer/make_vllm_files.py [OUT_DIR]      # default: this folder

It needs the tokenizer of tests/engine_vllm/make_models.py (built here into a temporary folder).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests"))
import vllm_helpers as vh  # noqa: E402


class Completions(BaseHTTPRequestHandler):
    """POST /v1/completions, streamed; request k (0 is vLLM's initial test request) fails when `fail`
    holds k, or every request but the first when it is "all"."""

    protocol_version = "HTTP/1.0"
    fail: set[int] | str = set()
    seen = 0
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        with Completions.lock:
            k, Completions.seen = Completions.seen, Completions.seen + 1
        fail = Completions.fail
        if (fail == "all" and k > 0) or (isinstance(fail, set) and k in fail):
            self.send_response(500, "Internal Server Error")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        tokens = int(body.get("max_tokens") or 8)
        time.sleep(0.02)
        for _ in range(tokens):
            self._event({"choices": [{"index": 0, "text": " a"}]})
            time.sleep(0.004)
        self._event({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": tokens}})
        self.wfile.write(b"data: [DONE]\n\n")

    def _event(self, obj: dict[str, object]) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


def bench(out: Path, name: str, fail: set[int] | str, tokenizer: Path, *extra: str) -> None:
    Completions.fail, Completions.seen = fail, 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Completions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cmd = [
        vh.python(), str(vh.VLLM_CLI), "bench", "serve", "--backend", "vllm",
        "--base-url", f"http://127.0.0.1:{server.server_address[1]}", "--model", "tiny",
        "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", "8",
        "--random-output-len", "6", "--num-prompts", "6", "--max-concurrency", "2", "--seed", "0",
        "--result-dir", str(out), "--result-filename", name, *extra,
    ]  # fmt: skip
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **vh.engine_env()})
    finally:
        server.shutdown()
    if r.returncode != 0:
        sys.exit(f"{name}: vllm bench serve failed:\n{r.stderr[-2000:]}")


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = vh.build_models(Path(tmp)) / "target"
        for name in ("vllm-bench-append-repeats.jsonl", "vllm-bench-append-sweep.jsonl"):
            (out / name).unlink(missing_ok=True)
        bench(out, "vllm-bench-failed-detailed.json", {2, 5}, tokenizer, "--save-result", "--save-detailed")
        bench(out, "vllm-bench-failed.json", {3, 6}, tokenizer, "--save-result")
        bench(out, "vllm-bench-all-failed.json", "all", tokenizer, "--save-result", "--save-detailed")
        for _ in range(3):
            goodput = ("--goodput", "ttft:1000", "tpot:100")
            bench(out, "vllm-bench-append-repeats.jsonl", set(), tokenizer, "--append-result", *goodput)
        for c in ("1", "3"):
            bench(
                out,
                "vllm-bench-append-sweep.jsonl",
                set(),
                tokenizer,
                "--append-result",
                "--max-concurrency",
                c,
            )


if __name__ == "__main__":
    main()
