"""The OS isolation layer: predicates, Landlock, namespaces, rlimits, the launcher, egress control.

It knows nothing of tools. The launcher imports this package as root before it confines itself, so only light
modules are imported here eagerly; the egress proxy and DNS stub (trio, h11, dnspython) load on first use.
"""

from __future__ import annotations

from typing import Any

from ._errors import ConfinementError, SandboxError, exception_leaves, first_leaf
from ._plan import ConfinementPlan, FsRule, Rlimits
from ._predicates import PathPredicate, PredicateError, parse_predicate, predicate_to_json

__all__ = [
    "AllowedHosts",
    "ConfinementError",
    "ConfinementPlan",
    "FsRule",
    "PathPredicate",
    "PredicateError",
    "Rlimits",
    "SandboxError",
    "check_path",
    "compile_predicate",
    "evaluate",
    "exception_leaves",
    "first_leaf",
    "landlock_abi",
    "parse_predicate",
    "predicate_to_json",
    "serve_dns_stub",
    "serve_egress",
]

_LAZY = {
    "AllowedHosts": "._hosts",
    "check_path": "._predicate_eval",
    "compile_predicate": "._fs_compile",
    "evaluate": "._predicate_eval",
    "landlock_abi": "._landlock",
    "serve_dns_stub": "._dns_stub",
    "serve_egress": "._egress",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sandbox' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)
