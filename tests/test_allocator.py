"""support/allocator.py: importing prefixbench turns numpy's huge pages off and keeps glibc
from returning large freed blocks, unless the user set either; a no-op elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from prefixbench.support import allocator

_HUGEPAGES = "import numpy; print(numpy._core.multiarray._get_madvise_hugepage())"
# bytes glibc holds in mmap'ed blocks while a 64 MiB array is alive (mallinfo2, glibc >= 2.33)
_MMAPPED = """
import ctypes, numpy
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena ordblks smblks hblks hblkhd usmblks "
                                               "fsmblks uordblks fordblks keepcost").split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
a = numpy.ones(8 << 20)
print(libc.mallinfo2().hblkhd >= a.nbytes)
"""


def _run(code: str, **env: str) -> str:
    # importing prefixbench here set the huge-page variable in this process's environment
    drop = (allocator.HUGEPAGE_VAR, *allocator.MALLOC_VARS)
    base = {k: v for k, v in os.environ.items() if k not in drop}
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**base, **env},
    )  # fmt: skip
    return p.stdout.strip()


def test_numpy_huge_pages_are_off_after_importing_prefixbench():
    assert _run(_HUGEPAGES) == "True"  # numpy's default on this Linux
    assert _run("import prefixbench; " + _HUGEPAGES) == "False"
    assert _run(_HUGEPAGES.replace("import numpy;", "import numpy, prefixbench;")) == "False"


def test_the_users_huge_page_setting_wins():
    assert _run("import prefixbench; " + _HUGEPAGES, NUMPY_MADVISE_HUGEPAGE="1") == "True"
    env = {allocator.HUGEPAGE_VAR: "1"}
    assert allocator.configure(env)["numpy_hugepages_off"] is False and env == {
        allocator.HUGEPAGE_VAR: "1"
    }


def test_configure_sets_the_variable_numpy_reads():
    env = {"GLIBC_TUNABLES": "x"}  # and leaves glibc alone
    assert allocator.configure(env) == {"numpy_hugepages_off": True, "glibc_keep_freed": False}
    assert env[allocator.HUGEPAGE_VAR] == "0"


@pytest.mark.skipif(not allocator._is_glibc(), reason="glibc's mallopt")
def test_large_blocks_come_from_the_heap_unless_the_user_tuned_glibc():
    assert _run(_MMAPPED) == "True"  # glibc's default: a 64 MiB block is mmap'ed
    assert _run("import prefixbench\n" + _MMAPPED) == "False"
    tuned = "glibc.malloc.mmap_threshold=131072"
    assert _run("import prefixbench\n" + _MMAPPED, GLIBC_TUNABLES=tuned) == "True"


def test_no_mallopt_off_glibc(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert allocator._is_glibc() is False
    assert allocator.configure({})["glibc_keep_freed"] is False
    monkeypatch.setattr(sys, "platform", "linux")

    def no_confstr(name):
        raise ValueError(name)  # musl: CS_GNU_LIBC_VERSION is not defined

    monkeypatch.setattr(os, "confstr", no_confstr)
    assert allocator._is_glibc() is False
