"""A streamed chat-completions answer (``text/event-stream``) assembled into a
:class:`~supervisor.agents._chat_reply.ChatReply`, whatever the splits of the text it arrives in (pure)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ._chat_reply import (
    ChatReply,
    ModelError,
    error_text,
    metadata_value,
    preview,
    thinking_of,
    tool_call_request,
    transient_meta_of,
)

__all__ = ["StreamAssembler"]


@dataclass
class StreamAssembler:
    """Builds a :class:`ChatReply` from the ``data:`` lines of a streamed answer (server-sent events)."""

    content: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    done: bool = False
    #: the first ``continuation_id`` metadata value any event carried (``None``: none did)
    continuation_id: str | None = None
    _buffer: str = ""

    def feed(self, text: str) -> None:
        """Take more of the stream (any split); raises :class:`ModelError` for an error event or bad JSON."""
        self._buffer += text
        while "\n" in self._buffer:
            line, self._buffer = self._buffer.split("\n", 1)
            self._line(line.rstrip("\r"))

    def _line(self, line: str) -> None:
        if not line.startswith("data:"):
            return  # comments, event names, ids, blank separators
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ModelError(
                f"the model's stream carried an event that is not JSON: {preview(data.encode())}", transient=False
            ) from exc
        if not isinstance(chunk, dict):
            raise ModelError("the model's stream carried an event that is not an object", transient=False)
        if "error" in chunk:
            meta = transient_meta_of(chunk)
            raise ModelError(
                f"the model's stream reported an error: {error_text(chunk, data.encode())}", transient=meta != "false"
            )
        if self.continuation_id is None:
            self.continuation_id = metadata_value(chunk, "continuation_id")
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
            if isinstance(delta, dict) and (thought := thinking_of(delta)):
                self.thinking.append(thought)
            for part in delta.get("tool_calls") or []:
                if not isinstance(part, dict):
                    continue
                slot = self.calls.setdefault(int(part.get("index") or 0), {"id": "", "name": "", "arguments": ""})
                if part.get("id"):
                    slot["id"] = str(part["id"])
                fn = part.get("function") or {}
                if isinstance(fn.get("name"), str):
                    slot["name"] += fn["name"]
                if isinstance(fn.get("arguments"), str):
                    slot["arguments"] += fn["arguments"]
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def reply(self) -> ChatReply:
        """The assembled reply; :class:`ModelError` (transient) when the stream ended before it was complete."""
        if self._buffer.strip():
            self._line(self._buffer.strip())
            self._buffer = ""
        if not self.done and self.finish_reason is None:
            raise ModelError(
                "the model's stream broke before the answer was complete (no finish reason, no [DONE])", transient=True
            )
        calls = tuple(
            tool_call_request({"id": c["id"], "function": {"name": c["name"], "arguments": c["arguments"]}}, i)
            for i, c in sorted(self.calls.items())
        )
        return ChatReply(
            "".join(self.content), calls, self.finish_reason, self.continuation_id or "", "".join(self.thinking)
        )
