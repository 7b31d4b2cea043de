"""A skill's files as MCP resources: its ``SKILL.md`` and every file under ``references/`` (read-only).

The toolbox's own URI of a resource is ``<skill>/SKILL.md`` or ``<skill>/references/<path>``; the supervisor
serves it as ``agents-supervise://<agent>/<toolbox>/<that>``. A read opens the file inside the confined worker
without following a symlink at the last component (the skill loader lists regular files only; a file swapped for a
link since is refused), reads at most :data:`MAX_READ_BYTES`, and answers ``text`` when the bytes are UTF-8, else a
base64 ``blob``.
"""

from __future__ import annotations

import base64
import mimetypes
import os
import stat
from typing import TYPE_CHECKING, Any

from .._result import ToolResult

if TYPE_CHECKING:
    from ._store import Skill

__all__ = ["MAX_READ_BYTES", "read_skill_file", "skill_resources"]

#: Largest file a read answers (its base64 stays under the catalog's 16 MiB bound).
MAX_READ_BYTES = 8 * 1024 * 1024


def _mime(path: str) -> str:
    if path.endswith(".md"):
        return "text/markdown"
    return mimetypes.guess_type(path)[0] or "application/octet-stream"


def skill_resources(skills: dict[str, Skill]) -> list[dict[str, Any]]:
    """The resources of every skill, in name order: SKILL.md first, then its references."""
    out: list[dict[str, Any]] = []
    for name in sorted(skills):
        skill = skills[name]
        out.append(
            {
                "uri": f"{name}/SKILL.md",
                "name": f"{name}/SKILL.md",
                "mimeType": "text/markdown",
                "description": f"The instructions of the skill {name}: {skill.meta.description}"[:8192],
            }
        )
        for ref in skill.references:
            out.append(
                {
                    "uri": f"{name}/{ref}",
                    "name": f"{name}/{ref}"[:256],
                    "mimeType": _mime(ref),
                    "description": f"A reference file of the skill {name}.",
                }
            )
    return out[:1024]


def read_skill_file(skills: dict[str, Skill], uri: str) -> ToolResult:
    """The contents of the resource ``uri`` (one of :func:`skill_resources`), or an error result saying why not."""
    name, _, rel = uri.partition("/")
    skill = skills.get(name)
    if skill is None or not (rel == "SKILL.md" or rel in skill.references):
        return ToolResult.error(f"{uri!r} is not a resource of this skills toolbox (resources/list names them)")
    path = os.path.join(skill.path, rel)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        return ToolResult.error(f"{uri}: cannot be opened: {exc.strerror or exc}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ToolResult.error(f"{uri}: is not a regular file")
        if st.st_size > MAX_READ_BYTES:
            return ToolResult.error(f"{uri}: is {st.st_size} bytes, more than the {MAX_READ_BYTES} a read answers")
        chunks, total = [], 0
        while total <= MAX_READ_BYTES:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_READ_BYTES:
        return ToolResult.error(f"{uri}: grew past the {MAX_READ_BYTES} bytes a read answers")
    content: dict[str, Any] = {"uri": uri, "mimeType": _mime(rel)}
    try:
        content["text"] = data.decode("utf-8")
    except UnicodeDecodeError:
        content["blob"] = base64.b64encode(data).decode("ascii")
    return ToolResult("passed", summary=f"read {uri}", structured={"contents": [content]})
