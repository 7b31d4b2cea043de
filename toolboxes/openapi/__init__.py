"""The OpenAPI toolbox (SPEC.md section 4, openapi): one tool per operation of a Swagger 2.0 or OpenAPI 3.x spec.

Its spec handling (reading a spec, ``$ref`` resolution, schema conversion under a budget, wire text of scalars) is
public: the PostgREST toolbox builds on it through this ``__init__`` (DECISIONS.md "Toolbox kinds share through
common modules").
"""

from ._operations import Operation, build_operations, operation_name
from ._refs import RefError, Resolver, SpecError, parse_document
from ._request import build_request, scalar_text
from ._schema import SchemaBudget
from ._source import load_spec
from ._tool_set import SpecTool, SpecToolbox, SpecToolSet
from ._toolbox import OpenApiToolbox, open_toolbox

__all__ = [
    "OpenApiToolbox",
    "Operation",
    "RefError",
    "Resolver",
    "SchemaBudget",
    "SpecError",
    "SpecTool",
    "SpecToolSet",
    "SpecToolbox",
    "build_operations",
    "build_request",
    "load_spec",
    "open_toolbox",
    "operation_name",
    "parse_document",
    "scalar_text",
]
