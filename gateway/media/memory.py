"""Large buffers given back to the system when freed (glibc's malloc; elsewhere nothing).

A decoded image, a download's bytes and a data URL are each megabytes, allocated
and freed in bursts and from several threads. glibc serves such an allocation from
a heap once one of its size has been freed (its mmap threshold rises with every
free, up to 32 MB), and a heap keeps what is freed in its middle: after a burst of
images, a worker's memory stayed about 150 MB above what it used. With a fixed
threshold, every allocation of `threshold` bytes or more is a mapping of its own,
returned to the system when it is freed.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's <malloc.h>
THRESHOLD = 1024 * 1024


def return_large_buffers(threshold: int = THRESHOLD) -> bool:
    """Whether allocations of `threshold` bytes or more now come from their own mappings
    (False where the C library has no such setting)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, threshold))
    log.debug("buffers of %d bytes or more are mapped on their own: %s", threshold, done)
    return done
