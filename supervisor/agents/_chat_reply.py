"""What a chat-completions endpoint answers, read (pure): the reply (text, tool calls, finish reason, the seed's
``continuation_id``, the model's reasoning), the request's pieces (:func:`completion_url`, :func:`function_tool`),
and every failure as a :class:`ModelError` whose ``transient`` says whether the same request may succeed if made
again (:func:`retry_decision`; the rules are :mod:`supervisor.agents._llm`'s docstring). A streamed answer is
assembled by :mod:`._chat_stream`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ChatReply",
    "ModelError",
    "ToolCallRequest",
    "completion_url",
    "error_text",
    "function_tool",
    "metadata_value",
    "parse_completion",
    "preview",
    "retry_decision",
    "thinking_of",
    "tool_call_request",
    "transient_meta_of",
]

_NOT_RETRYABLE_5XX = {501, 505}


class ModelError(Exception):
    """A model request failed. ``transient``: the same request may succeed later; ``status``: the HTTP status, if
    one arrived. Raised by :meth:`ChatClient.complete`; :func:`complete_with_retries` raises the last one when the
    retries are spent. The message never contains the API key."""

    def __init__(self, message: str, *, transient: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.status = status


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call the model asked for. ``arguments`` is the model's raw text (it may not be valid JSON)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ChatReply:
    """The assistant's answer: text, tool calls (possibly none) and the finish reason."""

    content: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    finish_reason: str | None = None
    #: the seed's ``continuation_id`` metadata key: the endpoint holds the conversation so far under this id ("" when
    #: it sent none, or an empty one: it holds nothing, send everything next time)
    continuation_id: str = ""
    #: the model's reasoning, when its endpoint sends it apart from the answer (``reasoning_content``: Kimi,
    #: DeepSeek; ``reasoning``: OpenRouter, Ollama); kept in the session for ``read-session``'s ``include_thinking``
    thinking: str = ""

    def message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation before the tool results."""
        out: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return out


def completion_url(model_url: str) -> str:
    """The chat-completions endpoint of ``modelUrl`` (``.../v1`` -> ``.../v1/chat/completions``)."""
    base = model_url.rstrip("/")
    return base if base.endswith("/chat/completions") else base + "/chat/completions"


def function_tool(name: str, description: str, input_schema: Mapping[str, Any]) -> dict[str, Any]:
    """A tool as an OpenAI function tool (its JSON schema as ``parameters``)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description[:1024],
            "parameters": dict(input_schema) or {"type": "object"},
        },
    }


def metadata_value(body: Any, key: str) -> str | None:
    """The first ``key`` pair of the seed's ``metadata`` list (``[[key, value], ...]``) in ``body`` (top level or
    under ``error``), if any."""
    for holder in (body, body.get("error") if isinstance(body, dict) else None):
        if not isinstance(holder, dict):
            continue
        pairs = holder.get("metadata")
        for pair in pairs if isinstance(pairs, list) else []:
            if isinstance(pair, list | tuple) and len(pair) == 2 and pair[0] == key:
                return str(pair[1])
    return None


def transient_meta_of(body: Any) -> str | None:
    """The first ``transient`` metadata value of an error body, if any."""
    return metadata_value(body, "transient")


def retry_decision(status: int | None, *, broken: bool = False, transient_meta: str | None = None) -> bool:
    """Whether a failed request may be retried: the seed's ``transient`` key first, then the status or breakage.

    Args:
        status: the HTTP status that arrived, or ``None`` when none did.
        broken: the connection failed, broke, or the answer ended early or timed out.
        transient_meta: the ``transient`` metadata value the endpoint sent, if any (``"true"``/``"false"``).
    """
    if transient_meta == "true":
        return True
    if transient_meta == "false":
        return False
    if broken:
        return True
    return status is not None and (status in (408, 429) or (500 <= status < 600 and status not in _NOT_RETRYABLE_5XX))


def error_text(body: Any, raw: bytes) -> str:
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
    return preview(raw)


def preview(raw: bytes, limit: int = 200) -> str:
    text = " ".join(raw.decode("utf-8", "replace").split())
    return text[:limit] + ("..." if len(text) > limit else "")


def tool_call_request(raw: Any, index: int) -> ToolCallRequest:
    if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
        raise ModelError(f"the model's tool call #{index + 1} is not an object with a 'function'", transient=False)
    fn = raw["function"]
    name, arguments = fn.get("name"), fn.get("arguments", "")
    if not isinstance(name, str) or not name:
        raise ModelError(f"the model's tool call #{index + 1} has no function name", transient=False)
    if isinstance(arguments, dict):  # some servers send the object itself
        arguments = json.dumps(arguments)
    if not isinstance(arguments, str):
        raise ModelError(
            f"the model's tool call #{index + 1} ({name}) has arguments that are neither text nor an object",
            transient=False,
        )
    call_id = raw.get("id")
    return ToolCallRequest(str(call_id) if call_id else f"call_{index + 1}", name, arguments)


def parse_completion(body: Any) -> ChatReply:
    """The reply in a non-streamed chat-completions answer; :class:`ModelError` (not transient) on a wrong shape."""
    if not isinstance(body, dict):
        raise ModelError("the model endpoint answered JSON that is not an object", transient=False)
    if "error" in body and not body.get("choices"):
        meta = transient_meta_of(body)
        raise ModelError(f"the model endpoint reported an error: {error_text(body, b'')}", transient=meta != "false")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ModelError("the model endpoint's answer has no choices", transient=False)
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ModelError("the model endpoint's answer has no message in its first choice", transient=False)
    content = message.get("content") or ""
    if not isinstance(content, str):
        content = json.dumps(content)
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ModelError("the model's tool_calls is not a list", transient=False)
    return ChatReply(
        content,
        tuple(tool_call_request(c, i) for i, c in enumerate(calls)),
        choices[0].get("finish_reason"),
        metadata_value(body, "continuation_id") or "",
        thinking_of(message),
    )


def thinking_of(part: Mapping[str, Any]) -> str:
    """The reasoning text of a message or a stream delta (``""``: none)."""
    for key in ("reasoning_content", "reasoning"):
        value = part.get(key)
        if isinstance(value, str):
            return value
    return ""
