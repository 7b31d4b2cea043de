"""Errors of the supervisor.

::

    SupervisorError
    ├── ConfigError        (_config_errors.py) a policy or agent file is wrong; nothing was started
    ├── PolicyRefused      the policy is well-formed but cannot be enforced here, or asks for something a strict
    │                      policy forbids; nothing was started
    └── WorkerStartError   a toolbox's worker could not start (confinement refused, toolbox failed to open)

Refusals of tool calls are not exceptions: they are results with status ``error`` (see ``_portal.py``). Faults of a
running worker (crash, protocol violation, hang) end its calls with ``error`` results and a restart; they never
raise into the supervisor.
"""

from __future__ import annotations

from sandbox import first_leaf
from toolboxes import ToolResult

__all__ = ["PolicyRefused", "SupervisorError", "WorkerStartError", "execution_error", "first_leaf"]


def execution_error(message: str) -> ToolResult:
    """An ``error`` result of a dispatched call that could not run (its worker died, restarted, was disabled, or
    the call ran past its wall time): the seed's ``PortalExecutionError`` kind in metadata ``portal_error``, as the
    portal's refusals carry theirs. A toolbox's own refusal is not one."""
    return ToolResult.error(message).with_meta("portal_error", "PortalExecutionError")


class SupervisorError(Exception):
    """Base of the errors the supervisor raises to the person who started it."""


class PolicyRefused(SupervisorError):
    """The policy cannot be enforced on this machine, or a strict policy forbids what it asks.

    Raised by policy compilation before any worker starts, so a strict policy never silently degrades. The message
    says what was refused and what to change.
    """


class WorkerStartError(SupervisorError):
    """A toolbox's worker failed its first start; the message names the toolbox and the cause (the launcher's or
    the toolbox's own words). Unlike a crash of a running worker, this stops the supervisor from starting."""
