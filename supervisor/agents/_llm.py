"""An OpenAI-compatible chat-completions client for the supervisor's agent loops (httpx, under trio).

Pure parts (tested apart from I/O): :func:`completion_url`, :func:`function_tool`, :func:`parse_completion`,
:class:`StreamAssembler` (``text/event-stream``), :func:`retry_decision`, :func:`resolve_api_key`. Then
:class:`ChatClient` makes one request and :func:`complete_with_retries` retries it within ``agent_loop`` bounds.

Every failure is a :class:`ModelError` whose message says what the endpoint did, in words a person can act on,
and whose ``transient`` says whether the same request may succeed if made again:

- transient: HTTP 408, 429, a retryable 5xx (not 501/505), a connection that failed or broke before the answer was
  complete (a stream that ended without ``[DONE]`` or a finish reason), an error event inside a stream, a request
  that did not answer within ``request_timeout_s``;
- not transient: any other status, an answer that is not JSON (an HTML page), a JSON answer of the wrong shape.
The seed's ``transient`` metadata key overrides both ways: an error body (or stream error event) carrying
``"metadata": [["transient", "false"]]`` vetoes a retry of a ``429``; ``"true"`` makes any failure retryable.
An answer may carry the seed's ``continuation_id`` metadata key (the endpoint holds the conversation): it is
returned in :attr:`ChatReply.continuation_id`, and :meth:`ChatClient.complete` sends it back as the request's
``continuation_id`` field with only the new messages (the agent loop decides which, ``supervisor/agents/_loop.py``).
The API key is sent only in the ``Authorization`` header; it is never part of an error message, a trace record or
anything a worker sees. Redirects are never followed (a ``3xx`` is an HTTP error of the endpoint), and a connection
the address rules refuse (:mod:`supervisor.agents._model_network`) is an error that is not transient, naming the
policy key that would open it. Timeouts are trio cancel scopes (the httpx client is built without its own timeouts).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import trio

from ._model_network import ModelEndpointRefused

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "ChatClient",
    "ChatReply",
    "ModelError",
    "RetryBounds",
    "StreamAssembler",
    "ToolCallRequest",
    "complete_with_retries",
    "completion_url",
    "function_tool",
    "parse_completion",
    "resolve_api_key",
    "retry_decision",
]

#: Largest answer read from a model endpoint; more is an error (not transient).
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
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


@dataclass(frozen=True)
class RetryBounds:
    """How often and how patiently a request is retried (the policy's ``agent_loop``)."""

    retries: int = 3
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 10.0
    request_timeout_s: float = 120.0


# ------------------------------------------------------------------------------------------------- pure parts
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


def _metadata_value(body: Any, key: str) -> str | None:
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


def _transient_meta(body: Any) -> str | None:
    """The first ``transient`` metadata value of an error body, if any."""
    return _metadata_value(body, "transient")


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


def _error_text(body: Any, raw: bytes) -> str:
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
    return _preview(raw)


def _preview(raw: bytes, limit: int = 200) -> str:
    text = " ".join(raw.decode("utf-8", "replace").split())
    return text[:limit] + ("..." if len(text) > limit else "")


def _tool_call(raw: Any, index: int) -> ToolCallRequest:
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
        meta = _transient_meta(body)
        raise ModelError(f"the model endpoint reported an error: {_error_text(body, b'')}", transient=meta != "false")
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
        tuple(_tool_call(c, i) for i, c in enumerate(calls)),
        choices[0].get("finish_reason"),
        _metadata_value(body, "continuation_id") or "",
        _thinking(message),
    )


def _thinking(part: Mapping[str, Any]) -> str:
    """The reasoning text of a message or a stream delta (``""``: none)."""
    for key in ("reasoning_content", "reasoning"):
        value = part.get(key)
        if isinstance(value, str):
            return value
    return ""


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
                f"the model's stream carried an event that is not JSON: {_preview(data.encode())}", transient=False
            ) from exc
        if not isinstance(chunk, dict):
            raise ModelError("the model's stream carried an event that is not an object", transient=False)
        if "error" in chunk:
            meta = _transient_meta(chunk)
            raise ModelError(
                f"the model's stream reported an error: {_error_text(chunk, data.encode())}", transient=meta != "false"
            )
        if self.continuation_id is None:
            self.continuation_id = _metadata_value(chunk, "continuation_id")
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
            if isinstance(delta, dict) and (thought := _thinking(delta)):
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
            _tool_call({"id": c["id"], "function": {"name": c["name"], "arguments": c["arguments"]}}, i)
            for i, c in sorted(self.calls.items())
        )
        return ChatReply(
            "".join(self.content), calls, self.finish_reason, self.continuation_id or "", "".join(self.thinking)
        )


