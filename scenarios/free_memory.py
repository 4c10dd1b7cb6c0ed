"""Hand the C heap's free pages back to the system after a large run's set-up.

At millions of clients the driver's set-up frees large temporaries: on Ray its own copy of
the data once it reads the object store's (:meth:`fedclock.actors.federation.Federation.read_from`),
and the serialization's buffers of the put; then the population's draws and the clock's and
selector's construction. glibc keeps the freed chunks below its mmap threshold in the heap,
still resident, and the run's rounds never reuse most of them: at 2x10^6 clients on Ray the
driver held about 130 MiB of free heap through the rounds, at 10^7 about 5 times that
(``benchmarks/RESULTS.md``, "Ten million clients", driver breakdown, ``scale.py --memory-phases``).
``malloc_trim(0)`` returns those pages (the values of the run are untouched); elsewhere than
glibc this does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache
from typing import Any

__all__ = ["return_free_memory"]


@cache
def _trim() -> Any:
    """glibc's ``malloc_trim``, looked up once; None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return getattr(libc, "malloc_trim", None) if libc else None


def return_free_memory() -> bool:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim(0)``); whether it
    could (False where the C library has no ``malloc_trim``)."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
