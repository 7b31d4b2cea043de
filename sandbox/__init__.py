"""The OS isolation layer: predicates, Landlock, namespaces, rlimits, the launcher, egress control.

It knows nothing of tools. This is its face: every name another package uses is exported here, and nothing outside
``sandbox/`` imports its private modules (``tests/test_exports.py``). The launcher imports this package as root
before it confines itself, so only light modules are imported here eagerly; the others (the egress proxy and DNS
stub need trio, h11 and dnspython; the cgroup, credential, view and TLS modules are the supervisor's) load on first
use of one of their names (:data:`_LAZY`, PEP 562), and the type checker reads them from the ``TYPE_CHECKING`` block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._errors import ConfinementError, SandboxError, exception_leaves, first_leaf
from ._plan import NEUTRAL_HOSTNAME, READ, WRITE, ConfinementPlan, FsRule, Rlimits, ViewSpec
from ._predicates import PREDICATE_TAGS, AlwaysDeny, PathPredicate, PredicateError, parse_predicate, predicate_to_json

if TYPE_CHECKING:
    from ._addresses import address_class, embedded_ipv4, is_loopback_entry
    from ._audit_session import read_session
    from ._bridge import BridgeError, BridgePorts, BridgeSockets, receive_bridge, worker_network_env
    from ._cgroup_events import CounterFiles, LimitCounters, counter_files, read_counters, rises
    from ._cgroup_plan import CgroupInstance, CgroupLayout, CgroupPlan, plan_cgroup, read_layout
    from ._cgroups import create_cgroup, enter_cgroup, open_procs_files, remove_cgroup, sweep_stale_cgroups
    from ._credentials import (
        DEFAULT_PORTS,
        NAME_RE,
        PLACEHOLDER_PREFIX,
        Credential,
        CredentialBinding,
        credential_value_problem,
        placeholder,
    )
    from ._dirfd import UnsafeTreeError, ensure_dir, ensure_path, open_anchor, open_dir, reown_tree, seal_tree
    from ._dns_stub import serve_dns_stub
    from ._egress import Terminator, limited_resolver, serve_egress
    from ._egress_decide import (
        OwnListeners,
        Resolution,
        ResolveError,
        Resolver,
        decide,
        default_resolve,
        local_addresses,
        no_own_ports,
        own_host_refusal,
        shown_host,
    )
    from ._egress_upstream import CONNECT_TIMEOUT_S
    from ._file_sandbox import DEFAULT_MAX_FILE_SIZE, FileSandbox, parse_file_sandbox
    from ._fs_compile import compile_predicate
    from ._host_names import Host, HostError, IPAddress, normalize_host
    from ._hosts import AllowedHosts, HostRule, parse_cname_targets
    from ._landlock import landlock_abi
    from ._libc import LIBC
    from ._mount_api import RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS, openat2
    from ._path_walk import Judge, open_rule_path, resolve_named_path, resolve_path
    from ._predicate_eval import check_path, evaluate, lists_entries
    from ._seccomp import REFUSAL_REASONS, syscall_name
    from ._syspaths import python_runtime_paths, uid_can_read, uid_write_problem
    from ._tls_ca import SupervisorCA, supervisor_ca
    from ._view import host_mount_points, probe_host
    from ._view_plan import PathInfo, ViewError, plan_view, view_files
    from ._zygote_wire import MAX_MESSAGE, ZygoteWireError, decode_message, encode_message

__all__ = [
    "CONNECT_TIMEOUT_S",
    "DEFAULT_MAX_FILE_SIZE",
    "DEFAULT_PORTS",
    "LIBC",
    "MAX_MESSAGE",
    "NAME_RE",
    "NEUTRAL_HOSTNAME",
    "PLACEHOLDER_PREFIX",
    "PREDICATE_TAGS",
    "READ",
    "REFUSAL_REASONS",
    "RESOLVE_BENEATH",
    "RESOLVE_NO_SYMLINKS",
    "WRITE",
    "AllowedHosts",
    "AlwaysDeny",
    "BridgeError",
    "BridgePorts",
    "BridgeSockets",
    "CgroupInstance",
    "CgroupLayout",
    "CgroupPlan",
    "ConfinementError",
    "ConfinementPlan",
    "CounterFiles",
    "Credential",
    "CredentialBinding",
    "FileSandbox",
    "FsRule",
    "Host",
    "HostError",
    "HostRule",
    "IPAddress",
    "Judge",
    "LimitCounters",
    "OwnListeners",
    "PathInfo",
    "PathPredicate",
    "PredicateError",
    "Resolution",
    "ResolveError",
    "Resolver",
    "Rlimits",
    "SandboxError",
    "SupervisorCA",
    "Terminator",
    "UnsafeTreeError",
    "ViewError",
    "ViewSpec",
    "ZygoteWireError",
    "address_class",
    "check_path",
    "compile_predicate",
    "counter_files",
    "create_cgroup",
    "credential_value_problem",
    "decide",
    "decode_message",
    "default_resolve",
    "embedded_ipv4",
    "encode_message",
    "ensure_dir",
    "ensure_path",
    "enter_cgroup",
    "evaluate",
    "exception_leaves",
    "first_leaf",
    "host_mount_points",
    "is_loopback_entry",
    "landlock_abi",
    "limited_resolver",
    "lists_entries",
    "local_addresses",
    "no_own_ports",
    "normalize_host",
    "open_anchor",
    "open_dir",
    "open_procs_files",
    "open_rule_path",
    "openat2",
    "own_host_refusal",
    "parse_cname_targets",
    "parse_file_sandbox",
    "parse_predicate",
    "placeholder",
    "plan_cgroup",
    "plan_view",
    "predicate_to_json",
    "probe_host",
    "python_runtime_paths",
    "read_counters",
    "read_layout",
    "read_session",
    "receive_bridge",
    "remove_cgroup",
    "reown_tree",
    "resolve_named_path",
    "resolve_path",
    "rises",
    "seal_tree",
    "serve_dns_stub",
    "serve_egress",
    "shown_host",
    "supervisor_ca",
    "sweep_stale_cgroups",
    "syscall_name",
    "uid_can_read",
    "uid_write_problem",
    "view_files",
    "worker_network_env",
]

#: The private module of the names not imported eagerly: imported on the first use of one of them.
_LAZY: dict[str, tuple[str, ...]] = {
    "_addresses": ("address_class", "embedded_ipv4", "is_loopback_entry"),
    "_audit_session": ("read_session",),
    "_bridge": ("BridgeError", "BridgePorts", "BridgeSockets", "receive_bridge", "worker_network_env"),
    "_cgroup_events": ("CounterFiles", "LimitCounters", "counter_files", "read_counters", "rises"),
    "_cgroup_plan": ("CgroupInstance", "CgroupLayout", "CgroupPlan", "plan_cgroup", "read_layout"),
    "_cgroups": ("create_cgroup", "enter_cgroup", "open_procs_files", "remove_cgroup", "sweep_stale_cgroups"),
    "_credentials": (
        "DEFAULT_PORTS",
        "NAME_RE",
        "PLACEHOLDER_PREFIX",
        "Credential",
        "CredentialBinding",
        "credential_value_problem",
        "placeholder",
    ),
    "_dirfd": ("UnsafeTreeError", "ensure_dir", "ensure_path", "open_anchor", "open_dir", "reown_tree", "seal_tree"),
    "_dns_stub": ("serve_dns_stub",),
    "_egress": ("Terminator", "limited_resolver", "serve_egress"),
    "_egress_decide": (
        "OwnListeners",
        "Resolution",
        "ResolveError",
        "Resolver",
        "decide",
        "default_resolve",
        "local_addresses",
        "no_own_ports",
        "own_host_refusal",
        "shown_host",
    ),
    "_egress_upstream": ("CONNECT_TIMEOUT_S",),
    "_file_sandbox": ("DEFAULT_MAX_FILE_SIZE", "FileSandbox", "parse_file_sandbox"),
    "_fs_compile": ("compile_predicate",),
    "_host_names": ("Host", "HostError", "IPAddress", "normalize_host"),
    "_hosts": ("AllowedHosts", "HostRule", "parse_cname_targets"),
    "_landlock": ("landlock_abi",),
    "_libc": ("LIBC",),
    "_mount_api": ("RESOLVE_BENEATH", "RESOLVE_NO_SYMLINKS", "openat2"),
    "_path_walk": ("Judge", "open_rule_path", "resolve_named_path", "resolve_path"),
    "_predicate_eval": ("check_path", "evaluate", "lists_entries"),
    "_seccomp": ("REFUSAL_REASONS", "syscall_name"),
    "_syspaths": ("python_runtime_paths", "uid_can_read", "uid_write_problem"),
    "_tls_ca": ("SupervisorCA", "supervisor_ca"),
    "_view": ("host_mount_points", "probe_host"),
    "_view_plan": ("PathInfo", "ViewError", "plan_view", "view_files"),
    "_zygote_wire": ("MAX_MESSAGE", "ZygoteWireError", "decode_message", "encode_message"),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'sandbox' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
