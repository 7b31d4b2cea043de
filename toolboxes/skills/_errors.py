"""Errors of the skills toolbox.

::

    SkillsError               base
    ├── ConfigError           the toolbox config is malformed (also a ValueError)
    └── FrontmatterError      a SKILL.md has no frontmatter or invalid frontmatter

A :class:`FrontmatterError` becomes a load error for that skill (the other skills load); a script of a skill that
fails ``describe`` is a load error too (``toolboxes.bash.DescribeError``). Calls never raise: refusals (a script
tool of a skill not enabled in the session) are ``error`` results.
"""

from __future__ import annotations

__all__ = ["ConfigError", "FrontmatterError", "SkillsError"]


class SkillsError(Exception):
    """Base of the skills toolbox's errors."""


class ConfigError(SkillsError, ValueError):
    """Raised by ``open_toolbox`` for a malformed config (a source that is not a ``SkillDirectory`` with an absolute
    path, an ``autoEnableSkills`` that is not a list of names, a bad policy value). The message names the key."""


class FrontmatterError(SkillsError):
    """Raised when a ``SKILL.md`` cannot be used: no ``---`` frontmatter, YAML that does not parse, or fields that
    break the rules (name, description, license, compatibility, metadata). The message names the field."""
