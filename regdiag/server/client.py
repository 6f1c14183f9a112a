"""One HTTP request to an inference server, timed per streamed chunk. Standard library only (and
regdiag.snapshot.fields, which is too).

Three request formats:
  sglang       POST /generate               {"text", "sampling_params", "stream"}
  openai       POST /v1/completions         {"model", "prompt", "max_tokens", "stream", ...}
  openai-chat  POST /v1/chat/completions    {"model", "messages", "max_tokens", "stream", ...}

Streams are Server-Sent Events ("data: {...}" lines, "data: [DONE]" at the end). Output tokens are
counted from the engine's own numbers, never from text: SGLang's meta_info.completion_tokens
(cumulative in every chunk), OpenAI usage.completion_tokens (per chunk with
stream_options.continuous_usage_stats, else the final usage chunk). Only when a server sends
neither is each content chunk counted as one token, and the result says so (token_source
"chunks"). The socket has a connect timeout and a read timeout (the longest wait for the next
bytes), so a stalled server fails one request instead of hanging the run.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from regdiag.snapshot.fields import one_line
from regdiag.snapshot.redact import scrub_text

API_SGLANG = "sglang"
API_OPENAI = "openai"
API_CHAT = "openai-chat"
APIS = (API_SGLANG, API_OPENAI, API_CHAT)

_PATHS = {API_SGLANG: "/generate", API_OPENAI: "/v1/completions", API_CHAT: "/v1/chat/completions"}
_MAX_ERROR_BODY = 64 * 1024


class EndpointError(ValueError):
    """A URL or option that cannot name an endpoint. The message quotes the URL, credentials cut out."""

    def __init__(self, message: str) -> None:
        super().__init__(scrub_text(message))


@dataclass
class Endpoint:
    """Where to send requests. `api_key` is sent as a Bearer token and never stored anywhere."""

    url: str
    api: str = API_SGLANG
    model: str | None = None
    connect_timeout: float = 10.0
    read_timeout: float = 300.0
    api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise EndpointError(f"unknown API {self.api!r}; choose one of {', '.join(APIS)}")
        try:
            parts = urlsplit(self.url if "://" in self.url else f"http://{self.url}")
        except ValueError as e:  # an unclosed [IPv6 bracket
            raise EndpointError(f"{self.url}: not a valid URL ({e})") from None
        if parts.scheme not in ("http", "https"):
            raise EndpointError(f"{self.url}: only http:// and https:// URLs are supported")
        if not parts.hostname:
            raise EndpointError(f"{self.url}: no host in the URL")
        try:
            port = parts.port
        except ValueError:
            raise EndpointError(f"{self.url}: the port is not a number") from None
        if port == 0:  # urlsplit reads ":0" as no port, which then meant port 80
            raise EndpointError(f"{self.url}: port 0 is no port a server listens on (1..65535)")
        if any(c.isspace() or not c.isprintable() for c in parts.netloc):
            raise EndpointError(f"{self.url}: the host holds a space or a control character")
        if parts.username or parts.password:
            raise EndpointError(f"{self.url}: put credentials in --api-key-env, not in the URL")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        # Written so that NaN fails too: a socket refuses it only later, mid-launch.
        if not (0 < self.connect_timeout < math.inf and 0 < self.read_timeout < math.inf):
            raise EndpointError("timeouts must be positive numbers of seconds")

    @property
    def display(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"

    def connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.connect_timeout)
        conn.connect()
        # Connected: from now on the limit is the wait for the next bytes, not the connect.
        assert conn.sock is not None
        conn.sock.settimeout(self.read_timeout)
        return conn

    def headers(self, accept: str = "application/json") -> dict[str, str]:
        h = {"Accept": accept, "User-Agent": "regdiag"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h


class RequestFailed(Exception):
    """One request failed; the message is one line."""


def _describe_os_error(e: BaseException, ep: Endpoint, phase: str) -> str:
    if isinstance(e, ConnectionRefusedError):
        return f"connection refused by {ep.host}:{ep.port} (is the server up?)"
    if isinstance(e, (socket.timeout, TimeoutError)):
        if phase == "connect":
            return f"connect timeout after {ep.connect_timeout:g} s to {ep.host}:{ep.port}"
        return f"read timeout: no data for {ep.read_timeout:g} s"
    if isinstance(e, socket.gaierror):
        return f"cannot resolve host {ep.host!r}"
    if isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
        return "server closed the connection"
    if isinstance(e, http.client.IncompleteRead):
        return "server closed the connection in the middle of a response"
    if isinstance(e, http.client.HTTPException):
        return f"bad HTTP response ({type(e).__name__})"
    if isinstance(e, OSError):
        return f"{e.strerror or type(e).__name__}"
    return f"{type(e).__name__}: {e}"


def _error_message(status: int, body: bytes) -> str:
    text = body.decode("utf-8", "replace")
    msg = text
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            msg = str(err.get("message") or err.get("detail") or err)
        elif isinstance(err, str):
            msg = err
        elif "detail" in obj:
            msg = str(obj["detail"])
    return f"HTTP {status}: {one_line(msg, 200) or http.client.responses.get(status, '')}"


def simple_get(ep: Endpoint, path: str, accept: str = "application/json") -> tuple[int, bytes]:
    """GET a small document (health, metrics, server info). Raises RequestFailed on transport errors."""
    phase = "connect"
    conn = None
    try:
        conn = ep.connection()
        phase = "read"
        conn.request("GET", ep.prefix + path, headers=ep.headers(accept))
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException) as e:
        raise RequestFailed(f"GET {path}: {_describe_os_error(e, ep, phase)}") from None
    finally:
        if conn is not None:
            conn.close()


def get_json(ep: Endpoint, path: str) -> Any:
    """GET a JSON document; None when the server does not offer it (4xx), RequestFailed otherwise."""
    status, body = simple_get(ep, path)
    if 400 <= status < 500:
        return None
    if status >= 500:
        raise RequestFailed(f"GET {path}: {_error_message(status, body)}")
    try:
        return json.loads(body)
    except ValueError:
        raise RequestFailed(f"GET {path}: malformed JSON in the response") from None


def build_request(
    api: str, prompt: str, *, max_tokens: int, stream: bool, ignore_eos: bool, model: str | None
) -> tuple[str, dict[str, Any]]:
    """The path and JSON body of one greedy (temperature 0) generation request."""
    if api == API_SGLANG:
        params: dict[str, Any] = {"temperature": 0.0, "max_new_tokens": max_tokens}
        if ignore_eos:
            params["ignore_eos"] = True
        return _PATHS[api], {"text": prompt, "sampling_params": params, "stream": stream}
    body: dict[str, Any] = {"model": model or "default", "max_tokens": max_tokens, "temperature": 0.0}
    if api == API_CHAT:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if ignore_eos:
        body["ignore_eos"] = True  # an extension both vLLM and SGLang accept
    body["stream"] = stream
    if stream:
        # Per-chunk usage gives exact token counts per chunk (several tokens per chunk with speculation).
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return _PATHS[api], body


@dataclass
class RequestResult:
    """What one request measured. Times are seconds from the moment the request was started."""

    index: int
    prompt_index: int
    ok: bool = False
    error: str | None = None
    http_status: int | None = None
    started: float = 0.0  # perf_counter at start, for ordering within a launch
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int | None = None
    token_source: str = "none"
    chunk_times: list[float] = field(default_factory=list)  # arrival of each token-bearing chunk
    chunk_tokens: list[int] = field(default_factory=list)  # new tokens in that chunk
    spec_verify_ct: int | None = None
    finish_reason: str | None = None
    events: int = 0

    @property
    def itl_s(self) -> float | None:
        """Mean time per output token after the first chunk: the decode rate a user sees."""
        if len(self.chunk_times) < 2:
            return None
        # The engine's total when it gave one (per-chunk counts may be approximate, see token_source).
        total = self.output_tokens if self.output_tokens is not None else sum(self.chunk_tokens)
        after_first = total - self.chunk_tokens[0]
        if after_first <= 0:
            return None
        return (self.chunk_times[-1] - self.chunk_times[0]) / after_first

    @property
    def accept_len(self) -> float | None:
        """SGLang's own accounting: tokens per verify step (includes the bonus token)."""
        if self.spec_verify_ct and self.output_tokens:
            return self.output_tokens / self.spec_verify_ct
        return None

    def gaps_ms(self) -> list[float]:
        return [
            round((b - a) * 1000.0, 4)
            for a, b in zip(self.chunk_times[:-1], self.chunk_times[1:], strict=True)
        ]


