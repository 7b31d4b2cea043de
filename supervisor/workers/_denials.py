"""Say which kernel rule refused a worker: Landlock (a path, a port, a signal) or seccomp (a system call), and
what would have to change. Pure: the records come from ``supervisor.workers._kernel_audit``, the words go into the
call's result and the trace.

A Landlock record names the domain's refusal (``blockers=fs.write_file path="/etc/x"``); the toolbox's rules say
why nothing granted it: no rule covers the path (the FileSandbox does not reach it), or a rule covers it read-only
(the FileSandbox of a toolbox kind that only reads, a system path, a read-only file of the toolbox). A seccomp record
names the system call; the filter refuses it for every toolbox (no policy key allows it).

Paths are the kernel's own (resolved, as the worker sees them), compared as text: nothing here touches the file
system. For a file or folder being *created*, the kernel names the folder it was to be created in.
:func:`explain_text_paths` is the fallback where the host gives no audit records: the absolute paths of the result's
``Permission denied`` lines, explained the same way, said to be a guess.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox import READ, WRITE, FsRule

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "MAX_NOTES",
    "Denial",
    "FsContext",
    "context_of",
    "explain_landlock",
    "explain_seccomp",
    "explain_text_paths",
    "notes",
]

#: at most this many notes per call (further denials are counted in one line)
MAX_NOTES = 5

#: Landlock's blocker names -> (what the process tried, in words; does it need a write rule)
_FS_ACCESS = {
    "fs.execute": ("execute", False),
    "fs.read_file": ("read", False),
    "fs.read_dir": ("list", False),
    "fs.write_file": ("write", True),
    "fs.truncate": ("truncate", True),
    "fs.remove_dir": ("remove a folder in", True),
    "fs.remove_file": ("remove a file in", True),
    "fs.make_reg": ("create a file in", True),
    "fs.make_dir": ("create a folder in", True),
    "fs.make_sym": ("create a symlink in", True),
    "fs.make_fifo": ("create a FIFO in", True),
    "fs.make_sock": ("create a unix socket in", True),
    "fs.make_char": ("create a device in", True),
    "fs.make_block": ("create a device in", True),
    "fs.refer": ("link or rename across folders into", True),
    "fs.ioctl_dev": ("use a device ioctl on", True),
    "fs.change_topology": ("mount on", True),
}
_NEVER_GRANTED = {"fs.make_char", "fs.make_block", "fs.make_sock", "fs.change_topology"}


@dataclass(frozen=True)
class Denial:
    """One refusal, explained."""

    #: ``landlock`` or ``seccomp``
    layer: str
    #: the kernel's name of the access (``fs.write_file``, ``net.connect_tcp``, ``syscall``)
    access: str
    #: the path, port or system call refused
    target: str
    #: the rule that refused, short (for grouping in the trace report)
    rule: str
    #: the whole explanation, for the agent
    text: str


@dataclass(frozen=True)
class FsContext:
    """What a toolbox's worker was granted, as the supervisor compiled it."""

    toolbox: str
    kind: str
    rules: tuple[FsRule, ...]
    #: the paths of the Landlock rules that come from the toolbox's FileSandbox, and its mode (read/write)
    sandbox_paths: tuple[str, ...] = ()
    sandbox_mode: str = ""
    system_paths: tuple[str, ...] = ()
    workdir: str = ""


def _beneath(path: str, top: str) -> bool:
    return top == "/" or path == top or path.startswith(top.rstrip("/") + "/")


def _origin(ctx: FsContext, rule: FsRule) -> str:
    if rule.path in ctx.sandbox_paths:
        return f"its FileSandbox (rule {rule.mode} {rule.path})"
    if rule.path in ctx.system_paths:
        return f"the policy's system_paths ({rule.path}, read-only for every toolbox)"
    if rule.path == ctx.workdir:
        return f"its work folder {rule.path}"
    return f"the rule {rule.mode} {rule.path} (what the toolbox needs to run)"


def _where_to_write(ctx: FsContext) -> str:
    return f" or write in the toolbox's work folder {ctx.workdir} (its cwd and HOME)" if ctx.workdir else ""


def explain_landlock(fields: dict[str, str], ctx: FsContext) -> list[Denial]:
    """The denials of one ``AUDIT_LANDLOCK_ACCESS`` record (its fields), explained for the toolbox ``ctx``."""
    blockers = [b for b in fields.get("blockers", "").split(",") if b]
    out = []
    for blocker in blockers:
        if blocker.startswith("fs."):
            out.append(_explain_fs(blocker, posixpath.normpath(fields.get("path", "") or "?"), ctx))
        elif blocker.startswith("net."):
            port = fields.get("dest") or fields.get("src") or "?"
            verb = "connect to" if blocker == "net.connect_tcp" else "bind"
            rule = blocker
            text = (
                f"Landlock refused to {verb} TCP port {port}"
                + (f" ({fields['daddr']})" if fields.get("daddr") else "")
                + ": a worker reaches the network only through the supervisor's proxy for its allowed hosts "
                "(AllowedHosts in the agent file, toolboxes.<name>.allowed_hosts in the policy); binding is "
                "never allowed"
            )
            out.append(Denial("landlock", blocker, f"tcp:{port}", rule, text))
        elif blocker.startswith("scope."):
            what = "signal a process" if blocker == "scope.signal" else "connect to an abstract unix socket"
            target = fields.get("opid") or fields.get("path") or "?"
            out.append(
                Denial(
                    "landlock",
                    blocker,
                    target,
                    blocker,
                    f"Landlock refused to {what} outside the toolbox's worker ({target}): a worker reaches "
                    "only its own processes and sockets; no policy key changes that",
                )
            )
    return out


