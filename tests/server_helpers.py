"""A real HTTP server that answers like SGLang and vLLM, for the `probe server` tests.

Run as a script it listens on 127.0.0.1 and prints "PORT <n>"; the tests talk to it over real
sockets. It serves the documented response formats:

  SGLang   POST /generate (JSON, or SSE with cumulative "text" and "meta_info" per chunk, then
           "data: [DONE]"), GET /get_server_info, /get_model_info, /health
  vLLM     GET /version, /v1/models, /metrics (Prometheus text with the V1 spec-decode counters)
  both     POST /v1/completions and /v1/chat/completions (JSON or SSE with choices[].text or
           choices[].delta.content, usage per chunk when asked with continuous_usage_stats)

Generation is emulated: a request of max_tokens tokens yields one token at "prefill", then
speculative steps that each emit `tokens_per_step[i]` tokens (cycled), one chunk per step,
`step_ms` apart. SGLang-style "Decode batch" lines go to stderr like the real scheduler's.

Knobs (JSON; --knobs on the command line, or POST /_control at run time) make it misbehave:
status_every (every N-th generation request answers `status`), error_after_chunks (an error
event mid-stream), cut_after_chunks (connection closed mid-stream), malformed_after_chunks (a
broken JSON event), malformed_body (a plain answer that is not JSON), hang_s (no answer for this
long), die_after_requests (the process exits when request N+1 arrives), usage ("continuous" |
"final" | "none"), health_delay_s (/health answers 503 while "loading"), ignore_sigterm, and
only_requests (fault knobs apply to these request numbers only, counted from 1). busy_ms spins the
CPU that long per step (a server whose CPU time is what a test measures).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEFAULTS: dict[str, Any] = {
    "engine": "sglang",
    "model": "tiny-emulated",
    "spec": True,
    "num_spec_tokens": 3,
    "tokens_per_step": [3, 2, 1, 2],
    "step_ms": 2.0,
    "busy_ms": 0.0,
    "ttft_ms": 5.0,
    "status": 503,
    "status_every": 0,
    "error_after_chunks": None,
    "cut_after_chunks": None,
    "malformed_after_chunks": None,
    "hang_s": 0.0,
    "die_after_requests": None,
    "usage": "continuous",
    "health_delay_s": 0.0,
    "ignore_sigterm": False,
    "only_requests": None,
    "log_every_steps": 4,
    "old_sglang": False,
    "malformed_body": False,
}


def _step(k: dict[str, Any]) -> None:
    """One decode step: `busy_ms` of CPU work, then `step_ms` of waiting."""
    end = time.perf_counter() + k["busy_ms"] / 1000
    while time.perf_counter() < end:
        pass
    time.sleep(k["step_ms"] / 1000)


SECRET = "sk-emulated0123456789abcdefSECRET"


class State:
    def __init__(self, knobs: dict[str, Any]) -> None:
        self.knobs = {**DEFAULTS, **knobs}
        self.lock = threading.Lock()
        self.count = 0
        self.received: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "generation": 0}
        self.per_pos = [0] * 16
        self.steps_logged = 0
        self.tokens_since_log = 0
        self.log_t0 = time.monotonic()


STATE: State


def _faulty(n: int) -> bool:
    only = STATE.knobs["only_requests"]
    return only is None or n in only


def _plan(max_tokens: int) -> list[int]:
    """Tokens per chunk: 1 at prefill, then the speculative steps (the last one cut to fit)."""
    pattern = STATE.knobs["tokens_per_step"] if STATE.knobs["spec"] else [1]
    chunks = [1]
    left = max_tokens - 1
    i = 0
    while left > 0:
        k = min(pattern[i % len(pattern)], left)
        chunks.append(k)
        left -= k
        i += 1
    return chunks[: max(max_tokens, 0)] if max_tokens > 0 else []


def _account(step_tokens: int, running: int) -> None:
    """Engine-side counters and a SGLang-style decode log line every few steps."""
    with STATE.lock:
        STATE.counters["generation"] += step_tokens
        if STATE.knobs["spec"]:
            STATE.counters["drafts"] += 1
            STATE.counters["draft_tokens"] += STATE.knobs["num_spec_tokens"]
            acc = step_tokens - 1
            STATE.counters["accepted"] += acc
            for p in range(acc):
                STATE.per_pos[p] += 1
        STATE.steps_logged += 1
        STATE.tokens_since_log += step_tokens
        every = STATE.knobs["log_every_steps"]
        if every and STATE.steps_logged % every == 0:
            now = time.monotonic()
            tput = STATE.tokens_since_log / max(now - STATE.log_t0, 1e-6)
            STATE.tokens_since_log, STATE.log_t0 = 0, now
            ts = time.strftime("%Y-%m-%d %H:%M:%S")
            acc = f"accept len: {step_tokens:.2f}, " if STATE.knobs["spec"] else ""
            sys.stderr.write(
                f"[{ts} TP0] Decode batch, #running-req: {running}, #token: 100, token usage: 0.01, "
                f"{acc}cuda graph: True, gen throughput (token/s): {tput:.2f}, #queue-req: 0, \n"
            )
            sys.stderr.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    running = 0

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet access log
        pass

    # -- plumbing --------------------------------------------------------------------------------
    def _json(self, code: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _text(self, code: int, text: str, ctype: str = "text/plain") -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data: str) -> None:
        raw = data.encode()
        self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
        self.wfile.flush()

    def _event(self, obj: Any) -> None:
        self._chunk("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n")

    def _cut(self) -> None:
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def _error_body(self, code: int, msg: str) -> dict[str, Any]:
        if STATE.knobs["engine"] == "vllm":
            return {
                "object": "error",
                "message": msg,
                "type": "InternalServerError",
                "param": None,
                "code": code,
            }
        return {"error": {"message": msg, "code": code}}

    # -- GET -------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        k = STATE.knobs
        if self.path == "/health":
            if time.monotonic() - STATE.started < k["health_delay_s"]:
                return self._text(503, "loading")
            return self._text(200, "")
        if self.path == "/_requests":
            with STATE.lock:
                return self._json(200, STATE.received)
        if self.path == "/v1/models":
            return self._json(
                200,
                {"object": "list", "data": [{"id": k["model"], "object": "model", "max_model_len": 4096}]},
            )
        if k["engine"] == "sglang":
            if self.path == "/get_server_info":
                return self._json(
                    200,
                    {
                        "model_path": k["model"],
                        "tp_size": 1,
                        "speculative_algorithm": "EAGLE3" if k["spec"] else None,
                        "speculative_num_steps": 2,
                        "speculative_num_draft_tokens": k["num_spec_tokens"],
                        "api_key": SECRET,
                        "hf_cmd": f"download --token {SECRET}",
                        "version": "0.5.0rc0",
                        "internal_states": [{"avg_spec_accept_length": 2.0}],
                    },
                )
            if self.path == "/get_model_info":
                return self._json(200, {"model_path": k["model"], "is_generation": True})
        else:
            if self.path == "/version":
                return self._json(200, {"version": "0.10.1.1"})
            if self.path == "/metrics":
                return self._text(200, self._metrics(), "text/plain; version=0.0.4")
        return self._json(404, {"detail": "Not Found"})

    def _metrics(self) -> str:
        lab = f'engine="0",model_name="{STATE.knobs["model"]}"'
        c = STATE.counters
        lines = [
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lab}}} {float(c['generation'])}",
        ]
        if STATE.knobs["spec"]:
            for name, key in (
                ("drafts", "drafts"),
                ("draft_tokens", "draft_tokens"),
                ("accepted_tokens", "accepted"),
            ):
                lines += [
                    f"# TYPE vllm:spec_decode_num_{name}_total counter",
                    f"vllm:spec_decode_num_{name}_total{{{lab}}} {float(c[key])}",
                    f"vllm:spec_decode_num_{name}_created{{{lab}}} 1.7e+09",
                ]
            lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
            for p in range(STATE.knobs["num_spec_tokens"]):
                lines.append(
                    f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{p}"}} {float(STATE.per_pos[p])}'
                )
        return "\n".join(lines) + "\n"

    # -- POST ------------------------------------------------------------------------------------
    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path == "/_control":
            knobs = json.loads(raw)
            with STATE.lock:
                if knobs.pop("_reset", False):
                    STATE.knobs = dict(DEFAULTS)
                    STATE.count, STATE.received = 0, []
                    STATE.counters = dict.fromkeys(STATE.counters, 0)
                    STATE.per_pos = [0] * 16
                STATE.knobs.update(knobs)
            return self._json(200, STATE.knobs)
        if self.path not in ("/generate", "/v1/completions", "/v1/chat/completions"):
            return self._json(404, {"detail": "Not Found"})
        body = json.loads(raw)
        with STATE.lock:
            STATE.count += 1
            n = STATE.count
            STATE.received.append(
                {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
            )
        k = STATE.knobs
        die = k["die_after_requests"]
        if die is not None and n > die:
            sys.stderr.write("emulator: dying as asked\n")
            sys.stderr.flush()
            os._exit(3)
        if k["hang_s"] and _faulty(n):
            time.sleep(k["hang_s"])
        if k["status_every"] and n % k["status_every"] == 0:
            return self._json(k["status"], self._error_body(k["status"], "emulated overload"))
        if k["malformed_body"] and not body.get("stream") and _faulty(n):
            return self._text(200, '{"text": "cut', "application/json")
        Handler.running += 1
        try:
            if self.path == "/generate":
                self._sglang(body, n)
            else:
                self._openai(body, n, chat=self.path.endswith("chat/completions"))
        finally:
            Handler.running -= 1

    def _stream_head(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _faults(self, n: int, i: int) -> bool:
        """Apply mid-stream faults before chunk i; True when the stream must end here."""
        k = STATE.knobs
        if not _faulty(n):
            return False
        if k["error_after_chunks"] is not None and i == k["error_after_chunks"]:
            self._event(self._error_body(500, "emulated engine failure mid-stream"))
            self._event("[DONE]")
            self._chunk("")
            return True
        if k["cut_after_chunks"] is not None and i == k["cut_after_chunks"]:
            self._cut()
            return True
        if k["malformed_after_chunks"] is not None and i == k["malformed_after_chunks"]:
            self._chunk('data: {"text": "broken", "meta_info": {\n\n')
        return False

    def _sglang(self, body: dict[str, Any], n: int) -> None:
        k = STATE.knobs
        sp = body.get("sampling_params") or {}
        plan = _plan(int(sp.get("max_new_tokens", 16)))
        rid = f"req{n}"
        text = ""
        t0 = time.monotonic()

        def meta(done: int, steps: int, final: bool) -> dict[str, Any]:
            m: dict[str, Any] = {
                "id": rid,
                "finish_reason": {"type": "length", "length": done} if final else None,
                "prompt_tokens": 7,
                "completion_tokens": done,
                "cached_tokens": 0,
            }
            if k["spec"]:
                m["spec_verify_ct"] = steps
                if not k["old_sglang"] and final and steps:
                    m.update({"spec_accept_length": done / steps, "spec_accept_rate": 0.5})
            if final:
                m["e2e_latency"] = time.monotonic() - t0
            return m

        time.sleep(k["ttft_ms"] / 1000)
        if not body.get("stream"):
            done = 0
            for i, tok in enumerate(plan):
                if i:
                    _step(k)
                    _account(tok, Handler.running)
                done += tok
            text = "".join(f" w{j}" for j in range(done))
            return self._json(
                200,
                {"text": text, "output_ids": list(range(done)), "meta_info": meta(done, len(plan) - 1, True)},
            )
        self._stream_head()
        done = 0
        for i, tok in enumerate(plan):
            if self._faults(n, i):
                return
            if i:
                _step(k)
                _account(tok, Handler.running)
            text += "".join(f" w{j}" for j in range(done, done + tok))
            done += tok
            self._event(
                {
                    "text": text,
                    "output_ids": list(range(done)),
                    "meta_info": meta(done, i, i == len(plan) - 1),
                }
            )
        self._event("[DONE]")
        self._chunk("")

    def _openai(self, body: dict[str, Any], n: int, chat: bool) -> None:
        k = STATE.knobs
        plan = _plan(int(body.get("max_tokens", 16)))
        model = body.get("model")
        if model != k["model"]:
            return self._json(404, self._error_body(404, f"The model `{model}` does not exist."))
        base = {
            "id": f"cmpl-{n}",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
        }
        opts = body.get("stream_options") or {}
        time.sleep(k["ttft_ms"] / 1000)
        total = sum(plan)
        usage_final = {"prompt_tokens": 7, "completion_tokens": total, "total_tokens": 7 + total}
        if not body.get("stream"):
            for i, tok in enumerate(plan):
                if i:
                    _step(k)
                    _account(tok, Handler.running)
            text = "".join(f" w{j}" for j in range(total))
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            out = {**base, "object": "chat.completion" if chat else "text_completion", "choices": [choice]}
            if k["usage"] != "none":
                out["usage"] = usage_final
            return self._json(200, out)
        self._stream_head()
        if chat:
            self._event(
                {
                    **base,
                    "choices": [
                        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                    ],
                }
            )
        done = 0
        for i, tok in enumerate(plan):
            if self._faults(n, i):
                return
            if i:
                _step(k)
                _account(tok, Handler.running)
            piece = "".join(f" w{j}" for j in range(done, done + tok))
            done += tok
            fin = "length" if i == len(plan) - 1 else None
            ch: dict[str, Any] = {"index": 0, "finish_reason": fin}
            if chat:
                ch["delta"] = {"content": piece}
            else:
                ch.update({"text": piece, "logprobs": None, "stop_reason": None})
            ev: dict[str, Any] = {**base, "choices": [ch]}
            if k["usage"] == "continuous" and opts.get("continuous_usage_stats"):
                ev["usage"] = {"prompt_tokens": 7, "completion_tokens": done, "total_tokens": 7 + done}
            self._event(ev)
        if k["usage"] != "none" and opts.get("include_usage"):
            self._event({**base, "choices": [], "usage": usage_final})
        self._event("[DONE]")
        self._chunk("")


def main() -> None:
    global STATE
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--knobs", default="{}")
    args = ap.parse_args()
    STATE = State(json.loads(args.knobs))
    if STATE.knobs["ignore_sigterm"]:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    srv.daemon_threads = True
    sys.stdout.write(f"PORT {srv.server_address[1]}\n")
    sys.stdout.flush()
    sys.stderr.write(f"emulated {STATE.knobs['engine']} server ready (api_key={SECRET})\n")
    sys.stderr.flush()
    srv.serve_forever()


# ---- used by the tests -----------------------------------------------------------------------------

SCRIPT = Path(__file__).resolve()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Emulator:
    """A running emulator process; stop() ends it by its PID."""

    def __init__(self, **knobs: Any) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--knobs", json.dumps(knobs)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"emulator did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def configure(self, **knobs: Any) -> None:
        req = urllib.request.Request(self.url + "/_control", data=json.dumps(knobs).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()

    def reset(self, **knobs: Any) -> Emulator:
        """Back to the defaults (and zero counters), then these knobs."""
        self.configure(_reset=True, **knobs)
        return self

    def received(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.url + "/_requests", timeout=10) as r:
            return json.loads(r.read())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stdout:
            self.proc.stdout.close()


@contextlib.contextmanager
def emulator(**knobs: Any) -> Iterator[Emulator]:
    emu = Emulator(**knobs)
    try:
        yield emu
    finally:
        emu.stop()


def launch_cmd(port: int, **knobs: Any) -> str:
    """A --launch-cmd that starts the emulator on `port` (what a user's sglang command would be)."""
    import shlex

    return shlex.join([sys.executable, str(SCRIPT), "--port", str(port), "--knobs", json.dumps(knobs)])


if __name__ == "__main__":
    main()
