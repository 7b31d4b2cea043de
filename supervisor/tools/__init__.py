"""What a tool is to the supervisor: a worker's tool list checked, and argument schemas compiled."""

from ._relax import Relaxed, ValidationConfig, relax
from ._schema_pool import SchemaPool
from ._tool_lists import CompiledSchema, ToolList, compile_schema, fingerprint, prepare_tool_list
from ._validation import ArgumentValidator, FieldError, format_validation_errors

__all__ = [
    "ArgumentValidator",
    "CompiledSchema",
    "FieldError",
    "Relaxed",
    "SchemaPool",
    "ToolList",
    "ValidationConfig",
    "compile_schema",
    "fingerprint",
    "format_validation_errors",
    "prepare_tool_list",
    "relax",
]
