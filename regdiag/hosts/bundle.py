"""The one file regdiag ships to a host to run there: a zip that the host's python runs directly.

Contents: regdiag/__init__.py, regdiag/version.py, regdiag/records.py, regdiag/json_bounds.py, regdiag/files.py, regdiag/snapshot/ (stdlib only), the
probes as regdiag/probes/*.py, and a __main__.py (bundle_main.py) that checks the python version first
and then dispatches `version`, `snapshot ...` or `probe NAME ...`. Nothing else of regdiag goes there, so the
host needs python >= 3.9 and nothing installed.

The zip is byte-for-byte reproducible (sorted names, fixed timestamps), so its sha256 names it: a host
gets it uploaded once per connection, and the local copy is kept in the regdiag cache directory.

BundleHost is a Host that runs regdiag's own code from the bundle: what SSHHost (and, for its
interpreter check, SlurmNode) take; LocalHost runs it from this machine's files.
"""

from __future__ import annotations

import hashlib
import io
import threading
import weakref
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import regdiag
from regdiag.hosts.base import CommandResult, Host
from regdiag.probe_modules import probes_dir

_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_lock = threading.Lock()
_built: Bundle | None = None


@dataclass(frozen=True)
class Bundle:
    data: bytes
    sha256: str
    files: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"regdiag-bundle-{self.sha256[:16]}.zip"


def bundle_files() -> dict[str, bytes]:
    """Archive name -> content, for everything the bundle holds."""
    root = Path(regdiag.__file__).parent
    files: dict[str, bytes] = {
        "__main__.py": (root / "hosts" / "bundle_main.py").read_bytes(),
        "regdiag/__init__.py": (root / "__init__.py").read_bytes(),
        "regdiag/version.py": (root / "version.py").read_bytes(),
        "regdiag/records.py": (root / "records.py").read_bytes(),
        "regdiag/files.py": (root / "files.py").read_bytes(),
        "regdiag/json_bounds.py": (root / "json_bounds.py").read_bytes(),
        "regdiag/probe_modules.py": (root / "probe_modules.py").read_bytes(),
    }
    snapshot = root / "snapshot"
    if snapshot.is_dir():
        for f in sorted(snapshot.rglob("*.py")):
            if "__pycache__" not in f.parts:
                files["regdiag/snapshot/" + f.relative_to(snapshot).as_posix()] = f.read_bytes()
    probes = probes_dir()
    files["regdiag/probes/__init__.py"] = b""
    if probes is not None and probes.is_dir():
        for f in sorted(probes.glob("*.py")):
            files["regdiag/probes/" + f.name] = f.read_bytes()
    return files


def make_zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, files[name])
    return buf.getvalue()


def build_bundle() -> Bundle:
    """The bundle for this regdiag, built once per process."""
    global _built
    with _lock:
        if _built is None:
            files = bundle_files()
            data = make_zip(files)
            _built = Bundle(data, hashlib.sha256(data).hexdigest(), tuple(sorted(files)))
        return _built


def local_bundle_path() -> Path:
    """The bundle as a file on this machine (for running it with another local interpreter)."""
    from regdiag.files import atomic_write_bytes, regdiag_home

    b = build_bundle()
    path = regdiag_home() / "cache" / b.name
    if not path.is_file() or path.stat().st_size != len(b.data):
        atomic_write_bytes(path, b.data)  # a private temporary file renamed over: no planted name is opened
    return path


EXIT_PYTHON_TOO_OLD = 97  # bundle_main.EXIT_TOO_OLD
_uploads: weakref.WeakKeyDictionary[Host, str] = weakref.WeakKeyDictionary()
_uploads_lock = threading.Lock()


def upload_bundle(host: Host) -> str:
    """Where the bundle is on `host`, uploaded on first use for this connection: through the host's own
    `upload_once` where it has one (SSH), else into a temp dir per host object."""
    b = build_bundle()
    upload_once = getattr(host, "upload_once", None)
    if upload_once is not None:
        return str(upload_once(b.sha256, lambda: b.data, b.name))
    with _uploads_lock:
        if host not in _uploads:
            d = host.make_tempdir()
            path = f"{d}/{b.name}"
            host.put_file(local_bundle_path(), path)
            _uploads[host] = path
            weakref.finalize(host, _quiet_remove, host.remove_tree, d)
        return _uploads[host]


def _quiet_remove(remove: Callable[[str], None], path: str) -> None:
    try:
        remove(path)
    except Exception:
        pass


def check_interpreter(host: Host, res: CommandResult) -> None:
    """HostError when the result says the host's python could not run the bundle at all."""
    from regdiag.errors import HostError

    err = res.stderr.decode("utf-8", "replace")
    if res.returncode in (126, 127) and host.python in err:
        what = "is not executable" if res.returncode == 126 else "was not found"
        raise HostError(
            f"{host.name}: python interpreter {host.python!r} {what}; pass the right one with --python PATH"
        )
    if res.returncode == EXIT_PYTHON_TOO_OLD and "regdiag-bundle:" in err:
        line = next(ln for ln in err.splitlines() if "regdiag-bundle:" in ln)
        raise HostError(f"{host.name}: {line.split('regdiag-bundle:', 1)[1].strip()}")


class BundleHost(Host):
    """A host kind that runs regdiag's own code from the bundle (SSH; a Slurm node checks its interpreter
    alike), where hosts/base.py leaves it to each kind."""

    def regdiag_argv(self, entry: Sequence[str], python: str | None = None) -> list[str]:
        """`python BUNDLE *entry`: the bundle uploaded once per connection (upload_bundle)."""
        return [python or self.python, upload_bundle(self), *entry]

    def check_regdiag(self, res: CommandResult) -> None:
        check_interpreter(self, res)
