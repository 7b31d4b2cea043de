"""The seed's ``FileSandboxConfig``: a predicate, a size limit and a name, inline or by ``{"ref": NAME}``.

JSON form (seed 004): ``{"fsbPredicate": PREDICATE, "fsbMaxFileSize": BYTES | null, "fsbName": NAME | null}``.
A toolbox's ``FileSandbox`` is that object or ``{"ref": NAME}`` naming an entry of the agent's
``fileSandboxes`` map. Predicate paths are resolved against the directory of the file that holds them, once,
here (through ``parse_predicate``). Evaluation lives in ``sandbox._predicate_eval``; this module only parses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox._predicates import AlwaysDeny, PathPredicate, PredicateError, parse_predicate

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["DEFAULT_MAX_FILE_SIZE", "FileSandbox", "parse_file_sandbox", "parse_file_sandboxes"]

#: The seed's default ``fsbMaxFileSize``: 50 MiB.
DEFAULT_MAX_FILE_SIZE = 50 * 1024 * 1024


@dataclass(frozen=True)
class FileSandbox:
    """A parsed ``FileSandboxConfig``.

    Attributes:
        predicate: what the sandbox allows (default ``AlwaysDeny``, as in the seed).
        max_file_size: ``fsbMaxFileSize`` in bytes, ``None`` = no limit (default 50 MiB).
        name: ``fsbName``, for messages.
    """

    predicate: PathPredicate = field(default_factory=AlwaysDeny)
    max_file_size: int | None = DEFAULT_MAX_FILE_SIZE
    name: str | None = None


_FSB_KEYS = {"fsbPredicate", "fsbMaxFileSize", "fsbName"}


def parse_file_sandbox(
    data: Any,
    base_dir: str,
    *,
    named: Mapping[str, FileSandbox] | None = None,
    where: str = "FileSandbox",
) -> FileSandbox:
    """Parse a ``FileSandboxConfig`` in the seed's JSON form, or a ``{"ref": NAME}`` into ``named``.

    Missing ``fsbPredicate`` means ``AlwaysDeny`` and missing ``fsbMaxFileSize`` means 50 MiB (the seed's
    defaults); ``fsbMaxFileSize: null`` means no limit.

    Raises:
        PredicateError: unknown keys, wrong types, a bad predicate, or a ref to a name ``named`` does not hold
            (the message lists the names it does hold). ``path`` says where.
    """
    if not isinstance(data, dict):
        raise PredicateError('expected a file sandbox object {"fsbPredicate": ...} or {"ref": NAME}', where)
    if "ref" in data:
        ref = data["ref"]
        if set(data) != {"ref"} or not isinstance(ref, str):
            raise PredicateError('a sandbox reference is exactly {"ref": NAME} with NAME a string', where)
        known = named or {}
        if ref not in known:
            names = ", ".join(sorted(known)) or "none are defined"
            raise PredicateError(f"no file sandbox named {ref!r} in fileSandboxes (defined: {names})", where)
        return known[ref]
    unknown = set(data) - _FSB_KEYS
    if unknown:
        raise PredicateError(f"unknown keys {sorted(unknown)}; expected {sorted(_FSB_KEYS)} or ref", where)
    predicate: PathPredicate = AlwaysDeny()
    if "fsbPredicate" in data:
        predicate = parse_predicate(data["fsbPredicate"], base_dir, f"{where}.fsbPredicate")
    max_size = data.get("fsbMaxFileSize", DEFAULT_MAX_FILE_SIZE)
    if max_size is not None and (not isinstance(max_size, int) or isinstance(max_size, bool) or max_size < 0):
        raise PredicateError("fsbMaxFileSize is a non-negative number of bytes or null", f"{where}.fsbMaxFileSize")
    name = data.get("fsbName")
    if name is not None and not isinstance(name, str):
        raise PredicateError("fsbName is a string or null", f"{where}.fsbName")
    return FileSandbox(predicate, max_size, name)


def parse_file_sandboxes(data: Any, base_dir: str, where: str = "fileSandboxes") -> dict[str, FileSandbox]:
    """Parse the agent-level ``fileSandboxes`` map; a sandbox without ``fsbName`` is named by its key."""
    if not isinstance(data, dict):
        raise PredicateError("fileSandboxes maps names to file sandbox objects", where)
    out: dict[str, FileSandbox] = {}
    for key, value in data.items():
        if isinstance(value, dict) and "ref" in value:
            raise PredicateError("an entry of fileSandboxes cannot be a reference", f"{where}.{key}")
        fsb = parse_file_sandbox(value, base_dir, where=f"{where}.{key}")
        out[key] = fsb if fsb.name is not None else FileSandbox(fsb.predicate, fsb.max_file_size, key)
    return out
