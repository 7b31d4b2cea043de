"""The skills toolbox: folders with a ``SKILL.md``, their ``scripts/`` as per-session tools, their ``references/``.

Scripts follow the bash protocol and run through :class:`toolboxes.bash.ScriptRunner`.
"""

from ._errors import ConfigError, FrontmatterError, SkillsError
from ._frontmatter import SkillMeta, parse_skill_md, valid_skill_name
from ._store import Skill, load_skills, script_tool_name
from ._toolbox import SkillsToolbox, open_toolbox

__all__ = [
    "ConfigError",
    "FrontmatterError",
    "Skill",
    "SkillMeta",
    "SkillsError",
    "SkillsToolbox",
    "load_skills",
    "open_toolbox",
    "parse_skill_md",
    "script_tool_name",
    "valid_skill_name",
]