def _explain_fs(blocker: str, path: str, ctx: FsContext) -> Denial:
    verb, writes = _FS_ACCESS.get(blocker, (blocker, True))
    head = f"Landlock refused to {verb} {path} ({blocker})"
    if blocker in _NEVER_GRANTED:
        return Denial(
            "landlock",
            blocker,
            path,
            blocker,
            f"{head}: no worker may ever do that (devices, unix sockets and mounts are never granted)",
        )
    covering = [r for r in ctx.rules if _beneath(path, r.path)]
    if not covering:
        if ctx.sandbox_mode:
            rule = "FileSandbox: no rule"
            why = (
                f"nothing granted to toolbox {ctx.toolbox!r} reaches it: its FileSandbox does not cover "
                f"{path}. To allow it, widen that FileSandbox in the agent file (a DirectoryRecursive or "
                f"FileExactly naming it){_where_to_write(ctx) if writes else ''}"
            )
        else:
            rule = f"no rule ({ctx.kind or 'this'} toolbox without a FileSandbox)"
            writable = ", ".join(r.path for r in ctx.rules if r.mode == WRITE) or "nowhere"
            why = (
                f"no rule of toolbox {ctx.toolbox!r} reaches it: a {ctx.kind or 'this'} toolbox has no "
                f"FileSandbox; it may write only in {writable} and read the policy's system_paths and its own "
                f"files. To {'write' if writes else 'read'} it, use a path it is granted"
                + (" (its work folder is its cwd and HOME)" if writes else " or give the file to the tool as input")
            )
        return Denial("landlock", blocker, path, rule, f"{head}: {why}")
    best = max(covering, key=lambda r: len(r.path))
    if writes and all(r.mode == READ for r in covering):
        if best.path in ctx.sandbox_paths and ctx.sandbox_mode == READ:
            why = (
                f"it is granted read-only by its FileSandbox (rule read {best.path}): a {ctx.kind} toolbox's "
                f"FileSandbox is only ever read-only (its tools may not change the files they are given). To "
                f"write, use another path{_where_to_write(ctx)}"
            )
            rule = f"FileSandbox read-only: {best.path}"
        else:
            why = f"it is granted read-only by {_origin(ctx, best)}. To write, use another path{_where_to_write(ctx)}"
            rule = f"read-only: {best.path}"
        return Denial("landlock", blocker, path, rule, f"{head} in toolbox {ctx.toolbox!r}: {why}")
    # a rule covers it with the right mode, yet Landlock refused: a right the rule never carries (MAKE_SOCK ...)
    # or the inexact part of a predicate the in-worker check closes
    return Denial(
        "landlock",
        blocker,
        path,
        f"{best.mode}: {best.path}",
        f"{head} in toolbox {ctx.toolbox!r}: {_origin(ctx, best)} does not carry that right",
    )


def explain_seccomp(name: str | None, number: int, reason: str | None) -> Denial:
    """A refused system call (from an ``AUDIT_SECCOMP`` record), named."""
    call = name or f"system call {number}"
    why = f": {reason}" if reason else ""
    return Denial(
        "seccomp",
        "syscall",
        call,
        call,
        f"the worker's system call filter (seccomp) refused {call}(){why}. It is refused for every "
        "toolbox; no policy key allows it: use another way to do the job",
    )


_DENIED_LINE = re.compile(r"Permission denied|EACCES")
_READ_ONLY_LINE = re.compile(r"Read-only file system|EROFS")
_PATH_IN_LINE = re.compile(r"'(/[^'\n]*)'|\"(/[^\"\n]*)\"|(?<![\w/.])(/[^\s:'\"()]+)")
#: dash (Debian's /bin/sh): ``/bin/sh: 1: cannot create /usr/x: Read-only file system``; the path is what lies
#: between ``cannot create `` and the line's last ``: `` (it may hold spaces and colons)
_DASH_CREATE = re.compile(r"cannot create (.+): ")
#: a shell's own name and line number before its message (``/bin/sh: 1: ...``, ``sh: 3: ...``): never the target
_SHELL_PREFIX = re.compile(r"^\S+: (?:line )?\d+: ")


