"""The supervisor <-> worker wire protocol, without I/O.

Frames are msgpack maps streamed over the worker's stdin (supervisor -> worker) and stdout (worker -> supervisor).
The key ``t`` names the message type. Both sides may send requests; ids are unique per direction.

supervisor -> worker:
    ``call {id, tool, args, ctx}`` (with ``op: "read_resource"|"get_prompt"``, ``tool`` is a resource's URI or a
    prompt's name; see ``_catalog.py``), ``cancel {id}``, ``reply {id, result}`` or ``reply {id, error}`` (answer to a
    portal/host request), ``shutdown {}``.
worker -> supervisor:
    ``hello {protocol, tools, load_errors}`` (plus ``resources``, ``resource_templates``, ``prompts`` when the
    toolbox has any), ``result {id, result}``, ``portal {id, call, tool, args}`` (a tool call
    the worker wants made on behalf of call ``call``), ``host {id, call, op, args}``, ``event {event}``,
    ``tools_changed {tools, load_errors}``.

A WASM toolbox and its executor processes (``toolboxes/wasm/_executor.py``) speak the same frames, directions
``to_executor`` (``setup {...}`` once, then ``check {key, ticks}`` and ``call {key, ticks, data, log_path}``, each
with ``compiled`` the first time an executor needs that component) and ``from_executor`` (``ready {}`` after the
setup, ``answer {...}`` per request, ``failed {error}`` when the setup or a request cannot be done).

A ``tool`` entry is ``{name, description, input_schema}`` plus optional ``annotations``, ``hints`` (MCP tool
annotations) and ``output_schema``. Names are the toolbox's own;
the supervisor maps them to public names.

:class:`FrameDecoder` turns bytes into validated messages and raises :class:`ProtocolError` for anything that is not
a well-formed message of the expected direction; the caller decides what a violation costs (the supervisor kills the
worker).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import msgpack

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = [
    "MAX_FRAME_BYTES",
    "PROTOCOL_VERSION",
    "READ_SIZE",
    "FrameDecoder",
    "ProtocolError",
    "encode",
    "json_problem",
    "json_type_name",
]

PROTOCOL_VERSION = 1
#: Largest frame either side accepts. A result larger than this is a protocol violation, so tools cap their own
#: output well below it (bash caps stdout, attachments travel as files, not bytes).
MAX_FRAME_BYTES = 64 * 1024 * 1024

_TO_WORKER: dict[str, tuple[str, ...]] = {
    "call": ("id", "tool", "args", "ctx"),
    "cancel": ("id",),
    "reply": ("id",),
    "shutdown": (),
}
_TO_SUPERVISOR: dict[str, tuple[str, ...]] = {
    "hello": ("protocol", "tools"),
    "result": ("id", "result"),
    "portal": ("id", "tool", "args"),
    "host": ("id", "op"),
    "event": ("event",),
    "tools_changed": ("tools",),
}
_TO_EXECUTOR: dict[str, tuple[str, ...]] = {
    "setup": ("max_memory", "copy_on_write", "file_size", "preopens", "env", "network"),
    "check": ("key", "ticks"),
    "call": ("key", "ticks"),
}
_FROM_EXECUTOR: dict[str, tuple[str, ...]] = {"ready": (), "answer": (), "failed": ("error",)}
DIRECTIONS = {
    "to_worker": _TO_WORKER,
    "to_supervisor": _TO_SUPERVISOR,
    "to_executor": _TO_EXECUTOR,
    "from_executor": _FROM_EXECUTOR,
}


class ProtocolError(Exception):
    """A frame that does not decode, is too large, or is not a well-formed message for this direction.

    Raised by :class:`FrameDecoder`. Unlike a tool failure (a result with status ``failed``/``error``), a protocol
    error means the peer cannot be trusted to speak the protocol any more: the supervisor kills the worker, a worker
    exits.
    """


def _refuse_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack extension type {code} is not part of the protocol")


#: Exact types that are JSON scalars with nothing to check (a float is checked for NaN; subclasses take the long way).
_PLAIN_SCALARS = frozenset({str, int, bool, type(None)})


def json_problem(value: Any, *, max_depth: int, max_nodes: int, finite: bool = True) -> tuple[str | None, int]:
    """Whether ``value`` is plain JSON within bounds: ``(problem or None, nodes seen)``. Never recurses.

    JSON here means maps with string keys, lists, strings, integers, floats, booleans and ``None`` (no bytes, no
    msgpack extension values), nested at most ``max_depth`` deep and ``max_nodes`` values in all; ``finite``
    refuses NaN and infinities (which JSON cannot spell). Stops at the first problem, so the cost is bounded by
    ``max_nodes`` whatever the value. (The plain scalars in a map or list are counted where it is, not pushed: the
    same checks and counts, in fewer steps.)
    """
    nodes = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    plain = _PLAIN_SCALARS
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            return f"has more than {max_nodes} values", nodes
        if depth > max_depth:
            return f"is nested more than {max_depth} deep", nodes
        kind = type(item)
        if kind in plain:
            continue
        if kind is float or (kind is not dict and kind is not list and isinstance(item, float)):
            if finite and not math.isfinite(item):
                return f"holds {item!r}, which JSON cannot represent", nodes
            continue
        children: Iterable[Any]
        if kind is dict or isinstance(item, dict):  # (the exact types first: no call for what msgpack makes)
            for k in item:
                if type(k) is not str and not isinstance(k, str):
                    return f"has a map key that is a {type(k).__name__}, not a string", nodes
            children = item.values()
        elif kind is list or isinstance(item, list | tuple):
            children = item
        elif isinstance(item, str | int | bool):  # a subclass: checked as its base
            continue
        else:
            return f"holds a {type(item).__name__}, which is not a JSON value", nodes
        child = depth + 1
        for v in children:
            if type(v) in plain and child <= max_depth:
                nodes += 1
                if nodes > max_nodes:
                    return f"has more than {max_nodes} values", nodes
            else:
                stack.append((v, child))
    return None, nodes


def encode(message: dict[str, Any]) -> bytes:
    """Serialise one message to a frame."""
    frame: bytes = msgpack.packb(message, use_bin_type=True)
    return frame


#: The decoder's buffer to begin with (msgpack's default is 1 MiB per decoder, and its fill pointer sweeps all of
#: it, so every connection came to hold 1 MiB resident; a larger frame grows it).
READ_SIZE = 64 * 1024


class FrameDecoder:
    """Incremental decoder of frames for one direction (``"to_worker"``, ``"to_supervisor"``, ``"to_executor"`` or
    ``"from_executor"``).

    Its buffer starts at :data:`READ_SIZE` and grows for a larger frame (up to ``max_frame_bytes``); once it has
    taken more than that since it was made and holds no partial frame, it is made again, so one large frame does
    not leave a buffer of its size for the rest of the connection's life."""

    def __init__(self, direction: str, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._schema = DIRECTIONS[direction]
        self._max_frame_bytes = max_frame_bytes
        self._unpacker = self._new_unpacker()
        self._fed = 0  # bytes fed to this unpacker
        self._decoded = 0  # where the last whole frame it decoded ended
        #: the size in bytes of the frame of the message :meth:`feed` yielded last
        self.last_frame_bytes = 0

    def _new_unpacker(self) -> msgpack.Unpacker:
        return msgpack.Unpacker(
            raw=False,
            read_size=min(READ_SIZE, self._max_frame_bytes),
            max_buffer_size=self._max_frame_bytes,
            strict_map_key=True,
            use_list=True,
            ext_hook=_refuse_ext,
        )

    def feed(self, data: bytes) -> Iterator[dict[str, Any]]:
        """Feed bytes; yield each complete, validated message. Raises :class:`ProtocolError`."""
        try:
            self._unpacker.feed(data)
        except msgpack.BufferFull as exc:
            raise ProtocolError("frame larger than the protocol limit") from exc
        self._fed += len(data)
        while True:
            try:
                obj = self._unpacker.unpack()
            except msgpack.OutOfData:
                # tell() after OutOfData counts a partial frame's bytes too: only the end of the last whole frame
                # says whether nothing is pending
                if self._fed > READ_SIZE and self._decoded == self._fed:
                    self._unpacker = self._new_unpacker()  # drained: a buffer grown past READ_SIZE goes
                    self._fed = self._decoded = 0
                return
            except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError, TypeError) as exc:
                raise ProtocolError(f"undecodable frame: {exc}") from exc
            start, self._decoded = self._decoded, self._unpacker.tell()
            self.last_frame_bytes = self._decoded - start
            yield self.validate(obj)

    def validate(self, obj: Any) -> dict[str, Any]:
        """Check that ``obj`` is a message of this direction with its required keys."""
        if not isinstance(obj, dict):
            raise ProtocolError(f"frame is a {type(obj).__name__}, not a map")
        kind = obj.get("t")
        required = self._schema.get(kind) if type(kind) is str or isinstance(kind, str) else None
        if required is None:
            raise ProtocolError(f"unexpected message type {kind!r}")
        for key in required:
            if key not in obj:
                missing = [k for k in required if k not in obj]
                raise ProtocolError(f"{kind} message lacks {', '.join(missing)}")
        ident = obj.get("id", 0)  # (absent: nothing to check)
        if type(ident) is not int and not (isinstance(ident, int) and not isinstance(ident, bool)):
            raise ProtocolError(f"{kind} message id must be an integer")
        return obj


def json_type_name(value: Any) -> str:
    """The JSON/YAML name of a Python value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
