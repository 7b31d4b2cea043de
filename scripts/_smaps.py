"""Where a process's resident memory is, from ``/proc/<pid>/smaps`` (the soak's breakdown, ``scripts/soak``).

Each mapping's ``Rss`` is counted in one class:

- ``heap``: ``[heap]``, the brk heap (glibc's main arena);
- ``malloc_arenas``: anonymous mappings inside a 64 MiB-aligned region glibc reserved for a thread's arena (the
  region starts with a read-write part, the rest ``---p``), the other threads' malloc arenas;
- ``stacks``: ``[stack]`` and the anonymous read-write mapping right above a 4 KiB ``---p`` guard page (a thread
  stack made by glibc's ``pthread_create``);
- ``anon``: every other anonymous mapping: pymalloc's 1 MiB arenas (the kernel merges neighbours, so they cannot be
  told apart by size), glibc's mmapped large blocks, SQLite's and OpenSSL's own;
- ``file``: mappings of a file (code, data of shared libraries, mmapped files).

:func:`breakdown` is pure (text in, figures out) so it is tested apart from ``/proc``.
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass, field

__all__ = ["CLASSES", "Chunk", "Mapping", "breakdown", "classified", "grown", "mmapped_chunks", "parse", "read"]

CLASSES = ("heap", "malloc_arenas", "stacks", "anon", "file")
_ARENA_ALIGN = 64 * 2**20  # glibc's HEAP_MAX_SIZE on 64-bit
_GUARD = 4096


@dataclass
class Mapping:
    start: int
    end: int
    perms: str
    path: str
    fields: dict[str, int] = field(default_factory=dict)  # kB values: Rss, Private_Dirty, AnonHugePages, ...

    @property
    def size(self) -> int:
        return self.end - self.start


def parse(text: str) -> list[Mapping]:
    """The mappings of an ``smaps`` text, in address order."""
    out: list[Mapping] = []
    for line in text.splitlines():
        head = line.split(None, 5)
        if not head:
            continue
        if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            start, end = (int(x, 16) for x in head[0].split("-"))
            out.append(Mapping(start, end, head[1], head[5].strip() if len(head) > 5 else ""))
        elif out and head[0].endswith(":") and len(head) >= 2 and head[1].isdigit():
            out[-1].fields[head[0][:-1]] = int(head[1])
    return out


def _anonymous(m: Mapping) -> bool:
    return not m.path or m.path.startswith("[anon")


def _classify(maps: list[Mapping]) -> list[str]:
    kinds = []
    arena_end = 0  # the end of the 64 MiB region of the thread arena being walked
    for i, m in enumerate(maps):
        if m.path == "[heap]":
            kinds.append("heap")
            continue
        if m.path == "[stack]":
            kinds.append("stacks")
            continue
        if m.path and not m.path.startswith("[anon"):
            kinds.append("file")
            continue
        if m.start < arena_end:
            kinds.append("malloc_arenas")
            continue
        prev = maps[i - 1] if i else None
        after = maps[i + 1] if i + 1 < len(maps) else None
        if (
            m.start % _ARENA_ALIGN == 0
            and m.perms.startswith("rw")
            and after is not None
            and _anonymous(after)
            and after.start == m.end
            and after.perms.startswith("---")
            and (after.end - m.start) == _ARENA_ALIGN
        ):
            arena_end = m.start + _ARENA_ALIGN
            kinds.append("malloc_arenas")
            continue
        if (
            prev is not None
            and _anonymous(prev)
            and prev.end == m.start
            and prev.size == _GUARD
            and prev.perms.startswith("---")
            and m.perms.startswith("rw")
        ):
            kinds.append("stacks")
            continue
        kinds.append("anon")
    return kinds


def breakdown(text: str) -> dict[str, float]:
    """Resident MB per class of :data:`CLASSES` (``<class>_mb``), with ``anon_huge_mb`` (transparent huge pages) and
    ``private_dirty_mb`` over all mappings."""
    maps = parse(text)
    out = {f"{kind}_mb": 0.0 for kind in CLASSES}
    for m, kind in zip(maps, _classify(maps), strict=True):
        out[f"{kind}_mb"] += m.fields.get("Rss", 0) / 1024
    out["anon_huge_mb"] = sum(m.fields.get("AnonHugePages", 0) for m in maps) / 1024
    out["private_dirty_mb"] = sum(m.fields.get("Private_Dirty", 0) for m in maps) / 1024
    return out


def read(pid: int | str = "self") -> dict[str, float]:
    """:func:`breakdown` of a live process (``{}`` when its ``smaps`` cannot be read)."""
    try:
        with open(f"/proc/{pid}/smaps") as f:
            return breakdown(f.read())
    except OSError:
        return {}


def classified(pid: int | str = "self") -> list[tuple[Mapping, str]]:
    """Every mapping of a live process with its class (``[]`` when its ``smaps`` cannot be read)."""
    try:
        with open(f"/proc/{pid}/smaps") as f:
            maps = parse(f.read())
    except OSError:
        return []
    return list(zip(maps, _classify(maps), strict=True))


def grown(before: list[tuple[Mapping, str]], after: list[tuple[Mapping, str]], top: int = 12) -> list[str]:
    """The mappings whose resident size grew most from ``before`` to ``after`` (matched by start address: the heap
    and merged anonymous mappings grow at their end; a new one counts from 0), one line each: class, range, size,
    resident before and after."""
    was = {m.start: m.fields.get("Rss", 0) for m, _ in before}
    rows = []
    for m, kind in after:
        rss = m.fields.get("Rss", 0)
        diff = rss - was.get(m.start, 0)
        if diff > 0:
            rows.append(
                (
                    diff,
                    f"{kind:13} {m.start:x}-{m.end:x} {m.size // 1024:>8} kB  resident "
                    f"{was.get(m.start, 0):>7} -> {rss:>7} kB  {m.path}".rstrip(),
                )
            )
    rows.sort(reverse=True)
    return [line for _, line in rows[:top]]


_PAGE = 4096
_IS_MMAPPED = 0x2


@dataclass(frozen=True)
class Chunk:
    """One block glibc's malloc mmapped on its own (a request past its mmap threshold)."""

    address: int
    size: int
    resident: int  # bytes of it in memory
    type_name: str  # the Python type whose object starts the block, if one does ("" otherwise)


