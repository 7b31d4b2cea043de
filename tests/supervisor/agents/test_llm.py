"""The pure parts of the model client: stream assembly at any split, completion parsing, retry decisions, keys."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.agents._chat_reply import ModelError, completion_url, function_tool, parse_completion, retry_decision
from supervisor.agents._chat_stream import StreamAssembler
from supervisor.agents._model_keys import resolve_api_key
from tests.supervisor._model_server import message, streamed

if TYPE_CHECKING:
    from pathlib import Path


def _sse_text(reply_chunks: list[dict], done: bool = True) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in reply_chunks) + ("data: [DONE]\n\n" if done else "")


@given(st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
def test_stream_assembles_the_same_reply_at_any_split(cuts: list[int]) -> None:
    text = _sse_text(streamed("Hello there, friend", [("tool_a", '{"x": 1}'), ("tool_b", "{}")]).chunks)
    assembler = StreamAssembler()
    last = 0
    for cut in sorted(c % (len(text) + 1) for c in cuts):
        assembler.feed(text[last:cut])
        last = cut
    assembler.feed(text[last:])
    reply = assembler.reply()
    assert reply.content == "Hello there, friend"
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("call_0", "tool_a", '{"x": 1}'),
        ("call_1", "tool_b", "{}"),
    ]
    assert reply.finish_reason == "tool_calls"


def test_a_stream_without_end_is_a_transient_break() -> None:
    assembler = StreamAssembler()
    assembler.feed(_sse_text(streamed("cut short").chunks[:3], done=False))
    with pytest.raises(ModelError, match="stream broke") as caught:
        assembler.reply()
    assert caught.value.transient


def test_an_error_event_in_a_stream_is_transient_unless_vetoed() -> None:
    with pytest.raises(ModelError, match="overloaded") as caught:
        StreamAssembler().feed('data: {"error": {"message": "overloaded"}}\n')
    assert caught.value.transient
    with pytest.raises(ModelError) as vetoed:
        StreamAssembler().feed('data: {"error": "quota", "metadata": [["transient", "false"]]}\n')
    assert not vetoed.value.transient


def test_parse_completion_reads_text_and_tool_calls_and_refuses_wrong_shapes() -> None:
    reply = parse_completion(message("hi", [("t", '{"a": 1}')]))
    assert reply.content == "hi" and reply.tool_calls[0].name == "t"
    assert reply.message()["tool_calls"][0]["function"] == {"name": "t", "arguments": '{"a": 1}'}
    for bad, text in (
        ([], "not an object"),
        ({"choices": []}, "no choices"),
        ({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}, "no function name"),
    ):
        with pytest.raises(ModelError, match=text) as caught:
            parse_completion(bad)
        assert not caught.value.transient


@pytest.mark.parametrize(
    ("status", "broken", "meta", "expected"),
    [
        (408, False, None, True),
        (429, False, None, True),
        (500, False, None, True),
        (503, False, None, True),
        (501, False, None, False),
        (400, False, None, False),
        (401, False, None, False),
        (None, True, None, True),
        (429, False, "false", False),
        (400, False, "true", True),
        (None, True, "false", False),
    ],
)
def test_retry_decision(status: int | None, broken: bool, meta: str | None, expected: bool) -> None:
    assert retry_decision(status, broken=broken, transient_meta=meta) is expected


def test_api_keys_come_from_the_environment_or_a_key_file(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("sk-file\n")
    keys = {"env": "MY_KEY", "file": str(key_file)}
    assert resolve_api_key(None, keys) is None
    assert resolve_api_key("env", keys, {"MY_KEY": "sk-env"}) == "sk-env"
    assert resolve_api_key("file", keys, {}) == "sk-file"
    with pytest.raises(ModelError, match="no API key is configured for apiKeyId 'other'"):
        resolve_api_key("other", keys, {})
    with pytest.raises(ModelError, match="empty or missing \\(environment variable MY_KEY\\)"):
        resolve_api_key("env", keys, {})


def test_urls_and_function_tools() -> None:
    assert completion_url("http://h/v1/") == "http://h/v1/chat/completions"
    assert completion_url("http://h/v1/chat/completions") == "http://h/v1/chat/completions"
    schema = {"type": "object", "properties": {"what": {"type": "string"}}}
    assert function_tool("t", "d", schema) == {
        "type": "function",
        "function": {"name": "t", "description": "d", "parameters": schema},
    }


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/v1/chat/completions", "http://[::1/v1", "127.0.0.1:9/v1"])
async def test_an_unusable_model_url_is_a_clear_error_not_retried(url: str) -> None:
    import httpx

    from supervisor.agents._llm import ChatClient, RetryBounds, complete_with_retries

    attempts: list[int] = []
    async with httpx.AsyncClient(timeout=None, trust_env=False) as http:
        with pytest.raises(ModelError, match="modelUrl") as caught:
            await complete_with_retries(
                ChatClient(http, url, "m", None),
                [],
                [],
                RetryBounds(retries=3, backoff_initial_s=0),
                on_retry=lambda n, e, d: attempts.append(n),
            )
    assert not caught.value.transient and attempts == []


# -- the seed's continuation_id metadata key ----------------------------------------------------------------------
def test_a_completion_carries_the_first_continuation_id_of_its_metadata() -> None:
    body = {
        **message("hi"),
        "metadata": [["state_effect", "read"], ["continuation_id", "conv-7"], ["continuation_id", "conv-8"]],
    }
    assert parse_completion(body).continuation_id == "conv-7"
    assert parse_completion(message("hi")).continuation_id == ""
    assert parse_completion({**message("hi"), "metadata": [["continuation_id", ""]]}).continuation_id == ""
    assert parse_completion({**message("hi"), "metadata": "not a list"}).continuation_id == ""


def test_a_stream_carries_the_continuation_id_of_its_first_event_that_has_one() -> None:
    chunks = streamed("Hello").chunks
    chunks[1] = {**chunks[1], "metadata": [["continuation_id", "conv-1"]]}
    chunks[-1] = {**chunks[-1], "metadata": [["continuation_id", "conv-2"]]}
    assembler = StreamAssembler()
    assembler.feed(_sse_text(chunks))
    reply = assembler.reply()
    assert (reply.content, reply.continuation_id) == ("Hello", "conv-1")
    plain = StreamAssembler()
    plain.feed(_sse_text(streamed("Hello").chunks))
    assert plain.reply().continuation_id == ""


def test_the_models_reasoning_is_kept_apart_from_its_answer() -> None:
    """``reasoning_content`` (Kimi, the seed's KimiV1 flavour; DeepSeek) or ``reasoning`` (OpenRouter, Ollama): kept
    for read-session's include_thinking, never part of the answer."""
    body = {
        "choices": [{"message": {"content": "42", "reasoning_content": "six times seven"}, "finish_reason": "stop"}]
    }
    reply = parse_completion(body)
    assert (reply.content, reply.thinking) == ("42", "six times seven")
    assert "reasoning_content" not in reply.message()
    assert parse_completion({"choices": [{"message": {"content": "x", "reasoning": "r"}}]}).thinking == "r"
    assert parse_completion({"choices": [{"message": {"content": "x"}}]}).thinking == ""
    stream = StreamAssembler()
    for delta in ({"reasoning_content": "six "}, {"reasoning_content": "times seven"}, {"content": "42"}):
        stream.feed("data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}) + "\n\n")
    stream.feed('data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n')
    assert (stream.reply().content, stream.reply().thinking) == ("42", "six times seven")
