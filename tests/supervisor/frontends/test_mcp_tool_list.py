"""``tools/list``'s answer made and encoded once per listing (issue 29): the spliced line is exactly the message's
own encoding, a listing that changed is answered anew, and what a revision shows keys the cache."""

from __future__ import annotations

import json
from typing import Any

import pytest

from supervisor import ToolInfo
from supervisor.frontends._mcp_tool_list import tool_list
from supervisor.frontends._mcp_wire import EncodedMessage, encode_json, encode_message, spliced


def _info(name: str, description: str = "d", *, hints: dict[str, Any] | None = None) -> ToolInfo:
    schema = {"type": "object", "properties": {"p": {"type": "string", "description": "é ✓"}}}
    return ToolInfo(name, description, schema, "box", "agent", name, {}, hints or {}, {"type": "object"}, "agent")


@pytest.mark.parametrize("req_id", [1, 0, -7, 2**70, "x", "é✓", 'quote " and \\ back'])
@pytest.mark.parametrize("extra", [{}, {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}])
def test_a_spliced_reply_is_the_messages_own_line(req_id: Any, extra: dict[str, Any]) -> None:
    tools = [{"name": "a", "description": "ü", "inputSchema": {"type": "object"}}]
    message = {"jsonrpc": "2.0", "id": req_id, "result": {**extra, "tools": tools}}
    out = spliced(message, "tools", encode_json(tools))
    assert isinstance(out, EncodedMessage)
    assert out == message  # whoever reads the mapping reads the same message
    assert encode_message(out) == encode_message(dict(message))
    assert json.loads(encode_message(out)) == message


def test_a_reply_whose_id_needs_the_fallback_is_not_spliced() -> None:
    message = {"jsonrpc": "2.0", "id": "lone \ud800", "result": {"tools": []}}
    out = spliced(message, "tools", b"[]")
    assert type(out) is dict
    assert json.loads(encode_message(out)) == {"jsonrpc": "2.0", "id": "lone \ud800", "result": {"tools": []}}


def test_a_key_that_is_not_last_is_not_spliced() -> None:
    message = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [], "after": 1}}
    assert type(spliced(message, "tools", b"[]")) is dict


def test_the_same_listing_is_encoded_once_and_a_changed_one_anew() -> None:
    a, b = _info("a"), _info("b", hints={"readOnlyHint": True})
    entries, text, names = tool_list([a, b], True, True)
    assert names == {"a", "b"}
    assert text is not None and json.loads(text) == entries
    assert entries[1]["annotations"] == {"readOnlyHint": True} and "outputSchema" in entries[0]
    again = tool_list([a, b], True, True)
    assert again[1] is text  # made once
    # an older revision shows neither annotations nor output schemas: its own answer
    old, old_text, _ = tool_list([a, b], False, False)
    assert all("annotations" not in e and "outputSchema" not in e for e in old)
    assert old_text is not None and json.loads(old_text) == old
    # the registry rebuilt (a description changed): new objects, a new answer, even with equal names
    changed = _info("a", "Not available now: restarting")
    entries2, text2, _ = tool_list([changed, b], True, True)
    assert entries2[0]["description"] == "Not available now: restarting"
    assert text2 is not None and json.loads(text2) == entries2
    # a session's own view (a skill's tool left out) is its own answer
    only_b, only_b_text, only_b_names = tool_list([b], True, True)
    assert only_b_names == {"b"} and json.loads(only_b_text or b"") == only_b


def test_a_listing_json_cannot_spell_is_answered_by_the_fallbacks() -> None:
    bad = ToolInfo("n", "lone \ud800", {"type": "object"}, "box", "agent", "n", {}, {}, None, "agent")
    entries, text, _ = tool_list([bad], True, True)
    assert text is None
    line = encode_message({"jsonrpc": "2.0", "id": 1, "result": {"tools": entries}})
    assert json.loads(line)["result"]["tools"][0]["description"] == "lone \ud800"
