# The __main__.py of the bundle that regdiag uploads to a remote host and runs with that host's python:
#
#     python3 regdiag-bundle-<hash>.zip version
#     python3 regdiag-bundle-<hash>.zip snapshot [--repo PATH] [--all-packages] [--timeout S] [--via ssh]
#     python3 regdiag-bundle-<hash>.zip probe NAME [ARGS...]
#     python3 regdiag-bundle-<hash>.zip warm {serve SOCKET SCRIPT | launch SOCKET ARGS... | stop SOCKET}
#
# It is never imported by regdiag itself. It must run far enough on ANY python to say that the python is
# too old, so it uses no f-strings, annotations or other syntax newer than python 2.7 / 3.0.
import os
import sys

MIN_PYTHON = (3, 9)
EXIT_USAGE = 2
EXIT_TOO_OLD = 97
USAGE = "usage: regdiag-bundle {version | snapshot [--repo PATH] [--all-packages] [--timeout S] | probe NAME [ARGS...]}"


def _fail(message, code):
    sys.stderr.write("regdiag-bundle: " + message + "\n")
    sys.stderr.flush()
    return code


def _bundle_path():
    # Inside a zip, __file__ is <zip>/__main__.py; sys.argv[0] is the zip itself.
    return os.path.abspath(sys.argv[0])


def _version():
    import json

    import regdiag

    info = {"regdiag": regdiag.__version__, "python": sys.version.split()[0], "executable": sys.executable}
    sys.stdout.write(json.dumps(info) + "\n")
    return 0


def _snapshot(args):
    # The collector's own command line (--repo, --all-packages, --timeout, --via, -o): one parser, so the
    # local `python -m regdiag.snapshot` and the remote bundle accept the same arguments.
    try:
        from regdiag.snapshot.__main__ import main as snapshot_main
    except ImportError as e:
        return _fail("snapshot: this bundle has no snapshot code (" + str(e) + ")", 1)
    try:
        return snapshot_main(list(args))
    except SystemExit as e:  # argparse's usage errors
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    except Exception as e:
        import traceback

        traceback.print_exc()
        return _fail("snapshot failed: " + type(e).__name__ + ": " + " ".join(str(e).split()), 1)


def _extracted():
    # Probes may start worker processes that import their script by path (multiprocessing spawn,
    # torchrun), so they run from real files: the bundle is unpacked once, next to itself.
    import shutil
    import tempfile
    import zipfile

    zpath = _bundle_path()
    target = zpath + ".d"
    if os.path.isfile(os.path.join(target, ".complete")):
        return target
    tmp = tempfile.mkdtemp(prefix=os.path.basename(target) + ".", dir=os.path.dirname(zpath))
    with zipfile.ZipFile(zpath) as z:
        z.extractall(tmp)
    open(os.path.join(tmp, ".complete"), "w").close()
    try:
        os.rename(tmp, target)
    except OSError:  # another launch unpacked it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _probe(args):
    import runpy

    if not args:
        return _fail("probe: which probe? " + USAGE, EXIT_USAGE)
    # regdiag sends the script's file name (measure/probes.py); a probe name still works by hand.
    name = args[0][:-3] if args[0].endswith(".py") else args[0].replace("-", "_")
    if not name.replace("_", "").isalnum() or name.startswith("_"):
        return _fail("probe: " + repr(args[0]) + " is not a probe name", EXIT_USAGE)
    root = _extracted()
    probes = os.path.join(root, "regdiag", "probes")
    script = os.path.join(probes, name + ".py")
    if not os.path.isfile(script):
        have = sorted(
            f[:-3].replace("_", "-") for f in os.listdir(probes) if f.endswith(".py") and f[0] != "_"
        )
        return _fail(
            "probe: no probe named " + repr(args[0]) + " (this bundle has: " + ", ".join(have) + ")",
            EXIT_USAGE,
        )
    sys.path[0] = root
    sys.argv = [script] + list(args[1:])
    runpy.run_path(script, run_name="__main__")
    return 0


def _warm(args):
    # The warm interpreter of an environment (probes/_warm.py): serve / launch / stop, from the bundle.
    import runpy

    root = _extracted()
    script = os.path.join(root, "regdiag", "probes", "_warm.py")
    sys.path[0] = os.path.dirname(script)
    sys.argv = [script] + list(args)
    runpy.run_path(script, run_name="__main__")
    return 0


def main(argv):
    if sys.version_info < MIN_PYTHON:
        return _fail(
            "python " + sys.version.split()[0] + " at " + str(sys.executable) + " is too old: regdiag needs "
            "python >= "
            + ".".join(str(v) for v in MIN_PYTHON)
            + " on this host (choose one with --python PATH)",
            EXIT_TOO_OLD,
        )
    if not argv:
        return _fail(USAGE, EXIT_USAGE)
    if argv[0] == "version":
        return _version()
    if argv[0] == "snapshot":
        return _snapshot(argv[1:])
    if argv[0] == "probe":
        return _probe(argv[1:])
    if argv[0] == "warm":
        return _warm(argv[1:])
    return _fail("unknown command " + repr(argv[0]) + "; " + USAGE, EXIT_USAGE)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
