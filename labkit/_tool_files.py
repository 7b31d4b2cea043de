"""Files the tests and the harness scripts (``scripts/chaos``, ``scripts/soak``) build toolboxes from: a bash tool
script and its ``describe`` answer, a skill folder with its ``SKILL.md`` and script tools."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["describe_json", "make_skill", "skill_md", "write_script"]


def describe_json(slug: str, args: list[dict[str, Any]] | None = None, **extra: Any) -> str:
    """The JSON a bash tool script answers ``describe`` with: ``slug``, a description, ``args`` and ``extra``."""
    return json.dumps({"slug": slug, "description": f"the {slug} tool", "args": args or [], **extra})


def write_script(folder: Path, name: str, describe: str, run: str, mode: int = 0o755) -> Path:
    """A bash script answering ``describe`` with ``describe`` (JSON text) and running ``run`` (bash) otherwise."""
    path = folder / name
    path.write_text(
        "#!/bin/bash\n"
        'if [ "$1" = describe ]; then\n'
        f"cat <<'DESCRIBE_EOF'\n{describe}\nDESCRIBE_EOF\nexit 0\nfi\n"
        "shift\n"
        f"{run}\n"
    )
    path.chmod(mode)
    return path


def make_skill(
    root: Path,
    folder: str,
    skill_md: str,
    scripts: dict[str, str] | None = None,
    references: dict[str, str] | None = None,
) -> Path:
    """``root/folder`` as a skill: its ``SKILL.md``, a script tool per ``scripts`` entry (file name -> slug; each
    takes one path argument and echoes it with the session id), and ``references`` (relative path -> text)."""
    skill = root / folder
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(skill_md)
    for name, slug in (scripts or {}).items():
        (skill / "scripts").mkdir(exist_ok=True)
        arg = {
            "name": "file",
            "description": "the file",
            "type": "path",
            "backing_type": "string",
            "arity": "single",
            "mode": "positional",
        }
        write_script(
            skill / "scripts", name, describe_json(slug, [arg]), 'echo "$0 on $1 in session $AGENT_SESSION_ID"'
        )
    for rel, text in (references or {}).items():
        path = skill / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return skill


def skill_md(name: str, description: str = "does things") -> str:
    """A ``SKILL.md`` naming ``name`` with ``description``."""
    return f"---\nname: {name}\ndescription: {description}\n---\nUse {name} well.\n"
