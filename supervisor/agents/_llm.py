"""An OpenAI-compatible chat-completions client for the supervisor's agent loops (httpx, under trio).

Pure parts (tested apart from I/O): what an answer means, :mod:`._chat_reply` (:func:`completion_url`,
:func:`function_tool`, :func:`parse_completion`, :func:`retry_decision`, :class:`ModelError`); a streamed answer,
:mod:`._chat_stream` (:class:`StreamAssembler`); the API key, :mod:`._model_keys` (:func:`resolve_api_key`). Here
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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import trio

from ._chat_reply import ChatReply, ModelError, error_text, parse_completion, preview, retry_decision, transient_meta_of
from ._chat_stream import StreamAssembler
from ._model_network import ModelEndpointRefused

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = ["MAX_RESPONSE_BYTES", "ChatClient", "RetryBounds", "complete_with_retries"]

#: Largest answer read from a model endpoint; more is an error (not transient).
MAX_RESPONSE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class RetryBounds:
    """How often and how patiently a request is retried (the policy's ``agent_loop``)."""

    retries: int = 3
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 10.0
    request_timeout_s: float = 120.0


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
                    meta = transient_meta_of(body)
                    transient = retry_decision(response.status_code, transient_meta=meta)
                    raise ModelError(
                        f"the model endpoint answered HTTP {response.status_code}: {error_text(body, raw)}",
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
                        f"(it starts: {preview(raw, 120)!r}); check modelUrl",
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
