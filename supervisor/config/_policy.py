"""The YAML policy: what an agent file cannot say (which agents, limits, uid, kernel demands, paths, network).

Models are strict and refuse unknown keys. Units are in field names: sizes (``*_bytes``) accept an integer or
a string with a unit (``"256MiB"``, ``"1GB"``: KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000, B
bytes); durations (``*_s``, ``cpu_seconds``) are numbers of seconds. Relative paths (``agents``,
``state_dir``, ``trace.path``, key files in ``model_keys``) resolve against the policy file's directory at
load, via the validation context ``{"base_dir": ...}``; ``system_paths`` and ``device_paths`` must be absolute
and are kept as written (the launcher opens them in the worker's own process, so ``/proc/self`` names the
worker).

This module holds the file's top level (:class:`Policy`) and its cross-section checks; each section is a model of
its own module: field types ``_policy_fields``, ``limits`` ``_limits``, ``toolboxes`` and ``network``
``_toolbox_policy``, ``sessions`` ``_sessions_policy``, ``agent_loop`` ``_agent_loop``, ``budget`` ``_budget``,
``supervision`` ``_supervision``, ``trace`` ``_trace_policy``, ``context`` ``_media_limits``, ``worker_uids`` and
``shared_groups`` ``_worker_ids``, ``frontends`` ``_http_frontend``, ``tenants`` and ``oauth`` ``_tenants``,
``ceilings`` ``_ceilings``, ``credentials`` ``_credentials``, ``validation`` ``_validation_settings``.

:func:`policy_json_schema` is the JSON Schema of the file (``agents-supervise schema``).
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, ValidationInfo, model_validator

from ._agent_loop import AgentLoop
from ._budget import Budget
from ._ceilings import Ceiling
from ._credentials import CredentialName, CredentialPolicy
from ._errors import problem
from ._http_frontend import Frontends
from ._limits import Limits
from ._media_limits import Context
from ._model import StrictModel
from ._policy_fields import (
    ENV_NAME_RE,
    MAX_ID,
    AbsolutePath,
    Env,
    NamedPath,
    PolicyPath,
    Slug,
    ToolboxKey,
    check_slug,
    resolve_path,
)
from ._sessions_policy import Sessions
from ._supervision import Supervision
from ._tenants import OAuthResourceServer, Tenant
from ._toolbox_policy import Network, ToolboxPolicy
from ._trace_policy import Trace
from ._validation_settings import Validation
from ._worker_ids import SharedGroup, WorkerUids

__all__ = ["DEFAULT_STATE_DIR", "DEFAULT_SYSTEM_PATHS", "Policy", "policy_json_schema"]

DEFAULT_STATE_DIR = "/var/lib/agents-supervise"
#: A narrow read-only view: programs, libraries and the few /etc files bash, python3 and curl read.
DEFAULT_SYSTEM_PATHS = (
    "/usr",
    "/bin",
    "/lib",
    "/lib64",
    "/etc/ld.so.cache",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/os-release",
    "/etc/mime.types",
    "/dev/urandom",
    "/dev/zero",
    "/proc/self",
    "/proc/uptime",
    "/proc/loadavg",
    "/proc/meminfo",
)


def _kernel_audit_word(value: Any) -> Any:
    """``kernel_audit: off`` written unquoted, as the shipped policies' comments show it, is YAML 1.1's ``False``
    (so are ``no`` and ``false``): that is ``off``. ``True`` (``on``, ``yes``) could be ``enable`` or ``use``."""
    if value is False:
        return "off"
    if value is True:
        raise problem(
            "YAML reads an unquoted on, yes or true as a boolean, which does not say which of enable or use is meant",
            "one of enable, use, off",
        )
    return value


def _model_key(value: str, info: ValidationInfo) -> str:
    if ENV_NAME_RE.match(value):
        return value
    if "/" in value:
        return resolve_path(value, info)
    raise problem(f"invalid key source {value!r}", "an environment variable name or a key file path with a '/'")


def _ceiling_key(value: str) -> str:
    return value if value == "*" else check_slug(value)


class Policy(StrictModel):
    """The policy file. See ``policies/strict.yaml`` for every key, commented."""

    agents: list[NamedPath] = Field(default=[], description="agent files, relative to the policy file")
    state_dir: PolicyPath = DEFAULT_STATE_DIR
    sandbox_uid: int = Field(default=65534, ge=1, le=MAX_ID, description="uid workers run as (never root)")
    sandbox_gid: int = Field(
        default=65534,
        ge=1,
        le=MAX_ID,
        description="gid workers run as with worker_uids null (each worker has a gid of its own otherwise)",
    )
    worker_uids: WorkerUids | None = Field(
        default=WorkerUids(first=3_000_000_000),
        description="a uid of its own for every worker from this range; null = all run as sandbox_uid",
    )
    strict: bool = Field(default=True, description="refuse to start when the kernel cannot enforce the policy")
    landlock_min_abi: int = Field(default=1, ge=0, le=64)
    inexact_predicates: Literal["refuse", "warn"] = "refuse"
    kernel_audit: Annotated[Literal["enable", "use", "off"], BeforeValidator(_kernel_audit_word)] = Field(
        default="enable",
        description="read the kernel's audit records to say which Landlock rule or seccomp filter refused a call: "
        "enable = turn the host's audit on if it is off (it stays on), use = only if it is already on, "
        "off = never (failed calls' 'Permission denied' paths are then explained from the rules)",
    )
    private_view: bool = Field(
        default=True,
        description="each worker gets a root of its own holding only the paths it is granted (a fresh /tmp, "
        "/dev/shm and /proc, /etc files naming only the worker, its own host name); false: workers see "
        "the host's tree and Landlock alone decides what they may open",
    )
    system_paths: list[AbsolutePath] = Field(
        default=list(DEFAULT_SYSTEM_PATHS), description="read-only (and execute) paths every worker sees"
    )
    device_paths: list[AbsolutePath] = Field(default=["/dev/null"], description="read-write device files")
    worker_env: Env = Field(default={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"})
    limits: Limits = Limits()
    toolboxes: dict[ToolboxKey, ToolboxPolicy] = Field(
        default={},
        description="per toolbox, keyed agent-slug/name; a bare name only while one agent has a "
        "toolbox of that name (an error once two have)",
    )
    shared_groups: list[SharedGroup] = Field(
        default=[], description="supplementary groups for folders several toolboxes write (explicit grants)"
    )
    network: Network = Network()
    max_call_depth: int = Field(default=4, ge=0)
    validation: Validation = Field(
        default=Validation(), description="how tool-call arguments are checked (the seed's ValidationConfig)"
    )
    sessions: Sessions = Sessions()
    agent_loop: AgentLoop = Field(default=AgentLoop(), description="bounds of sub-agent loops (model requests)")
    budget: Budget = Field(
        default=Budget(),
        description="what one root call's whole call tree may use (model requests, tool calls, wall time)",
    )
    supervision: Supervision = Supervision()
    trace: Trace = Trace()
    context: Context = Context()
    model_keys: dict[str, Annotated[str, AfterValidator(_model_key)]] = Field(
        default={}, description="apiKeyId -> environment variable name, or key file path (with a '/')"
    )
    frontends: Frontends = Frontends()
    oauth: OAuthResourceServer | None = Field(default=None, description="accept OAuth JWT access tokens over HTTP")
    tenants: dict[Slug, Tenant] = Field(default={}, description="who may use the HTTP frontend")
    ceilings: dict[Annotated[str, AfterValidator(_ceiling_key)], Ceiling] = Field(
        default={},
        description="the most an agent file may grant its toolboxes, per agent slug ('*': every agent): hosts its "
        "AllowedHosts may name, capabilities it may not enable; past it is a load error naming the key",
    )
    credentials: dict[CredentialName, CredentialPolicy] = Field(
        default={},
        description="secrets the egress proxy adds to toolboxes' requests to the hosts each is bound "
        "to; a worker holds at most a placeholder (docs/CREDENTIALS.md)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Policy:
        if self.strict and self.landlock_min_abi < 1:
            raise problem("strict: true needs landlock_min_abi of at least 1", "landlock_min_abi >= 1")
        for i, group in enumerate(self.shared_groups):
            ranged = self.worker_uids
            if ranged is not None and ranged.first <= group.gid < ranged.first + ranged.count:
                raise problem(
                    f"shared_groups[{i}].gid {group.gid} is in the worker_uids range, whose numbers are "
                    "the workers' own groups",
                    "a gid outside worker_uids",
                )
        for key, tb in self.toolboxes.items():
            for name in [*tb.credentials, *tb.credential_env.values()]:
                if name not in self.credentials:
                    raise problem(
                        f"toolboxes.{key} names the credential {name!r}, which credentials does not define",
                        "a name among credentials: " + (", ".join(self.credentials) or "none"),
                    )
        if self.trace.path is None:
            object.__setattr__(
                self,
                "trace",
                self.trace.model_copy(update={"path": os.path.join(self.state_dir, "trace.jsonl")}),
            )
        return self

    def toolbox_policy(self, name: str, agent_slug: str | None = None) -> ToolboxPolicy:
        """The policy entry for a toolbox: ``slug/name`` if present, else ``name``, else the defaults."""
        if agent_slug is not None and f"{agent_slug}/{name}" in self.toolboxes:
            return self.toolboxes[f"{agent_slug}/{name}"]
        return self.toolboxes.get(name, ToolboxPolicy())

    def effective_limits(self, name: str, agent_slug: str | None = None) -> Limits:
        """``limits`` with the toolbox's overrides applied (only the keys the override wrote)."""
        return self.toolbox_policy(name, agent_slug).limits.applied_to(self.limits)

    def effective_validation(self, name: str, agent_slug: str | None = None) -> Validation:
        """``validation`` with the toolbox's overrides applied (only the keys the override wrote)."""
        return self.toolbox_policy(name, agent_slug).validation.applied_to(self.validation)

    def shared_gids(self, name: str, agent_slug: str) -> tuple[int, ...]:
        """The ``shared_groups`` the toolbox is in (by ``slug/name``, or by bare ``name``)."""
        keys = {f"{agent_slug}/{name}", name}
        return tuple(sorted({g.gid for g in self.shared_groups if keys & set(g.toolboxes)}))

    def loopback_for(self, name: str, agent_slug: str | None = None) -> bool:
        """Whether the policy opens the host's loopback to the toolbox (``network`` or its own
        ``allow_loopback``)."""
        return self.network.allow_loopback or self.toolbox_policy(name, agent_slug).allow_loopback

    def private_ranges_for(self, name: str, agent_slug: str | None = None) -> tuple[str, ...]:
        """The private ranges the toolbox's proxy may dial: ``network``'s and its own."""
        own = self.toolbox_policy(name, agent_slug).allow_private_ranges
        return tuple(dict.fromkeys([*self.network.allow_private_ranges, *own]))

    def worker_env_for(self, name: str, agent_slug: str | None = None) -> dict[str, str]:
        """``worker_env`` plus the toolbox's ``env`` extras."""
        return {**self.worker_env, **self.toolbox_policy(name, agent_slug).env}


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the policy file."""
    schema = Policy.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    otel = schema["$defs"]["Trace"]["properties"]["otel"]
    otel["anyOf"] = [{"type": "boolean"}, {"$ref": otel.pop("$ref")}] if "$ref" in otel else [{"type": "boolean"}]
    schema.setdefault("title", "agents-supervise policy")
    return schema
