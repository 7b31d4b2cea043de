"""The JSON Schema of an agent file, made from its pydantic models (:mod:`supervisor.config._agent_file`, the one
definition of the file).

``agents-supervise schema --agent-file`` prints it; the developer toolbox ships a copy as data
(``toolboxes/developer/agent_file_schema.json``: the worker cannot import the supervisor) and checks agent files
against it (``validate-agent``) and writes ``show-spec agent`` from it. ``tests/supervisor/config/test_agent_schema.py``
holds the shipped copy equal to this one.

The schema is the file as written: ``{"tag": "OpenAIAgentDescription", "contents": {...}}`` or the bare object
(``if``/``then``/``else`` on the ``tag`` key), the contents under ``$defs/AgentDescription``. What it leaves to the
loader: paths resolved and checked, ``${VAR}`` set, host syntax, a predicate's contents, ``FileSandbox`` refs and
toolbox name clashes (the loader is authoritative; the schema catches what is wrong in the shape).
"""

from __future__ import annotations

from typing import Any

from ._agent_file import AgentDescription

__all__ = ["AGENT_TAG", "agent_json_schema"]

#: The tag of the wrapped form of an agent file.
AGENT_TAG = "OpenAIAgentDescription"

_DESCRIPTION = (
    f'An agent file: JSON, either {{"tag": "{AGENT_TAG}", "contents": {{...}}}} or the bare object. Tagged values are '
    '{"tag": NAME, "contents": ...} (the SQLite Versioning has its fields beside its tag). Relative paths resolve '
    "against the agent file's folder. allowedPaths was removed: it is ignored, with a warning (write a FileSandbox)."
)


def agent_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of an agent file, wrapped or bare; its contents are ``$defs/AgentDescription``.

    A fresh value on each call (the caller may change it)."""
    contents = AgentDescription.model_json_schema(mode="validation", by_alias=True, ref_template="#/$defs/{model}")
    defs = contents.pop("$defs", {})
    defs["AgentDescription"] = contents
    contents_ref = {"$ref": "#/$defs/AgentDescription"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "agents-supervise agent file",
        "description": _DESCRIPTION,
        "type": "object",
        "if": {"required": ["tag"]},
        "then": {
            "properties": {"tag": {"const": AGENT_TAG}, "contents": contents_ref},
            "required": ["tag", "contents"],
            "additionalProperties": False,
        },
        "else": contents_ref,
        "$defs": defs,
    }
