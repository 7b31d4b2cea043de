"""The code that runs inside workers: the worker loop, the wire protocol, and one module per toolbox kind.

Toolboxes know nothing of the supervisor's internals: anything that crosses toolboxes is a request up the pipe.
This face holds what the supervisor shares with the workers: the protocol, results and progress, the toolbox kinds,
the checks of what a worker sends (catalogs, output caps, media types) and the atomic file writes both sides use.
Every module here is light (the worker imports this package at start-up).
"""

from ._atomic import atomic_write, is_temporary, sweep_temporaries
from ._catalog import CATALOG_KINDS, catalog_problem, prompt_problem, read_problem
from ._kinds import KINDS, ToolboxKind
from ._media import IMAGE_TYPES, canonical, class_of, is_textual, mismatch, sniff
from ._output_cap import OUTPUT_LIMIT_KEY, TRUNCATED_KEY, cap_output
from ._progress import ProgressUpdate, parse_progress_event
from ._protocol import (
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    FrameDecoder,
    ProtocolError,
    encode,
    json_problem,
    json_type_name,
)
from ._result import Attachment, ResourceLink, ToolResult
from ._toolbox import CallContext, HostChannel, Toolbox, ToolSpec, WorkerEnv

__all__ = [
    "CATALOG_KINDS",
    "IMAGE_TYPES",
    "KINDS",
    "MAX_FRAME_BYTES",
    "OUTPUT_LIMIT_KEY",
    "PROTOCOL_VERSION",
    "TRUNCATED_KEY",
    "Attachment",
    "CallContext",
    "FrameDecoder",
    "HostChannel",
    "ProgressUpdate",
    "ProtocolError",
    "ResourceLink",
    "ToolResult",
    "ToolSpec",
    "Toolbox",
    "ToolboxKind",
    "WorkerEnv",
    "atomic_write",
    "canonical",
    "cap_output",
    "catalog_problem",
    "class_of",
    "encode",
    "is_temporary",
    "is_textual",
    "json_problem",
    "json_type_name",
    "mismatch",
    "parse_progress_event",
    "prompt_problem",
    "read_problem",
    "sniff",
    "sweep_temporaries",
]
