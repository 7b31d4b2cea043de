"""The code that runs inside workers: the worker loop, the wire protocol, and one module per toolbox kind.

Toolboxes know nothing of the supervisor's internals: anything that crosses toolboxes is a request up the pipe.
Only the shared protocol and result types are imported here (the worker imports this package at start-up).
"""

from ._protocol import PROTOCOL_VERSION, FrameDecoder, ProtocolError, encode
from ._result import Attachment, ToolResult
from ._toolbox import CallContext, HostChannel, Toolbox, ToolSpec, WorkerEnv

__all__ = [
    "PROTOCOL_VERSION",
    "Attachment",
    "CallContext",
    "FrameDecoder",
    "HostChannel",
    "ProtocolError",
    "ToolResult",
    "ToolSpec",
    "Toolbox",
    "WorkerEnv",
    "encode",
]
