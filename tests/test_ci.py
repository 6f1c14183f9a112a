"""`.ci/run` runs the README's test command, in a venv (the user's layout), and nothing else installs
the Python side: a command that only CI's machine knows would pass there and fail for a user."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```bash\n(python3 -m pip install [^\n]+)\n```", text)


def test_ci_runs_the_readme_test_command_inside_a_fresh_venv() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = _readme_commands()
    test_cmd = [c for c in commands if "pytest" in c]
    assert len(test_cmd) == 1, commands
    lines = [ln.strip() for ln in ci.splitlines()]
    assert test_cmd[0] in lines
    at = lines.index(test_cmd[0])
    before = lines[:at]
    assert "python3 -m venv .venv" in before and ". .venv/bin/activate" in before
    assert before.index("python3 -m venv .venv") < before.index(". .venv/bin/activate")
    # nothing before the venv installs regdiag's Python side into the system interpreter
    assert not [ln for ln in before if re.match(r"(python3? -m )?pip3? install .*-e", ln)]


def test_the_install_command_is_the_test_commands_without_test_extras() -> None:
    install, test = _readme_commands()
    assert install.startswith("python3 -m pip install torch==2.13.0 -e .")
    assert test.startswith("python3 -m pip install torch==2.13.0 -e '.[test]'")


def test_every_package_directory_is_in_the_wheel() -> None:
    """pyproject lists its packages by hand (probes/ is mapped in as regdiag.probes): a package missing
    there works in an editable install and is absent from a wheel."""
    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "regdiag").rglob("__init__.py")} | {
        "regdiag.probes"
    }
    assert found == listed, (sorted(found - listed), sorted(listed - found))
