"""R requests at concurrency C, in threads; every request's outcome is kept, failed ones included.

Threads rather than asyncio: the client is blocking http.client (standard library only), the
concurrency of a latency benchmark is small (1 to a few dozen streams), and a thread per stream
keeps each request's timing free of an event loop shared with the others.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from regdiag.server.client import Endpoint, RequestResult, send

BUILTIN_PROMPTS: tuple[str, ...] = (
    "Explain, step by step, how a hash map handles collisions.",
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Summarize the causes of the French Revolution in a short paragraph.",
    "List ten fruits and one fact about each.",
    "Translate into French: The weather is nice today and we are going to the beach.",
    "What is the derivative of x^3 * sin(x)? Show the work.",
    "Write a haiku about a GPU waiting for memory.",
    "Describe the difference between TCP and UDP for a beginner.",
)


def load_prompts(path: str) -> list[str]:
    """One prompt per non-empty line, or JSON lines with a "prompt" or "text" field (or a JSON string)."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file (not UTF-8)") from None
    prompts: list[str] = []
    jsonl = path.endswith((".jsonl", ".json"))
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if jsonl:
            try:
                obj = json.loads(line)
            except ValueError:
                raise ValueError(f"{path}: line {n} is not valid JSON") from None
            if isinstance(obj, dict):
                obj = obj.get("prompt", obj.get("text"))
            if not isinstance(obj, str):
                raise ValueError(f'{path}: line {n} has no "prompt" or "text" string')
            prompts.append(obj)
        else:
            prompts.append(line)
    if not prompts:
        raise ValueError(f"{path}: no prompts in the file")
    return prompts


@dataclass
class LoadSpec:
    requests: int = 8
    concurrency: int = 1
    max_tokens: int = 128
    stream: bool = True
    ignore_eos: bool = True


def run_load(
    ep: Endpoint,
    prompts: Sequence[str],
    spec: LoadSpec,
    *,
    first_index: int = 0,
    on_result: Callable[[RequestResult], None] | None = None,
    stop: threading.Event | None = None,
) -> tuple[list[RequestResult], float]:
    """Send spec.requests requests with spec.concurrency in flight; return (results, wall seconds).

    `on_result` is called (under a lock) as each request finishes, so callers can write results
    to disk as they arrive. Setting `stop` lets the in-flight requests finish and starts no more.
    On KeyboardInterrupt the finished results so far are returned through `on_result` already.
    """
    results: list[RequestResult] = []
    lock = threading.Lock()
    next_i = [0]
    stop = stop or threading.Event()

    def worker() -> None:
        while not stop.is_set():
            with lock:
                i = next_i[0]
                if i >= spec.requests:
                    return
                next_i[0] += 1
            p = (first_index + i) % len(prompts)
            r = send(
                ep,
                prompts[p],
                index=i,
                prompt_index=p,
                max_tokens=spec.max_tokens,
                stream=spec.stream,
                ignore_eos=spec.ignore_eos,
            )
            with lock:
                results.append(r)
                if on_result is not None:
                    on_result(r)

    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=worker, daemon=True)
        for _ in range(max(1, min(spec.concurrency, spec.requests)))
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.2)  # short joins keep Ctrl-C responsive in the main thread
    except BaseException:
        stop.set()
        raise
    return results, time.perf_counter() - t0
