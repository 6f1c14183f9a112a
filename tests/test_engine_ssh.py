"""`probe engine --host`: the hook shipped over SFTP to a real sshd on loopback, the engine started and
stopped there, the hook's files read back over the same connection."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from server_helpers import free_port
from sshd_helpers import Sshd, sshd  # noqa: F401 - sshd is a fixture

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "engine_fake"


@pytest.mark.ssh
def test_engine_probe_over_ssh(cli, sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    port = free_port()
    out = tmp_path / "run.json"
    r = cli(
        "probe", "engine", "--host", "regdiag-test", "--ssh-config", str(sshd.ssh_config),
        "--python", sys.executable, "--no-snapshot", "-L", "1", "-R", "2", "--max-tokens", "30",
        "--launch-cmd", f"PYTHONPATH={FAKE}/site {sys.executable} {FAKE}/fake_engine.py --port {port}",
        "--url", f"http://127.0.0.1:{port}",
        "--phase", "draft=fake_spec:SpecWorker.draft", "--phase", "verify=fake_spec:SpecWorker.verify",
        "--sync", "fake_spec:SpecWorker.commit", "-o", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = json.loads(out.read_text())
    la = run["launches"][0]
    assert run["host"]["via"] == "ssh"
    assert la["status"] == "ok" and la["processes_timed"] == 2
    assert la["header"]["chained_sitecustomize"] == str(FAKE / "site" / "sitecustomize.py")
    assert len(la["samples"]["verify"]) > 0 and la["server_process"]["stopped_by"] == "SIGTERM"
    assert run["engine"]["targets_checked"][0]["state"] == "ok"
