"""Why a name is not served: the pure note about toolboxes (and scripts) that did not load."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from supervisor.calls._unloaded import unloaded_note


@dataclass
class _Spec:
    toolbox: str
    kind: str
    agent: str


@dataclass
class _Runner:
    spec: _Spec
    tools: list[dict[str, Any]] = field(default_factory=list)
    failed_reason: str | None = None
    load_errors: list[dict[str, Any]] = field(default_factory=list)


def test_the_failed_toolbox_whose_names_match_is_named_alone() -> None:
    runners = [
        _Runner(_Spec("db", "sqlite", "a"), failed_reason="toolbox db did not load: no such file"),
        _Runner(_Spec("other", "mcp", "a"), failed_reason="toolbox other did not load: exit 1"),
        _Runner(_Spec("system", "system", "a"), tools=[{"name": "system_system_date"}]),
    ]
    note = unloaded_note("sqlite_db_query", runners, "a")
    assert note == "Its toolbox db did not load: toolbox db did not load: no such file."
    listed = unloaded_note("sqlite_nope_query", runners, "a")
    assert "db: toolbox db did not load" in listed and "other: toolbox other did not load" in listed


def test_another_agents_failures_are_not_told() -> None:
    runners = [_Runner(_Spec("db", "sqlite", "b"), failed_reason="secret path /srv/b")]
    assert unloaded_note("sqlite_db_query", runners, "a") == ""
    assert "secret path" in unloaded_note("sqlite_db_query", runners, None)


def test_a_script_that_did_not_load_is_named() -> None:
    runner = _Runner(
        _Spec("tools", "bash", "a"),
        tools=[{"name": "bash_ok"}],
        load_errors=[{"source": "/t/ask-user.bash", "message": "describe printed invalid JSON"}],
    )
    assert unloaded_note("bash_ask_user", [runner], "a") == (
        "the script /t/ask-user.bash of toolbox tools did not load: describe printed invalid JSON."
    )
    assert unloaded_note("bash_other", [runner], "a") == ""  # the toolbox serves tools: nothing to say
