"""Texts of show-spec (but ``agent``'s, :mod:`._agent_spec`), the create-tool templates (seed's bash and python
templates) and the create-agent template. Pure data and string building."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["SLUG_RE", "SPECS", "SPEC_NAMES", "agent_template", "tool_template"]

SLUG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")

_BASH_TOOLS = """\
# Bash tools

A bash tool is an executable file answering two commands:

- `TOOL describe` prints one JSON object and exits 0:
  {"slug": "my-tool", "description": "what it does",
   "args": [{"name": "input", "description": "...", "type": "string", "backing_type": "string",
             "arity": "single", "mode": "dashdashspace"}],
   "empty-result": {"tag": "AddMessage", "contents": "No results"},   (optional; or {"tag": "DoNothing"})
   "output-media-type": "image/png"}                                   (optional)
  - arity: single (required), optional, multiple (a JSON array; the flag repeats)
  - mode: positional (alias space), dashdashspace (--name value), dashdashequal (--name=value), stdin
  - backing_type gives the JSON schema type: string, number, integer, boolean.
- `TOOL run ARGS...` does the work. Exit 0: stdout is the result; non-zero: the call failed (exit code,
stderr,
  stdout are reported). The environment has AGENT_SESSION_ID, AGENT_CONVERSATION_ID, AGENT_TURN_ID,
  AGENT_AGENT_ID and nothing of the supervisor's.

The tool is registered as bash_<slug> (dashes become underscores). It runs confined (files, network, limits
of its
toolbox) with a wall-time limit; the whole process group is killed at the limit.
"""

_POLICY = """\
# Policy

The supervisor's policy (YAML) says what an agent file cannot: which agent files to load, per-toolbox and
default
limits (memory, CPU seconds, wall time per call, open files, file size, processes), the uid workers run as,
the
minimum Landlock ABI, what to do with a predicate Landlock cannot enforce exactly (refuse | warn), the
read-only
system paths workers see, network extras, address classes the egress proxy may dial, max_call_depth, trace
sinks
and frontends. `agents-supervise schema` prints its JSON Schema; policies/strict.yaml is deny-by-default.
"""

#: The texts show-spec has as they are; ``agent`` is written from the agent file's schema (:mod:`._agent_spec`).
SPECS = {"bash-tools": _BASH_TOOLS, "policy": _POLICY}
#: What show-spec shows.
SPEC_NAMES = ("bash-tools", "agent", "policy")

_BASH_TEMPLATE = """\
#!/bin/bash
# {slug} - A bash tool for agents-exe

set -euo pipefail

case "${{1:-}}" in
  describe)
    cat <<'DESCRIBE_EOF'
{describe}
DESCRIBE_EOF
    ;;
  run)
    # TODO: Implement tool logic
    echo "Tool {slug} executed"
    ;;
  *)
    echo "Usage: {slug} <describe|run>" >&2
    exit 1
    ;;
esac
"""

_PYTHON_TEMPLATE = """\
#!/usr/bin/env python3
import json
import sys
import os

def describe():
    return {describe}

def run():
    # TODO: Implement tool logic
    print("Tool {slug} executed")

def main():
    if len(sys.argv) < 2:
        print(f"Usage: {{sys.argv[0]}} <describe|run>", file=sys.stderr)
        return 1

    command = sys.argv[1]
    if command == "describe":
        print(json.dumps(describe()))
        return 0
    elif command == "run":
        run()
        return 0
    else:
        print(f"Unknown command: {{command}}", file=sys.stderr)
        return 1

if __name__ == "__main__":
    sys.exit(main())
"""


def _describe(slug: str, description: str) -> dict[str, Any]:
    return {
        "slug": slug,
        "description": description or f"Tool {slug} - describe what this tool does",
        "args": [],
        "empty-result": {"tag": "AddMessage", "contents": "--no output--"},
    }


def tool_template(language: str, slug: str, description: str = "") -> str:
    """The seed's template for a ``bash`` or ``python`` tool named ``slug``. Raises ``ValueError``."""
    if not SLUG_RE.match(slug):
        raise ValueError(f"slug {slug!r}: use 1-64 letters, digits, '-' or '_', starting with a letter or digit")
    value = _describe(slug, description)
    if language == "bash":
        return _BASH_TEMPLATE.format(slug=slug, describe=json.dumps(value, indent=2))
    if language == "python":
        return _PYTHON_TEMPLATE.format(slug=slug, describe=repr(value))
    raise ValueError(f"language {language!r}: create-tool makes 'bash' or 'python' tools")


def agent_template(slug: str, args: dict[str, Any]) -> dict[str, Any]:
    """A minimal agent file in the seed's format, with no toolboxes. Raises ``ValueError`` on a bad slug."""
    if not SLUG_RE.match(slug):
        raise ValueError(f"slug {slug!r}: use 1-64 letters, digits, '-' or '_', starting with a letter or digit")
    prompt = args.get("systemPrompt") or ["You are a helpful software agent."]
    if isinstance(prompt, str):
        prompt = [prompt]
    return {
        "tag": "OpenAIAgentDescription",
        "contents": {
            "slug": slug,
            "apiKeyId": str(args.get("apiKeyId") or "openai"),
            "flavor": str(args.get("flavor") or "OpenAIv1"),
            "modelUrl": str(args.get("modelUrl") or "https://api.openai.com/v1"),
            "modelName": str(args.get("modelName") or "gpt-4o"),
            "announce": str(args.get("announce") or f"The {slug} agent."),
            "systemPrompt": [str(p) for p in prompt],
            "bashToolboxes": [],
            "builtinToolboxes": [],
        },
    }
