"""One entry point for tests, lint, types and benchmarks: `nox -s tests full lint typecheck bench`."""

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True


def _install(session: nox.Session, *extras: str) -> None:
    # The CPU build of torch first, so the project's `torch>=2.4` is already satisfied.
    session.install("torch==2.13.0")
    session.install("-e", f".[{','.join(extras)}]" if extras else ".")


def _pytest(session: nox.Session, tier: str) -> None:
    _install(session, "test")
    session.run(
        "python",
        "-m",
        "pytest",
        "-q",
        "-n",
        "auto",
        "--dist",
        "loadfile",
        "-m",
        tier,
        "tests",
        *session.posargs,
    )


@nox.session
def tests(session: nox.Session) -> None:
    """The fast tier (the README's test command): units, properties, one real path per area."""
    _pytest(session, "not slow")


@nox.session
def full(session: nox.Session) -> None:
    """The full tier: real vLLM, real Slurm, many real launches (`.ci/run` runs both tiers)."""
    _pytest(session, "slow")


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "regdiag", "probes", "tests", "bench")
    session.run("ruff", "format", "--check", "regdiag", "probes", "tests", "bench")


@nox.session
def typecheck(session: nox.Session) -> None:
    _install(session)
    session.install("mypy")
    session.run("mypy", "regdiag")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks whose results go to docs/benchmarks.md (one section per script)."""
    _install(session, "test", "dev")
    session.run("python", "bench/run_all.py", *session.posargs)
