"""validate-agent: an agent file checked against the agent file's JSON Schema, with messages an agent can act on.

The schema is made from the supervisor's models of the agent file (``supervisor/config/_agent_schema.py``, the one
definition) and shipped beside this module as data (:data:`SCHEMA_FILE`; the worker cannot import the supervisor,
and a test holds the copy equal to the models). The supervisor's loader stays authoritative for what the schema
cannot say (paths that exist, ``${VAR}`` set, host syntax, a predicate's contents, ``FileSandbox`` refs).

jsonschema's own messages for a tagged union are "is not valid under any of the given schemas"; :func:`check_agent`
instead follows the branch the value means (by its ``tag``, or the one it fails least) and reports that branch's
problems, one per unknown key, with the keys the object knows. ``allowedPaths`` (removed: the loader ignores it with
a warning) is a warning here too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._protocol import json_type_name

if TYPE_CHECKING:
    from collections.abc import Iterator

    from jsonschema import ValidationError

__all__ = ["MAX_PROBLEMS", "SCHEMA_FILE", "check_agent", "load_agent_schema"]

#: The JSON Schema of an agent file, as ``agents-supervise schema --agent-file`` prints it.
SCHEMA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent_file_schema.json")
#: Problems reported at most (the rest are counted in the last one).
MAX_PROBLEMS = 50
_REMOVED = {"allowedPaths": "allowedPaths was removed and is ignored: write a FileSandbox with an fsbPredicate"}


def load_agent_schema(path: str = SCHEMA_FILE) -> dict[str, Any]:
    """The shipped schema. Raises ``OSError`` or ``ValueError`` when the file is missing or not JSON."""
    with open(path, encoding="utf-8") as f:
        schema = json.load(f)
    if not isinstance(schema, dict):
        raise ValueError(f"{path}: not a JSON Schema object")
    return schema


def check_agent(data: Any, schema: Mapping[str, Any]) -> tuple[list[dict[str, str]], list[str]]:
    """Errors (``{path, message}``, ``path`` a JSON path in the file without ``$``) and warnings of an agent file's
    parsed JSON, wrapped or bare; no errors means the schema accepts it."""
    from jsonschema import Draft202012Validator  # not at import: the worker starts without it (about 70 ms)

    validator = Draft202012Validator(schema)
    errors: list[dict[str, str]] = []
    warnings: list[str] = []
    for error in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        for path, message, is_warning in _problems(error, tuple(error.absolute_path)):
            if is_warning:
                warnings.append(f"{_render(path)}: {message}")
            else:
                errors.append({"path": _render(path), "message": message})
    if len(errors) > MAX_PROBLEMS:
        errors = [*errors[: MAX_PROBLEMS - 1], {"path": "", "message": f"and {len(errors) - MAX_PROBLEMS + 1} more"}]
    return errors, warnings


Problem = tuple[tuple[Any, ...], str, bool]


def _problems(error: ValidationError, path: tuple[Any, ...]) -> Iterator[Problem]:
    """The problems one jsonschema error stands for, at ``path`` (the error's instance in the file)."""
    kind, instance = error.validator, error.instance
    value: Any = error.validator_value
    schema: Mapping[str, Any] = error.schema if isinstance(error.schema, Mapping) else {}
    if kind in ("oneOf", "anyOf") and error.context:
        branch = _meant_branch(error)
        if branch is None:
            yield _union_problem(error, path)
        else:
            for inner in branch:
                yield from _problems(inner, (*path, *inner.relative_path))
        return
    if kind == "additionalProperties" and isinstance(instance, dict):
        known = list(schema.get("properties") or {})
        for key in instance:
            if key in known:
                continue
            if key in _REMOVED:
                yield (*path, key), _REMOVED[key], True
            else:
                yield (*path, key), f"unknown key {key!r}; keys: {', '.join(known) or 'none'}", False
        return
    if kind == "required" and isinstance(instance, dict):
        for key in value:
            if key not in instance:
                yield (*path, key), f"missing required key {key!r}", False
        return
    if kind == "const":
        yield path, f"expected {json.dumps(value)}, got {json.dumps(instance)}", False
    elif kind == "enum":
        yield path, f"{json.dumps(instance)} is not one of {', '.join(json.dumps(v) for v in value)}", False
    elif kind == "type":
        yield path, f"wrong type: expected {_types(value)}, got {json_type_name(instance)}", False
    else:
        yield path, error.message, False


def _meant_branch(error: ValidationError) -> list[ValidationError] | None:
    """The errors of the branch of a failed ``oneOf``/``anyOf`` the value means, or ``None`` when it means none
    (a wrong or missing tag, a wrong type) or matched several."""
    branches: dict[int, list[ValidationError]] = {}
    for inner in error.context or ():
        branches.setdefault(int(inner.schema_path[0]), []).append(inner)
    candidates = [errs for errs in branches.values() if not any(_rules_out(e) for e in errs)]
    if not candidates:
        return None
    return min(candidates, key=lambda errs: (sum(not e.relative_path for e in errs), len(errs)))


def _rules_out(error: ValidationError) -> bool:
    """The error says the value is not of this branch at all: another type, another tag, or no tag."""
    at, value = tuple(error.relative_path), error.validator_value
    if at == ():
        if error.validator == "required" and isinstance(error.instance, dict) and isinstance(value, list):
            return "tag" in value and "tag" not in error.instance
        return error.validator in ("type", "const", "enum")
    return at == ("tag",) and error.validator in ("const", "enum")


def _branch_tag(error: ValidationError) -> str | None:
    """The tag the branch an error comes from is for (its ``tag`` property's constant), or ``None``."""
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if tuple(error.relative_path) == ("tag",):
        return str(error.validator_value) if error.validator == "const" else None
    tag = ((schema.get("properties") or {}).get("tag") or {}).get("const")
    return str(tag) if tag is not None else None


def _union_problem(error: ValidationError, path: tuple[Any, ...]) -> Problem:
    instance = error.instance
    tags = list(dict.fromkeys(t for e in error.context or () if (t := _branch_tag(e)) is not None))
    if isinstance(instance, dict) and tags:
        if "tag" not in instance:
            return path, f'missing "tag": one of {", ".join(tags)}', False
        return (*path, "tag"), f"unknown tag {json.dumps(instance['tag'])}: one of {', '.join(tags)}", False
    types = [e.validator_value for e in error.context or () if not e.relative_path and e.validator == "type"]
    if types:
        expected = " or ".join(dict.fromkeys(_types(t) for t in types))
        return path, f"wrong type: expected {expected}, got {json_type_name(instance)}", False
    return path, error.message, False


#: JSON Schema's type names in the words of :func:`toolboxes.json_type_name` (what a value was), so that a message
#: says "expected a list, got an object" in one vocabulary.
_TYPE_WORDS = {
    "null": "null",
    "boolean": "a boolean",
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "array": "a list",
    "object": "an object",
}


def _types(value: Any) -> str:
    names = value if isinstance(value, list) else [value]
    return " or ".join(_TYPE_WORDS.get(str(n), str(n)) for n in names)


def _render(path: tuple[Any, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
