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
    "DescribeProblem",
    "ScriptArg",
    "ScriptSpec",
    "bash_tool_name",
    "describe_problems",
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


@dataclass(frozen=True)
class DescribeProblem:
    """One thing wrong in a describe object: ``path`` inside it (``""`` the object itself, ``slug``,
    ``args[0].arity``) and a message that names it (``describe.args[0].arity must be one of ...``)."""

    path: str
    message: str


class _Problems:
    """Collects every problem of one describe object (validate-tool reports them all; a load reports the first)."""

    def __init__(self) -> None:
        self.found: list[DescribeProblem] = []

    def add(self, path: str, message: str) -> None:
        self.found.append(DescribeProblem(path, message))

    def need(self, obj: dict[str, Any], key: str, kind: type, path: str) -> Any:
        """``obj[key]`` when it is a ``kind``; else a problem and ``None``. ``path`` is ``obj``'s own."""
        where = f"{path}.{key}" if path else key
        shown = f"describe.{path}" if path else "describe"
        if key not in obj:
            self.add(where, f"{shown}: missing required key {key!r}")
            return None
        value = obj[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            self.add(where, f"describe.{where} must be a {kind.__name__}, not {type(value).__name__}")
            return None
        return value


def _check_arg(obj: Any, path: str, problems: _Problems) -> ScriptArg | None:
    if not isinstance(obj, dict):
        problems.add(path, f"describe.{path} must be an object, not {type(obj).__name__}")
        return None
    before = len(problems.found)
    name = problems.need(obj, "name", str, path)
    if name is not None and not _ARG_NAME.match(name):
        problems.add(
            f"{path}.name",
            f"describe.{path}.name {name!r} is not a usable argument name (1-64 of letters, digits, '_', "
            "'.', '-', not starting with '.' or '-')",
        )
    description = obj.get("description", "")
    if not isinstance(description, str):
        problems.add(f"{path}.description", f"describe.{path}.description must be a string")
    backing = problems.need(obj, "backing_type", str, path)
    json_type = BACKING_TYPES.get(backing.lower()) if backing is not None else None
    if backing is not None and json_type is None:
        problems.add(
            f"{path}.backing_type",
            f"describe.{path}.backing_type {backing!r} is not supported; use one of string, number, integer, boolean",
        )
    type_text = obj.get("type", backing)
    if not isinstance(type_text, str) and backing is not None:
        problems.add(f"{path}.type", f"describe.{path}.type must be a string")
    arity = problems.need(obj, "arity", str, path)
    if arity is not None and arity not in ARITIES:
        problems.add(f"{path}.arity", f"describe.{path}.arity must be one of {', '.join(ARITIES)}, not {arity!r}")
    mode = problems.need(obj, "mode", str, path)
    if mode is not None and mode not in MODES:
        problems.add(f"{path}.mode", f"describe.{path}.mode must be one of {', '.join(MODES)}, not {mode!r}")
    if len(problems.found) > before:
        return None
    return ScriptArg(name, description, type_text, str(json_type), arity, MODES[mode])


def _check_empty_result(obj: Any, problems: _Problems) -> str | None:
    path = "describe.empty-result"
    if obj is None:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("tag"), str):
        problems.add(
            "empty-result", f'{path} must be {{"tag": "AddMessage", "contents": TEXT}} or {{"tag": "DoNothing"}}'
        )
        return None
    if obj["tag"] == "DoNothing":
        return None
    if obj["tag"] == "AddMessage":
        contents = obj.get("contents")
        if not isinstance(contents, str):
            problems.add("empty-result.contents", f"{path}.contents must be a string for AddMessage")
            return None
        return contents
    problems.add("empty-result.tag", f"{path}.tag must be AddMessage or DoNothing, not {obj['tag']!r}")
    return None


def _check(obj: Any) -> tuple[ScriptSpec | None, list[DescribeProblem]]:
    problems = _Problems()
    if not isinstance(obj, dict):
        problems.add("", f"describe must print a JSON object, not a {type(obj).__name__}")
        return None, problems.found
    slug = problems.need(obj, "slug", str, "")
    if slug is not None and not _SLUG.match(slug):
        problems.add(
            "slug",
            f"describe.slug {slug!r} must be 1-128 of letters, digits, '_' and '-', starting with a letter or digit",
        )
    description = problems.need(obj, "description", str, "")
    if description is not None and len(description) > MAX_DESCRIPTION_CHARS:
        problems.add("description", f"describe.description is longer than {MAX_DESCRIPTION_CHARS} characters")
    raw_args = obj.get("args", [])
    if not isinstance(raw_args, list):
        problems.add("args", f"describe.args must be a list, not {type(raw_args).__name__}")
        raw_args = []
    args = [_check_arg(a, f"args[{i}]", problems) for i, a in enumerate(raw_args)]
    seen: set[str] = set()
    for i, arg in enumerate(args):
        if arg is None:
            continue
        if arg.name in seen:
            problems.add(f"args[{i}].name", f"describe.args[{i}].name {arg.name!r} is used twice")
        seen.add(arg.name)
    media = obj.get("output-media-type")
    if media is not None and not (isinstance(media, str) and _MEDIA_TYPE.match(media.lower())):
        problems.add(
            "output-media-type", f"describe.output-media-type must be a media type like image/png, not {media!r}"
        )
    empty_result = _check_empty_result(obj.get("empty-result"), problems)
    if problems.found:
        return None, problems.found
    spec = ScriptSpec(
        slug=slug,
        description=description,
        args=tuple(a for a in args if a is not None),
        empty_result=empty_result,
        output_media_type=media.lower() if isinstance(media, str) else None,
    )
    return spec, []


def describe_problems(obj: Any) -> list[DescribeProblem]:
    """Every problem of a describe object already parsed from JSON (what ``validate-tool`` reports); empty when
    the bash and skills toolboxes would load it. The one validator of the describe protocol."""
    return _check(obj)[1]


def parse_describe(raw: bytes) -> ScriptSpec:
    """Validate the bytes a script printed on ``describe``. Raises :class:`DescribeError` saying what is wrong
    (the first problem :func:`describe_problems` finds)."""
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
    spec, problems = _check(obj)
    if spec is None:
        raise DescribeError(problems[0].message)
    return spec


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
