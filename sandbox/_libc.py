"""The C library for ``ctypes``, loaded once per process.

``ctypes.CDLL`` builds a new class each time it is called; in a fresh fork of the zygote, whose memory is shared
copy-on-write, that cost about 0.4 ms a call, and each confinement step (namespaces, seccomp, Landlock, the uid
drop, the private mounts) made its own. :data:`LIBC` is made when this module is imported (in the zygote, before it
forks: its children share it). ``syscall`` returns a ``long``, as ``syscall(2)`` does.
"""

from __future__ import annotations

import ctypes

__all__ = ["LIBC"]

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.syscall.restype = ctypes.c_long