class _Tokens:
    """Turns each event into (new tokens) using the best count the server gives."""

    def __init__(self, result: RequestResult) -> None:
        self.r = result
        self.count = 0
        self.exact = False

    def cumulative(self, total: int) -> int:
        self.exact = True
        new = total - self.count
        self.count = max(self.count, total)
        return max(new, 0)


def _finish_reason(value: Any) -> str | None:
    if isinstance(value, dict):  # SGLang: {"type": "length", "length": 64}
        return str(value.get("type")) if value.get("type") is not None else json.dumps(value)
    return None if value is None else str(value)


def _event_error(ev: dict[str, Any]) -> str | None:
    if ev.get("object") == "error":
        return one_line(str(ev.get("message") or ev), 200)
    err = ev.get("error")
    if err:
        if isinstance(err, dict):
            return one_line(str(err.get("message") or err), 200)
        return one_line(str(err), 200)
    return None


def _apply_event(api: str, ev: Any, tok: _Tokens) -> int:
    """Update the result from one decoded JSON event; return the new tokens it brought."""
    r = tok.r
    if not isinstance(ev, dict):
        raise RequestFailed(f"unexpected event (a JSON {type(ev).__name__}, not an object)")
    err = _event_error(ev)
    if err:
        raise RequestFailed(f"server error in the stream: {err}")
    if api == API_SGLANG:
        meta = ev.get("meta_info") or {}
        if "spec_verify_ct" in meta and isinstance(meta["spec_verify_ct"], int):
            r.spec_verify_ct = meta["spec_verify_ct"]
        if meta.get("finish_reason") is not None:
            r.finish_reason = _finish_reason(meta["finish_reason"])
        ct = meta.get("completion_tokens")
        if isinstance(ct, int):
            r.token_source = "meta_info.completion_tokens"
            return tok.cumulative(ct)
        if tok.exact:
            return 0
        r.token_source = "chunks"
        tok.count += 1 if ev.get("text") else 0
        return 1 if ev.get("text") else 0
    choices = ev.get("choices") or []
    usage = ev.get("usage") if isinstance(ev.get("usage"), dict) else None
    text = ""
    for ch in choices[:1]:
        if not isinstance(ch, dict):
            continue
        if api == API_CHAT:
            delta = ch.get("delta") or ch.get("message") or {}
            text = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
        else:
            text = ch.get("text") or ""
        if ch.get("finish_reason") is not None:
            r.finish_reason = _finish_reason(ch["finish_reason"])
    ct = usage.get("completion_tokens") if usage else None
    if isinstance(ct, int):
        if r.token_source == "none":
            r.token_source = "usage.completion_tokens"  # usage in every chunk: exact per chunk
        elif r.token_source == "chunks":
            # Usage only at the end (a chunk of its own, or llama.cpp's last chunk): the total is
            # exact, the earlier per-chunk counts were one per content chunk.
            r.token_source = "chunks; total from usage.completion_tokens"
        new = tok.cumulative(ct)
        # A chunk that only settles the total (no choices, or no text after counted chunks) is not
        # a token arrival.
        if not choices or (r.token_source != "usage.completion_tokens" and not text):
            return 0
        return new
    if tok.exact or not text:
        return 0
    r.token_source = "chunks"
    tok.count += 1
    return 1