def mmapped_chunks(type_names: dict[int, str] | None = None) -> list[Chunk]:
    """glibc's mmapped blocks in this process, found by their headers (``prev_size`` 0, ``size`` page-aligned with
    ``IS_MMAPPED``) at resident page starts of its anonymous read-write mappings; their resident bytes from
    ``/proc/self/pagemap``. ``type_names``: ``id(type) -> name``, to name the Python object a block holds. A page
    that is not resident is never read (reading it would bring it in). Heuristic: good enough to see which blocks
    fill up, not an exact census."""
    names = type_names or {}
    out: list[Chunk] = []
    fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        for m, kind in classified():
            if kind != "anon" or not m.perms.startswith("rw"):
                continue
            os.lseek(fd, (m.start // _PAGE) * 8, os.SEEK_SET)
            raw = os.read(fd, (m.size // _PAGE) * 8)
            present = [bool(v >> 63) for (v,) in struct.iter_unpack("Q", raw)]
            page = 0
            while page < len(present):
                if not present[page]:
                    page += 1
                    continue
                start = m.start + page * _PAGE
                prev, size = struct.unpack("QQ", ctypes.string_at(start, 16))
                length = size & ~0x7
                if prev == 0 and size & _IS_MMAPPED and length % _PAGE == 0 and 0 < length <= m.end - start:
                    pages = length // _PAGE
                    _, tp = struct.unpack("QQ", ctypes.string_at(start + 16, 16))
                    out.append(Chunk(start, length, sum(present[page : page + pages]) * _PAGE, names.get(tp, "")))
                    page += pages
                else:
                    page += 1
    finally:
        os.close(fd)
    return out