def _path_of_line(line: str, marker: re.Match[str]) -> str | None:
    """The path an error line says was refused (its ``marker``: the words of the refusal); ``None`` when it names
    none that is absolute (a relative path cannot be judged: the process's directory is not known here)."""
    dash = _DASH_CREATE.search(line[: marker.start()])
    if dash is not None:
        named = dash.group(1)
        if len(named) > 1 and named[0] == named[-1] and named[0] in "'\"":
            named = named[1:-1]
        return named if named.startswith("/") else None
    prefix = _SHELL_PREFIX.match(line)
    skip = prefix.end() if prefix is not None else 0
    paths = [(m.start(), next(g for g in m.groups() if g)) for m in _PATH_IN_LINE.finditer(line) if m.start() >= skip]
    # "prog: PATH: Permission denied" names it before the marker ("bash: SCRIPT: line 3: PATH: ..."); Python's
    # "PermissionError: [Errno 13] Permission denied: 'PATH'" after it
    before = [p for at, p in paths if at < marker.start()]
    after = [p for at, p in paths if at > marker.start()]
    return before[-1] if before else after[0] if after else None


def explain_text_paths(text: str, ctx: FsContext, *, permission_denied: bool, limit: int = MAX_NOTES) -> list[Denial]:
    """The absolute paths on a failed call's error lines, explained from the toolbox's rules (pure).

    Lines saying ``Read-only file system`` always count: the worker's private view mounts what it is granted
    read-only as read-only, and the kernel says so before Landlock is asked (no audit record). Lines saying
    ``Permission denied`` count only when ``permission_denied`` (the host gives no audit records to say it for
    sure); which access it was the text does not say, so a path no rule reaches is called refused to read, one a
    read-only rule covers refused to write.
    """
    seen: list[tuple[str, bool]] = []
    for line in text.splitlines()[-400:]:
        marker = _READ_ONLY_LINE.search(line) or (_DENIED_LINE.search(line) if permission_denied else None)
        if marker is None:
            continue
        read_only = bool(_READ_ONLY_LINE.search(line))
        named = _path_of_line(line, marker)
        if named is not None:
            path = posixpath.normpath(named)
            if all(path != p for p, _ in seen):
                seen.append((path, read_only))
        if len(seen) >= limit:
            break
    out = []
    for path, read_only in seen[:limit]:
        read = _explain_fs("fs.read_file", path, ctx)
        chosen = (
            read
            if not read_only and read.rule.startswith(("FileSandbox: no rule", "no rule"))
            else _explain_fs("fs.write_file", path, ctx)
        )
        verb = "read" if chosen is read else "write"
        how = (
            "was refused by the worker's private view (what it is not granted to write is mounted read-only)"
            if read_only
            else "was probably refused by Landlock (this host gives no audit records: judged from "
            "the error text and the toolbox's rules)"
        )
        text_out = chosen.text.replace(
            f"Landlock refused to {verb} {path} ({chosen.access})", f"{verb} {path} {how}", 1
        )
        out.append(Denial("view" if read_only else "landlock", chosen.access, path, chosen.rule, text_out))
    return out


def named_in_text(d: Denial, text: str) -> bool:
    """Does the result text name the refused path (or the folder a file was to be made in)? Seccomp: always."""
    return d.layer == "seccomp" or (d.target != "/" and d.target in text)


def notes(denials: Iterable[Denial], text: str = "") -> list[str]:
    """The notes appended to a failed call's result (pure): one per distinct denial the result's own text names
    (its path, or a file in the folder named; seccomp refusals always), at most :data:`MAX_NOTES`, then one line
    counting the others (a shell probing ``/dev/tty`` at start is refused too, and is not why the call failed)."""
    unique: list[Denial] = []
    for d in denials:
        if all((d.access, d.target) != (u.access, u.target) for u in unique):
            unique.append(d)
    named = [d for d in unique if named_in_text(d, text)]
    others = [d for d in unique if not named_in_text(d, text)]
    out = [f"[denied: {d.text}]" for d in named[:MAX_NOTES]]
    rest = others + named[MAX_NOTES:]
    if rest:
        shown = ", ".join(sorted({d.target for d in rest})[:3])
        out.append(
            f"[denied: {len(rest)} other refusal(s) during this call ({shown}{', ...' if len(rest) > 3 else ''})"
            f"; each is explained in the trace]"
        )
    return out


def context_of(
    toolbox: str,
    kind: str,
    rules: Iterable[FsRule],
    report: dict[str, object],
    system_paths: Iterable[str],
    workdir: str,
    *,
    view: bool = False,
) -> FsContext:
    """An :class:`FsContext` from a worker spec's parts (its rules and ``check`` report; pure). ``view``: the
    worker has a private view, whose fresh ``/tmp`` and ``/dev/shm`` the launcher grants read-write."""
    fsb = report.get("file_sandbox") if isinstance(report, dict) else None
    paths: tuple[str, ...] = ()
    mode = ""
    if isinstance(fsb, dict):
        paths = tuple(str(r.get("path")) for r in fsb.get("rules") or () if isinstance(r, dict))
        mode = str(fsb.get("mode") or "")
    extra = (FsRule("/tmp", WRITE), FsRule("/dev/shm", WRITE)) if view else ()
    return FsContext(
        toolbox, kind, (*rules, *extra), paths, mode if mode in (READ, WRITE) else "", tuple(system_paths), workdir
    )
