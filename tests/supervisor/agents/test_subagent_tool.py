"""The sub-agent tool's description reads as sentences, whatever the agent file's ``announce`` looks like."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from supervisor.agents._subagent_tool import announce_sentence, subagent_tool

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
DOES = "it works on your request with its own tools and answers in text."


def _announce(fixture: str) -> str:
    data = json.loads((FIXTURES / fixture).read_text())
    return str(data.get("contents", data)["announce"])


def test_the_seed_kimi_announce_ending_in_a_full_stop_gets_no_second_one() -> None:
    tool = subagent_tool("local_lrmlua", _announce("kimi-lrmlua.json"))
    assert tool["name"] == "io_prompt_agent_local_lrmlua"
    assert tool["description"] == f"The main agent, capable of reasoning. Ask the agent local_lrmlua: {DOES}"
    assert ".." not in tool["description"]


def test_the_seed_file_agent_announce_without_an_end_mark_gets_one() -> None:
    tool = subagent_tool("file-agent", _announce("file-agent.json"))
    assert tool["description"] == f"A file management assistant with vision. Ask the agent file-agent: {DOES}"


def test_no_announce_still_reads_as_a_sentence() -> None:
    assert subagent_tool("helper", None)["description"] == f"Ask the agent helper: {DOES}"
    assert subagent_tool("helper", "  \n ")["description"] == f"Ask the agent helper: {DOES}"


@pytest.mark.parametrize(
    ("announce", "sentence"),
    [
        ("The sub agent announces itself.", "The sub agent announces itself."),
        ("the sub agent announces itself", "The sub agent announces itself."),
        ("  Reads\n  files,\tanswers  ", "Reads files, answers."),
        ("Helps with:", "Helps with."),
        ("Does it work?", "Does it work?"),
        ("Fast!", "Fast!"),
        ("Thinks a lot...", "Thinks a lot..."),
        ('Says "hello."', 'Says "hello."'),
        ("Handles (most things.)", "Handles (most things.)"),
        ("42 tools", "42 tools."),
    ],
)
def test_announce_becomes_one_sentence(announce: str, sentence: str) -> None:
    assert announce_sentence(announce) == sentence
    assert subagent_tool("x", announce)["description"] == f"{sentence} Ask the agent x: {DOES}"


def test_the_argument_is_described_as_a_sentence_too() -> None:
    what = subagent_tool("x", None)["input_schema"]["properties"]["what"]["description"]
    assert what[0].isupper() and what.endswith(".")
