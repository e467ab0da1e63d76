"""support/allocator.py: importing prefixbench turns numpy's huge pages off unless the user
set the variable, and leaves glibc's allocator as it is (its mmap threshold raised, a
10M-request run no longer fits in 4 GB: docs/performance.md)."""

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
    drop = (allocator.HUGEPAGE_VAR, "GLIBC_TUNABLES")
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
    env = {}
    assert allocator.configure(env) == {"numpy_hugepages_off": True}
    assert env[allocator.HUGEPAGE_VAR] == "0"


def _glibc() -> bool:
    try:
        return sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION").startswith(
            "glibc"
        )
    except (ValueError, OSError, AttributeError):
        return False


@pytest.mark.skipif(not _glibc(), reason="glibc's mallinfo2")
def test_large_blocks_are_still_mmapped_after_importing_prefixbench():
    assert _run(_MMAPPED) == "True"  # glibc's default: a 64 MiB block is mmap'ed
    assert _run("import prefixbench\n" + _MMAPPED) == "True"
