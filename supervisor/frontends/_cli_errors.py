"""How the CLI says what went wrong: one ``agents-supervise: error: ...`` line on stderr and the exit status
(:func:`fail`), the one boundary every command ends through (:func:`error_status`), and the warnings and load
errors of a started service, one line each."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from supervisor._errors import SupervisorError, first_leaf
from supervisor.config import ConfigError, load_error_line

if TYPE_CHECKING:
    from collections.abc import Iterable

    from supervisor._face import ToolService

__all__ = ["EXIT_ERROR", "EXIT_FAILED", "EXIT_INTERNAL", "error_status", "fail", "print_load_errors", "print_warnings"]

#: ``call``'s "the tool failed"; what a person can fix; a bug
EXIT_FAILED, EXIT_ERROR, EXIT_INTERNAL = 1, 2, 70


def fail(message: str, code: int = EXIT_ERROR) -> int:
    """Print ``message`` as one ``agents-supervise: error:`` line on stderr; returns ``code``."""
    print(f"agents-supervise: error: {message}", file=sys.stderr)
    return code


def print_warnings(warnings: Iterable[str]) -> None:
    """Each warning as one ``agents-supervise: warning: ...`` line on stderr."""
    for w in warnings:
        print(f"agents-supervise: warning: {w}", file=sys.stderr)


def print_load_errors(sup: ToolService) -> None:
    """Each load error as one ``agents-supervise: load error: ...`` line on stderr."""
    for e in sup.load_errors():
        print(f"agents-supervise: load error: {load_error_line(e)}", file=sys.stderr)


def error_status(exc: BaseException) -> int:
    """The CLI's one error boundary: print what ended a command as one ``agents-supervise: error: ...`` line and
    return its exit status; never a traceback. An exception group is judged by its first leaf.

    - 2 (:data:`EXIT_ERROR`): what a person can fix: a policy or agent file that does not load (``ConfigError``:
      one line per problem), a policy this machine cannot enforce, a worker or the session store that cannot
      start (``SupervisorError``), a file that cannot be read or made (``OSError``);
    - 130: interrupted (Ctrl-C);
    - 70 (:data:`EXIT_INTERNAL`): anything else, a bug: its type and message on the line.

    ``call``'s own statuses (0 passed, 1 the tool failed, 2 error) come from the result, never from here: an
    exception is never a tool's failure.
    """
    leaf = first_leaf(exc) if isinstance(exc, BaseExceptionGroup) else exc
    if isinstance(leaf, KeyboardInterrupt):
        return 130
    if isinstance(leaf, ConfigError | SupervisorError):
        return fail(str(leaf))
    if isinstance(leaf, OSError):
        return fail(f"{leaf.strerror or leaf}: {leaf.filename or ''}".rstrip(": "))
    first = (str(leaf).splitlines() or [""])[0][:2000]
    return fail(f"internal error: {type(leaf).__name__}: {first} (a bug: please report it)", EXIT_INTERNAL)
