"""``SKILL.md``: YAML frontmatter between ``---`` lines, then the instructions (pure code).

Rules (SPEC.md section 4, skills)::

    name           required; 1-64 of a-z, 0-9 and '-', no leading, trailing or double '-'
    description    required; 1-1024 characters
    license        optional string
    compatibility  optional string, at most 500 characters
    metadata       optional map of string to string
    allowed-tools  optional (accepted and ignored: the policy decides what a skill's scripts may do)

Any other key is refused, so a typo (``descripton``) is an error rather than a skill without a description."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from ._errors import FrontmatterError

__all__ = ["SkillMeta", "parse_skill_md", "valid_skill_name"]

_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_KEYS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500


@dataclass(frozen=True)
class SkillMeta:
    """A validated ``SKILL.md``."""

    name: str
    description: str
    instructions: str
    license: str | None = None
    compatibility: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)


def valid_skill_name(name: object) -> bool:
    """Whether ``name`` is a valid skill name."""
    return isinstance(name, str) and 1 <= len(name) <= MAX_NAME and bool(_NAME.match(name))


def _split(text: str) -> tuple[str, str]:
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise FrontmatterError("SKILL.md must start with a '---' line opening the YAML frontmatter")
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1 :])
    raise FrontmatterError("SKILL.md frontmatter is not closed by a '---' line")


def _optional_str(data: dict[str, Any], key: str, limit: int | None = None) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise FrontmatterError(f"frontmatter.{key} must be a string, not {type(value).__name__}")
    if limit is not None and len(value) > limit:
        raise FrontmatterError(f"frontmatter.{key} is {len(value)} characters long; the limit is {limit}")
    return value


def parse_skill_md(text: str) -> SkillMeta:
    """Validate a ``SKILL.md``; raises :class:`FrontmatterError` naming the field at fault."""
    head, body = _split(text)
    try:
        data = yaml.safe_load(head)
    except yaml.YAMLError as exc:
        raise FrontmatterError(f"frontmatter is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise FrontmatterError("frontmatter must be a YAML map of keys to values")
    unknown = sorted(str(k) for k in data if k not in _KEYS)
    if unknown:
        raise FrontmatterError(f"frontmatter has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(_KEYS)}")
    name = data.get("name")
    if name is None:
        raise FrontmatterError("frontmatter.name is required")
    if not valid_skill_name(name):
        raise FrontmatterError(
            f"frontmatter.name {name!r} must be 1-{MAX_NAME} of a-z, 0-9 and '-', "
            "with no leading, trailing or double '-'"
        )
    description = _optional_str(data, "description", MAX_DESCRIPTION)
    if not description or not description.strip():
        raise FrontmatterError("frontmatter.description is required and must not be empty")
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise FrontmatterError("frontmatter.metadata must be a map of strings to strings")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise FrontmatterError(
                f'frontmatter.metadata.{key} must be a string (quote values like "1.0" in YAML), '
                f"not {type(value).__name__}"
            )
    return SkillMeta(
        name=name,
        description=description,
        instructions=body.strip(),
        license=_optional_str(data, "license"),
        compatibility=_optional_str(data, "compatibility", MAX_COMPATIBILITY),
        metadata=dict(metadata),
    )
