"""One agent-file schema (issue 26): the pydantic models are the definition; the JSON Schema is made from them; the
developer toolbox's shipped copy is that schema, and its validate-agent and show-spec agent read only that copy.

What the loader refuses for a wrong shape, validate-agent refuses at the same JSON path; what the loader accepts,
validate-agent accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from supervisor.config import ConfigError, agent_json_schema
from supervisor.config._agent_file import AgentDescription
from supervisor.config._agent_loader import parse_agent_data
from toolboxes.developer._agent_check import SCHEMA_FILE, check_agent, load_agent_schema
from toolboxes.developer._agent_spec import agent_spec

REPO = Path(__file__).resolve().parents[3]
_KEYS = set(AgentDescription.model_json_schema(by_alias=True)["properties"]) | {"allowedPaths"}


def _agent_files() -> list[Path]:
    """The agent files of the fixtures, and the seed's fragments that are an agent's keys (made whole by a slug)."""
    out = sorted((REPO / "tests" / "fixtures" / "agents").glob("*.json"))
    for path in sorted((REPO / "tests" / "fixtures" / "seed004").glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue  # a fragment that is not JSON alone
        if isinstance(data, dict) and (data.get("tag") == "OpenAIAgentDescription" or set(data) <= _KEYS):
            out.append(path)
    return out


AGENT_FILES = _agent_files()


def test_the_shipped_schema_is_the_one_the_models_make() -> None:
    shipped = load_agent_schema()
    assert shipped == agent_json_schema(), (
        f"{SCHEMA_FILE} is not the agent file's schema any more: run "
        "`agents-supervise schema --agent-file > toolboxes/developer/agent_file_schema.json`"
    )
    jsonschema.Draft202012Validator.check_schema(shipped)


@pytest.mark.parametrize("path", AGENT_FILES, ids=lambda p: p.name)
def test_what_the_loader_loads_validates(path: Path) -> None:
    data = json.loads(path.read_text())
    if data.get("tag") != "OpenAIAgentDescription" and "slug" not in data:  # a fragment: an agent's keys
        data = {"slug": "fragment", **data}
    loaded = parse_agent_data(data, str(path), environ={"GITHUB_TOKEN": "t", "OPENAI_API_KEY": "k"})
    errors, warnings = check_agent(data, load_agent_schema())
    assert errors == [], errors
    assert len(warnings) == len(loaded.warnings)  # allowedPaths: ignored with a warning by both


_SYSTEM = {"Name": "s", "Description": "d", "Capabilities": ["date"]}
_BAD: list[tuple[dict[str, Any], str]] = [
    ({"colour": "blue"}, "colour"),
    ({"slug": "a b"}, "slug"),
    ({"builtinToolboxes": [{"tag": "SystemToolboxx", "contents": _SYSTEM}]}, "builtinToolboxes[0].tag"),
    ({"builtinToolboxes": [{"contents": _SYSTEM}]}, "builtinToolboxes[0]"),
    (
        {"builtinToolboxes": [{"tag": "SystemToolbox", "contents": {**_SYSTEM, "Capabilities": ["date", "fly"]}}]},
        "builtinToolboxes[0].contents.Capabilities[1]",
    ),
    (
        {"builtinToolboxes": [{"tag": "SystemToolbox", "contents": {"Name": "s", "Capabilities": ["date"]}}]},
        "builtinToolboxes[0].contents.Description",
    ),
    (
        {
            "postgrestToolboxes": [
                {
                    "tag": "PostgRESTServer",
                    "contents": {"SpecUrl": "http://db/", "BaseUrl": "http://db", "AllowedMethods": ["GET", "PUT"]},
                }
            ]
        },
        "postgrestToolboxes[0].contents.AllowedMethods[1]",
    ),
    (
        {
            "builtinToolboxes": [
                {"tag": "WasmToolbox", "contents": {"Name": "w", "Description": "d", "Path": "c.wasm", "Port": 1}}
            ]
        },
        "builtinToolboxes[0].contents.Port",
    ),
    ({"systemPrompt": "one string"}, "systemPrompt"),
    ({"extraAgents": [{"slug": "x"}]}, "extraAgents[0].path"),
]


@pytest.mark.parametrize(("contents", "where"), _BAD, ids=[w for _, w in _BAD])
def test_the_loader_and_validate_agent_refuse_the_same_thing_at_the_same_place(
    contents: dict[str, Any], where: str, tmp_path: Path
) -> None:
    contents = {"slug": "a", **contents}
    for data, prefix in ((contents, ""), ({"tag": "OpenAIAgentDescription", "contents": contents}, "contents.")):
        with pytest.raises(ConfigError) as refused:
            parse_agent_data(data, str(tmp_path / "agent.json"))
        errors, _ = check_agent(data, load_agent_schema())
        assert [e["path"] for e in errors] == [prefix + where], errors
        assert f"$.{prefix}{where}" in {p.json_path for p in refused.value.problems}


def test_postgrest_allowed_methods_and_wasm_without_network_are_what_validate_agent_knows() -> None:
    """The hand-written copies had PostgREST without AllowedMethods and WASM's AllowedHosts as a grant."""
    postgrest = {
        "tag": "PostgRESTServer",
        "contents": {"SpecUrl": "http://db/", "BaseUrl": "http://db", "AllowedMethods": ["GET", "PATCH"]},
    }
    assert check_agent({"slug": "a", "postgrestToolboxes": [postgrest]}, load_agent_schema()) == ([], [])
    text = agent_spec(load_agent_schema())
    postgrest_section = text.split("PostgrestContents:")[1].split("\n\n")[0]
    assert '- AllowedMethods: ["GET" | "POST" | "PATCH" | "DELETE"] | null' in postgrest_section
    wasm_section = text.split("WasmContents:")[1].split("\n\n")[0]
    [hosts] = [line for line in wasm_section.splitlines() if line.startswith("- AllowedHosts")]
    assert "gives components nothing in this build" in hosts


def test_show_spec_agent_names_every_key_of_every_model() -> None:
    text = agent_spec(load_agent_schema())
    for name, schema in agent_json_schema()["$defs"].items():
        assert f"\n{name}:" in text, name
        for key in schema.get("properties", {}):
            if key != "tag":
                assert f"- {key}" in text or f'"{key}"' in text, (name, key)
    for key in AgentDescription.model_json_schema(by_alias=True)["properties"]:
        assert f"\n- {key}" in text.split("AgentDescription:")[1], key
