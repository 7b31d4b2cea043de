"""One function per Developer capability: ``op_<capability>(toolbox, args, ctx) -> ToolResult``.

Each one checks its path through ``toolbox.access`` before it opens anything, refuses bad input with a message
that says what to fix, and writes only through ``DeveloperToolbox.write_file`` (in place, journaled).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from toolboxes._result import ToolResult

from .._unified_diff import PatchError, apply_hunks, locate_hunks, parse_patch
from ._files import TextFile, load_text, refusal
from ._ranges import RangeError, apply_edits, check_overlaps, parse_read_ranges, parse_write_ranges
from ._store import EditSession, Store, snapshot_ref

if TYPE_CHECKING:
    from toolboxes._toolbox import CallContext

    from ._toolbox import DeveloperToolbox

__all__ = ["op_patch_file", "op_read_file_range", "op_restore_file", "op_write_file_range"]


def _store(tb: DeveloperToolbox, ctx: CallContext) -> Store:
    return Store(tb.state_dir, ctx.session_id or "-", tb.clock)


def _encode(lines: list[str]) -> bytes:
    return "".join(lines).encode("utf-8")


def op_read_file_range(tb: DeveloperToolbox, args: dict[str, Any], ctx: CallContext) -> ToolResult:
    opened = tb.read_text(args.get("path"))
    if isinstance(opened, ToolResult):
        return opened
    path, text = opened
    try:
        ranges = parse_read_ranges(args.get("ranges"), len(text.lines))
    except RangeError as exc:
        return refusal(f"{exc}", path)
    ref = _store(tb, ctx).save_snapshot(text.raw)
    metadata_only = bool(args.get("metadata_only"))
    parts: list[str] = []
    used = 0
    read = 0
    truncated = False
    if not metadata_only:
        for first, last in ranges:
            for n in range(first, last + 1):
                line = f"{n}\t{text.lines[n - 1].rstrip(chr(10)).rstrip(chr(13))}\n"
                used += len(line.encode())
                if used > tb.output_bytes:
                    truncated = True
                    break
                parts.append(line)
                read += 1
            if truncated:
                break
    value: dict[str, Any] = {
        "path": path,
        "content": "".join(parts),
        "linesRead": read,
        "totalLineCount": len(text.lines),
        "totalFileSize": len(text.raw),
        "rangesParsed": [] if metadata_only else [f"{a}-{b}" for a, b in ranges],
        "snapshotRef": ref,
    }
    if args.get("session_id"):
        value["sessionId"] = args["session_id"]
    if metadata_only:
        value["metadataOnly"] = True
    if truncated:
        value["truncated"] = True
    summary = f"{read} of {len(text.lines)} lines" + (" (truncated: read smaller ranges)" if truncated else "")
    return tb.json_result(value, path, "read", summary, truncated=truncated)


def _stale(expected: Any, actual: str, path: str) -> ToolResult | None:
    if expected and expected != actual:
        return refusal(
            f"{path} changed since snapshot {expected} (it is now {actual}): read it again, then "
            "send your edit with the new snapshotRef",
            path,
        )
    return None


def op_write_file_range(tb: DeveloperToolbox, args: dict[str, Any], ctx: CallContext) -> ToolResult:
    acc = tb.access(args.get("path"), for_write=True)
    if not acc.allowed:
        return refusal(acc.message, acc.path)
    path = acc.path
    spec = args.get("ranges")
    blocks = args.get("contentBlocks")
    if not isinstance(spec, str) or not isinstance(blocks, list) or not all(isinstance(b, str) for b in blocks):
        return refusal("ranges is a string and contentBlocks a list of strings (one block per range)", path)
    with tb.lock:
        current = load_text(path)
        if isinstance(current, str):
            return refusal(current, path)
        cur_ref = snapshot_ref(current.raw)
        store = _store(tb, ctx)
        sid = args.get("session_id")
        if not sid:
            if (stale := _stale(args.get("expected_snapshot_ref"), cur_ref, path)) is not None:
                return stale
            try:
                edits = parse_write_ranges(spec, blocks, len(current.lines), current.newline)
                check_overlaps(edits)
            except RangeError as exc:
                return refusal(str(exc), path)
            new = _encode(apply_edits(current.lines, edits))
            return _commit(tb, store, path, current, new, len(edits), edits, None, None)
        return _session_write(tb, store, path, current, cur_ref, str(sid), spec, blocks, args)


def _commit(
    tb: DeveloperToolbox,
    store: Store,
    path: str,
    before: TextFile,
    new: bytes,
    n_ranges: int,
    edits: list[Any],
    sid: str | None,
    delta: int | None,
) -> ToolResult:
    size_check = tb.access(path, for_write=True, size=len(new))
    if not size_check.allowed:
        return refusal(size_check.message, path)
    store.save_snapshot(before.raw)
    tb.write_file(path, new)
    after = store.save_snapshot(new)
    value = {
        "path": path,
        "rangesModified": n_ranges,
        "linesWritten": sum(len(e.lines) for e in edits),
        "beforeSnapshotRef": snapshot_ref(before.raw),
        "afterSnapshotRef": after,
        "sessionId": sid,
        "sessionNetDelta": delta,
        "sessionCommitted": True,
        "sessionStatus": "committed",
    }
    return tb.json_result(value, path, "mutate", f"wrote {os.path.basename(path)}")


def _session_write(
    tb: DeveloperToolbox,
    store: Store,
    path: str,
    current: TextFile,
    cur_ref: str,
    sid: str,
    spec: str,
    blocks: list[str],
    args: dict[str, Any],
) -> ToolResult:
    session = store.load_session(path, sid)
    if session is not None and session.expired(tb.clock()):
        store.drop_session(session)
        return refusal(
            f"edit session {sid!r} expired after 1 h without use; its staged edits were dropped. "
            "Read the file again and start a new session",
            path,
        )
    if session is not None and session.status == "committed":
        return refusal(f"edit session {sid!r} was already committed; use a new session_id for more edits", path)
    if session is None:
        if (stale := _stale(args.get("expected_snapshot_ref"), cur_ref, path)) is not None:
            return stale
        store.save_snapshot(current.raw)
        session = EditSession(sid, path, cur_ref)
        base = current
    else:
        expected = args.get("expected_snapshot_ref")
        if expected and expected != session.base_ref:
            return refusal(
                f"edit session {sid!r} numbers lines against snapshot {session.base_ref}, not {expected}", path
            )
        raw = store.load_snapshot(session.base_ref)
        loaded = load_text(path) if raw is None else None
        if raw is None or isinstance(loaded, str):
            return refusal(f"edit session {sid!r}: its original is no longer stored; start a new session", path)
        base = _as_text(raw)
    try:
        new_edits = parse_write_ranges(spec, blocks, len(base.lines), base.newline)
        staged = [
            e
            for label, block in session.edits
            for e in parse_write_ranges(label, [block], len(base.lines), base.newline)
        ]
        check_overlaps(staged + new_edits)
    except RangeError as exc:
        return refusal(f"{exc} (edit session {sid!r} numbers lines as in the original file)", path)
    session.edits.extend([e.label, b] for e, b in zip(new_edits, blocks, strict=True))
    all_edits = staged + new_edits
    delta = sum(len(e.lines) - (e.end - e.start) for e in all_edits)
    if not args.get("commit"):
        store.save_session(session)
        value = {
            "path": path,
            "rangesModified": len(new_edits),
            "linesWritten": sum(len(e.lines) for e in new_edits),
            "beforeSnapshotRef": session.base_ref,
            "afterSnapshotRef": None,
            "sessionId": sid,
            "sessionNetDelta": delta,
            "sessionCommitted": False,
            "sessionStatus": "staged",
        }
        return tb.json_result(value, path, "read", f"staged {len(session.edits)} edit(s) in session {sid}")
    if cur_ref != session.base_ref:
        store.save_session(session)
        return refusal(
            f"{path} changed on disk since edit session {sid!r} began (snapshot {session.base_ref}, "
            f"now {cur_ref}); nothing was written. Read the file again and redo the edits in a new "
            "session",
            path,
        )
    result = _commit(
        tb, store, path, base, _encode(apply_edits(base.lines, all_edits)), len(new_edits), new_edits, sid, delta
    )
    if result.status == "passed":
        session.status = "committed"
        store.save_session(session)
    return result


def _as_text(raw: bytes) -> TextFile:
    lines = raw.decode("utf-8").splitlines(keepends=True)
    return TextFile(raw, lines, "\r\n" if lines and lines[0].endswith("\r\n") else "\n")


def op_patch_file(tb: DeveloperToolbox, args: dict[str, Any], ctx: CallContext) -> ToolResult:
    acc = tb.access(args.get("path"), for_write=True)
    if not acc.allowed:
        return refusal(acc.message, acc.path)
    path = acc.path
    patch = args.get("patch")
    if not isinstance(patch, str) or not patch.strip():
        return refusal("patch is empty: send a unified diff (--- a/f, +++ b/f, @@ -a,b +c,d @@ ...)", path)
    with tb.lock:
        try:
            hunks, creates = parse_patch(patch)
        except PatchError as exc:
            return refusal(str(exc), path)
        current = load_text(path, missing_ok=creates)
        if isinstance(current, str):
            return refusal(current, path)
        if creates and (current.raw or tb.exists(path)):
            return refusal(f"the patch creates {path}, but it already exists", path)
        cur_ref = snapshot_ref(current.raw)
        if (stale := _stale(args.get("expected_snapshot_ref"), cur_ref, path)) is not None:
            return stale
        try:
            positions = locate_hunks(current.lines, hunks)
        except PatchError as exc:
            body = exc.to_json()
            result = ToolResult.json(body, status="failed", summary=exc.message)
            return result.with_meta("state_effect", "read").with_meta("resource_id", f"file:{path}")
        new = _encode(apply_hunks(current.lines, hunks, positions))
        size_check = tb.access(path, for_write=True, size=len(new))
        if not size_check.allowed:
            return refusal(size_check.message, path)
        store = _store(tb, ctx)
        store.save_snapshot(current.raw)
        tb.write_file(path, new, create_mode=0o666 if creates else None)  # the worker's umask applies
        after = store.save_snapshot(new)
    changed = sum(h.changed for h in hunks)
    value = {
        "path": path,
        "hunksApplied": len(hunks),
        "hunksRejected": 0,
        "linesChanged": changed,
        "beforeSnapshotRef": cur_ref,
        "afterSnapshotRef": after,
    }
    return tb.json_result(value, path, "mutate", f"applied {len(hunks)} hunk(s) to {os.path.basename(path)}")


def op_restore_file(tb: DeveloperToolbox, args: dict[str, Any], ctx: CallContext) -> ToolResult:
    acc = tb.access(args.get("path"), for_write=True)
    if not acc.allowed:
        return refusal(acc.message, acc.path)
    store = _store(tb, ctx)
    ref = str(args.get("snapshot_ref") or "")
    content = store.load_snapshot(ref)
    if content is None:
        return refusal(
            f"no snapshot {ref!r} in this session; use a snapshotRef returned by read-file-range or a write", acc.path
        )
    size_check = tb.access(acc.path, for_write=True, size=len(content))
    if not size_check.allowed:
        return refusal(size_check.message, acc.path)
    with tb.lock:
        try:
            with open(acc.path, "rb") as f:
                before: str | None = store.save_snapshot(f.read())
        except FileNotFoundError:
            before = None
        tb.write_file(acc.path, content, create_mode=None if before is not None else 0o644)
    value = {"path": acc.path, "restoredSnapshotRef": ref, "beforeSnapshotRef": before, "afterSnapshotRef": ref}
    return tb.json_result(value, acc.path, "mutate", f"restored {os.path.basename(acc.path)} to {ref}")