def resolve_api_key(
    api_key_id: str | None, model_keys: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> str | None:
    """The API key for ``apiKeyId``: ``model_keys`` maps it to an environment variable name or a key file path.

    ``None`` when the agent names no ``apiKeyId`` (a local model without authentication). Raises
    :class:`ModelError` (not transient) naming the id and the source, never the key.
    """
    if not api_key_id:
        return None
    source = model_keys.get(api_key_id)
    if source is None:
        raise ModelError(
            f"no API key is configured for apiKeyId {api_key_id!r}; add it to the policy's "
            f"model_keys (an environment variable name, or a key file path)",
            transient=False,
        )
    if "/" in source:
        try:
            with open(source, encoding="utf-8") as fh:
                key = fh.read().strip()
        except OSError as exc:
            raise ModelError(
                f"cannot read the key file of apiKeyId {api_key_id!r} ({source}): {exc.strerror or exc}",
                transient=False,
            ) from exc
    else:
        key = (os.environ if environ is None else environ).get(source, "").strip()
    if not key:
        where = f"key file {source}" if "/" in source else f"environment variable {source}"
        raise ModelError(f"the API key of apiKeyId {api_key_id!r} is empty or missing ({where})", transient=False)
    return key


# --------------------------------------------------------------------------------------------------------- I/O
class ChatClient:
    """One agent's endpoint: ``url`` (chat completions), ``model``, and the key sent as a Bearer token."""

    def __init__(self, http: httpx.AsyncClient, url: str, model: str, api_key: str | None) -> None:
        self._http = http
        self.url = url
        self.model = model
        self._api_key = api_key

    def __repr__(self) -> str:
        return f"ChatClient(url={self.url!r}, model={self.model!r})"

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], continuation_id: str = ""
    ) -> ChatReply:
        """Make one request (streamed); return the reply or raise :class:`ModelError`.

        With ``continuation_id``, ``messages`` are only those the endpoint does not hold yet, and the id is sent as
        the request's ``continuation_id`` field (the seed's protocol). Not bounded in time here: the caller wraps it
        in a cancel scope. A checkpoint; cancellation closes the connection.
        """
        payload: dict[str, Any] = {"model": self.model, "messages": list(messages), "stream": True}
        if continuation_id:
            payload["continuation_id"] = continuation_id
        if tools:
            payload["tools"] = list(tools)
        headers = {"Accept": "text/event-stream, application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            async with self._http.stream(
                "POST", self.url, json=payload, headers=headers, follow_redirects=False
            ) as response:
                ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if response.status_code != 200:
                    raw = await _read_capped(response)
                    body = _json_or_none(raw)
                    meta = _transient_meta(body)
                    transient = retry_decision(response.status_code, transient_meta=meta)
                    raise ModelError(
                        f"the model endpoint answered HTTP {response.status_code}: {_error_text(body, raw)}",
                        transient=transient,
                        status=response.status_code,
                    )
                if ctype == "text/event-stream":
                    assembler = StreamAssembler()
                    async for text in response.aiter_text():
                        assembler.feed(text)
                    return assembler.reply()
                raw = await _read_capped(response)
                body = _json_or_none(raw)
                if body is None:
                    raise ModelError(
                        f"the model endpoint answered {ctype or 'an unknown type'} that is not JSON "
                        f"(it starts: {_preview(raw, 120)!r}); check modelUrl",
                        transient=False,
                        status=200,
                    )
                return parse_completion(body)
        except ModelEndpointRefused as exc:
            raise ModelError(f"the policy refuses the model endpoint {self.url}: {exc}", transient=False) from exc
        except httpx.UnsupportedProtocol as exc:
            raise ModelError(
                f"the model endpoint's URL cannot be used: {exc}; check modelUrl", transient=False
            ) from exc
        except httpx.TransportError as exc:
            what = (
                "broke while answering"
                if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError)
                else "could not be reached"
            )
            raise ModelError(f"the model endpoint {what}: {type(exc).__name__}: {exc}", transient=True) from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise ModelError(
                f"the request to the model endpoint failed: {type(exc).__name__}: {exc}; check modelUrl",
                transient=False,
            ) from exc
        except (ValueError, TypeError) as exc:  # an answer shaped in a way the parsers did not foresee
            raise ModelError(
                f"the model endpoint's answer could not be read: {type(exc).__name__}: {exc}", transient=False
            ) from exc


async def _read_capped(response: httpx.Response) -> bytes:
    out = bytearray()
    async for chunk in response.aiter_bytes():
        out += chunk
        if len(out) > MAX_RESPONSE_BYTES:
            raise ModelError(f"the model endpoint's answer is larger than {MAX_RESPONSE_BYTES} bytes", transient=False)
    return bytes(out)


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


async def complete_with_retries(
    client: ChatClient,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    bounds: RetryBounds,
    on_retry: Callable[[int, ModelError, float], None] | None = None,
    continuation_id: str = "",
    admit: Callable[[], None] | None = None,
) -> ChatReply:
    """:meth:`ChatClient.complete`, each attempt bounded by ``request_timeout_s``, transient failures retried up to
    ``retries`` times after a backoff doubling from ``backoff_initial_s`` up to ``backoff_max_s``.

    ``on_retry(attempt, error, delay_s)`` is told of each retry. ``admit()`` is called before every attempt (the call
    tree's budget counts it): what it raises propagates, and that attempt is not made. Raises the last
    :class:`ModelError` (its message says how many attempts were made) when the failure is not transient or the
    retries are spent.
    """
    delay = bounds.backoff_initial_s
    attempt = 0
    while True:
        if admit is not None:
            admit()
        attempt += 1
        error: ModelError
        with trio.move_on_after(bounds.request_timeout_s) as scope:
            try:
                return await client.complete(messages, tools, continuation_id)
            except ModelError as exc:
                error = exc
        if scope.cancelled_caught:
            error = ModelError(
                f"the model endpoint did not answer within {bounds.request_timeout_s:g} s", transient=True
            )
        if not error.transient or attempt > bounds.retries:
            tries = f" (after {attempt} attempts)" if attempt > 1 else ""
            raise ModelError(f"{error}{tries}", transient=error.transient, status=error.status) from error
        if on_retry is not None:
            on_retry(attempt, error, delay)
        await trio.sleep(delay)
        delay = min(max(delay * 2, 0.001), bounds.backoff_max_s)
