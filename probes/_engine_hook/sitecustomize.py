"""regdiag's engine hook: loaded by Python at start-up in every process of the engine (PYTHONPATH).

It first runs the sitecustomize that would have run without it (the next one on sys.path), then,
when REGDIAG_ENGINE_HOOK names a configuration, installs the phase timer. Nothing here may stop the
engine from starting: a failure is written to the hook's output as one error line.
"""

import os
import sys


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    seen_self = False
    for entry in list(sys.path):
        d = os.path.abspath(entry or os.getcwd())
        if d == here:
            seen_self = True
            continue
        if not seen_self:
            continue
        path = os.path.join(d, "sitecustomize.py")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                code = compile(f.read(), path, "exec")
            namespace = {"__name__": "sitecustomize", "__file__": path, "__builtins__": __builtins__}
            exec(code, namespace)
            os.environ.setdefault("REGDIAG_ENGINE_HOOK_CHAINED", path)
            return


_chain_next_sitecustomize()

if os.environ.get("REGDIAG_ENGINE_HOOK"):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import regdiag_phase_timer

        regdiag_phase_timer.install(os.environ["REGDIAG_ENGINE_HOOK"])
    except Exception as e:  # the engine must start whatever happens here
        try:
            import regdiag_phase_timer as _t

            _t.emergency_error(f"the engine hook failed to install: {type(e).__name__}: {e}")
        except Exception:
            pass
    finally:
        del sys.path[0]
