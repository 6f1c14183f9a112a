"""Run a command in a pseudo-terminal and read what its screen ends up showing.

`run_in_pty` gives the command a real pty (stdout and stderr both, as a terminal gives them) of a
chosen size and collects every byte; `Screen` replays those bytes as a terminal would: carriage
returns, line feeds, cursor moves, line erases (what rich's live status and progress use), colours
ignored. The final screen is what a user scrolls back through, so a spinner's text that was never
erased, or a line printed behind it, shows there.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

CSI = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z])")
OSC = re.compile(r"\x1b\][^\x07\x1b]*(\x07|\x1b\\)")


class Screen:
    """A terminal of `width` columns and unbounded scrollback."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.lines: list[list[str]] = [[]]
        self.row = 0
        self.col = 0

    def _line(self) -> list[str]:
        while len(self.lines) <= self.row:
            self.lines.append([])
        return self.lines[self.row]

    def _put(self, ch: str) -> None:
        if self.col >= self.width:  # auto-wrap at the right edge
            self.row, self.col = self.row + 1, 0
        line = self._line()
        while len(line) < self.col:
            line.append(" ")
        if self.col < len(line):
            line[self.col] = ch
        else:
            line.append(ch)
        self.col += 1

    def _csi(self, params: str, cmd: str) -> None:
        n = int(params) if params.isdigit() else None
        if cmd == "A":
            self.row = max(0, self.row - (n or 1))
        elif cmd == "B":
            self.row += n or 1
        elif cmd == "C":
            self.col += n or 1
        elif cmd == "D":
            self.col = max(0, self.col - (n or 1))
        elif cmd == "G":
            self.col = max(0, (n or 1) - 1)
        elif cmd == "K":
            line = self._line()
            if n in (None, 0):
                del line[self.col :]
            elif n == 1:
                line[: self.col] = [" "] * min(self.col, len(line))
            else:
                line.clear()
        elif cmd == "J" and n in (None, 0):
            del self._line()[self.col :]
            del self.lines[self.row + 1 :]

    def feed(self, data: str) -> None:
        data = OSC.sub("", data)
        i = 0
        while i < len(data):
            ch = data[i]
            if ch == "\x1b":
                m = CSI.match(data, i)
                if m:
                    self._csi(m.group(1), m.group(2))
                    i = m.end()
                    continue
                i += 2  # a two-byte escape (charset selection and the like)
                continue
            if ch == "\r":
                self.col = 0
            elif ch == "\n":
                self.row, self.col = self.row + 1, 0
            elif ch == "\b":
                self.col = max(0, self.col - 1)
            elif ch >= " ":
                self._put(ch)
            i += 1

    def text(self) -> list[str]:
        return ["".join(ln).rstrip() for ln in self.lines]


def run_in_pty(
    args: list[str], env: dict[str, str], cols: int = 80, rows: int = 24, timeout: float = 600
) -> tuple[int, str]:
    """Run `args` with stdin, stdout and stderr a pty of `cols` x `rows`: (exit status, all output)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(
        args, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True, start_new_session=True
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the other side closed
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
            raise TimeoutError(f"{args} ran past {timeout} s")
    finally:
        os.close(master)
    return proc.wait(timeout=30), b"".join(chunks).decode("utf-8", "replace")


def python_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "regdiag", *args]
