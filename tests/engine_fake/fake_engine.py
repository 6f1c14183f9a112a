"""A tiny inference "engine" for `regdiag probe engine` tests: an HTTP server (SGLang's /generate,
non-streaming) that drives --workers fresh worker processes, each running the speculative cycles
of fake_spec.SpecWorker, until a request's max_new_tokens are produced (or, with --tokens, runs
one generation and exits, like a script). It refuses to start when
its own sitecustomize did not run."""

import argparse
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

if not getattr(sys, "_fake_engine_site_ran", False):
    sys.stderr.write("fake engine: its own sitecustomize did not run\n")
    sys.exit(3)

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, help="serve HTTP on this port")
ap.add_argument("--tokens", type=int, help="instead of serving: generate this many tokens, then exit")
ap.add_argument("--workers", type=int, default=2)
args = ap.parse_args()

here = os.path.dirname(os.path.abspath(__file__))
workers = [
    subprocess.Popen(
        [sys.executable, os.path.join(here, "fake_worker.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    for _ in range(args.workers)
]
lock = threading.Lock()


def generate(max_tokens: int) -> int:
    produced = 0
    with lock:
        while produced < max_tokens:
            for w in workers:
                w.stdin.write("STEPS 1\n")
            counts = [int(w.stdout.readline().split()[1]) for w in workers]
            produced += counts[0]
    return produced


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self._send(200, {"ok": True})
        else:
            self._send(404, {"detail": "not found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path != "/generate":
            self._send(404, {"detail": "not found"})
            return
        n = generate(int(body.get("sampling_params", {}).get("max_new_tokens", 16)))
        self._send(
            200,
            {
                "text": "x" * n,
                "meta_info": {"completion_tokens": n, "finish_reason": {"type": "length", "length": n}},
            },
        )


# What an engine prints of the configuration it chose at start (vLLM's wording), so a bisect can name
# a change of it beside its culprit (regdiag/server/engine_config.py).
if os.environ.get("FAKE_ATTN_BACKEND"):
    print(f"Using {os.environ['FAKE_ATTN_BACKEND']} attention backend.", flush=True)

if args.tokens is not None:
    print(f"generated {generate(args.tokens)} tokens", flush=True)
    for w in workers:
        w.stdin.close()
        w.wait()
else:
    HTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
