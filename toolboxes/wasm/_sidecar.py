"""A component's sidecar: ``<component>.json`` next to ``<component>.wasm``, the tool's description and schema.

Format (a JSON object, at most :data:`MAX_SIDECAR_BYTES`)::

    {"description": "what the tool does, for the model",
     "inputSchema": {"type": "object", "properties": {...}, ...}}

``description`` is a non-empty string; ``inputSchema`` (optional, default: an object with no declared properties) is
a JSON Schema for the call's arguments whose ``type`` is ``"object"``, checked against its metaschema. The supervisor
validates each call against it before the component runs; the component receives the arguments as JSON text in
``tool-input.data``. Any other key is an error (a typo is not silently ignored). A custom section was considered and
not chosen: a sidecar can be read and fixed without rebuilding the component.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jsonschema

from .._protocol import json_problem
from ._errors import ComponentLoadError

__all__ = ["MAX_SIDECAR_BYTES", "Sidecar", "parse_sidecar"]

MAX_SIDECAR_BYTES = 256 * 1024
_KEYS = {"description", "inputSchema"}


@dataclass(frozen=True)
class Sidecar:
    """A checked sidecar."""

    description: str
    input_schema: dict[str, Any]


def parse_sidecar(text: bytes, where: str) -> Sidecar:
    """Parse the bytes of a sidecar file named ``where``; raises :class:`ComponentLoadError` saying what is wrong
    and what is expected."""
    if len(text) > MAX_SIDECAR_BYTES:
        raise ComponentLoadError(f"{where}: the sidecar is larger than {MAX_SIDECAR_BYTES} bytes")
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ComponentLoadError(f"{where}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ComponentLoadError(f'{where}: expected an object {{"description": ..., "inputSchema": {{...}}}}')
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ComponentLoadError(f"{where}: unknown keys {unknown}; a sidecar has only {sorted(_KEYS)}")
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        raise ComponentLoadError(f"{where}: 'description' must be a non-empty string")
    schema = data.get("inputSchema", {"type": "object"})
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ComponentLoadError(f'{where}: \'inputSchema\' must be a JSON Schema object with "type": "object"')
    problem, _ = json_problem(schema, max_depth=64, max_nodes=20_000)
    if problem:
        raise ComponentLoadError(f"{where}: 'inputSchema' {problem}")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ComponentLoadError(f"{where}: 'inputSchema' is not a valid JSON Schema: {exc.message}") from exc
    return Sidecar(description.strip(), schema)
