"""The trusted side: policy, registry, portal, worker supervision, frontends, traces.

``async with Supervisor.open("policies/strict.yaml") as sup: await sup.call(name, args)``.
"""

from supervisor.config import ConfigError, LoadedConfig, load_config
from toolboxes._result import Attachment, ToolResult

from ._errors import PolicyRefused, SupervisorError, WorkerStartError
from ._supervisor import Supervisor, ToolInfo

__all__ = [
    "Attachment",
    "ConfigError",
    "LoadedConfig",
    "PolicyRefused",
    "Supervisor",
    "SupervisorError",
    "ToolInfo",
    "ToolResult",
    "WorkerStartError",
    "load_config",
]
