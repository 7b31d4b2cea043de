"""Errors of the confinement layer.

The tree::

    Exception
     └── SandboxError            anything this package raises on purpose
          └── ConfinementError   one confinement step could not be enforced; the worker never runs

This module imports nothing from the package, so every other module can import it. It also holds the one way to
take an exception group apart (:func:`exception_leaves`, :func:`first_leaf`), used on both sides.
"""

from __future__ import annotations

__all__ = ["ConfinementError", "SandboxError", "exception_leaves", "first_leaf"]


class SandboxError(Exception):
    """Base of the errors the ``sandbox`` package raises on purpose.

    Raised only through a subclass. Bugs (``TypeError`` and friends) are not wrapped: a ``SandboxError``
    always means "the sandbox refused or could not do what it was asked", with a message a person can act on.
    """


class ConfinementError(SandboxError):
    """A confinement step could not be enforced, so the worker must not run.

    Raised by the ``apply_*`` functions (Landlock, namespaces, rlimits, privileges) and by the launcher when
    the plan is malformed or demands more than the kernel offers (for example a Landlock ABI above the running
    kernel's). Unlike a refusal of one tool call, this ends the whole worker: the launcher prints one line
    ``agents-supervise launcher: <toolbox>: confinement failed: <reason>`` and exits with status 78. The
    caller (the supervisor) should report the reason and not retry blindly: the same plan on the same kernel
    fails again.

    Attributes:
        step: the confinement step that failed (``"landlock"``, ``"netns"``, ``"rlimits"``, ...), or ``""``.
        errno: the ``errno`` of the failing system call, or ``None`` when the failure was not a system call.
    """

    def __init__(self, message: str, *, step: str = "", errno: int | None = None) -> None:
        super().__init__(message)
        self.step = step
        self.errno = errno


def exception_leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions that are not groups inside ``exc`` (nested groups walked depth first), or ``[exc]``."""
    if not isinstance(exc, BaseExceptionGroup):
        return [exc]
    return [leaf for inner in exc.exceptions for leaf in exception_leaves(inner)]


def first_leaf(exc: BaseException) -> BaseException:
    """``exc`` itself, or the first exception inside it when it is a (nested) exception group."""
    return exception_leaves(exc)[0]
