"""SIGINT, SIGTERM and SIGHUP end regdiag the same way: as an interruption that every layer already
handles (finished work kept, children stopped), with the exit status of the signal.

Python turns only SIGINT into an exception (KeyboardInterrupt); SIGTERM and SIGHUP would end the process
on the spot, skipping every `finally` that stops a probe, a server or a bisect's child, and leaving
them running (a TP=2 probe then holds 118 GiB per GPU until someone finds it). `install()` makes them
raise `Terminated`, a KeyboardInterrupt, so the same code paths run. A dropped SSH session delivers
SIGHUP.

Exit statuses (docs/cli.md): 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

_NAMES = {
    signal.SIGINT: "interrupted (Ctrl-C)",
    signal.SIGTERM: "terminated (SIGTERM)",
    signal.SIGHUP: "hung up (SIGHUP)",
}
_received: list[int] = []
_deferring: list[int] = []  # signals held back while a child process is being started
_depth = [0]


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread like Ctrl-C's KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def _handler(signum: int, _frame: FrameType | None) -> None:
    _received.append(signum)
    if _depth[0] > 0:
        _deferring.append(signum)
        return
    _raise(signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold an interruption back until the block is done: around starting a child process, so that
    the child is never started without its handle reaching the code that will stop it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _depth[0] += 1
    try:
        yield
    finally:
        _depth[0] -= 1
        if _depth[0] == 0 and _deferring:
            sig = _deferring[0]
            _deferring.clear()
            _raise(sig)


def install() -> None:
    """Route SIGINT, SIGTERM and SIGHUP to exceptions (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_IGN:
            continue  # nohup: the user asked for this one to be ignored
        signal.signal(sig, _handler)


def last_signal() -> int | None:
    return _received[-1] if _received else None


def signal_of(exc: BaseException | None = None) -> int:
    """The signal behind an interruption: the exception's own, else the last one received, else SIGINT."""
    if isinstance(exc, Terminated):
        return exc.signum
    return last_signal() or int(signal.SIGINT)


def exit_status(exc: BaseException | None = None) -> int:
    return 128 + signal_of(exc)


def describe(exc: BaseException | None = None) -> str:
    sig = signal_of(exc)
    return _NAMES.get(signal.Signals(sig), f"stopped by signal {sig}")
