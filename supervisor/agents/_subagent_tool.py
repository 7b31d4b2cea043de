"""The tool that runs a sub-agent: ``io_prompt_agent_<slug> {what}``, its name and its description (pure).

The description is what the calling model reads to decide whether to ask the sub-agent: the agent file's
``announce`` (the agent's own words about itself) as a sentence, then what the tool does. ``announce`` is written by
whoever wrote the agent file, so it is made a sentence here: spaces collapsed, the first letter capitalised, a final
full stop added when it has no end mark (and one only: "reasoning." stays "reasoning.", never "reasoning..").
"""

from __future__ import annotations

from typing import Any

__all__ = ["announce_sentence", "subagent_tool", "subagent_tool_name"]

#: What ends a sentence already (an ellipsis, a closing quote or bracket after an end mark counts too).
_END_MARKS = (".", "!", "?", "\u2026")  # \u2026: an ellipsis character
_CLOSERS = "\"')]\u201d\u2019\u00bb"  # also a closing double and single quotation mark, a guillemet


def subagent_tool_name(slug: str) -> str:
    """The tool that runs the sub-agent ``slug`` (SPEC.md section 2)."""
    return f"io_prompt_agent_{slug}"


def announce_sentence(announce: str | None) -> str:
    """``announce`` as one sentence: whitespace collapsed, first letter upper case, one end mark; ``""`` if empty."""
    text = " ".join((announce or "").split())
    text = text.rstrip(",;:- \u2013")  # \u2013: an en dash
    if not text:
        return ""
    if text[0].islower():
        text = text[0].upper() + text[1:]
    if not text.rstrip(_CLOSERS).endswith(_END_MARKS):
        text += "."
    return text


def subagent_tool(slug: str, announce: str | None) -> dict[str, Any]:
    """The tool entry (name, description, input schema) of the sub-agent ``slug`` announced by ``announce``."""
    about = announce_sentence(announce)
    does = f"Ask the agent {slug}: it works on your request with its own tools and answers in text."
    return {
        "name": subagent_tool_name(slug),
        "description": f"{about} {does}" if about else does,
        "input_schema": {
            "type": "object",
            "properties": {
                "what": {
                    "type": "string",
                    "description": "What to ask the agent, with everything it needs to know.",
                }
            },
            "required": ["what"],
            "additionalProperties": False,
        },
    }
