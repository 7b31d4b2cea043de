"""Load errors are made one way and written one way (pure)."""

from __future__ import annotations

from supervisor.config import LoadError, load_error_line, load_error_owner, toolbox_not_loaded


def test_a_toolbox_that_did_not_load_says_where_why_and_what_to_do() -> None:
    error = toolbox_not_loaded("files", "coder", "worker start", "the launcher refused: no Landlock", kind="system")
    assert error == {
        "toolbox": "files",
        "agent": "coder",
        "kind": "system",
        "source": "worker start",
        "message": "toolbox files (agent coder) did not load (worker start): the launcher refused: no Landlock. "
        "It serves nothing; fix the cause and restart the supervisor.",
    }
    assert "kind" not in toolbox_not_loaded("files", "coder", "tool list", "ValueError: x")
    long = toolbox_not_loaded("t", "a", "compile", "x" * 5000)["message"]
    assert len(long) < 2100 and long.endswith("restart the supervisor.")


def test_every_printer_writes_one_line_naming_whose_it_is() -> None:
    toolbox = toolbox_not_loaded("files", "coder", "tool list", "KeyError: 'x'")
    assert load_error_line(toolbox) == f"coder/files: tool list: {toolbox['message']}"
    subagent = LoadError(agent="coder", source="coder.json extraAgents[0]", message="its file is missing")
    assert load_error_owner(subagent) == "agent coder"
    assert load_error_line(subagent) == "agent coder: coder.json extraAgents[0]: its file is missing"
    left_out = {"toolbox": "bash", "agent": "coder", "tool": "bash_broken", "message": "describe failed"}
    assert load_error_line(left_out) == "coder/bash: bash_broken: describe failed"