def _sse_events(resp: http.client.HTTPResponse):  # type: ignore[no-untyped-def]
    """Yield (arrival time, data payload) per Server-Sent Event; '[DONE]' is yielded as is."""
    buf: list[str] = []
    t_first: float | None = None
    while True:
        raw = resp.readline()
        if not raw:
            break
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if buf:
                yield t_first, "\n".join(buf)
                buf, t_first = [], None
            continue
        if line.startswith(":"):
            continue
        if line.startswith("data:"):
            if not buf:
                t_first = time.perf_counter()
            payload = line[5:]
            buf.append(payload[1:] if payload.startswith(" ") else payload)
            if buf[-1].strip() == "[DONE]":
                yield t_first, "[DONE]"
                return
    if buf:
        yield t_first, "\n".join(buf)


def send(
    ep: Endpoint,
    prompt: str,
    *,
    index: int = 0,
    prompt_index: int = 0,
    max_tokens: int = 128,
    stream: bool = True,
    ignore_eos: bool = True,
) -> RequestResult:
    """Send one request and time it. Never raises for a server or network problem: the result
    carries ok=False and a one-line error, with everything received before the failure."""
    r = RequestResult(index=index, prompt_index=prompt_index)
    path, body = build_request(
        ep.api, prompt, max_tokens=max_tokens, stream=stream, ignore_eos=ignore_eos, model=ep.model
    )
    data = json.dumps(body).encode()
    tok = _Tokens(r)
    t0 = time.perf_counter()
    r.started = t0
    conn = None
    phase = "connect"
    try:
        conn = ep.connection()
        phase = "read"
        headers = ep.headers("text/event-stream" if stream else "application/json")
        headers["Content-Type"] = "application/json"
        conn.request("POST", ep.prefix + path, body=data, headers=headers)
        resp = conn.getresponse()
        r.http_status = resp.status
        if resp.status >= 400:
            raise RequestFailed(_error_message(resp.status, resp.read(_MAX_ERROR_BODY)))
        if stream:
            _read_stream(ep, resp, r, tok, t0)
        else:
            _read_whole(ep, resp, r, tok, t0)
        r.ok = True
    except RequestFailed as e:
        r.error = str(e)
    except (OSError, http.client.HTTPException) as e:
        r.error = _describe_os_error(e, ep, phase)
        if r.events:
            r.error += f" after {r.events} stream events"
    finally:
        if conn is not None:
            conn.close()
    r.output_tokens = tok.count if r.token_source != "none" else None
    if r.ok:
        r.e2e_s = time.perf_counter() - t0
    if stream and r.chunk_times:
        r.ttft_s = r.chunk_times[0]
    return r


