"""Reading a text file for the line tools, and the result helpers they share."""

from __future__ import annotations

from dataclasses import dataclass

from toolboxes._result import ToolResult

__all__ = ["TextFile", "load_text", "refusal"]


@dataclass(frozen=True)
class TextFile:
    """A UTF-8 text file: its bytes, its lines (with their endings) and its dominant line ending."""

    raw: bytes
    lines: list[str]
    newline: str


def load_text(path: str, *, missing_ok: bool = False) -> TextFile | str:
    """Read ``path`` as text, or return a message saying why it cannot be edited line by line.

    A file with a NUL byte or that is not UTF-8 is binary and refused. ``missing_ok`` reads a missing file as
    empty (patch-file creating a file).
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        if missing_ok:
            return TextFile(b"", [], "\n")
        return f"{path} does not exist; check the path (create-tool/create-agent create files)"
    except IsADirectoryError:
        return f"{path} is a directory, not a file"
    except PermissionError:
        return f"{path} cannot be read: permission denied by the system"
    if b"\0" in raw:
        return f"{path} is a binary file; these tools edit UTF-8 text files only"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"{path} is not UTF-8 text (binary or another encoding); these tools edit UTF-8 text only"
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    return TextFile(raw, lines, newline)


def refusal(message: str, path: str, effect: str = "read", status: str = "error") -> ToolResult:
    """An ``error`` (or ``failed``) result with the reserved metadata of a file tool."""
    result = ToolResult.error(message) if status == "error" else ToolResult.failed(message, summary=message)
    return result.with_meta("state_effect", effect).with_meta("resource_id", f"file:{path or '?'}")
