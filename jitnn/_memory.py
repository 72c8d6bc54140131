"""Keep freed tensor memory for reuse (glibc), instead of fresh pages per op.

glibc serves every allocation above its mmap threshold with fresh pages from
the kernel and returns them on free. The threshold adapts (it rises to the
size of a freed block), but a request of exactly that size is still mmapped,
so a runtime that allocates the same few-MB buffers op after op (an eager
policy, a plan run again and again) pays a page fault per 4 KiB on every
first write: measured here, 0.15 ms per MB, up to half the time of an
eager 256-channel elementwise op.

jitnn therefore sets, once at import, glibc's mmap threshold to 32 MiB (its
own ceiling for the adaptive threshold) and its trim threshold to 64 MiB:
blocks below 32 MiB come from the heap and go back to it, and the heap
keeps up to 64 MiB of free memory at its top instead of returning it. Nothing
else changes. This is process-wide; set ``JITNN_MALLOC_TUNING=0`` before
importing jitnn to leave the allocator alone. Other C libraries: no effect.
"""

from __future__ import annotations

import ctypes
import os
import platform

#: glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 64 * 2**20

#: what :func:`tune_allocator` did, for ``jitnn info``
status = "not applied"


def tune_allocator() -> str:
    """Apply the settings above (once); returns what was done, in words."""
    global status
    if status != "not applied":
        return status
    if os.environ.get("JITNN_MALLOC_TUNING", "1") == "0":
        status = "left alone (JITNN_MALLOC_TUNING=0)"
    elif platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        status = "left alone (not glibc)"
    else:
        try:
            libc = ctypes.CDLL(None)
            ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and \
                libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
        except (OSError, AttributeError):
            ok = False
        status = ("glibc mmap threshold 32 MiB, trim threshold 64 MiB (freed tensor memory "
                  "is reused; JITNN_MALLOC_TUNING=0 disables)") if ok else \
            "left alone (mallopt failed)"
    return status
