"""NCCL called directly through ctypes, on the caller's current CUDA stream: what SGLang and vLLM do
for the all-reduces inside their CUDA graphs, and what nccl-tests measures.

torch.distributed's ProcessGroupNCCL runs every collective on its own stream, fenced by events before
and after, and (eager) books a Work object for its watchdog. That costs microseconds per call: on two
H200s a 1 KiB all-reduce took 41 us eager through torch.distributed against 13 us in nccl-tests, and
11.5 us against 6.0 us inside a CUDA graph (docs/bench/collectives.md). A probe that times small
messages through it measures torch, not NCCL.

The library is the one torch already loaded (found in /proc/self/maps, so both speak the same NCCL
version), else the system's libnccl.so.2. The communicator's unique id travels over the torch process
group that the probe set up anyway. Only what the probes send is bound: all-reduce (sum) and
all-gather. Stdlib + torch; NCCL's C API is stable across 2.x for these calls.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any

NCCL_UNIQUE_ID_BYTES = 128
# ncclDataType_t and ncclRedOp_t values from nccl.h (stable since NCCL 2.0; bfloat16 since 2.10)
DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
          "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}  # fmt: skip
SUM = 0


class NcclUnavailable(RuntimeError):
    """No NCCL library can be loaded or a call failed: the message is one line for the user."""


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * NCCL_UNIQUE_ID_BYTES)]


def loaded_library_path(maps: str = "/proc/self/maps") -> str | None:
    """The libnccl this process already mapped (torch's), or None."""
    try:
        with open(maps) as f:
            for line in f:
                parts = line.split(None, 5)
                path = parts[5].strip() if len(parts) == 6 else ""
                if os.path.basename(path).startswith("libnccl") and ".so" in path:
                    return path
    except OSError:
        return None
    return None


def find_library() -> str | None:
    """torch's libnccl when mapped, else the system's; None when there is none."""
    return loaded_library_path() or ctypes.util.find_library("nccl")


def version_text(code: int) -> str:
    """22809 -> '2.28.9' (NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older, *1000 + *100)."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


class Library:
    """The few NCCL entry points the probes call, with their C signatures."""

    def __init__(self, path: str | None = None) -> None:
        path = path or find_library()
        if not path:
            raise NcclUnavailable("no NCCL library: torch has none loaded and libnccl.so.2 is not installed")
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as e:
            raise NcclUnavailable(f"cannot load NCCL from {path}: {e}") from None
        self.path = path
        vp, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        self._sig("ncclGetErrorString", [i], ctypes.c_char_p)
        self._sig("ncclGetVersion", [ctypes.POINTER(i)])
        self._sig("ncclGetUniqueId", [ctypes.POINTER(_UniqueId)])
        self._sig("ncclCommInitRank", [ctypes.POINTER(vp), i, _UniqueId, i])
        self._sig("ncclAllReduce", [vp, vp, sz, i, i, vp, vp])
        self._sig("ncclAllGather", [vp, vp, sz, i, vp, vp])
        self._sig("ncclReduceScatter", [vp, vp, sz, i, i, vp, vp])
        self._sig("ncclSend", [vp, sz, i, i, vp, vp])
        self._sig("ncclRecv", [vp, sz, i, i, vp, vp])
        self._sig("ncclGroupStart", [])
        self._sig("ncclGroupEnd", [])
        self._sig("ncclCommDestroy", [vp])

    def _sig(self, name: str, args: list[Any], res: Any = ctypes.c_int) -> None:
        try:
            fn = getattr(self.lib, name)
        except AttributeError:
            raise NcclUnavailable(f"{self.path} has no {name}: not an NCCL 2 library") from None
        fn.argtypes, fn.restype = args, res

    def check(self, name: str, rc: int) -> None:
        if rc != 0:
            text = self.lib.ncclGetErrorString(rc)
            raise NcclUnavailable(f"{name} failed: {text.decode() if text else rc} (ncclResult {rc})")

    def version(self) -> str:
        v = ctypes.c_int()
        self.check("ncclGetVersion", self.lib.ncclGetVersion(ctypes.byref(v)))
        return version_text(v.value)

    def unique_id(self) -> bytes:
        uid = _UniqueId()
        self.check("ncclGetUniqueId", self.lib.ncclGetUniqueId(ctypes.byref(uid)))
        return bytes(bytearray(uid.internal))


class Communicator:
    """One NCCL communicator over the torch process group's ranks; every call is enqueued on the
    current CUDA stream, so it is captured into a CUDA graph like any kernel."""

    def __init__(self, torch: Any, dist: Any, rank: int, world: int, device: Any, library: Library) -> None:
        self.torch, self.nccl, self.rank, self.world = torch, library, rank, world
        raw = torch.zeros(NCCL_UNIQUE_ID_BYTES, dtype=torch.uint8, device=device)
        if rank == 0:
            raw.copy_(torch.frombuffer(bytearray(library.unique_id()), dtype=torch.uint8))
        dist.broadcast(raw, 0)
        uid = _UniqueId()
        ctypes.memmove(ctypes.addressof(uid), bytes(raw.cpu().tolist()), NCCL_UNIQUE_ID_BYTES)
        self.comm = ctypes.c_void_p()
        library.check(
            "ncclCommInitRank", library.lib.ncclCommInitRank(ctypes.byref(self.comm), world, uid, rank)
        )

    def _dtype(self, t: Any) -> int:
        name = str(t.dtype).removeprefix("torch.")
        if name not in DTYPES:
            raise NcclUnavailable(f"dtype {name} has no NCCL type here")
        return DTYPES[name]

    def _stream(self) -> Any:
        """A function returning the current stream's handle, read per call (a capture runs on a stream
        of its own). The raw getter skips building a Stream object: microseconds of Python per call."""
        torch = self.torch
        raw, index = getattr(torch._C, "_cuda_getCurrentRawStream", None), torch.cuda.current_device()
        if raw is not None:
            return lambda: raw(index)
        return lambda: torch.cuda.current_stream().cuda_stream

    def _bound(self, name: str, *args: Any) -> Any:
        """A call of `name` with every argument but the stream converted to its C type once: the timed
        loop pays NCCL, ctypes and one stream lookup, as close to a C caller (nccl-tests) as Python gets."""
        fn, check, stream = getattr(self.nccl.lib, name), self.nccl.check, self._stream()
        c_args = [a if isinstance(a, t) else t(a) for t, a in zip(fn.argtypes[:-1], args, strict=True)]
        vp = ctypes.c_void_p

        def call() -> None:
            rc = fn(*c_args, vp(stream()))
            if rc:
                check(name, rc)

        return call

    def all_reduce_op(self, t: Any) -> Any:
        """A call that sums `t` in place (the op keeps `t` alive as long as it lives)."""
        call = self._bound(
            "ncclAllReduce", t.data_ptr(), t.data_ptr(), t.numel(), self._dtype(t), SUM, self.comm
        )
        call.keep = t  # type: ignore[attr-defined]
        return call

    def all_gather_op(self, out: Any, inp: Any) -> Any:
        call = self._bound(
            "ncclAllGather", inp.data_ptr(), out.data_ptr(), inp.numel(), self._dtype(inp), self.comm
        )
        call.keep = (out, inp)  # type: ignore[attr-defined]
        return call

    def reduce_scatter_op(self, out: Any, inp: Any) -> Any:
        """Sum every rank's `inp`; this rank keeps its `out.numel()` share."""
        call = self._bound(
            "ncclReduceScatter", inp.data_ptr(), out.data_ptr(), out.numel(), self._dtype(inp), SUM, self.comm
        )
        call.keep = (out, inp)  # type: ignore[attr-defined]
        return call

    def all_to_all_op(self, out: Any, inp: Any) -> Any:
        """Chunk p of `inp` to rank p, chunk p of `out` from rank p: one send and one receive per peer in
        one NCCL group (NCCL has no all-to-all call; this is how nccl-tests' alltoall issues it)."""
        lib, check, stream, vp = self.nccl.lib, self.nccl.check, self._stream(), ctypes.c_void_p
        n, dt = inp.numel() // self.world, self._dtype(inp)
        step = n * inp.element_size()
        pairs = [(vp(inp.data_ptr() + p * step), vp(out.data_ptr() + p * step), ctypes.c_int(p))
                 for p in range(self.world)]  # fmt: skip
        count, dtype, comm = ctypes.c_size_t(n), ctypes.c_int(dt), self.comm

        def call() -> None:
            s = vp(stream())
            rc = lib.ncclGroupStart()
            for send, recv, peer in pairs:
                rc = rc or lib.ncclSend(send, count, dtype, peer, comm, s)
                rc = rc or lib.ncclRecv(recv, count, dtype, peer, comm, s)
            rc = lib.ncclGroupEnd() or rc
            if rc:
                check("all-to-all (ncclSend/ncclRecv)", rc)

        call.keep = (out, inp)  # type: ignore[attr-defined]
        return call

    def close(self) -> None:
        if self.comm:
            comm, self.comm = self.comm, ctypes.c_void_p()
            self.nccl.check("ncclCommDestroy", self.nccl.lib.ncclCommDestroy(comm))
