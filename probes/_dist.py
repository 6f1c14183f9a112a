"""The rank side of every probe: process hygiene, torch.distributed set-up, helpers over ranks, a bounded
teardown, and the `main` every probe script shares.

A rank must never outlive its launch: it dies with its supervisor (parent-death signal, and a parent
watch where that is not available), dumps its Python stack on SIGUSR1 (the supervisor asks before it
kills a hung rank, so the record says where it hung), and its teardown cannot block: NCCL's
destroy_process_group() hangs while a CUDA graph that captured a collective is alive (2 H200s, torch
2.11, NCCL 2.28.9), so graphs are released first and the destroy runs against a deadline.
"""

from __future__ import annotations

import faulthandler
import os
import platform
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from _protocol import UsageError, apply_env_defaults, emit_error, one_line, rank_error

TEARDOWN_DEADLINE_S = 10.0
STACK_SIGNAL = signal.SIGUSR1
SUPERVISOR_PID_ENV = "REGDIAG_PROBE_SUPERVISOR_PID"


def _set_parent_death_signal() -> None:
    """Linux: the kernel sends SIGKILL to this rank when the supervisor that started it dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except Exception:  # no libc prctl (musl without it, a sandbox): the parent watch still runs
        pass


def watch_parent(interval_s: float = 0.5, on_orphan: Callable[[], None] | None = None) -> None:
    """A process whose parent vanished (kill -9) ends itself instead of blocking in a collective forever."""
    parent = os.getppid()

    def loop() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent:
                if on_orphan is not None:
                    on_orphan()
                os._exit(1)

    threading.Thread(target=loop, daemon=True, name="parent-watch").start()


def rank_setup() -> None:
    """First thing a rank does: die with the supervisor, answer SIGUSR1 with a stack dump."""
    _set_parent_death_signal()
    supervisor = os.environ.get(SUPERVISOR_PID_ENV)
    if supervisor and str(os.getppid()) != supervisor:  # it died before the signal was armed
        os._exit(1)
    watch_parent()
    faulthandler.register(STACK_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    apply_env_defaults()


# ------------------------------------------------------------------------------ torch.distributed


def init_dist(port: int, rank: int, world: int, cuda: bool, *, single: bool = False) -> Any:
    """The default process group over loopback (NCCL on GPUs, gloo on CPU); None for one rank unless
    `single` (the collectives probe times NCCL's one-rank path too)."""
    if world == 1 and not single:
        return None
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    kw: dict[str, Any] = dict(
        backend="nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=600),
    )
    if cuda:
        kw["device_id"] = torch.device("cuda", rank)
    try:
        dist.init_process_group(**kw)
    except TypeError:  # torch without device_id
        kw.pop("device_id", None)
        dist.init_process_group(**kw)
    return dist.group.WORLD


def barrier(group: Any, world: int, device: Any) -> None:
    """An all-reduce of one element, synchronized: a barrier that works the same on NCCL and gloo."""
    if world > 1:
        import torch
        import torch.distributed as dist

        t = torch.zeros(1, device=device)
        dist.all_reduce(t, group=group)
        if device.type == "cuda":
            torch.cuda.synchronize()


def max_over_ranks(
    rows: list[list[float]], n_cols: int, group: Any, world: int, device: Any
) -> list[list[float]]:
    """Element-wise maximum over ranks of a rows x n_cols table: every number becomes the slowest rank's."""
    if world == 1 or not rows:
        return rows
    import torch
    import torch.distributed as dist

    t = torch.tensor(rows, dtype=torch.float64, device=device).reshape(len(rows), n_cols)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.cpu().tolist()


def nccl_version() -> str | None:
    try:
        import torch

        v = torch.cuda.nccl.version()
        return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception:
        return None


def device_info(device: Any) -> dict[str, Any]:
    """What the header says of the device; `visible`: CUDA_VISIBLE_DEVICES where set (the GPUs a pinned
    launch was given, e.g. a `bisect --lanes gpu` lane's)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return {**_device(device), **({"visible": visible} if visible is not None else {})}


def _device(device: Any) -> dict[str, Any]:
    if device.type == "cuda":
        import torch

        p = torch.cuda.get_device_properties(device)
        return {"type": "cuda", "name": p.name, "count": torch.cuda.device_count(),
                "capability": f"{p.major}.{p.minor}", "memory_gib": round(p.total_memory / 2**30, 1),
                "sms": p.multi_processor_count}  # fmt: skip
    return {"type": "cpu", "name": platform.processor() or platform.machine(), "count": os.cpu_count()}


def pick_device(want: str, rank: int, world: int) -> Any:
    """cuda:rank or cpu for --device auto|cuda|cpu; UsageError when the GPUs are not there."""
    import torch

    cuda = want == "cuda" or (want == "auto" and torch.cuda.is_available())
    if cuda and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device")
    if cuda and rank >= torch.cuda.device_count():
        raise UsageError(f"--tp {world} needs {world} GPUs; {torch.cuda.device_count()} visible")
    if cuda:
        torch.cuda.set_device(rank)
        return torch.device("cuda", rank)
    return torch.device("cpu")


def teardown(
    world: int,
    cuda: bool,
    release: Callable[[], None] | None = None,
    close: Callable[[], None] | None = None,
) -> None:
    """End the rank's distributed state without ever blocking for good.

    `release` drops the rank's CUDA graphs (a graph that captured a collective keeps NCCL's
    destroy_process_group() from returning); then the device is synchronized and the group destroyed
    against a deadline, after `close` (a communicator of the probe's own, e.g. _pynccl's) under the same
    deadline. Past it the rank exits without the destroy: its results are already out."""
    if release is not None:
        release()
    import gc

    gc.collect()
    if cuda:
        import torch

        torch.cuda.synchronize()
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    done = threading.Event()

    def destroy() -> None:
        if close is not None:
            try:
                close()
            except Exception as e:  # the group still goes; the results are already out
                sys.stderr.write(f"teardown: closing the communicator failed: {e}\n")
        dist.destroy_process_group()
        done.set()

    threading.Thread(target=destroy, daemon=True, name="teardown").start()
    if not done.wait(TEARDOWN_DEADLINE_S):
        sys.stderr.write(
            f"teardown: destroy_process_group did not return within {TEARDOWN_DEADLINE_S:g} s; "
            "exiting without it (the results were already sent)\n"
        )
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(0)


# ------------------------------------------------------------------------------------- main


def probe_main(
    argv: list[str],
    build_parser: Callable[[], Any],
    validate: Callable[[Any], Any],
    run_rank: Callable[[Any, Any], None],
    script: str,
    gpu_sampling: Callable[[Any], bool],
) -> int:
    """The `main` of every probe: without --_rank it supervises a launch of a.tp ranks of `script`; with
    it, it is one rank. Errors become one protocol line and an exit status (2 usage, 1 failure)."""
    a = build_parser().parse_args(argv)
    if a._rank is None:
        try:
            validate(a)
        except UsageError as e:
            emit_error(str(e), "usage")
            return 2
        from _supervisor import supervise

        return supervise(os.path.abspath(script), argv, a, gpu_sampling=gpu_sampling(a))
    rank_setup()
    try:
        checked = validate(a)
        run_rank(a, checked)
    except UsageError as e:
        rank_error(str(e), "usage")
        return 2
    except KeyboardInterrupt:
        return 130
    except BaseException as e:  # one line for the user; the traceback stays on stderr for debugging
        import traceback

        traceback.print_exc(file=sys.stderr)
        rank_error(one_line(f"{type(e).__name__}: {e}"))
        return 1
    return 0
