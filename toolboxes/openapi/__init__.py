"""The OpenAPI toolbox (SPEC.md section 4, openapi): one tool per operation of a Swagger 2.0 or OpenAPI 3.x spec."""

from ._operations import Operation, build_operations, operation_name
from ._refs import RefError, Resolver, SpecError, parse_document
from ._request import build_request
from ._source import load_spec
from ._toolbox import OpenApiToolbox, open_toolbox

__all__ = [
    "OpenApiToolbox",
    "Operation",
    "RefError",
    "Resolver",
    "SpecError",
    "build_operations",
    "build_request",
    "load_spec",
    "open_toolbox",
    "operation_name",
    "parse_document",
]
