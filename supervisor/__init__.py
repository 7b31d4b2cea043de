"""The trusted side: policy, registry, portal, worker supervision, frontends, traces.

The Python API (docs/EMBEDDING.md), under trio or asyncio::

    async with open_supervisor("policies/strict.yaml") as sup:
        result = await sup.call("system_system_date", {})

:class:`Supervisor` is the implementation the frontends use (through ``supervisor._face``); an embedding program
uses :func:`open_supervisor` and :class:`EmbeddedSupervisor`, whose methods are the public surface.
"""

from supervisor.config import ConfigError, LoadedConfig, load_config
from toolboxes import Attachment, ToolResult

from ._asyncio_guest import GuestRunTaken
from ._embedding import EmbeddedSupervisor, open_supervisor
from ._errors import PolicyRefused, SupervisorError, WorkerStartError
from ._face import ToolInfo
from ._supervisor import Supervisor

__all__ = [
    "Attachment",
    "ConfigError",
    "EmbeddedSupervisor",
    "GuestRunTaken",
    "LoadedConfig",
    "PolicyRefused",
    "Supervisor",
    "SupervisorError",
    "ToolInfo",
    "ToolResult",
    "WorkerStartError",
    "load_config",
    "open_supervisor",
]
