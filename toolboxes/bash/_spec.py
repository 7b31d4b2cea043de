"""What a script says about itself on ``describe``, validated, and the tool schema derived from it (pure code).

The describe protocol (seed "Bash tools")::

    {"slug": "my-tool", "description": "...",
     "args": [{"name", "description", "type", "backing_type", "arity", "mode"}, ...],
     "empty-result": {"tag": "AddMessage", "contents": "text"} | {"tag": "DoNothing"},   (optional)
     "output-media-type": "image/png"}                                                   (optional)

Unknown keys are ignored (scripts written for newer versions of the protocol still load). Everything else is checked
here and a problem raises :class:`DescribeError` with the JSON path of the offending value.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from ._errors import DescribeError

__all__ = [
    "ARITIES",
    "BACKING_TYPES",
    "MODES",
    "ScriptArg",
    "ScriptSpec",
    "bash_tool_name",
    "input_schema",
    "parse_describe",
]

Arity = Literal["single", "optional", "multiple"]
Mode = Literal["positional", "dashdashspace", "dashdashequal", "stdin"]

ARITIES: tuple[str, ...] = ("single", "optional", "multiple")
#: Accepted modes; ``space`` is an alias of ``positional``.
MODES: dict[str, Mode] = {
    "positional": "positional",
    "space": "positional",
    "dashdashspace": "dashdashspace",
    "dashdashequal": "dashdashequal",
    "stdin": "stdin",
}
#: ``backing_type`` values and the JSON schema type each maps to.
BACKING_TYPES: dict[str, str] = {
    "string": "string",
    "str": "string",
    "text": "string",
    "number": "number",
    "float": "number",
    "double": "number",
    "integer": "integer",
    "int": "integer",
    "boolean": "boolean",
    "bool": "boolean",
}
_ARG_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_SLUG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*$")
MAX_DESCRIPTION_CHARS = 8192


@dataclass(frozen=True)
class ScriptArg:
    """One argument: ``json_type`` is the JSON schema type derived from ``backing_type``."""

    name: str
    description: str
    type: str
    json_type: str
    arity: Arity
    mode: Mode


@dataclass(frozen=True)
class ScriptSpec:
    """A validated description. ``empty_result`` is ``None`` (keep empty output), or the text that replaces an
    exactly-empty stdout (``AddMessage``); ``DoNothing`` is stored as ``None``."""

    slug: str
    description: str
    args: tuple[ScriptArg, ...]
    empty_result: str | None = None
    output_media_type: str | None = None


def bash_tool_name(slug: str, prefix: str = "bash_") -> str:
    """The public tool name of a script: ``prefix`` + slug with ``-`` turned into ``_`` (SPEC.md section
    2)."""
    return prefix + slug.replace("-", "_")


def _need(obj: dict[str, Any], key: str, kind: type, path: str) -> Any:
    if key not in obj:
        raise DescribeError(f"{path}: missing required key {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise DescribeError(f"{path}.{key} must be a {kind.__name__}, not {type(value).__name__}")
    return value


def _parse_arg(obj: Any, path: str) -> ScriptArg:
    if not isinstance(obj, dict):
        raise DescribeError(f"{path} must be an object, not {type(obj).__name__}")
    name = _need(obj, "name", str, path)
    if not _ARG_NAME.match(name):
        raise DescribeError(
            f"{path}.name {name!r} is not a usable argument name (1-64 of letters, digits, '_', '.', '-', "
            "not starting with '.' or '-')"
        )
    description = obj.get("description", "")
    if not isinstance(description, str):
        raise DescribeError(f"{path}.description must be a string")
    backing = _need(obj, "backing_type", str, path)
    json_type = BACKING_TYPES.get(backing.lower())
    if json_type is None:
        raise DescribeError(
            f"{path}.backing_type {backing!r} is not supported; use one of string, number, integer, boolean"
        )
    type_text = obj.get("type", backing)
    if not isinstance(type_text, str):
        raise DescribeError(f"{path}.type must be a string")
    arity = _need(obj, "arity", str, path)
    if arity not in ARITIES:
        raise DescribeError(f"{path}.arity must be one of {', '.join(ARITIES)}, not {arity!r}")
    mode = _need(obj, "mode", str, path)
    if mode not in MODES:
        raise DescribeError(f"{path}.mode must be one of {', '.join(MODES)}, not {mode!r}")
    return ScriptArg(name, description, type_text, json_type, arity, MODES[mode])


def _parse_empty_result(obj: Any) -> str | None:
    path = "describe.empty-result"
    if obj is None:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("tag"), str):
        raise DescribeError(
            f'{path} must be {{"tag": "AddMessage", "contents": TEXT}} or {{"tag": "DoNothing"}}'
        )
    if obj["tag"] == "DoNothing":
        return None
    if obj["tag"] == "AddMessage":
        contents = obj.get("contents")
        if not isinstance(contents, str):
            raise DescribeError(f"{path}.contents must be a string for AddMessage")
        return contents
    raise DescribeError(f"{path}.tag must be AddMessage or DoNothing, not {obj['tag']!r}")


def parse_describe(raw: bytes) -> ScriptSpec:
    """Validate the bytes a script printed on ``describe``. Raises :class:`DescribeError` saying what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DescribeError(f"describe printed bytes that are not UTF-8 (at offset {exc.start})") from exc
    if not text.strip():
        raise DescribeError("describe printed nothing; it must print a JSON object")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DescribeError(
            f"describe printed invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    if not isinstance(obj, dict):
        raise DescribeError(f"describe must print a JSON object, not a {type(obj).__name__}")
    slug = _need(obj, "slug", str, "describe")
    if not _SLUG.match(slug):
        raise DescribeError(
            f"describe.slug {slug!r} must be 1-128 of letters, digits, '_' and '-', "
            "starting with a letter or digit"
        )
    description = _need(obj, "description", str, "describe")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise DescribeError(f"describe.description is longer than {MAX_DESCRIPTION_CHARS} characters")
    raw_args = obj.get("args", [])
    if not isinstance(raw_args, list):
        raise DescribeError(f"describe.args must be a list, not {type(raw_args).__name__}")
    args = tuple(_parse_arg(a, f"describe.args[{i}]") for i, a in enumerate(raw_args))
    seen: set[str] = set()
    for i, arg in enumerate(args):
        if arg.name in seen:
            raise DescribeError(f"describe.args[{i}].name {arg.name!r} is used twice")
        seen.add(arg.name)
    media = obj.get("output-media-type")
    if media is not None and not (isinstance(media, str) and _MEDIA_TYPE.match(media.lower())):
        raise DescribeError(f"describe.output-media-type must be a media type like image/png, not {media!r}")
    return ScriptSpec(
        slug=slug,
        description=description,
        args=args,
        empty_result=_parse_empty_result(obj.get("empty-result")),
        output_media_type=media.lower() if isinstance(media, str) else None,
    )


def input_schema(spec: ScriptSpec) -> dict[str, Any]:
    """The JSON schema (an object schema) of a script's arguments.

    ``single`` arguments are required, ``optional`` ones are not, ``multiple`` ones are arrays (not required; an
    absent or empty array adds nothing to the command line). No other properties are allowed.
    """
    properties: dict[str, Any] = {}
    required: list[str] = []
    for arg in spec.args:
        description = arg.description
        if arg.type and arg.type.lower() != arg.json_type and arg.type.lower() not in BACKING_TYPES:
            description = f"{description} (type: {arg.type})" if description else f"type: {arg.type}"
        if arg.arity == "multiple":
            prop: dict[str, Any] = {"type": "array", "items": {"type": arg.json_type}}
        else:
            prop = {"type": arg.json_type}
        if description:
            prop["description"] = description
        properties[arg.name] = prop
        if arg.arity == "single":
            required.append(arg.name)
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema
