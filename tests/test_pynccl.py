"""probes/_pynccl.py where it can run without a GPU: finding the library torch mapped, reading NCCL's
version code, and refusing a library that is not NCCL in one line. The calls themselves run on the
GPU machine (tests/test_gpu_tp.py, docs/bench/collectives.md)."""

from __future__ import annotations

import ctypes.util

import pytest

from regdiag.probe_modules import load

pynccl = load("_pynccl")

MAPS = """\
7f0a00000000-7f0a00021000 rw-p 00000000 00:00 0
7f0a10000000-7f0a12000000 r-xp 00000000 fd:01 1234  /opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2
7f0a20000000-7f0a20001000 r--p 00000000 fd:01 99  /usr/lib/x86_64-linux-gnu/libc.so.6
"""


def test_the_library_torch_mapped_is_found(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(MAPS)
    assert pynccl.loaded_library_path(str(maps)) == (
        "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"
    )


def test_a_path_with_spaces_and_no_nccl(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f0a-7f0b r-xp 00000000 fd:01 5  /home/a b/libnccl.so.2\n")
    assert pynccl.loaded_library_path(str(maps)) == "/home/a b/libnccl.so.2"
    maps.write_text(MAPS.splitlines()[0] + "\n" + MAPS.splitlines()[2] + "\n")
    assert pynccl.loaded_library_path(str(maps)) is None
    assert pynccl.loaded_library_path(str(tmp_path / "absent")) is None


@pytest.mark.parametrize("code,text", [(22809, "2.28.9"), (21805, "2.18.5"), (2708, "2.7.8")])
def test_version_codes(code, text):
    assert pynccl.version_text(code) == text


def test_a_library_that_is_not_nccl_is_refused_in_one_line():
    libc = ctypes.util.find_library("c")
    assert libc
    with pytest.raises(pynccl.NcclUnavailable) as e:
        pynccl.Library(libc)
    assert "has no ncclGetErrorString: not an NCCL 2 library" in str(e.value) and "\n" not in str(e.value)


def test_a_missing_file_is_refused_in_one_line(tmp_path):
    with pytest.raises(pynccl.NcclUnavailable, match="cannot load NCCL from"):
        pynccl.Library(str(tmp_path / "libnccl.so.2"))


def test_the_dtype_table_matches_nccl_h():
    # ncclDataType_t in nccl.h: the two the probes send, and the byte types, by value
    assert pynccl.DTYPES["float32"] == 7 and pynccl.DTYPES["bfloat16"] == 9 and pynccl.DTYPES["uint8"] == 1
