"""Errors that reach the user as one line, and the exit codes they map to.

Exit codes (documented in docs/cli.md):
  0  success; for compare: unchanged or improved; for snapshot --check: fit for benchmarking
  1  regression found (compare), machine not fit (snapshot --check)
  2  bad input: unreadable or wrong record, bad option value, unknown preset
  3  inconclusive (compare, bisect)
  4  host error: connection, authentication, host key, remote python
  5  the measured program failed (probe crashed, server died)
  141 output closed: the reader of stdout or stderr went away (`| head -1`); nothing more is printed
      and the verdict is not reported, so a pipe's early exit never reads as a regression
  129 / 130 / 143  hung up (SIGHUP) / interrupted (Ctrl-C) / terminated (SIGTERM); everything finished
      before it is kept, every process regdiag started is stopped (regdiag.interrupts)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_REGRESSED = 1
EXIT_BAD_INPUT = 2
EXIT_INCONCLUSIVE = 3
EXIT_HOST = 4
EXIT_PROBE = 5
EXIT_INTERRUPTED = 130
EXIT_OUTPUT_CLOSED = 141  # 128 + SIGPIPE, what the shell shows for a tool killed by a closed pipe

# `--git-bisect` (docs/compare.md, "Under git bisect run"): git reads 0 as good, 125 as skip, 1-127 as
# bad and anything above 127 as "stop the bisection". regdiag's own codes say more than git can hear,
# so under that switch: a verdict that is no verdict (INCONCLUSIVE), a measurement that failed, input
# that cannot be used (a record this commit could not make) and an unreachable host skip the commit;
# a command line that cannot be parsed, or regdiag failing, stops the bisection (every commit would
# fail alike); interrupted, hung up or output closed already exit above 127 and stop it too.
GIT_SKIP = 125
GIT_STOP = 128
GIT_BISECT = {
    EXIT_OK: EXIT_OK,
    EXIT_REGRESSED: EXIT_REGRESSED,
    EXIT_BAD_INPUT: GIT_SKIP,
    EXIT_INCONCLUSIVE: GIT_SKIP,
    EXIT_HOST: GIT_SKIP,
    EXIT_PROBE: GIT_SKIP,
}


def for_git_bisect(code: int) -> int:
    """The exit status git bisect run should see for one of regdiag's exit statuses."""
    return GIT_BISECT.get(code, code if code > 127 else GIT_STOP)


def escape_controls(message: str) -> str:
    """The message as the one line it is shown as: a line break in it (a file name can hold one) and any
    other control character (a NUL, a terminal escape read from a file) are shown escaped, as Python
    writes them, instead of breaking the line or being acted on by the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message.strip())


def error_line(message: str) -> str:
    """The one `regdiag: error: ...` line every error is shown as: secrets scrubbed out (an error can
    quote a command line, a URL or a host spec; regdiag.snapshot.redact), control characters escaped."""
    from regdiag.snapshot.redact import scrub_text

    return f"regdiag: error: {escape_controls(scrub_text(message))}\n"


class RegdiagError(Exception):
    """An error meant for the user: one line, and an exit code."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class BadInput(RegdiagError):
    exit_code = EXIT_BAD_INPUT


class HostError(RegdiagError):
    exit_code = EXIT_HOST


class ProbeError(RegdiagError):
    exit_code = EXIT_PROBE