def _read_stream(
    ep: Endpoint, resp: http.client.HTTPResponse, r: RequestResult, tok: _Tokens, t0: float
) -> None:
    done = False
    for t, payload in _sse_events(resp):
        if payload == "[DONE]":
            done = True
            break
        r.events += 1
        try:
            ev = json.loads(payload)
        except ValueError:
            raise RequestFailed(
                f"malformed JSON in stream event {r.events}: {one_line(payload, 60)!r}"
            ) from None
        new = _apply_event(ep.api, ev, tok)
        if new > 0:
            r.chunk_times.append((t or time.perf_counter()) - t0)
            r.chunk_tokens.append(new)
    if not done:
        # Some servers close right after the last chunk; a finish_reason shows the answer is whole.
        if r.finish_reason is None:
            raise RequestFailed(f"stream ended without [DONE] after {r.events} events")


def _read_whole(
    ep: Endpoint, resp: http.client.HTTPResponse, r: RequestResult, tok: _Tokens, t0: float
) -> None:
    raw = resp.read()
    try:
        obj = json.loads(raw)
    except ValueError:
        raise RequestFailed(
            f"malformed JSON in the response: {one_line(raw.decode('utf-8', 'replace'), 60)!r}"
        ) from None
    if isinstance(obj, list) and len(obj) == 1:  # SGLang answers a batch form with a list
        obj = obj[0]
    r.events = 1
    _apply_event(ep.api, obj, tok)
    if not tok.exact:  # a whole answer without a token count: counting chunks would say 1
        r.token_source = "none"
        tok.count = 0
    r.chunk_times.append(time.perf_counter() - t0)
    r.chunk_tokens.append(tok.count)
