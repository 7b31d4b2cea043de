"""What the plan needs of each toolbox kind: one table, one entry per kind (pure).

:data:`KIND_PLANS` maps every name of ``toolboxes._kinds.KINDS`` to a :class:`KindPlan`: the worker config in the
form its toolbox module reads, the files it needs besides the policy's (its executable, spec folder, database,
sidecar, git clones), whether it writes files and runs code the agent controls (how its FileSandbox is granted and
judged), whether its agent-file hosts reach the worker, and what the rest of the supervisor serves for it (per-session
skills, host requests, catalogs). ``plan/_compile.py`` reads only this table for anything that differs by kind;
``tests/supervisor/plan/test_compile.py`` checks that the table and the list of names agree.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from sandbox import READ, FsRule, resolve_named_path
from supervisor._errors import PolicyRefused
from supervisor.config import Policy, ToolboxConfig
from supervisor.sessions import introspection_problem

if TYPE_CHECKING:
    from sandbox import Judge

from ._mcp_args import NamedPath, plan_server_args
from ._mcp_executable import plan_server_files, worker_writable_judge
from ._skill_sources import GitSource, plan_git_sources
from ._sqlite_grants import sqlite_access_warnings, sqlite_fs_rules

__all__ = ["KIND_PLANS", "WASM_NO_NETWORK", "GrantInputs", "KindGrants", "KindPlan", "kind_plan"]

#: Why a WASM toolbox's AllowedHosts cannot hold, and what to do (docs/WASM.md "Network", DECISIONS "WASM network").
WASM_NO_NETWORK = (
    "wasmtime-py's C API can inherit the network (wasi_config_inherit_network) but has no call that allows TCP or "
    "UDP, which wasmtime's WASI p2 leaves off, so create-tcp-socket answers access-denied; and its wasi:http "
    "dials each request's host directly with wasmtime's default hooks, never through the worker's egress proxy, "
    "so it is not linked. Components have no network. Remove AllowedHosts from this WasmToolbox; a tool that "
    "needs hosts belongs in a kind that reaches them through the proxy (FileSystemDirectory or SingleTool scripts, "
    "LuaToolbox, OpenAPIServer)."
)


@dataclass
class KindGrants:
    """What a kind's worker gets besides the policy's rules: its worker config (possibly rewritten, as a skills
    toolbox's git sources become the folders of their clones), read rules, and the folders among them the
    supervisor makes before the worker starts (they need not exist at planning)."""

    cfg: dict[str, Any]
    rules: list[FsRule] = field(default_factory=list)
    made_at_start: tuple[str, ...] = ()
    #: paths the agent file names that grant nothing: they must lie within the worker's other rules (an MCP
    #: server's path arguments, ``_mcp_args.py``); one outside is refused under a strict policy, warned otherwise
    read_within: tuple[NamedPath, ...] = ()
    #: paths the agent file names that the supervisor reads for the worker outside its rules (a ``file://`` git
    #: source it clones): bounded by a ceiling's ``paths`` like the rules
    reads_for_it: tuple[str, ...] = ()


@dataclass(frozen=True)
class GrantInputs:
    """What a kind's grants are planned from besides its toolbox: the state dir, the policy, and whether the
    supervisor runs as root (``_host_facts.HostFacts.root``: an MCP server's executable is then judged against the
    workers' uids)."""

    state_dir: str
    policy: Policy
    root: bool


#: ``(toolbox, its worker config, inputs, warnings) -> grants``; may raise :class:`PolicyRefused` (the policy
#: refused) or anything else (that toolbox's load error). It reads only the files it grants (never makes any).
GrantsHook = Callable[[ToolboxConfig, dict[str, Any], GrantInputs, list[str]], KindGrants]


def _no_grants(tb: ToolboxConfig, cfg: dict[str, Any], given: GrantInputs, warnings: list[str]) -> KindGrants:
    return KindGrants(cfg)


def _never(cfg: dict[str, Any]) -> bool:
    return False


def _always(cfg: dict[str, Any]) -> bool:
    return True


def _executes_commands(cfg: dict[str, Any]) -> bool:
    """A System toolbox with ``execute-command`` runs what the agent asks and writes where its FileSandbox lets it."""
    return "execute-command" in (cfg.get("Capabilities") or [])


@dataclass(frozen=True)
class KindPlan:
    """One toolbox kind, as the plan and the supervisor see it.

    Attributes:
        worker_config: the agent-file entry (``ToolboxConfig.worker_config()``) in the form ``toolboxes.<kind>``
            reads.
        grants: the worker's own files and config (:data:`GrantsHook`).
        writes_files: its FileSandbox is granted read-write (it writes files on the agent's behalf).
        runs_code: it runs code the agent controls: an inexact FileSandbox is refused under
            ``inexact_predicates: refuse`` and warned about otherwise.
        own_hostname: the worker's private view shows the host's own name (System's ``hostname`` capability).
        worker_hosts: its agent-file AllowedHosts reach the worker (a skills toolbox's are its git sources' hosts:
            for the clone, not for the worker; its credentials are granted for them).
        no_network: what AllowedHosts give this kind when they cannot hold, ``"<whom> nothing in this build: <why>"``
            (refused under strict, warned otherwise); ``None``: they work.
        allowed_tools: the worker config key listing the tools its code may call through the portal (Lua).
        check_warnings: ``check``'s warnings once its worker's uid, gid and supplementary groups are known.
        git_sources: the git sources the supervisor clones for it before it starts.
        session_skills: the supervisor keeps the skills each session enabled for it.
        host_requests: it answers host requests about sessions (System's introspection).
        catalogs: the MCP lists besides tools it can serve (``resources``, ``prompts``).
    """

    worker_config: Callable[[dict[str, Any]], dict[str, Any]] = dict
    grants: GrantsHook = _no_grants
    writes_files: Callable[[dict[str, Any]], bool] = _never
    runs_code: Callable[[dict[str, Any]], bool] = _never
    own_hostname: Callable[[dict[str, Any]], bool] = _never
    worker_hosts: bool = True
    no_network: str | None = None
    allowed_tools: str | None = None
    check_warnings: Callable[[ToolboxConfig, int, int, tuple[int, ...]], list[str]] = lambda tb, uid, gid, groups: []
    git_sources: Callable[[ToolboxConfig, str], list[GitSource]] = lambda tb, state_dir: []
    session_skills: bool = False
    host_requests: bool = False
    catalogs: frozenset[str] = frozenset()


def _bash_config(cfg: dict[str, Any]) -> dict[str, Any]:
    return {"tag": cfg.get("tag"), "contents": {"Path": cfg.get("Path")}}


def _skills_config(cfg: dict[str, Any]) -> dict[str, Any]:
    return {"skillSources": cfg.get("Sources", []), "autoEnableSkills": cfg.get("AutoEnable", [])}


def _skills_grants(tb: ToolboxConfig, cfg: dict[str, Any], given: GrantInputs, warnings: list[str]) -> KindGrants:
    """Git sources: read the clones, which exist once the supervisor made them."""
    cfg, git = plan_git_sources(cfg, state_dir=given.state_dir, toolbox=tb.name, agent=tb.agent_slug)
    targets = sorted({g.target for g in git})
    local = tuple(os.path.normpath(unquote(urlsplit(g.url).path)) for g in git if g.url.startswith("file://"))
    return KindGrants(cfg, [FsRule(t, READ) for t in targets], tuple(targets), reads_for_it=local)


def _skills_git_sources(tb: ToolboxConfig, state_dir: str) -> list[GitSource]:
    return plan_git_sources(
        _skills_config(tb.worker_config()), state_dir=state_dir, toolbox=tb.name, agent=tb.agent_slug
    )[1]


def _spec_folder_grants(tb: ToolboxConfig, cfg: dict[str, Any], given: GrantInputs, warnings: list[str]) -> KindGrants:
    """A spec given by path: its folder too (relative ``$ref`` files)."""
    return KindGrants(cfg, [FsRule(os.path.dirname(p), READ) for p in tb.read_paths])


def _system_grants(tb: ToolboxConfig, cfg: dict[str, Any], given: GrantInputs, warnings: list[str]) -> KindGrants:
    """Session introspection: an agent file only narrows what the policy allows."""
    too_wide = introspection_problem(cfg, given.policy.sessions.introspection)
    if too_wide:
        raise PolicyRefused(f"toolbox {tb.name} (agent {tb.agent_slug}): {too_wide}")
    return KindGrants(cfg)


def _sqlite_grants(tb: ToolboxConfig, cfg: dict[str, Any], given: GrantInputs, warnings: list[str]) -> KindGrants:
    return KindGrants(cfg, sqlite_fs_rules(cfg.get("Versioning") or {}))


def _sqlite_warnings(tb: ToolboxConfig, uid: int, gid: int, groups: tuple[int, ...]) -> list[str]:
    """File modes that keep the worker's uid (with its shared groups) out of a database it must write."""
    return sqlite_access_warnings(tb.name, tb.worker_config().get("Versioning") or {}, uid, gid, groups)


def _mcp_grants(tb: ToolboxConfig, cfg: dict[str, Any], given: GrantInputs, warnings: list[str]) -> KindGrants:
    """What an MCP server needs besides the system paths, read-only: its executable, resolved by the supervisor
    with the package tree it belongs to (``_mcp_executable.py``: an npm ``.bin`` link, a venv script; the worker
    then runs the path that plan says). Its arguments that name existing paths grant nothing: they are resolved
    and must lie within the worker's other rules (``_mcp_args.py``; its FileSandbox grants what it serves). Raises
    ``UnsafeTreeError`` (this toolbox's load error) for an executable a worker could change, or a link on an
    argument's way that neither root nor the agent file's owner made."""
    out: list[FsRule] = []
    exe = str(cfg.get("executable") or "")
    if "/" in exe:
        try:
            files = plan_server_files(
                exe,
                judge=_worker_judge(given.policy) if given.root else None,
                system_paths=given.policy.system_paths,
            )
        except FileNotFoundError:  # granted as written: check and the load error say it does not exist
            out += [FsRule(exe, READ)]
        else:
            out += files.rules
            cfg = {**cfg, "executable": files.run}
    args = plan_server_args(cfg.get("args") or [], _trusted(tb, given.root))
    return KindGrants({**cfg, "args": args.args}, out, read_within=args.named)


def _trusted(tb: ToolboxConfig, root: bool) -> frozenset[int] | None:
    """Whose links a path ``tb``'s agent file names may follow when the supervisor walks it: root and the agent
    file's owner (``None`` when the supervisor is not ``root``: it lends nothing, every link is followed)."""
    if not root:
        return None
    return frozenset({0} if tb.agent_owner is None else {0, tb.agent_owner})


def _worker_judge(policy: Policy) -> Judge:
    """The worker-writable test for the uids and groups the policy gives workers (``worker_uids``, or the shared
    ``sandbox_uid``/``sandbox_gid``; ``shared_groups``)."""
    ranged = policy.worker_uids
    shared = {policy.sandbox_gid, *(g.gid for g in policy.shared_groups)}

    def in_range(number: int) -> bool:
        return ranged is not None and ranged.first <= number < ranged.first + ranged.count

    return worker_writable_judge(
        lambda uid: uid == policy.sandbox_uid or in_range(uid), lambda gid: gid in shared or in_range(gid)
    )


def _wasm_grants(tb: ToolboxConfig, cfg: dict[str, Any], given: GrantInputs, warnings: list[str]) -> KindGrants:
    """A single component's sidecar (``<stem>.json`` beside it; a folder ``Path`` is granted whole already).
    ``fsbMaxFileSize`` is held in the worker (its RLIMIT_FSIZE, ``toolboxes/wasm/_file_size.py``)."""
    out: list[FsRule] = []
    path = str(cfg.get("Path") or "")
    if path and not os.path.isdir(path):
        stem = os.path.basename(path)
        stem = stem[: -len(".wasm")] if stem.endswith(".wasm") else stem
        sidecar = resolve_named_path(os.path.join(os.path.dirname(path), stem + ".json"), _trusted(tb, given.root))
        if sidecar.exists:  # a link on its way nobody trusted made: UnsafeTreeError, this toolbox's load error
            out.append(FsRule(sidecar.canonical, READ))
    return KindGrants(cfg, out)


#: One entry per toolbox kind (``toolboxes._kinds.KINDS``).
KIND_PLANS: dict[str, KindPlan] = {
    "bash": KindPlan(worker_config=_bash_config, runs_code=_always),
    "skills": KindPlan(
        worker_config=_skills_config,
        grants=_skills_grants,
        runs_code=_always,
        worker_hosts=False,
        git_sources=_skills_git_sources,
        session_skills=True,
        catalogs=frozenset({"resources"}),
    ),
    "mcp": KindPlan(grants=_mcp_grants, runs_code=_always, catalogs=frozenset({"resources", "prompts"})),
    "openapi": KindPlan(grants=_spec_folder_grants),
    "postgrest": KindPlan(grants=_spec_folder_grants),
    "sqlite": KindPlan(grants=_sqlite_grants, check_warnings=_sqlite_warnings),
    "system": KindPlan(
        grants=_system_grants,
        writes_files=_executes_commands,
        runs_code=_executes_commands,
        own_hostname=lambda cfg: "hostname" in (cfg.get("Capabilities") or []),
        host_requests=True,
    ),
    "developer": KindPlan(writes_files=_always),
    "lua": KindPlan(writes_files=_always, allowed_tools="AllowedTools"),
    "wasm": KindPlan(
        grants=_wasm_grants,
        writes_files=_always,
        runs_code=_always,
        no_network="WASM components nothing in this build: " + WASM_NO_NETWORK,
    ),
}


def kind_plan(kind: str) -> KindPlan:
    """The entry of ``kind``. Raises ``KeyError`` for a name the loader never produces (a bug, not an input)."""
    return KIND_PLANS[kind]
