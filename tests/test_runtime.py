"""Process-level helpers: what a replica hands back to the operating system after a load."""
from __future__ import annotations

import ctypes
import sys

import pytest

from lmplatform.runtime import trim_heap


def _resident_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def _glibc() -> bool:
    try:
        return callable(ctypes.CDLL("libc.so.6").malloc_trim)
    except (OSError, AttributeError):
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _glibc(), reason="malloc_trim is glibc's")
def test_trim_heap_returns_what_a_load_freed_but_the_allocator_kept() -> None:
    # texts of a report's size come from the C heap, not Python's small-object arenas; one object allocated after
    # them keeps the heap's top in use, so freeing them alone returns nothing
    texts = [f"{n:08d}" + "x" * 1000 for n in range(200_000)]
    pinned = f"{len(texts)}" + "y" * 1000  # made now, so after the texts
    loaded = _resident_mb()
    del texts
    freed = _resident_mb()
    trim_heap()
    trimmed = _resident_mb()
    assert pinned and loaded - freed < 50 < freed - trimmed, (loaded, freed, trimmed)
